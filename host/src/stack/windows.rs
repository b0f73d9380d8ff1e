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
/// have passed them all, for at most the matcher's hold (`--hold`): the
/// bytes still on their way then are counted as cut, not dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub window: Duration,
    pub every: Duration,
}

/// Where the window schedule is.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Every layer attached since `since` (before the attaching began),
    /// the entry open since `entry`, until `until`.
    Open {
        since: Instant,
        entry: Instant,
        until: Instant,
    },
    /// Entry closed at `closed` (`closed_ns` monotonic); the rest until
    /// nothing let in before is pending, or `deadline`.
    Draining {
        since: Instant,
        closed: Instant,
        closed_ns: u64,
        deadline: Instant,
    },
    /// Nothing attached until `until`.
    Closed { until: Instant },
}

/// What the windows did, as measured (not as configured): a window is
/// attached from before its first attach until its last detach returned,
/// which is longer than its nominal length by the attaching and by the
/// drain of the bytes it let in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowTotals {
    pub windows: u64,
    /// Layer programs attached (or ungated), all windows.
    pub attached: Duration,
    /// The send path's entry open (bytes let in), all windows.
    pub entry_open: Duration,
    /// Draining: entry closed, the rest still attached.
    pub draining: Duration,
    /// Drains that ended at the hold with bytes still on their way (the
    /// matcher counts those bytes as `cut`).
    pub drain_cut: u64,
}

/// The window schedule and its bookkeeping: stepped by whatever loop
/// drains the probe (`run_with` here, the daemon's host thread).
///
/// The window's place in each period is random (uniform over the
/// period), drawn afresh every period: traffic that repeats with the
/// period (a timer, a poll) would otherwise be always inside or always
/// outside the windows.
pub struct Schedule {
    w: Windows,
    phase: Phase,
    /// Start of the current period (on the grid start + k·every).
    period_start: Instant,
    rng: u64,
    pub(crate) windows: u64,
    pub(crate) observed: Duration,
    entry_open: Duration,
    draining: Duration,
    /// Windows that hit the hold with bytes still pending.
    pub(crate) drain_cut: u64,
}

impl Schedule {
    /// The probe has just attached: the first window is open.
    pub fn new(w: Windows, now: Instant) -> Schedule {
        let seed = monotonic_ns() ^ (u64::from(std::process::id()) << 32) | 1;
        Schedule {
            w,
            phase: Phase::Open {
                since: now,
                entry: now,
                until: now + w.window,
            },
            period_start: now,
            rng: seed,
            windows: 1,
            observed: Duration::ZERO,
            entry_open: Duration::ZERO,
            draining: Duration::ZERO,
            drain_cut: 0,
        }
    }

    /// A uniform offset in `[0, every)` (xorshift64*: the phase needs no
    /// more than to be unrelated to the traffic). Over the whole period,
    /// not its first `every − window`: a window may run into the next
    /// period (whose own window then opens no earlier than this one's
    /// drain ends), so every phase of the period is covered with the same
    /// probability, `window / every`.
    fn offset(&mut self) -> Duration {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let u = (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        self.w.every.mul_f64(u)
    }

    /// When the next window opens after a drain that ended at `now`: at
    /// a random offset into the period after the current one (or the one
    /// `now` is in, if the drain ran over whole periods), at once if
    /// that moment is past.
    fn next_open(&mut self, now: Instant) -> Instant {
        let mut next = self.period_start + self.w.every;
        while next + self.w.every <= now {
            next += self.w.every; // a drain ran over whole periods
        }
        self.period_start = next;
        (next + self.offset()).max(now)
    }

    /// Moves the schedule on; returns how long the loop may wait for
    /// events before it must look again.
    pub fn step(&mut self, probe: &mut StackProbe, matcher: &mut Matcher) -> Duration {
        let now = Instant::now();
        match self.phase {
            Phase::Open {
                since,
                entry,
                until,
            } if now >= until => {
                probe.close_entry();
                let closed = Instant::now();
                let closed_ns = monotonic_ns();
                matcher.window_closing(closed_ns);
                self.entry_open += closed.saturating_duration_since(entry);
                let room = self.w.every.saturating_sub(self.w.window);
                self.phase = Phase::Draining {
                    since,
                    closed,
                    closed_ns,
                    deadline: closed + room.min(matcher.hold()),
                };
                Duration::from_millis(1)
            }
            Phase::Open { until, .. } => until - now,
            Phase::Draining {
                since,
                closed,
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
                let done = Instant::now();
                self.observed += done.saturating_duration_since(since);
                self.draining += done.saturating_duration_since(closed);
                let next = self.next_open(done);
                self.phase = Phase::Closed { until: next };
                next.saturating_duration_since(done)
            }
            Phase::Closed { until } if now >= until => {
                let opened_ns = probe.open_window().unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "opening a sampling window");
                    monotonic_ns()
                });
                let entry = Instant::now();
                matcher.window_opened(opened_ns);
                self.windows += 1;
                self.phase = Phase::Open {
                    since: now,
                    entry,
                    until: entry + self.w.window,
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
    /// drains cut at the hold.
    pub fn totals(&self) -> (u64, Duration, u64) {
        let t = self.measured();
        (t.windows, t.attached, t.drain_cut)
    }

    /// Everything measured so far, the current window up to now.
    pub fn measured(&self) -> WindowTotals {
        let mut t = WindowTotals {
            windows: self.windows,
            attached: self.observed,
            entry_open: self.entry_open,
            draining: self.draining,
            drain_cut: self.drain_cut,
        };
        match self.phase {
            Phase::Open { since, entry, .. } => {
                t.attached += since.elapsed();
                t.entry_open += entry.elapsed();
            }
            Phase::Draining { since, closed, .. } => {
                t.attached += since.elapsed();
                t.draining += closed.elapsed();
            }
            Phase::Closed { .. } => {}
        }
        t
    }

    pub(crate) fn finish(&mut self) {
        let now = Instant::now();
        match self.phase {
            Phase::Open { since, entry, .. } => {
                self.observed += now - since;
                self.entry_open += now.saturating_duration_since(entry);
            }
            Phase::Draining { since, closed, .. } => {
                self.observed += now - since;
                self.draining += now.saturating_duration_since(closed);
            }
            Phase::Closed { .. } => {}
        }
        self.phase = Phase::Closed { until: now };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_spread_over_the_period_and_periods_stay_on_the_grid() {
        let t0 = Instant::now();
        let w = Windows {
            window: Duration::from_millis(100),
            every: Duration::from_millis(1000),
        };
        let mut s = Schedule::new(w, t0);
        let mut offsets = Vec::new();
        // Each window's drain ends 150 ms after it opened (a window near
        // a period's end runs into the next one).
        let mut end = t0 + Duration::from_millis(150);
        for k in 1..=400u32 {
            let open = s.next_open(end);
            let period = t0 + w.every * k;
            assert_eq!(s.period_start, period, "period {k} on the grid");
            assert!(open >= end, "never before the last drain ended");
            let off = open - period;
            assert!(off < w.every, "{off:?}");
            offsets.push(off.as_secs_f64());
            end = open + Duration::from_millis(150);
        }
        // Uniform over the period but for the openings a drain delayed:
        // mean about 0.5 s, some in every tenth.
        let mean = offsets.iter().sum::<f64>() / offsets.len() as f64;
        assert!((mean - 0.5).abs() < 0.06, "mean offset {mean}");
        for d in 0..10 {
            let lo = d as f64 * 0.1;
            let n = offsets.iter().filter(|&&o| o >= lo && o < lo + 0.1).count();
            assert!(
                (15..=80).contains(&n),
                "{n} offsets in [{lo}, {})",
                lo + 0.1
            );
        }
        // A drain that ran past whole periods: the next window opens in
        // the period it ended in, not before it ended.
        let base = s.period_start;
        let late = base + w.every * 3 + Duration::from_millis(950);
        let open = s.next_open(late);
        assert_eq!(s.period_start, base + w.every * 3);
        assert!(
            open >= late && open < base + w.every * 4,
            "{:?}",
            open - late
        );
    }
}
