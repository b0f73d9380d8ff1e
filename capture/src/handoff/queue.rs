//! Where the frames a worker owns wait for the time-ordered merge
//! (`super::merge`): lock-free single-producer single-consumer rings that carry
//! frames from the worker that received them to the worker that owns their
//! flow, and one local lane per worker for the frames it owns itself.
//!
//! One ring per ordered pair of distinct workers, so every ring has exactly
//! one writer and one reader and needs no lock and no CAS: the producer owns
//! `tail`, the consumer owns `head`, each publishes its index with Release
//! and reads the other's with Acquire. Both ends publish once per batch,
//! not per frame: the producer after each AF_XDP read ([`Producer::publish`]),
//! the consumer after the merge has accounted the frames it took
//! ([`Consumer::release`]); until then the taken slots stay the consumer's,
//! so the worker reads them in place. A worker's own frames never cross a
//! thread and go into its [`Lane`], the same FIFO without atomics.
//!
//! Slots are fixed-size and pre-allocated; a frame is copied in (the UMEM
//! frame goes straight back to the fill ring), truncated to `SLOT_BYTES`
//! (the flow code keeps captured and wire length apart, so a truncated copy
//! still counts the right bytes). A full ring or lane is a counted drop,
//! never a wait.

use std::{
    cell::UnsafeCell,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use xdprobe_dataplane::Timestamp;

/// Bytes of a frame carried per slot: headers plus enough payload for DNS
/// and a TLS ClientHello's first segment.
pub const SLOT_BYTES: usize = 2048;

/// Slots per ring (a power of two): 1024 × ~2 KiB = 2 MiB per ordered pair
/// of workers.
pub const RING_SLOTS: usize = 1024;

/// Slots of a worker's own lane: 512 × ~2 KiB = 1 MiB per worker. Its
/// frames wait only for the other workers' watermarks, which they raise
/// after every read (within 1 ms while frames wait, `merge::HOLD_NS` at
/// most), where a ring's frames also wait for the owner's own loop.
pub const LANE_SLOTS: usize = 512;

/// Bytes the hand-off of one interface with `n` queues allocates: a ring
/// per ordered pair of distinct workers and a lane per worker,
/// n(n−1) × 2 MiB + n × 1 MiB; nothing with one queue.
pub fn bytes_for(n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let slot = std::mem::size_of::<Slot>();
    n * (n - 1) * RING_SLOTS * slot + n * LANE_SLOTS * slot
}

/// One frame as it waits: what the flow code needs of it.
#[derive(Clone, Copy, Debug)]
pub struct Waiting<'a> {
    pub data: &'a [u8],
    pub wire_len: u32,
    pub ts: Timestamp,
}

struct Slot {
    ts: Timestamp,
    wire_len: u32,
    len: u32,
    data: [u8; SLOT_BYTES],
}

impl Slot {
    const EMPTY: Slot = Slot {
        ts: Timestamp::ZERO,
        wire_len: 0,
        len: 0,
        data: [0; SLOT_BYTES],
    };

    #[inline]
    fn fill(&mut self, frame: &[u8], wire_len: u32, ts: Timestamp) {
        let len = frame.len().min(SLOT_BYTES);
        self.ts = ts;
        self.wire_len = wire_len;
        self.len = len as u32;
        if let (Some(dst), Some(src)) = (self.data.get_mut(..len), frame.get(..len)) {
            dst.copy_from_slice(src);
        }
    }

    #[inline]
    fn view(&self) -> Waiting<'_> {
        let len = (self.len as usize).min(SLOT_BYTES);
        Waiting {
            data: self.data.get(..len).unwrap_or(&[]),
            wire_len: self.wire_len,
            ts: self.ts,
        }
    }
}

fn slots<T>(cap: usize, make: impl Fn() -> T) -> Box<[T]> {
    (0..cap).map(|_| make()).collect()
}

/// What the merge needs of a source of frames in timestamp order: look at
/// the oldest frame not yet taken, take it (it stays readable in place),
/// and give every taken frame back at once.
pub trait Source {
    /// Timestamp of the oldest frame waiting and not taken, if any.
    fn next_ts(&mut self) -> Option<Timestamp>;
    /// Takes the frame `next_ts` just showed; returns its index among the
    /// frames taken since the last `release`. Only after `next_ts` gave
    /// `Some`.
    fn take(&mut self) -> usize;
    /// The `i`-th frame taken since the last `release`.
    fn taken(&self, i: usize) -> Option<Waiting<'_>>;
    /// Gives the taken frames' slots back (one Release store for a ring).
    fn release(&mut self);
}

/// Keeps the two indices on separate cache lines.
#[repr(align(128))]
struct Padded(AtomicUsize);

struct Ring {
    slots: Box<[UnsafeCell<Slot>]>,
    mask: usize,
    /// Next slot the consumer reads; written by the consumer only.
    head: Padded,
    /// Next slot the producer writes; written by the producer only.
    tail: Padded,
}

// SAFETY: a slot is accessed by the producer only while it lies in
// [tail, head + cap) and by the consumer only while it lies in [head, tail);
// the Release/Acquire pairs on head and tail order those accesses, so no
// slot is ever touched by both threads at once.
unsafe impl Sync for Ring {}
// SAFETY: the slots are plain data; see the Sync argument above.
unsafe impl Send for Ring {}

/// Creates one ring with its two ends.
pub fn ring(slots_wanted: usize) -> (Producer, Consumer) {
    let cap = slots_wanted.max(2).next_power_of_two();
    let ring = Arc::new(Ring {
        slots: slots(cap, || UnsafeCell::new(Slot::EMPTY)),
        mask: cap - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (
        Producer {
            ring: ring.clone(),
            tail: 0,
            published: 0,
            head_cache: 0,
        },
        Consumer {
            ring,
            head: 0,
            taken: 0,
            tail_cache: 0,
        },
    )
}

/// The writing end (owned by the receiving worker).
pub struct Producer {
    ring: Arc<Ring>,
    /// Next slot to write; the consumer sees up to `published`.
    tail: usize,
    published: usize,
    /// Last seen consumer index: re-read only when the ring looks full.
    head_cache: usize,
}

impl Producer {
    /// Copies a frame in; false when the ring is full (the caller counts
    /// it). The consumer sees it after the next [`publish`](Self::publish).
    #[inline]
    pub fn push(&mut self, frame: &[u8], wire_len: u32, ts: Timestamp) -> bool {
        let cap = self.ring.mask + 1;
        if self.tail.wrapping_sub(self.head_cache) >= cap {
            self.head_cache = self.ring.head.0.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_cache) >= cap {
                return false;
            }
        }
        let Some(cell) = self.ring.slots.get(self.tail & self.ring.mask) else {
            return false;
        };
        // SAFETY: tail − head < cap, so this slot is outside [head, tail):
        // the consumer does not read it until `publish` stores a tail past it.
        unsafe { &mut *cell.get() }.fill(frame, wire_len, ts);
        self.tail = self.tail.wrapping_add(1);
        true
    }

    /// Makes the frames pushed so far visible to the consumer: one Release
    /// store, none when nothing was pushed.
    #[inline]
    pub fn publish(&mut self) {
        if self.published != self.tail {
            self.published = self.tail;
            self.ring.tail.0.store(self.tail, Ordering::Release);
        }
    }
}

/// The reading end (owned by the flow's owner worker).
pub struct Consumer {
    ring: Arc<Ring>,
    /// Oldest slot not given back; the producer sees it after `release`.
    head: usize,
    /// Frames taken past `head` and not yet given back.
    taken: usize,
    tail_cache: usize,
}

impl Consumer {
    #[inline]
    fn slot(&self, at: usize) -> Option<&Slot> {
        let cell = self.ring.slots.get(at & self.ring.mask)?;
        // SAFETY: callers pass only `at` in [head, tail_cache): the producer
        // finished that slot before its Release store of a tail past it
        // (read with Acquire into `tail_cache`) and does not write it again
        // until our Release store of a head past it in `release`.
        Some(unsafe { &*cell.get() })
    }
}

impl Source for Consumer {
    #[inline]
    fn next_ts(&mut self) -> Option<Timestamp> {
        let at = self.head.wrapping_add(self.taken);
        if at == self.tail_cache {
            self.tail_cache = self.ring.tail.0.load(Ordering::Acquire);
            if at == self.tail_cache {
                return None;
            }
        }
        self.slot(at).map(|s| s.ts)
    }

    #[inline]
    fn take(&mut self) -> usize {
        let i = self.taken;
        if self.head.wrapping_add(i) != self.tail_cache {
            self.taken += 1;
        }
        i
    }

    #[inline]
    fn taken(&self, i: usize) -> Option<Waiting<'_>> {
        if i >= self.taken {
            return None;
        }
        self.slot(self.head.wrapping_add(i)).map(Slot::view)
    }

    #[inline]
    fn release(&mut self) {
        if self.taken > 0 {
            self.head = self.head.wrapping_add(self.taken);
            self.taken = 0;
            self.ring.head.0.store(self.head, Ordering::Release);
        }
    }
}

/// A worker's own frames on their way to its merge: the FIFO of a ring
/// without the other thread, so no atomics and no shared cache lines.
pub struct Lane {
    slots: Box<[Slot]>,
    mask: usize,
    head: usize,
    taken: usize,
    tail: usize,
}

impl Lane {
    pub fn new(slots_wanted: usize) -> Lane {
        let cap = slots_wanted.max(2).next_power_of_two();
        Lane {
            slots: slots(cap, || Slot::EMPTY),
            mask: cap - 1,
            head: 0,
            taken: 0,
            tail: 0,
        }
    }

    /// Copies a frame in; false when the lane is full (the caller counts it).
    #[inline]
    pub fn push(&mut self, frame: &[u8], wire_len: u32, ts: Timestamp) -> bool {
        if self.tail.wrapping_sub(self.head) > self.mask {
            return false;
        }
        let Some(slot) = self.slots.get_mut(self.tail & self.mask) else {
            return false;
        };
        slot.fill(frame, wire_len, ts);
        self.tail = self.tail.wrapping_add(1);
        true
    }
}

impl Source for Lane {
    #[inline]
    fn next_ts(&mut self) -> Option<Timestamp> {
        let at = self.head.wrapping_add(self.taken);
        if at == self.tail {
            return None;
        }
        self.slots.get(at & self.mask).map(|s| s.ts)
    }

    #[inline]
    fn take(&mut self) -> usize {
        let i = self.taken;
        if self.head.wrapping_add(i) != self.tail {
            self.taken += 1;
        }
        i
    }

    #[inline]
    fn taken(&self, i: usize) -> Option<Waiting<'_>> {
        if i >= self.taken {
            return None;
        }
        self.slots
            .get(self.head.wrapping_add(i) & self.mask)
            .map(Slot::view)
    }

    #[inline]
    fn release(&mut self) {
        self.head = self.head.wrapping_add(self.taken);
        self.taken = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Got = (Vec<u8>, u32, Timestamp);

    /// Takes up to `max` frames, reads them in place, then gives them back.
    fn drain(s: &mut impl Source, max: usize) -> Vec<Got> {
        let mut n = 0;
        while n < max && s.next_ts().is_some() {
            assert_eq!(s.take(), n);
            n += 1;
        }
        let got = (0..n)
            .map(|i| {
                let w = s.taken(i).expect("taken");
                (w.data.to_vec(), w.wire_len, w.ts)
            })
            .collect();
        assert!(s.taken(n).is_none());
        s.release();
        got
    }

    #[test]
    fn fifo_and_full() {
        let (mut p, mut c) = ring(4);
        for i in 0..4u8 {
            assert!(p.push(&[i; 3], 60, Timestamp::from_nanos(u64::from(i))));
        }
        assert!(!p.push(&[9], 60, Timestamp::ZERO), "ring of 4 is full");
        assert!(c.next_ts().is_none(), "nothing published yet");
        p.publish();
        let mut got = drain(&mut c, 2);
        assert!(p.push(&[7; 5000], 6000, Timestamp::from_nanos(9)));
        p.publish();
        got.extend(drain(&mut c, 10));
        assert_eq!(got.len(), 5);
        assert_eq!(got[0], (vec![0; 3], 60, Timestamp::from_nanos(0)));
        assert_eq!(got[3].0, vec![3; 3]);
        assert_eq!(got[4].0.len(), SLOT_BYTES, "long frames are truncated");
        assert_eq!(got[4].1, 6000, "wire length kept");
    }

    #[test]
    fn taken_slots_stay_the_consumers_until_released() {
        let (mut p, mut c) = ring(2);
        assert!(p.push(b"a", 60, Timestamp::from_nanos(1)));
        assert!(p.push(b"b", 60, Timestamp::from_nanos(2)));
        p.publish();
        assert_eq!(c.next_ts(), Some(Timestamp::from_nanos(1)));
        assert_eq!(c.take(), 0);
        assert_eq!(c.next_ts(), Some(Timestamp::from_nanos(2)));
        assert_eq!(c.take(), 1);
        assert_eq!(c.next_ts(), None);
        assert!(!p.push(b"c", 60, Timestamp::ZERO), "taken, not released");
        assert_eq!(c.taken(0).map(|w| w.data), Some(&b"a"[..]));
        c.release();
        assert!(p.push(b"c", 60, Timestamp::from_nanos(3)));
        p.publish();
        assert_eq!(
            drain(&mut c, 9),
            vec![(b"c".to_vec(), 60, Timestamp::from_nanos(3))]
        );
    }

    #[test]
    fn lane_is_a_bounded_fifo() {
        let mut l = Lane::new(3);
        for i in 0..4u8 {
            assert!(l.push(&[i], 60, Timestamp::from_nanos(u64::from(i))));
        }
        assert!(!l.push(&[9], 60, Timestamp::ZERO), "lane of 4 is full");
        let got = drain(&mut l, 3);
        assert_eq!(got.iter().map(|g| g.0[0]).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(l.next_ts(), Some(Timestamp::from_nanos(3)));
        l.take();
        for i in 4..7u8 {
            assert!(l.push(&[i], 60, Timestamp::from_nanos(u64::from(i))));
        }
        assert!(
            !l.push(&[9], 60, Timestamp::ZERO),
            "the taken frame holds its slot"
        );
        assert_eq!(l.taken(0).map(|w| w.data), Some(&[3u8][..]));
        l.release();
        let got = drain(&mut l, 10);
        assert_eq!(got.iter().map(|g| g.0[0]).collect::<Vec<_>>(), [4, 5, 6]);
        assert!(l.push(&[7; 3000], 3000, Timestamp::ZERO));
        assert_eq!(drain(&mut l, 1)[0].0.len(), SLOT_BYTES);
    }

    #[test]
    fn memory_bound_is_below_n_squared_rings() {
        let ring_bytes = RING_SLOTS * std::mem::size_of::<Slot>();
        assert_eq!(bytes_for(1), 0);
        for n in 2..=16 {
            assert!(bytes_for(n) < n * n * ring_bytes, "{n} queues");
        }
    }

    #[test]
    fn threads_see_every_frame_in_order() {
        let (mut p, mut c) = ring(64);
        const N: u64 = 200_000;
        let t = std::thread::spawn(move || {
            let mut i = 0u64;
            while i < N {
                // Publish in bursts of up to 7, as a worker does per read.
                let mut burst = 0;
                while burst < 7 && i < N && p.push(&i.to_le_bytes(), 60, Timestamp::from_nanos(i)) {
                    i += 1;
                    burst += 1;
                }
                p.publish();
                if burst == 0 {
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0u64;
        while next < N {
            for (f, _, ts) in drain(&mut c, 32) {
                let v = u64::from_le_bytes(f.as_slice().try_into().expect("8 bytes"));
                assert_eq!(v, next);
                assert_eq!(ts.as_nanos(), next);
                next += 1;
            }
        }
        t.join().expect("producer");
    }
}
