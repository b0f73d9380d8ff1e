//! The stack-latency agent's loop: ring buffer → matcher → reports, until
//! told to stop or the duration is over. The one place that reads clocks
//! and waits; the matcher stays free of both.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use xdprobe_common::host::{StackCounters, StackEvent};

use crate::stack::matcher::{FlowReport, MatchCounters, Matcher, RawSample};
use crate::stack::probe::StackProbe;
use crate::stack::stats::Summary;
pub use crate::stack::windows::{Schedule, WindowTotals, Windows};

/// How often, and past what age, the kernel's per-thread and per-socket
/// entries are collected (a send call that blocks longer loses its
/// socket-layer time). A sweep is 65536 map lookups, one system call each
/// (about 65 ms of this thread's time here): every 30 s, and with time
/// sampling only between windows, where no program runs for the map calls
/// to hold up.
pub const GC_EVERY: Duration = Duration::from_secs(30);
pub const GC_AGE: Duration = Duration::from_secs(60);

/// `CLOCK_MONOTONIC` now, in ns: the clock `bpf_ktime_get_ns` reads.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Converts monotonic event times to Unix time: the offset between
/// `CLOCK_REALTIME` and `CLOCK_MONOTONIC`, taken once at start (it only
/// changes when the wall clock is stepped).
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    offset_ns: i128,
}

impl WallClock {
    pub fn now() -> WallClock {
        let mono = clock_ns(libc::CLOCK_MONOTONIC);
        let real = clock_ns(libc::CLOCK_REALTIME);
        WallClock {
            offset_ns: i128::from(real) - i128::from(mono),
        }
    }

    /// Unix microseconds of a monotonic ns time.
    pub fn unix_us(&self, mono_ns: u64) -> u64 {
        ((i128::from(mono_ns) + self.offset_ns).max(0) / 1000) as u64
    }
}

/// Events handed to the matcher between two looks at the clock (the
/// window schedule, reports): a ring that fills as fast as it is read
/// must not keep the loop from them.
pub const DRAIN_BATCH: usize = 4096;

/// What the loop did, for the end-of-run summary.
#[derive(Clone, Copy, Debug)]
pub struct RunStats {
    /// Sampling windows opened (0 without time sampling) and how long the
    /// layer programs were attached in all; windows whose drain hit the
    /// hold with bytes still on their way.
    pub windows: u64,
    pub observed: Duration,
    pub drain_cut: u64,
    /// The windows as measured (`None` without time sampling).
    pub window: Option<WindowTotals>,
    /// T8 of bytes that entered within [`crate::stack::matcher::EARLY_NS`] of a window's opening
    /// and of the others (`Matcher::window_latency`).
    pub t8_early: Summary,
    pub t8_rest: Summary,
    pub elapsed: Duration,
    pub kernel: StackCounters,
    /// Program runs the kernel skipped (`StackProbe::kernel_skipped`).
    pub kernel_skipped: u64,
    pub matcher: MatchCounters,
    pub reports: u64,
}

/// What the loop hands out.
pub enum Output {
    Report(Box<FlowReport>),
    /// Timed anchors (only when the matcher keeps raw samples).
    Samples(Vec<RawSample>),
}

/// Sees every event the loop drains, beside the matcher (the stream to a
/// manager), and the kernel's counters now and then.
pub trait Tap {
    fn event(&mut self, ev: &StackEvent);
    fn tick(&mut self, _kernel: &StackCounters) {}
}

struct NoTap;

impl Tap for NoTap {
    fn event(&mut self, _: &StackEvent) {}
}

/// Runs until `stop` is set or `duration` passes, handing every report to
/// `out`; reports every flow still open at the end.
pub fn run(
    probe: &mut StackProbe,
    matcher: &mut Matcher,
    duration: Option<Duration>,
    stop: &Arc<AtomicBool>,
    out: &mut dyn FnMut(Output),
) -> RunStats {
    run_with(probe, matcher, duration, stop, out, &mut NoTap)
}

/// [`run`], with every event also handed to `tap`.
pub fn run_with(
    probe: &mut StackProbe,
    matcher: &mut Matcher,
    duration: Option<Duration>,
    stop: &Arc<AtomicBool>,
    out: &mut dyn FnMut(Output),
    tap: &mut dyn Tap,
) -> RunStats {
    let started = Instant::now();
    let mut reports = 0u64;
    let mut emit = |r: FlowReport, out: &mut dyn FnMut(Output)| {
        reports += 1;
        out(Output::Report(Box::new(r)));
    };
    let mut last_advance = Instant::now();
    let mut last_gc = Instant::now();
    matcher.window_opened(monotonic_ns());
    let mut schedule = probe.windows.map(|w| Schedule::new(w, started));
    let mut horizon = Horizon::default();
    loop {
        let deadline_hit = duration.is_some_and(|d| started.elapsed() >= d);
        if stop.load(Ordering::Relaxed) || deadline_hit {
            break;
        }
        let n = probe.drain_some(DRAIN_BATCH, |ev| {
            horizon.seen(ev.ts_ns);
            matcher.on_event(ev);
            tap.event(ev);
        });
        horizon.drained(n, DRAIN_BATCH);
        if last_advance.elapsed() >= Duration::from_millis(50) {
            tap.tick(&probe.counters());
            matcher.advance(horizon.now_ns(), &mut |r| emit(r, out));
            let raw = matcher.take_samples();
            if !raw.is_empty() {
                out(Output::Samples(raw));
            }
            last_advance = Instant::now();
        }
        if last_gc.elapsed() >= GC_EVERY && schedule.as_ref().is_none_or(Schedule::is_closed) {
            probe.gc(monotonic_ns(), GC_AGE.as_nanos() as u64);
            last_gc = Instant::now();
        }
        let mut wait = Duration::from_millis(50);
        if let Some(s) = schedule.as_mut() {
            // Between windows nothing arrives but socket closes, which can
            // wait: sleep through to the next window (a signal ends the
            // poll early).
            let next = s.step(probe, matcher);
            wait = if s.is_closed() { next } else { wait.min(next) };
        }
        if let Some(d) = duration {
            wait = wait.min(d.saturating_sub(started.elapsed()));
        }
        if n == 0 {
            // Round up: a 0 ms poll spins until the next transition.
            wait_readable(probe.fd(), wait.as_micros().div_ceil(1000) as i32);
        }
    }
    if let Some(s) = schedule.as_mut() {
        s.finish();
    }
    // Late events of the last moments, then everything still open.
    probe.drain(|ev| {
        matcher.on_event(ev);
        tap.event(ev);
    });
    tap.tick(&probe.counters());
    matcher.finish(monotonic_ns(), &mut |r| emit(r, out));
    let raw = matcher.take_samples();
    if !raw.is_empty() {
        out(Output::Samples(raw));
    }
    let (windows, observed, drain_cut) = schedule.as_ref().map_or((0, started.elapsed(), 0), |s| {
        (s.windows, s.observed, s.drain_cut)
    });
    let (t8_early, t8_rest) = matcher.window_latency();
    RunStats {
        windows,
        observed,
        drain_cut,
        window: schedule.as_ref().map(Schedule::measured),
        t8_early,
        t8_rest,
        elapsed: started.elapsed(),
        kernel: probe.counters(),
        kernel_skipped: probe.kernel_skipped(),
        matcher: matcher.counters(),
        reports,
    }
}

/// The time up to which the matcher has seen every event, for
/// [`Matcher::advance`]: now, once the ring buffer is read empty; while
/// the agent is behind it (a full batch read, more waiting), the newest
/// event read. Judged by the wall clock while behind, bytes whose later
/// layers' events still waited in the ring looked older than the hold: a
/// bulk flow behind a debug build's agent (0.6-2.8 s behind) had 30,000
/// of its 61,000 timed bytes given up as slow though none took 90 ms.
#[derive(Clone, Copy, Debug, Default)]
pub struct Horizon {
    newest_ns: u64,
    behind: bool,
}

impl Horizon {
    /// An event was read.
    pub fn seen(&mut self, ts_ns: u64) {
        self.newest_ns = self.newest_ns.max(ts_ns);
    }

    /// A drain read `n` events of at most `max`.
    pub fn drained(&mut self, n: usize, max: usize) {
        self.behind = n >= max;
    }

    pub fn now_ns(&self) -> u64 {
        let now = monotonic_ns();
        if self.behind && self.newest_ns > 0 {
            self.newest_ns.min(now)
        } else {
            now
        }
    }
}

fn wait_readable(fd: std::os::fd::RawFd, timeout_ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one valid pollfd; EINTR and timeouts are fine.
    unsafe { libc::poll(&mut p, 1, timeout_ms) };
}
