//! Continuous RTT from the TCP timestamp option (RFC 7323 §3–4), all
//! through a flow's life, the way passive ping tools measure it
//! (Kathleen Nichols' pping; ePPing, xdp-project/bpf-examples).
//!
//! A segment's TSval is remembered with the capture time of the *first*
//! segment that carried it; the first segment of the other direction whose
//! TSecr echoes it closes one sample: probe → that endpoint → probe. A
//! sample from a client TSval is the server leg (like `t_snt`), one from a
//! server TSval the client leg (like `t_cnt`); their sum is the RTT at the
//! probe's position, all through the flow. The echo leaves the endpoint with
//! its next segment, so a leg includes that endpoint's delay before it
//! answers (a delayed ACK, or an application that sends later), as every
//! timestamp-based RTT does.
//!
//! Rules (each tested in `tsrtt_tests.rs`):
//! - **First sighting only.** Only a TSval newer than every TSval seen
//!   from that side (32-bit modular order, as RFC 7323 §5.2 compares them)
//!   is remembered; a repeat (many segments per clock tick, a retransmission
//!   or duplicate that reuses its TSval) is not a new sighting, and an older
//!   one (reordered before the probe) is counted `tsval_backwards`. A
//!   retransmission with a fresh TSval (Linux, RFC 7323 §3.2) is a new
//!   sighting: its echo times that very copy, without Karn's ambiguity.
//! - **First echo only.** A TSecr is read only on segments with ACK set
//!   (RFC 7323 §3.2); a matched TSval leaves the ring, so later echoes of it
//!   (every ACK until the next tick) give nothing.
//! - **Bounded state.** Each direction keeps at most [`PENDING`] TSvals
//!   waiting for their echo, in arrival order. When a new one arrives and
//!   the ring is full, the oldest is dropped (counted `expired`) if the
//!   other side has already echoed something newer, so it will not be
//!   echoed; otherwise every entry is still in flight and the *new* TSval is
//!   not remembered (`untracked`). Dropping in-flight entries instead would
//!   give no sample at all once more than [`PENDING`] clock ticks are in
//!   flight (a Linux sender ticks every 1 ms, so any leg longer than 4 ms
//!   under bulk load); this way a leg yields up to [`PENDING`] samples per
//!   round trip, whatever its length (4, so both rings fit one cache
//!   line: with 8, in two lines, `xdprobe pcap` took 18 % longer on the
//!   timestamped bench file, 2.52 s against 2.13 s, medians of 5
//!   alternating runs). An echo of a TSval that was seen but
//!   not remembered is counted per leg as `missed`, so `count + missed`
//!   is the number of distinct TSvals echoed (while echoes arrive in order).
//! - **Bad input is counted, never sampled**: a TSecr echoing nothing this
//!   side was seen to send (`echo_unseen`: a flow picked up mid-stream, a
//!   bogus value), an echo captured before its TSval (`time_backwards`:
//!   capture timestamps going backwards), the option on one side only
//!   (`one_sided_flows`, decided by the TCP tracker).
//! - **Wrap-around**: TSvals compare modulo 2^32; times are kept as µs
//!   offsets from a per-flow base that moves forward every 2^30 µs (18 min)
//!   of a flow's life, so no sample is computed across a wrapped value,
//!   and the TSvals a direction compares stay well within the half space
//!   modular order needs, even with a 1 µs TSval clock.
//!
//! A flow's state ([`TsRtt`], 256 bytes) lives in a column of the flow
//! table beside the TCP state, touched only by segments with the option:
//! what every such segment reads ([`TsHot`], 32 bytes) in one cache line,
//! the rings in another, touched only when a segment brings a new TSval or
//! a new echo. No allocation; time from capture timestamps only.

use super::histogram::Histogram;
use super::sketch::{RttSketch, Summary};
use crate::record::{Dir, TsRttLeg, TsRttRecord};
use crate::time::Timestamp;

/// TSvals a direction remembers while they wait for their echo.
pub const PENDING: usize = 4;

/// Offsets from the base beyond this (17.9 min) move the base forward.
/// Also the bound on how far apart the TSvals a direction compares are:
/// well inside the 2^31 ticks where modular order holds, even for a 1 µs
/// TSval clock (Linux `tcp_usec_ts`), where 2^31 ticks are 35.8 min.
const REBASE_AT_US: u64 = 1 << 30;
/// How far behind the current time the moved base lands: entries older
/// than this (8.9 min) are dropped as expired.
const REBASE_KEEP_US: u64 = 1 << 29;

/// A TSval (RFC 7323 §3.2): a 32-bit clock, compared modulo 2^32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TsVal(pub u32);

impl TsVal {
    /// `self` is later than `other` in modular order (RFC 7323 §5.2).
    #[inline]
    pub const fn after(self, other: TsVal) -> bool {
        (self.0.wrapping_sub(other.0) as i32) > 0
    }

    #[inline]
    pub const fn before(self, other: TsVal) -> bool {
        other.after(self)
    }
}

const HAVE_VAL: u8 = 1;
const HAVE_ECHO: u8 = 1 << 1;
const HAVE_BAD_ECHO: u8 = 1 << 2;

/// What every timestamped segment reads of one direction's TSvals (12
/// bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Head {
    /// Ring position of the oldest pending TSval, and how many there are.
    head: u8,
    len: u8,
    flags: u8,
    /// The newest TSval seen from this side (valid with HAVE_VAL).
    newest: TsVal,
    /// The newest TSval of this side the other side was seen to echo
    /// (valid with HAVE_ECHO).
    echoed: TsVal,
}

/// The part of a flow's timestamp-RTT state that every timestamped segment
/// reads (32 bytes), in a cache line of its own, so a segment that repeats
/// the last TSval and echo (most segments of a bulk flow) touches nothing
/// else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TsHot {
    /// Capture time (µs) the ring offsets count from.
    base_us: u64,
    /// By the direction that sent the TSvals.
    heads: [Head; 2],
}

/// The TSvals a direction sent, waiting for their echo: a FIFO ring in
/// arrival order (and so in TSval order), half a cache line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
struct Ring {
    vals: [u32; PENDING],
    /// Capture time of each value's first sighting, µs from the base.
    at: [u32; PENDING],
}

/// Both directions' rings in one cache line: a segment with a new TSval
/// and a new echo (a request/response exchange: every segment of it)
/// writes one ring and reads the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(64))]
struct Rings([Ring; 2]);

/// One direction's pending TSvals, borrowed from where they live.
struct Pending<'a> {
    h: &'a mut Head,
    r: &'a mut Ring,
    /// The first TSval seen from this side (valid with HAVE_VAL), rarely
    /// read: only for an echo that matches nothing.
    first: &'a mut TsVal,
    /// The last TSecr counted as echoing nothing seen (HAVE_BAD_ECHO), so
    /// a bogus value repeated on every ACK counts once.
    bad_echo: &'a mut u32,
}

/// What one echo did.
enum Echo {
    /// A sample, µs.
    Sample(u32),
    /// Nothing to record, or a counted anomaly.
    Nothing,
    /// A seen TSval, echoed for the first time, that was not remembered.
    Missed,
}

impl Pending<'_> {
    #[inline]
    fn has(&self, f: u8) -> bool {
        self.h.flags & f != 0
    }

    #[inline]
    fn slot(&self, i: usize) -> usize {
        (usize::from(self.h.head) + i) % PENDING
    }

    /// A TSval on a segment from this side, at offset `now`.
    #[inline]
    fn on_tsval(&mut self, v: TsVal, now: u32, c: &mut TsRttCounters) {
        if !self.has(HAVE_VAL) {
            *self.first = v;
            self.h.flags |= HAVE_VAL;
        } else if v == self.h.newest {
            return;
        } else if !v.after(self.h.newest) {
            c.tsval_backwards += 1;
            return;
        }
        self.h.newest = v;
        if usize::from(self.h.len) == PENDING {
            let oldest = TsVal(self.r.vals[usize::from(self.h.head)]);
            if self.has(HAVE_ECHO) && !oldest.after(self.h.echoed) {
                self.remove(0);
                c.expired += 1;
            } else {
                c.untracked += 1;
                return;
            }
        }
        let i = self.slot(usize::from(self.h.len));
        self.r.vals[i] = v.0;
        self.r.at[i] = now;
        self.h.len += 1;
    }

    /// Removes the `i`-th oldest entry, keeping the order of the rest.
    fn remove(&mut self, i: usize) {
        let len = usize::from(self.h.len);
        if i >= len {
            return;
        }
        if i == 0 {
            self.h.head = ((usize::from(self.h.head) + 1) % PENDING) as u8;
        } else {
            for j in i..len - 1 {
                let (dst, src) = (self.slot(j), self.slot(j + 1));
                self.r.vals[dst] = self.r.vals[src];
                self.r.at[dst] = self.r.at[src];
            }
        }
        self.h.len -= 1;
    }

    /// Drops entries first seen before offset `cut` and shifts the rest
    /// down by it (the base moved forward by `cut`). The range of TSvals
    /// taken as seen restarts at the oldest one still remembered, so it
    /// never spans more than the rebase period.
    fn rebase(&mut self, cut: u32, c: &mut TsRttCounters) {
        let mut i = 0;
        while i < usize::from(self.h.len) {
            let s = self.slot(i);
            if self.r.at[s] < cut {
                self.remove(i);
                c.expired += 1;
            } else {
                self.r.at[s] -= cut;
                i += 1;
            }
        }
        *self.first = if self.h.len > 0 {
            TsVal(self.r.vals[usize::from(self.h.head)])
        } else {
            self.h.newest
        };
    }

    /// A TSecr `e` from the other side echoing this side's TSvals.
    #[inline]
    fn on_echo(&mut self, e: TsVal, now: u32, c: &mut TsRttCounters) -> Echo {
        let echoed = self.has(HAVE_ECHO);
        if echoed && e == self.h.echoed {
            return Echo::Nothing; // The usual case: every ACK repeats it.
        }
        let first_echo = !echoed || e.after(self.h.echoed);
        let found = (0..usize::from(self.h.len)).find(|&i| self.r.vals[self.slot(i)] == e.0);
        if let Some(i) = found {
            // Remembered, so seen: it was the newest when it arrived.
            if first_echo {
                self.h.echoed = e;
                self.h.flags |= HAVE_ECHO;
            }
            let at = self.r.at[self.slot(i)];
            self.remove(i);
            return match now.checked_sub(at) {
                Some(us) => Echo::Sample(us),
                None => {
                    c.time_backwards += 1;
                    Echo::Nothing
                }
            };
        }
        let seen = self.has(HAVE_VAL) && !e.before(*self.first) && !e.after(self.h.newest);
        if !seen {
            if !(self.has(HAVE_BAD_ECHO) && *self.bad_echo == e.0) {
                c.echo_unseen += 1;
                *self.bad_echo = e.0;
                self.h.flags |= HAVE_BAD_ECHO;
            }
            return Echo::Nothing;
        }
        if first_echo {
            self.h.echoed = e;
            self.h.flags |= HAVE_ECHO;
            Echo::Missed
        } else {
            // An older echo than one seen before (reordered ACKs) of a value
            // matched or dropped already.
            Echo::Nothing
        }
    }
}

/// Per-flow timestamp-RTT state kept beside the TCP state (256 bytes,
/// four cache lines): what every segment reads ([`TsHot`]) with the rarely
/// read rest, then both rings, then the two legs' summaries (a sample
/// writes one).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
pub struct TsRtt {
    hot: TsHot,
    first: [TsVal; 2],
    bad_echo: [u32; 2],
    missed: [u32; 2],
    /// By the direction that sent the TSvals (C2S: client TSvals, whose
    /// leg is the server leg).
    rings: Rings,
    /// By the same direction: C2S = the server leg's summary.
    legs: [RttSketch; 2],
}

const _: () = assert!(size_of::<TsRtt>() == 256);

impl TsRtt {
    /// What a timestamped segment of a known flow may touch here (all of
    /// it: the first line always, the rings for a new TSval or echo, a
    /// summary line for a sample): prefetched with the TCP state.
    pub const HOT_BYTES: usize = 256;

    /// Starts afresh for a new flow whose first segment with the option is
    /// captured at `ts`.
    pub fn start(&mut self, ts: Timestamp) {
        // The rings need no clearing (the heads say they are empty), nor
        // `first` and `bad_echo` (valid only with their flags).
        self.reset_interval();
        self.hot = TsHot {
            base_us: ts.as_micros(),
            ..TsHot::default()
        };
    }

    /// Direction `d`'s pending TSvals.
    #[inline]
    fn pending(&mut self, d: Dir) -> Pending<'_> {
        let i = d.index();
        Pending {
            h: &mut self.hot.heads[i],
            r: &mut self.rings.0[i],
            first: &mut self.first[i],
            bad_echo: &mut self.bad_echo[i],
        }
    }

    /// One segment travelling in `dir` with the option: its TSval, and its
    /// TSecr when it is to be read (ACK set, and the other side uses the
    /// option).
    ///
    /// Inlined into the caller: most segments of a busy flow repeat the
    /// last TSval and the last echo, and that is decided here from the
    /// first cache line alone, without a call. Everything else is
    /// [`on_news`](Self::on_news), out of line. As one call, the register
    /// saves and restores cost more than the repeat check itself: on a
    /// real capture (3.3 M timestamped segments, bulk and short flows),
    /// 5.23 G instructions became 5.13 G, of 4.72 G without the feature.
    #[inline(always)]
    pub fn on_segment(
        &mut self,
        dir: Dir,
        tsval: u32,
        tsecr: Option<u32>,
        ts: Timestamp,
        w: &mut TsRttWorker,
    ) {
        let [c2s, s2c] = &self.hot.heads;
        let (me, other) = match dir {
            Dir::C2S => (c2s, s2c),
            Dir::S2C => (s2c, c2s),
        };
        let repeat = me.flags & HAVE_VAL != 0
            && me.newest.0 == tsval
            && match tsecr {
                None => true,
                Some(e) => other.flags & HAVE_ECHO != 0 && other.echoed.0 == e,
            };
        if !repeat {
            self.on_news(dir, tsval, tsecr, ts, w);
        }
    }

    /// A segment with a new TSval or a new echo (or the flow's first).
    #[inline(never)]
    fn on_news(
        &mut self,
        dir: Dir,
        tsval: u32,
        tsecr: Option<u32>,
        ts: Timestamp,
        w: &mut TsRttWorker,
    ) {
        let us = ts.as_micros();
        let Some(mut off) = us.checked_sub(self.hot.base_us) else {
            // Captured before the flow's first timestamped segment.
            w.counters.time_backwards += 1;
            return;
        };
        if off >= REBASE_AT_US {
            let cut = off - REBASE_KEEP_US;
            self.hot.base_us += cut;
            let cut = u32::try_from(cut).unwrap_or(u32::MAX);
            for d in [Dir::C2S, Dir::S2C] {
                self.pending(d).rebase(cut, &mut w.counters);
            }
            off = REBASE_KEEP_US;
        }
        let off = off as u32; // < 2^30 here.
        self.pending(dir)
            .on_tsval(TsVal(tsval), off, &mut w.counters);
        if let Some(e) = tsecr {
            let rev = dir.reverse();
            match self.pending(rev).on_echo(TsVal(e), off, &mut w.counters) {
                Echo::Sample(rtt) => {
                    self.legs[rev.index()].add(rtt);
                    w.add(rev, rtt, us);
                }
                Echo::Missed => {
                    let m = &mut self.missed[rev.index()];
                    *m = m.saturating_add(1);
                    w.counters.missed += 1;
                }
                Echo::Nothing => {}
            }
        }
    }

    /// This interval's figures.
    pub fn record(&self) -> TsRttRecord {
        let leg = |d: Dir| {
            let s = self.legs[d.index()].summary();
            TsRttLeg {
                count: s.count,
                min_us: s.min_us,
                mean_us: s.mean_us,
                max_us: s.max_us,
                p50_us: s.p50_us,
                p90_us: s.p90_us,
                missed: self.missed[d.index()],
            }
        };
        TsRttRecord {
            server: leg(Dir::C2S),
            client: leg(Dir::S2C),
        }
    }

    /// A new interval: samples restart, pending TSvals carry over.
    pub fn reset_interval(&mut self) {
        for l in &mut self.legs {
            l.clear();
        }
        self.missed = [0; 2];
    }
}

/// Counted events of timestamp RTT, per worker (summed when read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TsRttCounters {
    /// New TSvals not remembered: the ring was full of in-flight ones.
    pub untracked: u64,
    /// Remembered TSvals dropped unanswered (superseded, or older than the
    /// rebase horizon).
    pub expired: u64,
    /// Echoes of TSvals that were seen but not remembered.
    pub missed: u64,
    /// TSecr values echoing nothing the other side was seen to send.
    pub echo_unseen: u64,
    /// TSvals older than one already seen from the same side.
    pub tsval_backwards: u64,
    /// Echoes captured before their TSval, or segments captured before the
    /// flow's first timestamped one.
    pub time_backwards: u64,
    /// Flows where one side carries the option and the other does not.
    pub one_sided_flows: u64,
}

impl TsRttCounters {
    /// (name, value) pairs, for logs and the metrics endpoint.
    pub fn iter(&self) -> [(&'static str, u64); 7] {
        [
            ("untracked", self.untracked),
            ("expired", self.expired),
            ("missed", self.missed),
            ("echo_unseen", self.echo_unseen),
            ("tsval_backwards", self.tsval_backwards),
            ("time_backwards", self.time_backwards),
            ("one_sided_flows", self.one_sided_flows),
        ]
    }
}

/// How long a worker's quantile window lasts, in packet time.
pub const WINDOW_US: u64 = 10_000_000;

/// One leg's samples across all of a worker's flows: running totals and
/// the quantiles of the last complete window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LegTotals {
    pub count: u64,
    pub sum_us: u64,
    /// The last complete window's count, p50 and p90 and when it ended
    /// (capture µs).
    pub last_window: Option<(Summary, u64)>,
}

/// A worker's timestamp-RTT statistics: counters and per-leg summaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TsRttWorker {
    pub counters: TsRttCounters,
    /// By the direction whose TSvals were echoed (C2S = server leg).
    legs: [LegTotals; 2],
    window: [Histogram; 2],
    window_start_us: u64,
}

impl TsRttWorker {
    /// One sample of the leg whose TSvals `dir` sent, at capture time `now`.
    #[inline]
    fn add(&mut self, dir: Dir, us: u32, now_us: u64) {
        if self.window_start_us == 0 {
            self.window_start_us = now_us;
        } else if now_us.saturating_sub(self.window_start_us) >= WINDOW_US {
            self.roll(now_us);
        }
        let l = &mut self.legs[dir.index()];
        l.count += 1;
        l.sum_us += u64::from(us);
        self.window[dir.index()].add(us);
    }

    fn roll(&mut self, now_us: u64) {
        // The window ended a whole number of windows after it started; a
        // window older than the one just ended is stale.
        let n = now_us.saturating_sub(self.window_start_us) / WINDOW_US;
        let end = self.window_start_us + n * WINDOW_US;
        for (l, w) in self.legs.iter_mut().zip(&mut self.window) {
            l.last_window = (w.total() > 0 && n == 1).then(|| (w.summary(), end));
            w.clear();
        }
        self.window_start_us = end;
    }

    /// Leg totals by leg: `server` = samples of client TSvals.
    pub fn server(&self) -> &LegTotals {
        &self.legs[Dir::C2S.index()]
    }

    pub fn client(&self) -> &LegTotals {
        &self.legs[Dir::S2C.index()]
    }

    /// Adds another worker's totals and counters to these (a summary over
    /// workers; the windows' quantiles are per worker and are not merged).
    pub fn absorb(&mut self, other: &TsRttWorker) {
        let (c, o) = (&mut self.counters, &other.counters);
        c.untracked += o.untracked;
        c.expired += o.expired;
        c.missed += o.missed;
        c.echo_unseen += o.echo_unseen;
        c.tsval_backwards += o.tsval_backwards;
        c.time_backwards += o.time_backwards;
        c.one_sided_flows += o.one_sided_flows;
        for (l, o) in self.legs.iter_mut().zip(&other.legs) {
            l.count += o.count;
            l.sum_us += o.sum_us;
        }
    }

    /// Closes the current window if packet time `now` is past it (a quiet
    /// worker's tick), so the published quantiles do not go stale.
    pub fn tick(&mut self, now: Timestamp) {
        let now_us = now.as_micros();
        if self.window_start_us != 0 && now_us.saturating_sub(self.window_start_us) >= WINDOW_US {
            self.roll(now_us);
        }
    }
}

#[cfg(test)]
#[path = "tsrtt_tests.rs"]
mod tests;
