//! Time order for capture files.
//!
//! A file is not always in timestamp order: when the two directions of a
//! link reach the recorder on different ports or queues (a split TAP, a
//! NIC with several queues, two captures merged), a SYN+ACK can be written
//! before the SYN it answers although it is stamped later. Read in file
//! order, such a handshake has no RTT. The live probe tolerates this by
//! holding every frame up to [`WINDOW_NS`] for the other queues (the
//! hand-off's time-ordered merge); files get the same tolerance here.
//!
//! [`TimeOrdered`] wraps a [`PcapReader`] and hands out packets in
//! timestamp order, equal timestamps in file order, as long as no packet is
//! stamped more than [`WINDOW_NS`] before one read earlier:
//! - a packet is held until a packet stamped at least the window later has
//!   been read (or the file ends), so nothing within the window can still
//!   come before it;
//! - a packet stamped more than the window before the newest one read so
//!   far is *late*: everything held is handed out first, then it, in file
//!   order (real captures have such packets: tshark counts them, so do we);
//! - a packet stamped more than [`STRAY_NS`] back is a *stray*: dropped and
//!   counted (`late_dropped`). Handed on, one packet stamped 0 in a flow
//!   would make that flow start in 1970;
//! - unless strays keep coming: [`STEP_RUN`] of them in a row are a clock
//!   that stepped back (two files concatenated, a recorder's clock set
//!   back). Then everything held goes first, then the run, in file order,
//!   and the capture's time goes on from them (`steps`): nothing is lost;
//! - likewise a packet stamped more than [`STRAY_NS`] *ahead* does not move
//!   the capture's time (else every packet after it would be a stray)
//!   until [`STEP_RUN`] such packets in a row make it a step forward;
//! - at most [`CAPACITY`] packets are held; beyond that the oldest goes out
//!   early (counted), so a burst of more than that within one window is in
//!   file order again past that point.
//!
//! A file already in time order comes out exactly as it is. Nothing is
//! copied and nothing allocated per packet: a held packet is its place in
//! the reader's buffer (the whole file, memory-mapped), kept in a ring
//! allocated once.

use super::pcap::{PcapError, PcapReader};
use super::{Frame, Placed};

/// How far back in capture time a packet may be and still be put in order:
/// the live hand-off's hold time (`capture/src/handoff/merge.rs` uses this constant).
pub const WINDOW_NS: u64 = 2_000_000;

/// Late packets in a row that make a clock step rather than strays.
pub const STEP_RUN: usize = 64;

/// How far back (or ahead) of the capture's time a packet is a stray
/// rather than late: 10 s. Late packets occur in real captures (a split
/// TAP, merged files: the corpus has one 5 ms back) and are kept; a stamp
/// this far off is a broken one.
pub const STRAY_NS: u64 = 10_000_000_000;

/// Packets held at most: a 2 ms window at 4 M packets per second. A power
/// of two: the ring's positions wrap with a mask.
pub const CAPACITY: usize = 8192;
const _: () = assert!(CAPACITY.is_power_of_two());

/// What the stage did, for `--stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderStats {
    /// Packets handed out before others that preceded them in the file.
    pub reordered: u64,
    /// Packets stamped more than the window before an earlier-read one.
    pub late: u64,
    /// Strays dropped: more than [`STRAY_NS`] back, fewer than
    /// [`STEP_RUN`] in a row.
    pub late_dropped: u64,
    /// Clock steps back: a run of late packets handed out in file order.
    pub steps: u64,
    /// Packets handed out before the window passed because the ring was
    /// full.
    pub overflow: u64,
}

/// Packets read from the file at a time.
const READ_BATCH: usize = 16;

/// How far the ring's front may walk before the held packets are moved
/// back to its start ([`Ring::compact`]).
const COMPACT_AT: usize = 512;

/// The held packets in hand-out order: a ring of [`CAPACITY`] slots
/// allocated once. Every packet of a file passes through it, so it is
/// `VecDeque`'s job without its growth checks and index arithmetic: a
/// fixed array whose positions wrap with a mask (on a real capture the
/// whole stage, file parsing included, went from 225 to 200 instructions
/// per packet).
struct Ring {
    slots: Box<[Placed; CAPACITY]>,
    head: usize,
    len: usize,
}

impl Ring {
    const MASK: usize = CAPACITY - 1;

    fn new() -> Self {
        let slots: Box<[Placed]> = vec![Placed::default(); CAPACITY].into_boxed_slice();
        let Ok(slots) = slots.try_into() else {
            unreachable!("a boxed slice of CAPACITY elements");
        };
        Ring {
            slots,
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn at(&self, i: usize) -> &Placed {
        &self.slots[(self.head + i) & Self::MASK]
    }

    #[inline]
    fn get(&self, i: usize) -> Option<&Placed> {
        (i < self.len).then(|| self.at(i))
    }

    #[inline]
    fn back(&self) -> Option<&Placed> {
        self.len.checked_sub(1).map(|i| self.at(i))
    }

    /// Callers keep at most [`CAPACITY`] packets (`read_some` reads only
    /// what fits); beyond, the oldest would be overwritten.
    #[inline]
    fn push_back(&mut self, h: Placed) {
        debug_assert!(self.len < CAPACITY);
        self.slots[(self.head + self.len) & Self::MASK] = h;
        self.len = (self.len + 1).min(CAPACITY);
    }

    /// The slot past the held packets, for the next one read (callers
    /// keep fewer than [`CAPACITY`]: else it is the oldest's).
    #[inline]
    fn spare(&mut self) -> &mut Placed {
        &mut self.slots[(self.head + self.len) & Self::MASK]
    }

    /// Holds the packet written into [`spare`](Self::spare).
    #[inline]
    fn keep_spare(&mut self) {
        debug_assert!(self.len < CAPACITY);
        self.len = (self.len + 1).min(CAPACITY);
    }

    /// Drops the first `n` held packets (handed out).
    #[inline]
    fn advance(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head = (self.head + n) & Self::MASK;
        self.len -= n;
    }

    /// Moves the held packets back to the start of the array once the
    /// front has walked [`COMPACT_AT`] slots into it (and they do not
    /// wrap): then a stream that holds a few hundred packets at a time
    /// keeps writing the same few dozen KiB, which stay in cache, instead
    /// of walking all 8192 slots (256 KiB) and missing on every slot it
    /// writes (0.6 L2 misses a packet on the bench file, cachegrind). A
    /// copy of the held packets every `COMPACT_AT` out: nothing when few
    /// are held. Not when more than `COMPACT_AT` are: a dense capture (a
    /// flood at several Mpps) holds thousands within the window, their
    /// slots do not fit the cache anyway, and moving them all every 512
    /// out cost 155 instructions a packet (memmove) for nothing.
    #[inline]
    fn compact(&mut self) {
        if self.head >= COMPACT_AT && self.len <= COMPACT_AT && self.head + self.len <= CAPACITY {
            self.slots.copy_within(self.head..self.head + self.len, 0);
            self.head = 0;
        }
    }

    /// Puts `h` at position `at`, moving the later ones one up (a packet
    /// out of order: rare, and at most a window's worth to move).
    fn insert(&mut self, at: usize, h: Placed) {
        debug_assert!(self.len < CAPACITY && at <= self.len);
        let mut i = self.len;
        while i > at {
            self.slots[(self.head + i) & Self::MASK] = *self.at(i - 1);
            i -= 1;
        }
        self.slots[(self.head + at) & Self::MASK] = h;
        self.len = (self.len + 1).min(CAPACITY);
    }
}

/// A [`PcapReader`] whose packets come out in timestamp order (see the
/// module doc).
pub struct TimeOrdered<B: AsRef<[u8]>> {
    reader: PcapReader<B>,
    held: Ring,
    /// The first `forced` held packets go out whatever their time (they
    /// preceded a late packet).
    forced: usize,
    /// Newest timestamp read so far (ns).
    newest: u64,
    /// Strays back in a row, kept until they are a step or dropped.
    late_run: Vec<Placed>,
    /// Packets far ahead in a row (they do not move `newest` until a step).
    ahead: usize,
    /// A packet stamped in `fast` (inclusive) goes in as [`insert`]
    /// would put it, at the back with nothing else to do: not before the
    /// newest nor the last held, not far ahead, no run of strays or far
    /// ahead packets pending. Empty (`u64::MAX..=0`) while one is: then
    /// every packet takes [`insert`]. The common case in one comparison
    /// pair instead of [`insert`]'s dozen.
    ///
    /// [`insert`]: Self::insert
    fast: (u64, u64),
    /// The reader reported the end of the file or an error; calling it
    /// again repeats that answer.
    done: bool,
    stats: ReorderStats,
}

impl<B: AsRef<[u8]>> TimeOrdered<B> {
    pub fn new(reader: PcapReader<B>) -> Self {
        TimeOrdered {
            reader,
            held: Ring::new(),
            forced: 0,
            newest: 0,
            late_run: Vec::with_capacity(STEP_RUN),
            ahead: 0,
            fast: (u64::MAX, 0),
            done: false,
            stats: ReorderStats::default(),
        }
    }

    pub fn reader(&self) -> &PcapReader<B> {
        &self.reader
    }

    pub fn stats(&self) -> ReorderStats {
        self.stats
    }

    /// Whether at least `n` held packets may go out now, in O(1): past the
    /// forced ones the ring is sorted, so the `n`-th being due means all
    /// before it are.
    fn ready_at_least(&self, n: usize) -> bool {
        if self.done || n <= self.forced {
            return true;
        }
        let limit = self.newest.saturating_sub(WINDOW_NS);
        n.checked_sub(1)
            .and_then(|i| self.held.get(i))
            .is_some_and(|h| h.ts.as_nanos() <= limit)
    }

    /// How many held packets may go out now, all from the front.
    fn ready(&self) -> usize {
        if self.done {
            return self.held.len();
        }
        // The held packets after the forced ones are sorted by time.
        let limit = self.newest.saturating_sub(WINDOW_NS);
        let (mut lo, mut hi) = (self.forced, self.held.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.held.get(mid).is_some_and(|h| h.ts.as_nanos() <= limit) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Reads up to [`READ_BATCH`] packets into the ring (as many as fit);
    /// false at the end of the file or on an error (kept for
    /// [`next_batch`](Self::next_batch) to report).
    fn read_some(&mut self) -> bool {
        self.held.compact();
        let room = CAPACITY
            .saturating_sub(self.held.len() + self.late_run.len())
            .min(READ_BATCH);
        let mut n = 0;
        while n < room {
            // Each record goes from the file straight into the slot past
            // the held ones: a batch of frames converted afterwards cost
            // two more copies of every packet's fields.
            let slot = self.held.spare();
            match self.reader.next_placed(slot) {
                Ok(true) => {}
                // The end, or an error after the packets read before
                // it: those go in, and the next call reports it (the
                // reader stays on the faulty record).
                Ok(false) | Err(_) => break,
            }
            let t = slot.ts.as_nanos();
            if self.fast.0 <= t && t <= self.fast.1 {
                // What `insert` does with it (see `fast`): it is in its
                // place already.
                self.held.keep_spare();
                self.newest = t;
                self.fast = (t, t.saturating_add(STRAY_NS));
            } else {
                let h = *slot;
                self.insert(h);
                self.fast = self.fast_range();
            }
            n += 1;
        }
        n > 0
    }

    /// Puts one packet in its place (see the module doc).
    fn insert(&mut self, h: Placed) {
        let t = h.ts.as_nanos();
        if t.saturating_add(WINDOW_NS) < self.newest {
            self.stats.late += 1;
            if t.saturating_add(STRAY_NS) >= self.newest {
                // Late: what is held goes first, then this one, in file
                // order.
                self.drop_late_run();
                self.ahead = 0;
                self.forced = self.held.len();
                self.held.push_back(h);
                return;
            }
            if self.late_run.len() < STEP_RUN {
                self.late_run.push(h);
                return;
            }
            // A clock step: what is held goes first, then the run and this
            // one, in file order; time goes on from them.
            self.stats.steps += 1;
            self.forced = self.held.len();
            let mut newest = t;
            for r in std::mem::take(&mut self.late_run) {
                newest = newest.max(r.ts.as_nanos());
                self.held.push_back(r);
            }
            self.late_run = Vec::with_capacity(STEP_RUN);
            self.held.push_back(h);
            self.newest = newest;
            return;
        }
        self.drop_late_run();
        // Far ahead: held in its place but the capture's time stays, until
        // a run of them says the clock stepped forward.
        let raise = if self.newest != 0 && t > self.newest.saturating_add(STRAY_NS) {
            self.ahead += 1;
            self.ahead > STEP_RUN
        } else {
            self.ahead = 0;
            true
        };
        let t = if raise { t } else { self.newest };
        if self.held.back().is_none_or(|b| b.ts <= h.ts) {
            // In order (the common case): no search.
            self.push_back(h, t);
            return;
        }
        let (mut lo, mut hi) = (self.forced, self.held.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.held.get(mid).is_some_and(|x| x.ts <= h.ts) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo < self.held.len() {
            self.stats.reordered += 1;
        }
        self.held.insert(lo, h);
        self.newest = self.newest.max(t);
    }

    /// What `fast` is after [`insert`](Self::insert): from the newest time
    /// and the last held packet's (the ring's later ones are not before
    /// it) up to the stray bound; empty while a run is pending.
    fn fast_range(&self) -> (u64, u64) {
        if !self.late_run.is_empty() || self.ahead != 0 || self.newest == 0 {
            return (u64::MAX, 0);
        }
        let back = self.held.back().map_or(0, |b| b.ts.as_nanos());
        (self.newest.max(back), self.newest.saturating_add(STRAY_NS))
    }

    /// Late packets that turned out to be strays: dropped, counted.
    fn drop_late_run(&mut self) {
        self.stats.late_dropped += self.late_run.len() as u64;
        self.late_run.clear();
    }

    fn push_back(&mut self, h: Placed, t: u64) {
        self.held.push_back(h);
        self.newest = self.newest.max(t);
    }

    /// Fills `out` with the next packets in time order; `Ok(0)` at the end
    /// of the file. An error of the reader comes after every packet read
    /// before it.
    pub fn next_batch<'a>(&'a mut self, out: &mut [Frame<'a>]) -> Result<usize, PcapError> {
        let want = out.len();
        let n = loop {
            if self.done {
                break self.held.len().min(want);
            }
            if self.ready_at_least(want) {
                // The ring past the forced packets is sorted: all `want`.
                break want;
            }
            if self.held.len() + self.late_run.len() >= CAPACITY {
                if !self.ready_at_least(1) {
                    // Make room: the oldest goes out before its window
                    // passed.
                    self.forced = 1;
                    self.stats.overflow += 1;
                }
                break self.ready().min(want);
            }
            if !self.read_some() {
                self.done = true;
                self.drop_late_run();
            }
        };
        if n == 0 {
            // Nothing held and the reader is done: its own answer again
            // (`Ok(None)` at the end, or the same error; it does not
            // advance after one).
            return self.reader.next_packet().map(|_| 0);
        }
        let TimeOrdered {
            reader,
            held,
            forced,
            ..
        } = self;
        let reader: &'a PcapReader<B> = reader;
        let buf = reader.bytes();
        for (i, slot) in out[..n].iter_mut().enumerate() {
            *slot = held.at(i).frame(buf);
        }
        held.advance(n);
        *forced = forced.saturating_sub(n);
        Ok(n)
    }
}

#[cfg(test)]
#[path = "reorder_tests.rs"]
mod tests;
