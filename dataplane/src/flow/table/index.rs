//! Where the hash index keeps its control bytes and slots, learnt once so
//! that a SYN flood's two index cache misses per packet can be prefetched:
//! the control-byte group an eviction's removal probes (the victim is the
//! coldest flow in the table, so its group is never in cache) and the slot
//! a new flow's insert writes. `hashbrown::HashTable` has no prefetch of
//! its own; its layout (slots below the control bytes, bucket `i`'s slot at
//! `ctrl - (i + 1) * size_of::<T>()`, a probe starting at bucket
//! `hash & mask`) is what hashbrown 0.15 does, and only ever prefetched
//! here: were it to change, a prefetch would touch the wrong line and cost
//! a little, never read or write a wrong value.

use hashbrown::HashTable;

use super::{IndexSlot, prefetch};

/// The index's control-byte address and bucket mask; `ctrl == 0` when not
/// known (nothing is prefetched then).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IndexLayout {
    ctrl: usize,
    mask: usize,
}

/// Control bytes a probe loads at once (hashbrown's SSE2 group).
const GROUP: usize = 16;

impl IndexLayout {
    /// Learns the layout of an empty, pre-sized index: an entry inserted
    /// with hash 0 into an empty table lands in bucket 0, whose slot is
    /// the one right below the control bytes. The entry is removed again
    /// (its bucket becomes empty, not a tombstone, all its neighbours
    /// being empty), so the index is as it was.
    pub fn learn(index: &mut HashTable<IndexSlot>) -> Self {
        let items = index.capacity();
        // hashbrown keeps 1/8 of the buckets empty beyond 8 buckets.
        let buckets = items / 7 * 8;
        if !index.is_empty() || items < 14 || !buckets.is_power_of_two() || !items.is_multiple_of(7)
        {
            return IndexLayout::default();
        }
        let probe = IndexSlot {
            idx: u32::MAX,
            tag: 0,
        };
        let at = std::ptr::from_ref(index.insert_unique(0, probe, |_| 0).get()) as usize;
        if let Ok(e) = index.find_entry(0, |s| s.idx == u32::MAX) {
            e.remove();
        }
        IndexLayout {
            ctrl: at + size_of::<IndexSlot>(),
            mask: buckets - 1,
        }
    }

    /// The control bytes a lookup or removal of `hash` reads first.
    #[inline]
    pub fn prefetch_group(&self, hash: u64) {
        if self.ctrl == 0 {
            return;
        }
        let at = self.ctrl.wrapping_add(hash as usize & self.mask);
        // A group may straddle two lines.
        prefetch(at as *const u8, 1);
        prefetch(at.wrapping_add(GROUP - 1) as *const u8, 1);
    }

    /// The slot an insert of `hash` most likely writes: the first of its
    /// group (the index is at most a quarter full, so the first or second
    /// bucket of a group is nearly always free), and the one after it,
    /// which lies below it in memory.
    #[inline]
    pub fn prefetch_insert_slot(&self, hash: u64) {
        if self.ctrl == 0 {
            return;
        }
        let bucket = hash as usize & self.mask;
        let slot = self
            .ctrl
            .wrapping_sub((bucket + 1) * size_of::<IndexSlot>());
        prefetch(slot as *const u8, 1);
        prefetch(slot.wrapping_sub(size_of::<IndexSlot>()) as *const u8, 1);
    }

    /// Whether the layout was learnt (for the tests).
    #[cfg(test)]
    pub fn known(&self) -> bool {
        self.ctrl != 0
    }

    /// Bucket `hash` probes first and the address of its slot (for the
    /// tests, which check inserts against it).
    #[cfg(test)]
    pub fn slot_of_bucket(&self, hash: u64) -> usize {
        let bucket = hash as usize & self.mask;
        self.ctrl - (bucket + 1) * size_of::<IndexSlot>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The learnt layout matches where hashbrown puts entries: an entry
    /// whose first bucket is free lands in the slot `prefetch_insert_slot`
    /// fetches. If a hashbrown upgrade changes its layout this fails, and
    /// the prefetches would be useless (never wrong).
    #[test]
    fn layout_matches_where_entries_land() {
        let mut index: HashTable<IndexSlot> = HashTable::new();
        index.reserve(crate::flow::mem::index_capacity(1000), |_| 0);
        let layout = IndexLayout::learn(&mut index);
        assert!(layout.known());
        assert!(index.is_empty(), "learning leaves the index empty");
        for (n, hash) in [0u64, 1, 77, 1023, 0xdead_beef_0000_1234, u64::MAX]
            .into_iter()
            .enumerate()
        {
            let at = std::ptr::from_ref(
                index
                    .insert_unique(
                        hash,
                        IndexSlot {
                            idx: n as u32,
                            tag: 0,
                        },
                        |_| 0,
                    )
                    .get(),
            ) as usize;
            assert_eq!(at, layout.slot_of_bucket(hash), "hash {hash:#x}");
            if let Ok(e) = index.find_entry(hash, |s| s.idx == n as u32) {
                e.remove();
            }
        }
        // A used index, or one too small to have a 7/8 load, is not learnt.
        index.insert_unique(5, IndexSlot { idx: 0, tag: 0 }, |_| 0);
        assert!(!IndexLayout::learn(&mut index).known());
        assert!(!IndexLayout::learn(&mut HashTable::new()).known());
    }
}
