//! The stack-latency agent: ring buffer → matcher → reports, one step at
//! a time, for every loop that drives it (`xdprobe host`, the fleet
//! agent, the daemon's `[host]` thread). The one place that reads clocks
//! and waits; the matcher stays free of both.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use xdprobe_common::host::{StackCounters, StackEvent};

use crate::clock::monotonic_ns;
use crate::stack::matcher::{FlowReport, MatchCounters, Matcher, RawSample};
use crate::stack::probe::StackProbe;
use crate::stack::stats::Summary;
use crate::stack::window::{Schedule, WindowTotals};

/// How often, and past what age, the kernel's per-thread and per-socket
/// entries are collected (a send call that blocks longer loses its
/// socket-layer time). A sweep is 65536 map lookups, one system call each
/// (about 65 ms of this thread's time here): every 30 s, and with time
/// sampling only between windows, where no program runs for the map calls
/// to hold up.
pub const GC_EVERY: Duration = Duration::from_secs(30);
pub const GC_AGE: Duration = Duration::from_secs(60);

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

/// How often the matcher is advanced (reports and samples handed out,
/// the kernel's counters read): not on every batch.
pub const ADVANCE_EVERY: Duration = Duration::from_millis(50);

/// The stack-latency agent: the attached probe, its matcher and the
/// sampling windows' schedule, moved on one [`Agent::step`] at a time by
/// whichever loop owns the thread: [`Agent::run`] for `xdprobe host` (and
/// the fleet agent, a [`Tap`] on it), the daemon's `[host]` thread beside
/// its connect probe. Dropping the agent detaches the programs.
pub struct Agent {
    probe: StackProbe,
    matcher: Matcher,
    schedule: Option<Schedule>,
    horizon: Horizon,
    started: Instant,
    last_advance: Instant,
    last_gc: Instant,
    reports: u64,
}

/// What one [`Agent::step`] did.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    /// Events drained (0: the ring buffer was empty).
    pub drained: usize,
    /// The matcher was advanced ([`ADVANCE_EVERY`]): reports and samples
    /// were handed out, the counters are fresh.
    pub advanced: bool,
    /// How long the loop may wait for events before the next step:
    /// between windows, until the next one opens.
    pub wait: Duration,
}

impl Agent {
    /// Takes over a probe that has just attached (the first window open)
    /// and its matcher.
    pub fn new(probe: StackProbe, mut matcher: Matcher) -> Agent {
        let started = Instant::now();
        matcher.window_opened(monotonic_ns());
        let schedule = probe.windows.map(|w| Schedule::new(w, started));
        Agent {
            probe,
            matcher,
            schedule,
            horizon: Horizon::default(),
            started,
            last_advance: started,
            last_gc: started,
            reports: 0,
        }
    }

    pub fn probe(&self) -> &StackProbe {
        &self.probe
    }

    pub fn matcher(&self) -> &Matcher {
        &self.matcher
    }

    /// Drains a batch of events into the matcher (and `tap`), advances
    /// the matcher when due (its reports and samples to `out`), sweeps
    /// the kernel's stale entries when due and moves the window schedule.
    pub fn step(&mut self, out: &mut dyn FnMut(Output), tap: &mut dyn Tap) -> Step {
        let (matcher, horizon) = (&mut self.matcher, &mut self.horizon);
        let n = self.probe.drain_some(DRAIN_BATCH, |ev| {
            horizon.seen(ev.ts_ns);
            matcher.on_event(ev);
            tap.event(ev);
        });
        self.horizon.drained(n, DRAIN_BATCH);
        let advanced = self.last_advance.elapsed() >= ADVANCE_EVERY;
        if advanced {
            tap.tick(&self.probe.counters());
            let now = self.horizon.now_ns();
            self.hand_out(out, |m, emit| m.advance(now, &mut |r| emit(r)));
            self.last_advance = Instant::now();
        }
        let between = self.schedule.as_ref().is_none_or(Schedule::is_closed);
        if self.last_gc.elapsed() >= GC_EVERY && between {
            self.probe.gc(monotonic_ns(), GC_AGE.as_nanos() as u64);
            self.last_gc = Instant::now();
        }
        let mut wait = ADVANCE_EVERY;
        if let Some(s) = self.schedule.as_mut() {
            // Between windows nothing arrives but socket closes, which can
            // wait: through to the next window.
            let next = s.step(&mut self.probe, &mut self.matcher);
            wait = if s.is_closed() { next } else { wait.min(next) };
        }
        Step {
            drained: n,
            advanced,
            wait,
        }
    }

    /// Moves the matcher on with `f` and hands out its reports and
    /// samples.
    fn hand_out(
        &mut self,
        out: &mut dyn FnMut(Output),
        f: impl FnOnce(&mut Matcher, &mut dyn FnMut(FlowReport)),
    ) {
        let reports = &mut self.reports;
        f(&mut self.matcher, &mut |r| {
            *reports += 1;
            out(Output::Report(Box::new(r)));
        });
        let raw = self.matcher.take_samples();
        if !raw.is_empty() {
            out(Output::Samples(raw));
        }
    }

    /// Waits at most `wait` for events (a signal ends the wait early).
    pub fn wait(&self, wait: Duration) {
        // Round up: a 0 ms poll spins until the next transition.
        crate::poll::wait_readable(self.probe.fd(), wait);
    }

    /// Windows opened (0 without time sampling) and how long the layer
    /// programs have been attached, the current window up to now.
    pub fn attached(&self) -> (u64, Duration) {
        match &self.schedule {
            Some(s) => {
                let (w, attached, _) = s.totals();
                (w, attached)
            }
            None => (0, self.started.elapsed()),
        }
    }

    /// Steps until `stop` is set or `duration` passes, then [`Self::finish`]es.
    pub fn run(
        mut self,
        duration: Option<Duration>,
        stop: &Arc<AtomicBool>,
        out: &mut dyn FnMut(Output),
        tap: &mut dyn Tap,
    ) -> RunStats {
        loop {
            let deadline_hit = duration.is_some_and(|d| self.started.elapsed() >= d);
            if stop.load(Ordering::Relaxed) || deadline_hit {
                break;
            }
            let step = self.step(out, tap);
            let mut wait = step.wait;
            if let Some(d) = duration {
                wait = wait.min(d.saturating_sub(self.started.elapsed()));
            }
            if step.drained == 0 {
                self.wait(wait);
            }
        }
        self.finish(out, tap)
    }

    /// Hands the late events of the last moments to the matcher, reports
    /// every flow still open and detaches the programs (the probe is
    /// dropped on return).
    pub fn finish(mut self, out: &mut dyn FnMut(Output), tap: &mut dyn Tap) -> RunStats {
        if let Some(s) = self.schedule.as_mut() {
            s.finish();
        }
        let matcher = &mut self.matcher;
        self.probe.drain(|ev| {
            matcher.on_event(ev);
            tap.event(ev);
        });
        tap.tick(&self.probe.counters());
        self.hand_out(out, |m, emit| m.finish(monotonic_ns(), &mut |r| emit(r)));
        let (windows, observed, drain_cut) = self
            .schedule
            .as_ref()
            .map_or((0, self.started.elapsed(), 0), |s| {
                (s.windows, s.observed, s.drain_cut)
            });
        let (t8_early, t8_rest) = self.matcher.window_latency();
        RunStats {
            windows,
            observed,
            drain_cut,
            window: self.schedule.as_ref().map(Schedule::measured),
            t8_early,
            t8_rest,
            elapsed: self.started.elapsed(),
            kernel: self.probe.counters(),
            kernel_skipped: self.probe.kernel_skipped(),
            matcher: self.matcher.counters(),
            reports: self.reports,
        }
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
