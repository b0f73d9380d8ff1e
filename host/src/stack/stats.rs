//! Latency samples of one segment: exact count, min, max and mean, and
//! percentiles from the samples kept — all of them up to a cap, then a
//! uniform reservoir (Vitter's algorithm R) so memory stays bounded on a
//! flow that lives for days. Deterministic: the reservoir's generator has
//! a fixed seed, so the same input gives the same report.

use serde::Serialize;

/// Samples kept per segment and report for percentiles.
pub const DEFAULT_KEEP: usize = 4096;

#[derive(Clone, Debug)]
pub struct Samples {
    count: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
    kept: Vec<u64>,
    cap: usize,
    rng: u64,
}

impl Default for Samples {
    fn default() -> Self {
        Samples::with_cap(DEFAULT_KEEP)
    }
}

/// The summary a report carries, in microseconds (fractions kept: host
/// segments are often a few µs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub samples: u64,
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl Samples {
    pub fn with_cap(cap: usize) -> Self {
        Samples {
            count: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            kept: Vec::new(),
            cap: cap.max(1),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    pub fn add(&mut self, ns: u64) {
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        if self.kept.len() < self.cap {
            self.kept.push(ns);
        } else {
            // xorshift64*: a fixed-seed generator is enough to pick slots.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let j = self.rng % self.count;
            if (j as usize) < self.cap {
                self.kept[j as usize] = ns;
            }
        }
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

    /// Nearest-rank percentile (`q` in 0..=1) of the kept samples, in ns.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.kept.is_empty() {
            return 0;
        }
        let mut v = self.kept.clone();
        v.sort_unstable();
        rank(&v, q)
    }

    pub fn summary(&self) -> Summary {
        let mut v = self.kept.clone();
        v.sort_unstable();
        let us = |ns: u64| ns as f64 / 1000.0;
        Summary {
            samples: self.count,
            min_us: if self.count == 0 {
                0.0
            } else {
                us(self.min_ns)
            },
            mean_us: self.mean_ns() / 1000.0,
            p50_us: us(rank(&v, 0.50)),
            p99_us: us(rank(&v, 0.99)),
            max_us: us(self.max_ns),
        }
    }

    /// Merges another set (a report over several flows or intervals).
    pub fn merge(&mut self, o: &Samples) {
        let before = self.count;
        for &s in &o.kept {
            self.add(s);
        }
        // Exact figures from the other set, not from its kept subset.
        self.count = before + o.count;
        self.sum_ns = self.sum_ns - o.kept.iter().map(|&s| u128::from(s)).sum::<u128>() + o.sum_ns;
        if o.count > 0 {
            self.min_ns = self.min_ns.min(o.min_ns);
            self.max_ns = self.max_ns.max(o.max_ns);
        }
    }
}

fn rank(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let n = sorted.len();
    let r = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[r - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_figures_below_the_cap() {
        let mut s = Samples::with_cap(100);
        for v in 1..=100u64 {
            s.add(v * 1000);
        }
        let m = s.summary();
        assert_eq!(m.samples, 100);
        assert_eq!(m.min_us, 1.0);
        assert_eq!(m.max_us, 100.0);
        assert_eq!(m.mean_us, 50.5);
        assert_eq!(m.p50_us, 50.0);
        assert_eq!(m.p99_us, 99.0);
    }

    #[test]
    fn reservoir_keeps_percentiles_close_and_memory_bounded() {
        let mut s = Samples::with_cap(1000);
        for v in 0..100_000u64 {
            s.add(v);
        }
        assert_eq!(s.kept.len(), 1000);
        assert_eq!(s.count(), 100_000);
        let p50 = s.quantile_ns(0.5) as f64;
        assert!((p50 - 50_000.0).abs() < 5_000.0, "p50 {p50}");
        assert_eq!(s.summary().max_us, 99.999);
        assert_eq!(s.summary().mean_us, 49.9995);
    }

    #[test]
    fn merge_keeps_exact_count_sum_min_max() {
        let mut a = Samples::with_cap(4);
        let mut b = Samples::with_cap(4);
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
    }

    #[test]
    fn empty_is_zero_not_nan() {
        let m = Samples::default().summary();
        assert_eq!(m.samples, 0);
        assert_eq!(m.mean_us, 0.0);
        assert_eq!(m.min_us, 0.0);
    }
}
