//! The stack-latency agent's loop: ring buffer → matcher → reports, until
//! told to stop or the duration is over. The one place that reads clocks
//! and waits; the matcher stays free of both.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use xdprobe_common::host::{StackCounters, StackEvent};

use crate::stack::matcher::{FlowReport, MatchCounters, Matcher, RawSample};
use crate::stack::probe::StackProbe;

/// How often, and past what age, the kernel's per-thread and per-socket
/// entries are collected (a send call that blocks longer loses its
/// socket-layer time).
const GC_EVERY: Duration = Duration::from_secs(10);
const GC_AGE: Duration = Duration::from_secs(60);

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

/// What the loop did, for the end-of-run summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunStats {
    pub kernel: StackCounters,
    /// Program runs the kernel skipped (`StackProbe::kernel_skipped`).
    pub kernel_skipped: u64,
    pub matcher: MatchCounters,
    pub reports: u64,
}

/// What the loop hands out.
pub enum Output {
    Report(FlowReport),
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
        out(Output::Report(r));
    };
    let mut last_advance = Instant::now();
    let mut last_gc = Instant::now();
    loop {
        let deadline_hit = duration.is_some_and(|d| started.elapsed() >= d);
        if stop.load(Ordering::Relaxed) || deadline_hit {
            break;
        }
        let n = probe.drain(|ev| {
            matcher.on_event(ev);
            tap.event(ev);
        });
        if last_advance.elapsed() >= Duration::from_millis(50) {
            tap.tick(&probe.counters());
            matcher.advance(monotonic_ns(), &mut |r| emit(r, out));
            let raw = matcher.take_samples();
            if !raw.is_empty() {
                out(Output::Samples(raw));
            }
            last_advance = Instant::now();
        }
        if last_gc.elapsed() >= GC_EVERY {
            probe.gc(monotonic_ns(), GC_AGE.as_nanos() as u64);
            last_gc = Instant::now();
        }
        if n == 0 {
            wait_readable(probe.fd(), 50);
        }
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
    RunStats {
        kernel: probe.counters(),
        kernel_skipped: probe.kernel_skipped(),
        matcher: matcher.counters(),
        reports,
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
