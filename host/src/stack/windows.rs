//! Time sampling: the window schedule that attaches the layer programs
//! for a part of every period.

use std::time::{Duration, Instant};

use crate::stack::agent::monotonic_ns;
use crate::stack::matcher::Matcher;
use crate::stack::probe::StackProbe;

/// Time sampling: the layer programs are attached for `window` out of
/// every `every`, and detached in between, so that between windows the
/// probe costs the kernel nothing per packet (not even the empty
/// program's dispatch a byte-grid filter pays on every skb).
///
/// A window opens by attaching the layers from the receiving socket back
/// to the send path's entry, so every byte it lets in meets every layer;
/// it closes the entry first and the rest only once the bytes let in
/// have passed them all (at most [`MAX_DRAIN`]), so slow bytes are not
/// the ones a window cuts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub window: Duration,
    pub every: Duration,
}

/// The longest a closing window waits for bytes still on their way (the
/// matcher's default hold: the same bound on a late layer).
pub const MAX_DRAIN: Duration = Duration::from_millis(250);

/// Where the window schedule is.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Every layer attached until `until`.
    Open { since: Instant, until: Instant },
    /// Entry closed at `closed_ns` (monotonic); the rest until nothing
    /// let in before is pending, or `deadline`.
    Draining {
        since: Instant,
        closed_ns: u64,
        deadline: Instant,
    },
    /// Nothing attached until `until`.
    Closed { until: Instant },
}

/// The window schedule and its bookkeeping: stepped by whatever loop
/// drains the probe (`run_with` here, the daemon's host thread).
pub struct Schedule {
    w: Windows,
    phase: Phase,
    /// Start of the current period.
    period_start: Instant,
    pub(crate) windows: u64,
    pub(crate) observed: Duration,
    /// Windows that hit [`MAX_DRAIN`] with bytes still pending.
    pub(crate) drain_cut: u64,
}

impl Schedule {
    /// The probe has just attached: the first window is open.
    pub fn new(w: Windows, now: Instant) -> Schedule {
        Schedule {
            w,
            phase: Phase::Open {
                since: now,
                until: now + w.window,
            },
            period_start: now,
            windows: 1,
            observed: Duration::ZERO,
            drain_cut: 0,
        }
    }

    /// Moves the schedule on; returns how long the loop may wait for
    /// events before it must look again.
    pub fn step(&mut self, probe: &mut StackProbe, matcher: &mut Matcher) -> Duration {
        let now = Instant::now();
        match self.phase {
            Phase::Open { since, until } if now >= until => {
                probe.close_entry();
                let closed_ns = monotonic_ns();
                matcher.window_closing(closed_ns);
                let room = self.w.every.saturating_sub(self.w.window);
                self.phase = Phase::Draining {
                    since,
                    closed_ns,
                    deadline: now + room.min(MAX_DRAIN),
                };
                Duration::from_millis(1)
            }
            Phase::Open { until, .. } => until - now,
            Phase::Draining {
                since,
                closed_ns,
                deadline,
            } => {
                matcher.settle(monotonic_ns());
                let pending = matcher.pending_before(closed_ns);
                if pending && now < deadline {
                    return Duration::from_millis(2);
                }
                if pending {
                    self.drain_cut += 1;
                }
                probe.close_window();
                matcher.window_closed();
                self.observed += now - since;
                let next = (self.period_start + self.w.every).max(now);
                self.phase = Phase::Closed { until: next };
                next - now
            }
            Phase::Closed { until } if now >= until => {
                match probe.open_window() {
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "opening a sampling window"),
                }
                matcher.window_opened(monotonic_ns());
                self.windows += 1;
                self.period_start = until;
                self.phase = Phase::Open {
                    since: now,
                    until: now + self.w.window,
                };
                self.w.window
            }
            Phase::Closed { until } => until - now,
        }
    }

    /// Between windows: nothing attached.
    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed { .. })
    }

    /// Windows opened, time attached (the current window up to now) and
    /// drains cut at [`MAX_DRAIN`].
    pub fn totals(&self) -> (u64, Duration, u64) {
        let open = match self.phase {
            Phase::Open { since, .. } | Phase::Draining { since, .. } => since.elapsed(),
            Phase::Closed { .. } => Duration::ZERO,
        };
        (self.windows, self.observed + open, self.drain_cut)
    }

    pub(crate) fn finish(&mut self) {
        let now = Instant::now();
        match self.phase {
            Phase::Open { since, .. } | Phase::Draining { since, .. } => {
                self.observed += now - since;
            }
            Phase::Closed { .. } => {}
        }
    }
}
