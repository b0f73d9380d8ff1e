//! Latency samples of one segment: exact count, min, max and mean, and
//! percentiles of *every* sample within 0.5 % of their value
//! (`stack::quantiles`, a log-bucketed histogram), in memory bounded
//! whatever the number of samples. Deterministic: the same samples give
//! the same report in any order.

use serde::Serialize;

use crate::stack::quantiles::LogBuckets;

#[derive(Clone, Debug)]
pub struct Samples {
    count: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
    buckets: LogBuckets,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            count: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            buckets: LogBuckets::default(),
        }
    }
}

/// The summary a report carries, in microseconds (fractions kept: host
/// segments are often a few µs). Percentiles are nearest-rank over all
/// samples, each within 0.5 % of the exact value.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub samples: u64,
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl Samples {
    pub fn add(&mut self, ns: u64) {
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        self.buckets.add(ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    /// Nearest-rank percentile (`q` in 0..=1) in ns, within 0.5 % of the
    /// exact one, never outside the exact minimum and maximum; 0 without
    /// samples.
    pub fn quantile_ns(&self, q: f64) -> f64 {
        // The extremes are known exactly.
        let rank = (q * self.count as f64).ceil() as u64;
        if self.count > 0 && rank >= self.count {
            return self.max_ns as f64;
        }
        if self.count > 0 && rank <= 1 {
            return self.min_ns as f64;
        }
        match self.buckets.quantile(q) {
            None => 0.0,
            Some(v) => v.clamp(self.min_ns as f64, self.max_ns as f64),
        }
    }

    pub fn summary(&self) -> Summary {
        let us = |ns: f64| ns / 1000.0;
        if self.count == 0 {
            return Summary {
                samples: 0,
                min_us: 0.0,
                mean_us: 0.0,
                p50_us: 0.0,
                p90_us: 0.0,
                p99_us: 0.0,
                max_us: 0.0,
            };
        }
        Summary {
            samples: self.count,
            min_us: us(self.min_ns as f64),
            mean_us: self.mean_ns() / 1000.0,
            p50_us: us(self.quantile_ns(0.50)),
            p90_us: us(self.quantile_ns(0.90)),
            p99_us: us(self.quantile_ns(0.99)),
            max_us: us(self.max_ns as f64),
        }
    }

    /// Merges another set (a report over several flows or intervals):
    /// exact, as if every sample had been added here.
    pub fn merge(&mut self, o: &Samples) {
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
        self.buckets.merge(&o.buckets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 0.005 * b.abs() + 1e-9
    }

    #[test]
    fn exact_figures_and_close_percentiles() {
        let mut s = Samples::default();
        for v in 1..=100u64 {
            s.add(v * 1000);
        }
        let m = s.summary();
        assert_eq!(m.samples, 100);
        assert_eq!(m.min_us, 1.0);
        assert_eq!(m.max_us, 100.0);
        assert_eq!(m.mean_us, 50.5);
        assert!(close(m.p50_us, 50.0), "{}", m.p50_us);
        assert!(close(m.p90_us, 90.0), "{}", m.p90_us);
        assert!(close(m.p99_us, 99.0), "{}", m.p99_us);
    }

    /// The case the reservoir got wrong: a median where the density is
    /// low, between two modes, over more samples than it kept.
    #[test]
    fn a_median_between_two_modes_is_read_from_all_samples() {
        let mut s = Samples::default();
        let mut all = Vec::new();
        for i in 0..60_000u64 {
            let v = if i % 2 == 0 {
                10_000 + (i * 7919) % 1_000
            } else {
                10_000_000 + (i * 104_729) % 5_000_000
            };
            s.add(v);
            all.push(v);
        }
        all.sort_unstable();
        for q in [0.5, 0.9, 0.99] {
            let r = ((q * all.len() as f64).ceil() as usize).clamp(1, all.len());
            let want = all[r - 1] as f64;
            assert!(
                close(s.quantile_ns(q), want),
                "q {q}: {} vs {want}",
                s.quantile_ns(q)
            );
        }
    }

    #[test]
    fn merge_keeps_exact_count_sum_min_max() {
        let mut a = Samples::default();
        let mut b = Samples::default();
        for v in [5u64, 6, 7] {
            a.add(v);
        }
        for v in [1u64, 100, 3, 4, 9, 2] {
            b.add(v);
        }
        a.merge(&b);
        assert_eq!(a.count(), 9);
        assert_eq!(a.min_ns, 1);
        assert_eq!(a.max_ns, 100);
        assert_eq!(a.sum_ns, 5 + 6 + 7 + 1 + 100 + 3 + 4 + 9 + 2);
        assert_eq!(a.quantile_ns(1.0), 100.0);
    }

    #[test]
    fn empty_is_zero_not_nan() {
        let m = Samples::default().summary();
        assert_eq!(m.samples, 0);
        assert_eq!(m.mean_us, 0.0);
        assert_eq!(m.min_us, 0.0);
        assert_eq!(m.p90_us, 0.0);
    }
}
