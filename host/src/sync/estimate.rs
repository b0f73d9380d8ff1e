//! Clock offset from timing probes — the sans-IO core of clock sync:
//! timestamps in, offset, uncertainty and drift out; no clock read here.
//!
//! One exchange has four times: `t1` the manager sent the probe, `t2` the
//! agent's responder received it, `t3` it sent it back, `t4` the manager
//! received it; `t1`, `t4` on the manager's clock, `t2`, `t3` on the
//! agent's. With θ the agent's clock minus the manager's and `d→`, `d←`
//! the one-way delays (NTP's on-wire algebra, RFC 5905 §8):
//!
//! ```text
//! t2 = t1 + θ + d→        t4 = t3 − θ + d←
//! θ̂  = ((t2 − t1) + (t3 − t4)) / 2  = θ + (d→ − d←) / 2
//! δ  = (t4 − t1) − (t3 − t2)        = d→ + d←
//! ```
//!
//! Delays are never negative, so every exchange also bounds θ exactly:
//! `t3 − t4 ≤ θ ≤ t2 − t1`, an interval of width δ. The estimate's error is
//! half the delay *asymmetry*, which no probe can see; it is smallest
//! where the delays are least (least queueing and scheduling noise on
//! either leg), which is why NTP's clock filter (RFC 5905 §10) keeps the
//! minimum-delay samples. Here a burst keeps the minimum of each leg: the
//! intersection of every exchange's interval is bounded below by the
//! exchange with the least return delay and above by the one with the
//! least forward delay, and the estimate is its middle. Its half-width is
//! the reported uncertainty, a hard bound θ cannot leave whatever the
//! asymmetry.
//!
//! Across rounds, [`ClockModel`] fits the drift (the agent's clock rate
//! relative to the manager's, in ppm) by least squares and converts agent
//! times to manager times between and after rounds.

use std::collections::VecDeque;

use serde::Serialize;

/// One probe's four times, ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub t1: u64,
    pub t2: u64,
    pub t3: u64,
    pub t4: u64,
}

impl Exchange {
    /// θ̂: the agent's clock minus the manager's.
    pub fn offset_ns(&self) -> i128 {
        let (t1, t2, t3, t4) = self.wide();
        ((t2 - t1) + (t3 - t4)).div_euclid(2)
    }

    /// δ: the round trip minus the time inside the responder.
    pub fn delay_ns(&self) -> i128 {
        let (t1, t2, t3, t4) = self.wide();
        (t4 - t1) - (t3 - t2)
    }

    /// The interval θ must lie in: `[t3 − t4, t2 − t1]`.
    pub fn bounds(&self) -> (i128, i128) {
        let (t1, t2, t3, t4) = self.wide();
        (t3 - t4, t2 - t1)
    }

    fn wide(&self) -> (i128, i128, i128, i128) {
        (
            i128::from(self.t1),
            i128::from(self.t2),
            i128::from(self.t3),
            i128::from(self.t4),
        )
    }

    /// Stamps that contradict causality (the reply before the request, a
    /// responder that sent before it received): not an exchange to use.
    fn sane(&self) -> bool {
        self.t4 >= self.t1 && self.t3 >= self.t2 && self.delay_ns() >= 0
    }
}

/// One round's result for one agent.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    /// Manager time the estimate holds for: the middle of the kept
    /// exchange with the least delay.
    pub at_ns: u64,
    /// θ: agent clock − manager clock.
    pub offset_ns: i64,
    /// Half-width of the range θ is proven to lie in, around `offset_ns`.
    pub uncertainty_ns: u64,
    /// The least δ of the burst.
    pub min_delay_ns: u64,
    /// Exchanges answered / kept for the estimate / refused as insane.
    pub answered: usize,
    pub kept: usize,
    pub insane: usize,
}

/// The estimate of one burst; `None` when no exchange is usable.
///
/// The least forward and the least return delay of the burst bound θ
/// from both sides (the intersection of every exchange's interval); the
/// estimate is the middle of that range, and its half-width the proven
/// uncertainty. Should the intervals not intersect (a clock stepped
/// during the burst), the `keep` least-delay exchanges vote instead: the
/// median of their θ̂, bounded by the best one's interval.
pub fn estimate(exchanges: &[Exchange], keep: usize) -> Option<Estimate> {
    let mut ok: Vec<&Exchange> = exchanges.iter().filter(|e| e.sane()).collect();
    let insane = exchanges.len() - ok.len();
    if ok.is_empty() {
        return None;
    }
    ok.sort_by_key(|e| e.delay_ns());
    let best = ok[0];
    let kept = &ok[..keep.clamp(1, ok.len())];
    let (mut lo, mut hi) = best.bounds();
    for e in &ok {
        let (l, h) = e.bounds();
        lo = lo.max(l);
        hi = hi.min(h);
    }
    let theta = if lo <= hi {
        lo + (hi - lo) / 2
    } else {
        (lo, hi) = best.bounds();
        let mut offsets: Vec<i128> = kept.iter().map(|e| e.offset_ns()).collect();
        offsets.sort_unstable();
        // Lower median: an even count never averages two votes into a
        // value neither exchange supports.
        offsets[(offsets.len() - 1) / 2].clamp(lo, hi)
    };
    let uncertainty = (theta - lo).max(hi - theta);
    let mid = (i128::from(best.t1) + i128::from(best.t4)) / 2;
    Some(Estimate {
        at_ns: u64::try_from(mid).unwrap_or(0),
        offset_ns: clamp_i64(theta),
        uncertainty_ns: u64::try_from(uncertainty).unwrap_or(u64::MAX),
        min_delay_ns: u64::try_from(best.delay_ns()).unwrap_or(0),
        answered: exchanges.len(),
        kept: kept.len(),
        insane,
    })
}

fn clamp_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Rounds a model remembers for its drift fit and interpolation.
pub const HISTORY: usize = 32;

/// One agent's clock as the rounds have seen it.
#[derive(Clone, Debug, Default)]
pub struct ClockModel {
    rounds: VecDeque<Estimate>,
    /// Least-squares slope of θ over manager time (ns per ns).
    slope: f64,
    /// How far the latest round landed from where the previous model
    /// predicted it (ns; 0 for the first round).
    last_step_ns: i64,
}

/// What a model says now (for reports and metrics).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ClockState {
    pub offset_ns: i64,
    pub uncertainty_ns: u64,
    pub min_delay_ns: u64,
    /// The agent's clock rate minus the manager's, parts per million.
    pub drift_ppm: f64,
    /// The latest round's distance from the previous model's prediction.
    pub step_ns: i64,
    pub rounds: usize,
}

impl ClockModel {
    pub fn is_synced(&self) -> bool {
        !self.rounds.is_empty()
    }

    /// Adds a round (rounds must come in manager-time order; an older one
    /// is ignored).
    pub fn add(&mut self, e: Estimate) {
        if self.rounds.back().is_some_and(|l| e.at_ns <= l.at_ns) {
            return;
        }
        self.last_step_ns = match self.rounds.back() {
            Some(_) => clamp_i64(i128::from(e.offset_ns) - self.offset_at(e.at_ns)),
            None => 0,
        };
        self.rounds.push_back(e);
        while self.rounds.len() > HISTORY {
            self.rounds.pop_front();
        }
        self.slope = fit_slope(&self.rounds);
    }

    pub fn state(&self) -> Option<ClockState> {
        let last = self.rounds.back()?;
        Some(ClockState {
            offset_ns: last.offset_ns,
            uncertainty_ns: last.uncertainty_ns,
            min_delay_ns: last.min_delay_ns,
            drift_ppm: self.slope * 1e6,
            step_ns: self.last_step_ns,
            rounds: self.rounds.len(),
        })
    }

    /// θ at manager time `t`: linear between the rounds around it, the
    /// fitted drift beyond the newest (and before the oldest).
    pub fn offset_at(&self, t: u64) -> i128 {
        let Some(last) = self.rounds.back() else {
            return 0;
        };
        let first = self.rounds[0];
        let extrapolate = |r: &Estimate| {
            let dt = t as f64 - r.at_ns as f64;
            i128::from(r.offset_ns) + (self.slope * dt) as i128
        };
        if t >= last.at_ns {
            return extrapolate(last);
        }
        if t <= first.at_ns {
            return extrapolate(&first);
        }
        let i = self.rounds.partition_point(|r| r.at_ns <= t);
        let (a, b) = (self.rounds[i - 1], self.rounds[i]);
        let span = (b.at_ns - a.at_ns) as f64;
        let f = (t - a.at_ns) as f64 / span;
        i128::from(a.offset_ns) + ((b.offset_ns as f64 - a.offset_ns as f64) * f) as i128
    }

    /// The manager time of agent time `ta`: `ta − θ(tm)`, with `tm` found
    /// by fixed-point steps (each shrinks the error by the drift, a few
    /// ppm: two leave well below a nanosecond).
    pub fn to_manager(&self, ta: u64) -> u64 {
        let Some(last) = self.rounds.back() else {
            return ta;
        };
        let mut tm = sat(i128::from(ta) - i128::from(last.offset_ns));
        for _ in 0..2 {
            tm = sat(i128::from(ta) - self.offset_at(tm));
        }
        tm
    }
}

fn sat(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

/// Least-squares slope of offset over time; 0 with fewer than two rounds.
fn fit_slope(rounds: &VecDeque<Estimate>) -> f64 {
    if rounds.len() < 2 {
        return 0.0;
    }
    // Centred on the first round so the sums stay small.
    let (t0, o0) = (rounds[0].at_ns as f64, rounds[0].offset_ns as f64);
    let n = rounds.len() as f64;
    let (mut sx, mut sy) = (0.0, 0.0);
    for r in rounds {
        sx += r.at_ns as f64 - t0;
        sy += r.offset_ns as f64 - o0;
    }
    let (mx, my) = (sx / n, sy / n);
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for r in rounds {
        let dx = r.at_ns as f64 - t0 - mx;
        let dy = r.offset_ns as f64 - o0 - my;
        sxy += dx * dy;
        sxx += dx * dx;
    }
    if sxx <= 0.0 { 0.0 } else { sxy / sxx }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exchange with true offset `theta`, leaving at `t1` with one-way
    /// delays `fwd`, `back` and `hold` inside the responder.
    fn ex(t1: u64, theta: i64, fwd: u64, hold: u64, back: u64) -> Exchange {
        let t2 = (t1 + fwd).wrapping_add_signed(theta);
        let t3 = t2 + hold;
        let t4 = t1 + fwd + hold + back;
        Exchange { t1, t2, t3, t4 }
    }

    #[test]
    fn symmetric_delays_give_the_offset_exactly() {
        for theta in [0i64, 1_000_000, -1_000_000, 250_000_000, -250_000_000] {
            let e = ex(10_000_000_000, theta, 20_000, 300, 20_000);
            assert_eq!(e.offset_ns(), i128::from(theta));
            assert_eq!(e.delay_ns(), 40_000);
            let (lo, hi) = e.bounds();
            assert!(lo <= i128::from(theta) && i128::from(theta) <= hi);
            assert_eq!(hi - lo, 40_000);
        }
    }

    #[test]
    fn asymmetry_costs_half_its_size() {
        let e = ex(5_000_000_000, 77, 30_000, 0, 10_000);
        assert_eq!(e.offset_ns(), 77 + 10_000);
    }

    #[test]
    fn the_least_delay_exchanges_win_over_noisy_ones() {
        let theta = -250_000_000i64;
        let mut v = Vec::new();
        // Noisy exchanges: the return leg delayed by up to 2 ms (the
        // manager's thread was not running when the reply came).
        for i in 0..12u64 {
            let extra = 100_000 + i * 150_000;
            v.push(ex(1_000_000_000 + i * 1_000_000, theta, 15_000, 200, extra));
        }
        // Four quiet ones, a microsecond of asymmetry each way.
        for (i, (f, b)) in [
            (15_000, 16_000),
            (16_000, 15_000),
            (15_500, 15_000),
            (15_000, 15_400),
        ]
        .into_iter()
        .enumerate()
        {
            v.push(ex(2_000_000_000 + i as u64 * 1_000_000, theta, f, 200, b));
        }
        let est = estimate(&v, 4).unwrap();
        assert!(
            (est.offset_ns - theta).abs() <= 500,
            "{} vs {theta}",
            est.offset_ns
        );
        assert_eq!(est.min_delay_ns, 30_400);
        assert_eq!(est.kept, 4);
        // The proven range holds θ and is no wider than the best exchange.
        let lo = est.offset_ns - est.uncertainty_ns as i64;
        let hi = est.offset_ns + est.uncertainty_ns as i64;
        assert!(lo <= theta && theta <= hi);
        assert!(est.uncertainty_ns <= 30_400);
        // A plain mean over the burst would be far off.
        let mean: i128 = v.iter().map(Exchange::offset_ns).sum::<i128>() / v.len() as i128;
        assert!((mean - i128::from(theta)).abs() > 50_000);
    }

    #[test]
    fn intersection_tightens_the_bound() {
        // Two exchanges, each 40 µs wide, shifted against each other by
        // their asymmetries: the range they share is narrower.
        let theta = 1_000_000;
        let a = ex(1_000_000_000, theta, 10_000, 0, 30_000);
        let b = ex(1_001_000_000, theta, 30_000, 0, 10_000);
        let est = estimate(&[a, b], 2).unwrap();
        let lo = est.offset_ns - est.uncertainty_ns as i64;
        let hi = est.offset_ns + est.uncertainty_ns as i64;
        assert!(lo <= theta && theta <= hi, "{lo}..{hi}");
        assert!(est.uncertainty_ns <= 10_000, "{}", est.uncertainty_ns);
    }

    #[test]
    fn insane_exchanges_are_refused_and_none_means_none() {
        let good = ex(1_000, 5, 10, 1, 10);
        let bad = Exchange {
            t1: 100,
            t2: 50,
            t3: 40,
            t4: 90,
        };
        let est = estimate(&[bad, good], 4).unwrap();
        assert_eq!((est.insane, est.kept, est.offset_ns), (1, 1, 5));
        assert!(estimate(&[bad], 4).is_none());
        assert!(estimate(&[], 4).is_none());
    }

    fn round(at_ns: u64, offset_ns: i64) -> Estimate {
        Estimate {
            at_ns,
            offset_ns,
            uncertainty_ns: 10_000,
            min_delay_ns: 20_000,
            answered: 16,
            kept: 4,
            insane: 0,
        }
    }

    #[test]
    fn drift_is_fitted_and_extrapolated() {
        // The agent's clock gains 20 ppm: θ grows 1.28 ms per 64 s.
        let mut m = ClockModel::default();
        let base = 5_000_000_000i64;
        for k in 0..5u64 {
            let t = 100_000_000_000 + k * 64_000_000_000;
            m.add(round(t, base + (t as f64 * 20e-6) as i64));
        }
        let s = m.state().unwrap();
        assert!((s.drift_ppm - 20.0).abs() < 1e-3, "{}", s.drift_ppm);
        assert!(s.step_ns.abs() < 10, "prediction was right: {}", s.step_ns);
        // 30 s after the last round, the model follows the drift.
        let t = 100_000_000_000 + 4 * 64_000_000_000 + 30_000_000_000u64;
        let want = base + (t as f64 * 20e-6) as i64;
        assert!((m.offset_at(t) - i128::from(want)).abs() < 10);
        // And maps an event stamped by the agent back to manager time.
        let ta = (t as i64 + want) as u64;
        assert!((m.to_manager(ta) as i64 - t as i64).abs() < 10);
    }

    #[test]
    fn between_rounds_it_interpolates() {
        let mut m = ClockModel::default();
        m.add(round(1_000_000_000, 1_000));
        m.add(round(3_000_000_000, 3_000));
        assert_eq!(m.offset_at(2_000_000_000), 2_000);
        // Older rounds than the newest are ignored.
        m.add(round(2_000_000_000, 9_999_999));
        assert_eq!(m.state().unwrap().rounds, 2);
    }

    #[test]
    fn unsynced_model_is_the_identity() {
        let m = ClockModel::default();
        assert!(!m.is_synced());
        assert_eq!(m.to_manager(12345), 12345);
        assert!(m.state().is_none());
    }

    #[test]
    fn negative_offsets_map_back() {
        let mut m = ClockModel::default();
        m.add(round(50_000_000_000, -250_000_000));
        assert_eq!(m.to_manager(60_000_000_000 - 250_000_000), 60_000_000_000);
    }
}
