//! A single-producer single-consumer ring of frame *batches*: the reader of
//! a capture file fills a slot in place with up to [`FRAMES`] frame
//! references and publishes it with one Release store; the worker reads the
//! whole batch and gives the slot back with one Release store. Per frame
//! there is no atomic operation, no lock and no allocation. The producer
//! end moves between threads (the workers take turns at reading, under a
//! lock, `crate::worker::file`): the lock orders one holder's use of it before the
//! next's, so it still has one user at a time.
//!
//! A frame reference is the frame's place in the mapped file (a view, not a
//! copy); frames of a stream, whose buffer the reader reuses, are copied
//! into the slot's own arena, allocated once with the ring.

use std::{
    cell::UnsafeCell,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use xdprobe_dataplane::{Timestamp, parse::LinkType, source::pcap::MAX_CAPLEN};

/// Frames per batch: large enough that the two Release stores are nothing
/// per frame, small enough that a slot's references stay in L2.
pub const FRAMES: usize = 256;

/// Slots per ring: room for the reader to run ahead of a worker by a few
/// batches without the ring's references leaving the caches.
pub const SLOTS: usize = 16;

/// Bytes of a slot's arena for streamed input: one largest frame, so any
/// frame fits in an empty slot.
pub const ARENA_BYTES: usize = MAX_CAPLEN as usize;

/// Bytes one worker's ring allocates: its slots, with an arena each for
/// streamed input (a mapped file's frames are read in place).
pub fn bytes_per_ring(stream: bool) -> usize {
    let arena = if stream { ARENA_BYTES } else { 0 };
    (std::mem::size_of::<Batch>() + arena) * SLOTS
}

/// Where a frame's bytes are and what the reader knew of it.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameRef {
    pub ts: Timestamp,
    pub link: Option<LinkType>,
    pub linktype: u32,
    pub wire_len: u32,
    pub interface: u32,
    /// Offset in the mapped file, or in the slot's arena for a stream.
    pub offset: usize,
    pub len: u32,
}

/// One slot: a batch of frames and the reader's clock when it was sent.
pub struct Batch {
    pub frames: [FrameRef; FRAMES],
    pub len: usize,
    /// Newest capture time the reader had read when it published this
    /// batch: every frame for this worker stamped up to then is in this
    /// batch or an earlier one, so the worker may let its flow table's
    /// time run to here (`Worker::on_tick`).
    pub clock: Timestamp,
    /// Streamed input only: the bytes of this batch's frames.
    pub arena: Vec<u8>,
}

impl Batch {
    /// Adds a frame; false when the batch is full (or, for a copied frame,
    /// its arena is): publish and retry in the next slot.
    #[inline]
    pub fn push(&mut self, mut f: FrameRef, copy: Option<&[u8]>) -> bool {
        if self.len >= FRAMES {
            return false;
        }
        if let Some(bytes) = copy {
            if self.arena.len() + bytes.len() > self.arena.capacity() {
                return false;
            }
            f.offset = self.arena.len();
            self.arena.extend_from_slice(bytes);
        }
        if let Some(slot) = self.frames.get_mut(self.len) {
            *slot = f;
            self.len += 1;
        }
        true
    }

    fn clear(&mut self) {
        self.len = 0;
        self.arena.clear();
    }
}

/// Keeps the two indices on separate cache lines.
#[repr(align(128))]
struct Padded(AtomicUsize);

struct Ring {
    slots: Box<[UnsafeCell<Batch>]>,
    /// Next slot the consumer reads; written by the consumer only.
    head: Padded,
    /// Next slot the producer publishes; written by the producer only.
    tail: Padded,
    /// Set by the producer after its last publish.
    closed: AtomicBool,
    /// Set when the consumer is gone (its worker thread ended or
    /// unwound): nothing will make room any more.
    abandoned: AtomicBool,
}

// SAFETY: the producer touches only the slot at `tail` while
// `tail - head < SLOTS`, the consumer only the slot at `head` while
// `head < tail`; the Release stores of `tail` and `head` and the Acquire
// loads on the other side order those accesses, so no slot is used by both
// threads at once.
unsafe impl Sync for Ring {}
// SAFETY: the slots are plain data; see the Sync argument above.
unsafe impl Send for Ring {}

/// A ring and its two ends; `arena` for streamed input.
pub fn ring(arena: bool) -> (Producer, Consumer) {
    let slots = (0..SLOTS)
        .map(|_| {
            UnsafeCell::new(Batch {
                frames: [FrameRef::default(); FRAMES],
                len: 0,
                clock: Timestamp::ZERO,
                arena: Vec::with_capacity(if arena { ARENA_BYTES } else { 0 }),
            })
        })
        .collect();
    let ring = Arc::new(Ring {
        slots,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
        closed: AtomicBool::new(false),
        abandoned: AtomicBool::new(false),
    });
    (
        Producer {
            ring: ring.clone(),
            tail: 0,
            head_cache: 0,
        },
        Consumer { ring, head: 0 },
    )
}

/// The reader's end.
pub struct Producer {
    ring: Arc<Ring>,
    tail: usize,
    head_cache: usize,
}

impl Producer {
    /// Whether a slot is free to fill.
    #[inline]
    pub fn has_room(&mut self) -> bool {
        if self.tail.wrapping_sub(self.head_cache) >= SLOTS {
            self.head_cache = self.ring.head.0.load(Ordering::Acquire);
        }
        self.tail.wrapping_sub(self.head_cache) < SLOTS
    }

    /// The slot being filled, or `None` while the ring is full (the
    /// consumer has not given a slot back yet).
    #[inline]
    pub fn slot(&mut self) -> Option<&mut Batch> {
        if self.tail.wrapping_sub(self.head_cache) >= SLOTS {
            self.head_cache = self.ring.head.0.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_cache) >= SLOTS {
                return None;
            }
        }
        let cell = self.ring.slots.get(self.tail % SLOTS)?;
        // SAFETY: tail − head < SLOTS: the consumer is done with this slot
        // (its Release of a head past it was acquired above) and will not
        // read it before the Release store in `publish`.
        Some(unsafe { &mut *cell.get() })
    }

    /// Hands the slot filled through [`slot`](Self::slot) to the consumer,
    /// stamped with the reader's `clock`. The caller has made sure the
    /// slot exists (`slot()` returned `Some`).
    #[inline]
    pub fn publish(&mut self, clock: Timestamp) {
        if let Some(b) = self.slot() {
            b.clock = clock;
            self.tail = self.tail.wrapping_add(1);
            self.ring.tail.0.store(self.tail, Ordering::Release);
        }
    }

    /// Whether the consumer is gone: a full ring will never drain, so a
    /// producer waiting for room must stop instead (a worker that panicked
    /// would otherwise hang the reader, and with it the whole run).
    pub fn abandoned(&self) -> bool {
        self.ring.abandoned.load(Ordering::Acquire)
    }

    /// No more batches: the consumer ends once it has read the published
    /// ones.
    pub fn close(&self) {
        self.ring.closed.store(true, Ordering::Release);
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // A reader that fails or panics still lets its workers finish.
        self.close();
    }
}

/// The worker's end.
pub struct Consumer {
    ring: Arc<Ring>,
    head: usize,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.ring.abandoned.store(true, Ordering::Release);
    }
}

/// What [`Consumer::peek`] found.
pub enum Next<'a> {
    Batch(&'a Batch),
    Empty,
    /// Empty and the producer is gone: nothing will come.
    Closed,
}

impl Consumer {
    /// The oldest published batch; give it back with [`done`](Self::done).
    #[inline]
    pub fn peek(&mut self) -> Next<'_> {
        let closed = self.ring.closed.load(Ordering::Acquire);
        let tail = self.ring.tail.0.load(Ordering::Acquire);
        if self.head == tail {
            return if closed { Next::Closed } else { Next::Empty };
        }
        match self.ring.slots.get(self.head % SLOTS) {
            // SAFETY: head < tail (Acquire above): the producer finished
            // this slot before publishing and will not touch it again until
            // the Release store of a head past it in `done`.
            Some(cell) => Next::Batch(unsafe { &*cell.get() }),
            None => Next::Empty,
        }
    }

    /// No batch is waiting and none will come.
    #[inline]
    pub fn is_closed(&self) -> bool {
        let closed = self.ring.closed.load(Ordering::Acquire);
        closed && self.head == self.ring.tail.0.load(Ordering::Acquire)
    }

    /// Gives the batch returned by [`peek`](Self::peek) back to the producer.
    #[inline]
    pub fn done(&mut self) {
        if let Some(cell) = self.ring.slots.get(self.head % SLOTS) {
            // SAFETY: as in `peek`: this slot is still the consumer's until
            // the Release store below.
            unsafe { (*cell.get()).clear() };
        }
        self.head = self.head.wrapping_add(1);
        self.ring.head.0.store(self.head, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(i: usize) -> FrameRef {
        FrameRef {
            ts: Timestamp::from_nanos(i as u64),
            offset: i,
            len: 1,
            ..FrameRef::default()
        }
    }

    #[test]
    fn full_ring_refuses_and_batches_come_in_order() {
        let (mut p, mut c) = ring(false);
        for s in 0..SLOTS {
            let b = p.slot().expect("room");
            assert!(b.push(frame(s), None));
            p.publish(Timestamp::from_nanos(s as u64));
        }
        assert!(p.slot().is_none(), "{SLOTS} slots are full");
        for s in 0..SLOTS {
            match c.peek() {
                Next::Batch(b) => {
                    assert_eq!(b.len, 1);
                    assert_eq!(b.frames[0].offset, s);
                    assert_eq!(b.clock.as_nanos(), s as u64);
                }
                _ => panic!("batch {s} missing"),
            }
            c.done();
        }
        assert!(matches!(c.peek(), Next::Empty));
        drop(p);
        assert!(matches!(c.peek(), Next::Closed));
    }

    #[test]
    fn a_full_ring_whose_consumer_is_gone_says_so() {
        let (mut p, c) = ring(false);
        for s in 0..SLOTS {
            p.slot().expect("room");
            p.publish(Timestamp::from_nanos(s as u64));
        }
        assert!(!p.has_room() && !p.abandoned());
        // A worker thread unwinding drops its end.
        let t = std::thread::spawn(move || {
            let _c = c;
            panic!("a worker's bug");
        });
        assert!(t.join().is_err());
        assert!(!p.has_room() && p.abandoned());
    }

    #[test]
    fn copied_frames_fill_the_arena_then_ask_for_a_new_slot() {
        let (mut p, mut c) = ring(true);
        let big = vec![7u8; ARENA_BYTES - 10];
        let b = p.slot().expect("room");
        assert!(b.push(FrameRef::default(), Some(&big)));
        assert!(!b.push(FrameRef::default(), Some(&[1u8; 11])), "arena full");
        assert!(b.push(FrameRef::default(), Some(&[1u8; 10])));
        p.publish(Timestamp::ZERO);
        let Next::Batch(b) = c.peek() else {
            panic!("published")
        };
        assert_eq!(b.len, 2);
        assert_eq!(b.frames[1].offset, ARENA_BYTES - 10);
        assert_eq!(&b.arena[b.frames[1].offset..], &[1u8; 10]);
        c.done();
        let b = p.slot().expect("room");
        assert_eq!((b.len, b.arena.len()), (0, 0), "slots come back empty");
    }

    #[test]
    fn threads_see_every_frame_in_order() {
        let (mut p, mut c) = ring(false);
        const N: usize = 100_000;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < N {
                let Some(b) = p.slot() else {
                    std::hint::spin_loop();
                    continue;
                };
                while i < N && b.push(frame(i), None) {
                    i += 1;
                }
                p.publish(Timestamp::from_nanos(i as u64));
            }
        });
        let mut next = 0;
        loop {
            match c.peek() {
                Next::Batch(b) => {
                    for f in &b.frames[..b.len] {
                        assert_eq!(f.offset, next);
                        next += 1;
                    }
                    assert_eq!(b.clock.as_nanos(), next as u64);
                    c.done();
                }
                Next::Empty => std::hint::spin_loop(),
                Next::Closed => break,
            }
        }
        assert_eq!(next, N);
        t.join().expect("producer");
    }
}
