//! The flow index: from a key's hash to the flows that may have that key,
//! in one cache line per lookup. An array of 64-byte buckets, each holding
//! up to [`SLOTS`] flows as a 16-bit tag of the hash beside the flow's id,
//! so the probe that finds a candidate reads the tags and the id from the
//! same line (a `hashbrown` table keeps its control bytes and its slots in
//! two arrays: two lines a probe, and no way to prefetch either).
//!
//! A key's home bucket is `hash & mask`. A bucket that is full when an
//! insert passes it counts the pass (`over`), and a lookup goes on to the
//! next bucket only while the one it is in has such a count: so a lookup
//! stops at the first bucket nothing was pushed past, and a removal (which
//! finds its entry by id) takes its passes back. There are no tombstones,
//! entries never move, and nothing is ever rehashed. Sized for a quarter
//! of the table's capacity in buckets (rounded up to a power of two), a
//! full table holds at most 4 flows a bucket on average, against 10 slots:
//! a bucket overflows about once in 350 at the limit, and at the bench
//! file's 50 k flows a worker's 262 144-flow table has under one flow a
//! bucket.
//!
//! Tags only pick candidates: the flow's key is always compared before a
//! candidate is used (`FlowTable::matches`), so a tag collision costs a
//! look at a wrong flow, never a wrong flow.

use super::super::mem::{AllocError, ZeroValid, Zeroed};
use super::prefetch;

/// Flows a bucket holds.
pub(super) const SLOTS: usize = 10;

/// One cache line of the index. All zeros is an empty bucket.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Bucket {
    tags: [u16; SLOTS],
    /// Bit `s` set: slot `s` holds a flow.
    occ: u16,
    /// Entries inserted past this bucket because it was full (saturating:
    /// at `u16::MAX` it stays, and lookups always go on past it).
    over: u16,
    ids: [u32; SLOTS],
}

const _: () = assert!(size_of::<Bucket>() == 64);

impl Bucket {
    /// The first flow here with `tag` for which `is` holds.
    #[inline]
    fn find(&self, tag: u16, is: &mut (impl FnMut(u32) -> bool + ?Sized)) -> Option<u32> {
        let mut occ = self.occ;
        while occ != 0 {
            let s = occ.trailing_zeros() as usize;
            occ &= occ - 1;
            if self.tags[s] == tag && is(self.ids[s]) {
                return Some(self.ids[s]);
            }
        }
        None
    }
}

// SAFETY: a `Bucket` is integers only; all zeros is an empty bucket.
unsafe impl ZeroValid for Bucket {}

pub(super) struct Index {
    buckets: Zeroed<Bucket>,
    mask: usize,
    len: usize,
}

#[inline]
fn tag_of(hash: u64) -> u16 {
    (hash >> 48) as u16
}

impl Index {
    /// Buckets for a table of `capacity` flows.
    fn buckets_for(capacity: usize) -> usize {
        capacity.div_ceil(4).max(1).next_power_of_two()
    }

    /// Bytes the index of a `capacity`-flow table maps (backed by the
    /// kernel only where written).
    pub fn memory_bytes(capacity: usize) -> u64 {
        Zeroed::<Bucket>::memory_bytes(Self::buckets_for(capacity))
    }

    pub fn try_new(capacity: usize) -> Result<Index, AllocError> {
        let n = Self::buckets_for(capacity);
        let buckets = Zeroed::try_new(n).map_err(|_| AllocError {
            what: "the flow index",
            bytes: Self::memory_bytes(capacity),
        })?;
        Ok(Index {
            buckets,
            mask: n - 1,
            len: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        hash as usize & self.mask
    }

    /// Fetches the line a lookup of `hash` reads first.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        let b = self.home(hash);
        prefetch(self.buckets.as_slice().as_ptr().wrapping_add(b), 1);
    }

    /// The first flow whose tag matches `hash`, in probe order: the
    /// candidate a batch prefetches and confirms later.
    #[inline]
    pub fn candidate(&self, hash: u64) -> Option<u32> {
        self.find(hash, |_| true)
    }

    /// The first flow with `hash`'s tag for which `is` holds: its home
    /// bucket here, the buckets past it (nearly never) out of line.
    #[inline]
    pub fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = tag_of(hash);
        let b = self.home(hash);
        let bucket = self.buckets.as_slice().get(b)?;
        if let Some(id) = bucket.find(tag, &mut is) {
            return Some(id);
        }
        if bucket.over == 0 {
            return None;
        }
        self.find_past(b, tag, &mut is)
    }

    /// [`find`](Self::find) in the buckets after `home`, which passed an
    /// insert on.
    #[cold]
    #[inline(never)]
    fn find_past(&self, home: usize, tag: u16, is: &mut dyn FnMut(u32) -> bool) -> Option<u32> {
        let buckets = self.buckets.as_slice();
        let mut b = home;
        for _ in 1..buckets.len() {
            b = (b + 1) & self.mask;
            let bucket = buckets.get(b)?;
            if let Some(id) = bucket.find(tag, is) {
                return Some(id);
            }
            if bucket.over == 0 {
                return None;
            }
        }
        None
    }

    /// Adds flow `id` under `hash`. The table holds at most its capacity,
    /// a fraction of the slots, so there is always a free slot.
    pub fn insert(&mut self, hash: u64, id: u32) {
        let tag = tag_of(hash);
        let mask = self.mask;
        let buckets = self.buckets.as_mut_slice();
        let mut b = hash as usize & mask;
        for _ in 0..buckets.len() {
            let Some(bucket) = buckets.get_mut(b) else {
                return;
            };
            let free = !bucket.occ & ((1 << SLOTS) - 1);
            if free != 0 {
                let s = free.trailing_zeros() as usize;
                bucket.tags[s] = tag;
                bucket.ids[s] = id;
                bucket.occ |= 1 << s;
                self.len += 1;
                return;
            }
            bucket.over = bucket.over.saturating_add(1);
            b = (b + 1) & mask;
        }
        debug_assert!(false, "the flow index is full");
    }

    /// Removes flow `id`, found under `hash`; false if it is not there.
    pub fn remove(&mut self, hash: u64, id: u32) -> bool {
        let tag = tag_of(hash);
        let mask = self.mask;
        let buckets = self.buckets.as_mut_slice();
        let home = hash as usize & mask;
        let mut b = home;
        for _ in 0..buckets.len() {
            let Some(bucket) = buckets.get_mut(b) else {
                return false;
            };
            let mut occ = bucket.occ;
            while occ != 0 {
                let s = occ.trailing_zeros() as usize;
                occ &= occ - 1;
                if bucket.tags[s] == tag && bucket.ids[s] == id {
                    bucket.occ &= !(1 << s);
                    self.len -= 1;
                    // Take back the passes its insert counted.
                    let mut p = home;
                    while p != b {
                        if let Some(passed) = buckets.get_mut(p)
                            && passed.over != u16::MAX
                        {
                            passed.over -= 1;
                        }
                        p = (p + 1) & mask;
                    }
                    return true;
                }
            }
            if bucket.over == 0 {
                return false;
            }
            b = (b + 1) & mask;
        }
        false
    }

    /// Points the entry of flow `id` under `hash` at `new` instead (the
    /// flow moved); false if it is not there.
    pub fn replace(&mut self, hash: u64, id: u32, new: u32) -> bool {
        let tag = tag_of(hash);
        let mask = self.mask;
        let buckets = self.buckets.as_mut_slice();
        let mut b = hash as usize & mask;
        for _ in 0..buckets.len() {
            let Some(bucket) = buckets.get_mut(b) else {
                return false;
            };
            for s in 0..SLOTS {
                if bucket.occ & (1 << s) != 0 && bucket.tags[s] == tag && bucket.ids[s] == id {
                    bucket.ids[s] = new;
                    return true;
                }
            }
            if bucket.over == 0 {
                return false;
            }
            b = (b + 1) & mask;
        }
        false
    }

    /// Buckets, for the tests.
    #[cfg(test)]
    pub fn buckets(&self) -> usize {
        self.buckets.as_slice().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes that all land in bucket `b` with distinct tags.
    fn at(b: u64, n: u64) -> u64 {
        b | (n + 1) << 48
    }

    #[test]
    fn overflow_chains_are_followed_and_taken_back() {
        let mut ix = Index::try_new(16).unwrap(); // 4 buckets
        assert_eq!(ix.buckets(), 4);
        // 25 flows into bucket 1: it and bucket 2 fill, bucket 3 takes 5.
        for n in 0..25 {
            ix.insert(at(1, n), n as u32);
        }
        assert_eq!(ix.len(), 25);
        for n in 0..25 {
            assert_eq!(ix.find(at(1, n), |id| id == n as u32), Some(n as u32));
        }
        assert_eq!(ix.find(at(1, 99), |_| true), None);
        // A flow homed in bucket 2 lands past the full bucket 2, and its
        // lookup follows.
        ix.insert(at(2, 50), 50);
        assert_eq!(ix.find(at(2, 50), |_| true), Some(50));
        // Remove every flow of bucket 1: their passes go; the flow of
        // bucket 2 still passed it.
        for n in 0..25 {
            assert!(ix.remove(at(1, n), n as u32));
        }
        assert!(!ix.remove(at(1, 0), 0));
        assert_eq!(ix.len(), 1);
        let b = ix.buckets.as_slice();
        assert_eq!((b[1].over, b[2].over, b[3].over), (0, 1, 0), "{b:?}");
        assert_eq!(ix.find(at(2, 50), |_| true), Some(50));
        assert!(ix.replace(at(2, 50), 50, 7));
        assert_eq!(ix.find(at(2, 50), |_| true), Some(7));
        assert_eq!(ix.candidate(at(2, 50)), Some(7));
    }

    #[test]
    fn same_tag_candidates_are_told_apart_by_the_caller() {
        let mut ix = Index::try_new(1000).unwrap();
        ix.insert(5, 1);
        ix.insert(5, 2);
        assert_eq!(ix.candidate(5), Some(1));
        assert_eq!(ix.find(5, |id| id == 2), Some(2));
        assert!(ix.remove(5, 1));
        assert_eq!(ix.candidate(5), Some(2));
    }
}
