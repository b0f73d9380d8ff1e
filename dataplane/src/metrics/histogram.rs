//! A log-linear histogram of µs values for a worker's quantiles (the
//! Prometheus summary): each power of two split into 16 equal buckets (the
//! HdrHistogram layout), so a bucket is at most 1/16 of its lower bound
//! wide and a quantile read at its midpoint is within 3.2 % of any value in
//! it; values below 32 µs have a bucket each. One increment per sample;
//! 1.8 KiB, held once per worker and leg, not per flow.

use super::sketch::Summary;

const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Values below this are their own bucket.
const LINEAR: u32 = 2 * SUB as u32;
/// Buckets for every u32: the linear ones, then 16 per octave from 2^5.
pub const BUCKETS: usize = LINEAR as usize + (32 - SUB_BITS as usize - 1) * SUB;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: [u32; BUCKETS],
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: [0; BUCKETS],
            total: 0,
        }
    }
}

#[inline]
fn bucket(us: u32) -> usize {
    if us < LINEAR {
        return us as usize;
    }
    let e = 31 - us.leading_zeros(); // >= 5
    let sub = (us >> (e - SUB_BITS)) as usize & (SUB - 1);
    LINEAR as usize + (e as usize - (SUB_BITS as usize + 1)) * SUB + sub
}

/// The smallest value of bucket `i` and the bucket's width.
fn bounds(i: usize) -> (f64, f64) {
    if i < LINEAR as usize {
        return (i as f64, 1.0);
    }
    let j = i - LINEAR as usize;
    let e = (j / SUB) as i32 + SUB_BITS as i32 + 1;
    let width = 2f64.powi(e - SUB_BITS as i32);
    (2f64.powi(e) + (j % SUB) as f64 * width, width)
}

impl Histogram {
    #[inline]
    pub fn add(&mut self, us: u32) {
        let b = &mut self.counts[bucket(us)];
        *b = b.saturating_add(1);
        self.total += 1;
    }

    pub fn clear(&mut self) {
        *self = Histogram::default();
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// The `p` quantile (nearest rank), at its bucket's midpoint.
    pub fn quantile(&self, p: f64) -> Option<u32> {
        if self.total == 0 {
            return None;
        }
        let rank = ((p * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += u64::from(n);
            if seen >= rank {
                let (lo, w) = bounds(i);
                let mid = if w <= 1.0 { lo } else { lo + w / 2.0 };
                return Some(mid.round().min(f64::from(u32::MAX)) as u32);
            }
        }
        None
    }

    /// Count, p50 and p90 (the rest of [`Summary`] is not kept here).
    pub fn summary(&self) -> Summary {
        Summary {
            count: u32::try_from(self.total).unwrap_or(u32::MAX),
            p50_us: self.quantile(0.5),
            p90_us: self.quantile(0.9),
            ..Summary::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_histogram_buckets_cover_u32_in_order() {
        let mut last = 0;
        for v in (0..100_000u32).chain([u32::MAX / 2, u32::MAX - 1, u32::MAX]) {
            let b = bucket(v);
            assert!(b >= last && b < BUCKETS, "{v} -> {b}");
            let (lo, w) = bounds(b);
            assert!(
                f64::from(v) >= lo && f64::from(v) < lo + w,
                "{v} not in [{lo}, +{w})"
            );
            last = b;
        }
        assert_eq!(bucket(u32::MAX), BUCKETS - 1);
    }

    #[test]
    fn metrics_histogram_quantiles_within_bucket_precision() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        let xs: Vec<u32> = (0..10_000u32)
            .map(|i| 10_000 + (i * 7919) % 30_000)
            .collect();
        xs.iter().for_each(|&x| h.add(x));
        let mut s = xs.clone();
        s.sort_unstable();
        for p in [0.5, 0.9] {
            let want = f64::from(s[(p * s.len() as f64).ceil() as usize - 1]);
            let got = f64::from(h.quantile(p).unwrap());
            assert!((got - want).abs() / want <= 0.032, "p{p}: {got} vs {want}");
        }
        assert_eq!(h.summary().count, 10_000);
        h.clear();
        assert_eq!(h.total(), 0);
        h.add(7);
        assert_eq!(h.quantile(0.9), Some(7));
    }
}
