//! Lock-free single-producer single-consumer rings that carry frames from
//! the worker that received them to the worker that owns their flow.
//!
//! One ring per ordered pair of workers, so every ring has exactly one
//! writer and one reader and needs no lock and no CAS: the producer owns
//! `tail`, the consumer owns `head`, each publishes its index with Release
//! and reads the other's with Acquire. Slots are fixed-size and
//! pre-allocated; a frame is copied in (the UMEM frame goes straight back
//! to the fill ring), truncated to `SLOT_BYTES` (the flow code keeps
//! captured and wire length apart, so a truncated copy still counts the
//! right bytes). A full ring is a counted drop, never a wait.

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

/// Slots per ring (a power of two): 1024 × ~2 KiB = 2 MiB per worker pair.
pub const RING_SLOTS: usize = 1024;

struct Slot {
    ts: Timestamp,
    wire_len: u32,
    len: u32,
    data: [u8; SLOT_BYTES],
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
pub fn ring(slots: usize) -> (Producer, Consumer) {
    let cap = slots.max(2).next_power_of_two();
    let slots: Box<[UnsafeCell<Slot>]> = (0..cap)
        .map(|_| {
            UnsafeCell::new(Slot {
                ts: Timestamp::ZERO,
                wire_len: 0,
                len: 0,
                data: [0; SLOT_BYTES],
            })
        })
        .collect();
    let ring = Arc::new(Ring {
        slots,
        mask: cap - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (
        Producer {
            ring: ring.clone(),
            tail: 0,
            head_cache: 0,
        },
        Consumer {
            ring,
            head: 0,
            tail_cache: 0,
        },
    )
}

/// The writing end (owned by the receiving worker).
pub struct Producer {
    ring: Arc<Ring>,
    tail: usize,
    /// Last seen consumer index: re-read only when the ring looks full.
    head_cache: usize,
}

impl Producer {
    /// Copies a frame in; false when the ring is full (the caller counts it).
    #[inline]
    pub fn push(&mut self, frame: &[u8], wire_len: u32, ts: Timestamp) -> bool {
        let cap = self.ring.mask + 1;
        if self.tail.wrapping_sub(self.head_cache) >= cap {
            self.head_cache = self.ring.head.0.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_cache) >= cap {
                return false;
            }
        }
        let len = frame.len().min(SLOT_BYTES);
        let Some(cell) = self.ring.slots.get(self.tail & self.ring.mask) else {
            return false;
        };
        // SAFETY: tail − head < cap, so this slot is outside [head, tail):
        // the consumer does not read it until the Release store below.
        let slot = unsafe { &mut *cell.get() };
        slot.ts = ts;
        slot.wire_len = wire_len;
        slot.len = len as u32;
        if let (Some(dst), Some(src)) = (slot.data.get_mut(..len), frame.get(..len)) {
            dst.copy_from_slice(src);
        }
        self.tail = self.tail.wrapping_add(1);
        self.ring.tail.0.store(self.tail, Ordering::Release);
        true
    }
}

/// The reading end (owned by the flow's owner worker).
pub struct Consumer {
    ring: Arc<Ring>,
    head: usize,
    tail_cache: usize,
}

impl Consumer {
    /// Timestamp of the oldest frame waiting, if any.
    #[inline]
    pub fn peek_ts(&mut self) -> Option<Timestamp> {
        if self.head == self.tail_cache {
            self.tail_cache = self.ring.tail.0.load(Ordering::Acquire);
            if self.head == self.tail_cache {
                return None;
            }
        }
        let cell = self.ring.slots.get(self.head & self.ring.mask)?;
        // SAFETY: head < tail: the slot is published (see `drain`).
        Some(unsafe { (*cell.get()).ts })
    }

    /// Hands up to `max` frames to `f` (frame, wire length, timestamp) and
    /// returns how many.
    #[inline]
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(&[u8], u32, Timestamp)) -> usize {
        if self.tail_cache.wrapping_sub(self.head) < max {
            self.tail_cache = self.ring.tail.0.load(Ordering::Acquire);
        }
        let avail = self.tail_cache.wrapping_sub(self.head).min(max);
        for _ in 0..avail {
            let Some(cell) = self.ring.slots.get(self.head & self.ring.mask) else {
                break;
            };
            // SAFETY: head < tail (Acquire above): the producer finished this
            // slot before publishing tail and will not write it again until
            // the consumer's Release store of a head past it.
            let slot = unsafe { &*cell.get() };
            let len = (slot.len as usize).min(SLOT_BYTES);
            f(slot.data.get(..len).unwrap_or(&[]), slot.wire_len, slot.ts);
            self.head = self.head.wrapping_add(1);
        }
        if avail > 0 {
            self.ring.head.0.store(self.head, Ordering::Release);
        }
        avail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_full() {
        let (mut p, mut c) = ring(4);
        for i in 0..4u8 {
            assert!(p.push(&[i; 3], 60, Timestamp::from_nanos(u64::from(i))));
        }
        assert!(!p.push(&[9], 60, Timestamp::ZERO), "ring of 4 is full");
        let mut got = Vec::new();
        assert_eq!(c.drain(2, |f, w, t| got.push((f.to_vec(), w, t))), 2);
        assert!(p.push(&[7; 5000], 6000, Timestamp::from_nanos(9)));
        c.drain(10, |f, w, t| got.push((f.to_vec(), w, t)));
        assert_eq!(got.len(), 5);
        assert_eq!(got[0], (vec![0; 3], 60, Timestamp::from_nanos(0)));
        assert_eq!(got[3].0, vec![3; 3]);
        assert_eq!(got[4].0.len(), SLOT_BYTES, "long frames are truncated");
        assert_eq!(got[4].1, 6000, "wire length kept");
    }

    #[test]
    fn threads_see_every_frame_in_order() {
        let (mut p, mut c) = ring(64);
        const N: u64 = 200_000;
        let t = std::thread::spawn(move || {
            let mut i = 0u64;
            while i < N {
                if p.push(&i.to_le_bytes(), 60, Timestamp::from_nanos(i)) {
                    i += 1;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0u64;
        while next < N {
            c.drain(32, |f, _, ts| {
                let v = u64::from_le_bytes(f.try_into().expect("8 bytes"));
                assert_eq!(v, next);
                assert_eq!(ts.as_nanos(), next);
                next += 1;
            });
        }
        t.join().expect("producer");
    }
}
