//! A fixed-size summary of RTT samples: count, sum, min, max and estimates
//! of the median and the 90th percentile, in 64 bytes whatever the number
//! of samples.
//!
//! Up to [`EXACT`] (13) samples are kept as they are and the quantiles are
//! exact (linear interpolation between closest ranks, the definition
//! `numpy.quantile` uses by default).
//!
//! Beyond, the summary is [`ITEMS`] (11) weighted items in value order
//! beside the exact minimum and maximum. A new sample becomes an item of
//! its own (or one more of an item of samples all equal to it); when that
//! makes one too many, the two neighbouring items whose merge costs least
//! become one carrying both weights. The cost of a merge is its weight
//! over the rank distance between the pair and the nearer of the two
//! quantiles reported (p50, p90), plus 1 % of the samples: items near the
//! wanted ranks stay light and the weight piles up where nobody reads,
//! which is what makes 11 items enough. A merged item's value is the
//! weighted mean of the two when they are within a factor of 2 (a
//! centroid, as in Dunning's t-digest), else the heavier one's (so no
//! item sits in the gap between two modes or is dragged by an outlier). A
//! quantile is read by linear interpolation between the items' rank
//! centres (an item of equal samples covers its whole rank span, so runs
//! of equal values come back exact), clamped to the exact minimum and
//! maximum.
//!
//! Why not P² (Jain & Chlamtac 1985, two quantiles as Raatikainen 1987;
//! the previous version): its markers move one rank per sample from where
//! the first 13 samples put them and assume a smooth density, so a
//! start-up transient (the handshake's, slow start's) or a second mode
//! pulled the median off by 20 rank percent and more on real captures.
//! Here nothing has to converge: the order of the samples matters only
//! through which neighbours were merged when.
//!
//! Accuracy (`metrics_sketch_rank_error_property` below, and on every leg
//! of `tests/ts_rtt_oracle.rs`): exact up to 13 samples, then within 15 /
//! 10 / 5 rank percent of the true quantile from 14 / 100 / 1000 samples;
//! measured on smooth, heavy-tailed, two-mode, tied, outlier, transient
//! and trending inputs at most 10.2 / 8.2 / 2.9 (three seeds each). A
//! sudden shift late in an interval (the delay changing) can leave it
//! further off: weight piled up where no quantile was is near one now;
//! one reason records report per interval.
//!
//! Weights have 15 bits: from 2^14 samples on, the weights are halved each
//! time the count doubles and only one sample in 2^k (k halvings) goes
//! into the items, picked by a multiplicative hash of the count so that a
//! periodic pattern (every other echo delayed) is not aliased; old and new
//! samples keep equal weight, the minimum, maximum, sum and count stay
//! exact.
//!
//! Item values are stored in 16 bits with 13 significant bits (exact below
//! 4096 µs, within 1 µs below 16.4 ms, within 1/8192 of the value beyond,
//! up to 134 s); the minimum, maximum, sum and count are exact.

use std::cmp::Ordering;

/// Samples kept exactly.
pub const EXACT: usize = 13;
/// Weighted samples kept beyond [`EXACT`].
pub const ITEMS: usize = 11;

/// Weight bits of an item (the top bit says all its samples are equal).
const WEIGHT: u32 = 0x7FFF;
const PURE: u32 = 0x8000;
/// From a count of 2^`SCALE_FROM` on, weights are halved as the count
/// doubles (the total weight stays below 2^15).
const SCALE_FROM: u32 = 14;
/// Rank distance (in percent of the samples) added to every merge's:
/// without it no pair holding a target could ever merge.
const NEAR_PERCENT: u64 = 1;
/// Word of `RttSketch::w` holding the minimum (and the maximum after it),
/// then the items, once past [`EXACT`] samples.
const MIN: usize = 0;
const MAX: usize = 1;
const ITEM: usize = 2;

/// What a summary says, µs; `None` without samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub count: u32,
    pub min_us: Option<u32>,
    pub mean_us: Option<u32>,
    pub max_us: Option<u32>,
    pub p50_us: Option<u32>,
    pub p90_us: Option<u32>,
}

/// Samples of one reporting interval (64 bytes, one cache line).
///
/// Up to [`EXACT`] samples, `w` holds them sorted. Beyond, `w[0]` and
/// `w[1]` are the exact minimum and maximum and `w[2..]` the items in
/// value order, each the value's 16-bit code (low half) and its weight
/// with the all-equal flag (high half); weight 0 marks an unused item (at
/// the end). The sum is exact (`u64` µs).
#[derive(Clone, Copy, Debug, Default)]
pub struct RttSketch {
    sum_us: u64,
    count: u32,
    w: [u32; EXACT],
}

const _: () = assert!(size_of::<RttSketch>() == 64);
const _: () = assert!(ITEM + ITEMS == EXACT);

/// An item: value code and weight (with [`PURE`]).
#[derive(Clone, Copy, Default)]
struct Item {
    code: u16,
    weight: u32,
}

impl Item {
    #[inline]
    fn unpack(w: u32) -> Self {
        Item {
            code: w as u16,
            weight: w >> 16,
        }
    }

    #[inline]
    fn pack(self) -> u32 {
        u32::from(self.code) | self.weight << 16
    }

    #[inline]
    fn n(self) -> u32 {
        self.weight & WEIGHT
    }

    #[inline]
    fn pure(self) -> bool {
        self.weight & PURE != 0
    }
}

/// A µs value in 16 bits: 4 bits of exponent, 12 of mantissa, rounded to
/// nearest; monotonic, so codes compare as the values do.
#[inline]
fn encode(us: u32) -> u16 {
    if us < 1 << 12 {
        return us as u16;
    }
    let shift = 19 - us.leading_zeros(); // bit length - 13
    let mut m = (u64::from(us) + (1u64 << shift >> 1)) >> shift;
    let mut e = shift + 1;
    if m == 1 << 13 {
        m >>= 1;
        e += 1;
    }
    if e > 15 {
        return u16::MAX;
    }
    (e << 12 | (m as u32 & 0xFFF)) as u16
}

#[inline]
fn decode(c: u16) -> u32 {
    let (e, m) = (u32::from(c >> 12), u32::from(c & 0xFFF));
    if e == 0 { m } else { (m | 1 << 12) << (e - 1) }
}

impl RttSketch {
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Forgets every sample (a new interval). Only the count and sum are
    /// reset: `w` is read up to the count, so stale words are never seen
    /// (and a flow's first segment writes 16 bytes here, not 64).
    pub fn clear(&mut self) {
        self.sum_us = 0;
        self.count = 0;
    }

    #[inline]
    fn exact(&self) -> bool {
        self.count as usize <= EXACT
    }

    /// Adds one sample (µs).
    pub fn add(&mut self, us: u32) {
        self.sum_us = self.sum_us.saturating_add(u64::from(us));
        let c = self.count as usize;
        self.count = self.count.saturating_add(1);
        if c < EXACT {
            // Insertion into the sorted prefix.
            let mut i = c;
            while i > 0 && self.w[i - 1] > us {
                self.w[i] = self.w[i - 1];
                i -= 1;
            }
            self.w[i] = us;
            return;
        }
        if c == EXACT {
            // From exact samples to items: once per interval.
            let s = self.w;
            self.w[MIN] = s[0];
            self.w[MAX] = s[EXACT - 1];
            self.w[ITEM..].fill(0);
            for (i, &x) in s.iter().enumerate() {
                self.insert(encode(x), i);
            }
        }
        self.w[MIN] = self.w[MIN].min(us);
        self.w[MAX] = self.w[MAX].max(us);
        let k = (32 - self.count.leading_zeros()).saturating_sub(SCALE_FROM);
        if k > 0 {
            if self.count.is_power_of_two() {
                self.halve_items();
            }
            // Fibonacci hashing: the top k bits are 0 for one count in 2^k,
            // spread evenly (no period of the count aliases with it).
            if self.count.wrapping_mul(0x9E37_79B9) >> (32 - k) != 0 {
                return;
            }
        }
        self.insert(encode(us), c);
    }

    #[cold]
    fn halve_items(&mut self) {
        for w in &mut self.w[ITEM..] {
            let mut i = Item::unpack(*w);
            if i.n() == 0 {
                break;
            }
            i.weight = (i.weight & PURE) | i.n().div_ceil(2);
            *w = i.pack();
        }
    }

    /// One sample of code `code` into the items; `seq` (the sample's
    /// number) breaks ties between equal weights, alternately. Works on
    /// the packed words (no unpacking: this is the per-sample cost).
    fn insert(&mut self, code: u16, seq: usize) {
        let items = &mut self.w[ITEM..];
        let c = u32::from(code);
        // Items in use, and where the sample goes: after the items of
        // smaller or equal code.
        let (mut len, mut at) = (0, 0);
        while len < ITEMS && items[len] >> 16 != 0 {
            if items[len] & 0xFFFF <= c {
                at = len + 1;
            }
            len += 1;
        }
        if at > 0 {
            let prev = Item::unpack(items[at - 1]);
            if u32::from(prev.code) == c && prev.pure() {
                // The total weight stays below 2^15 (`SCALE_FROM`).
                if prev.n() < WEIGHT {
                    items[at - 1] += 1 << 16;
                }
                return;
            }
        }
        let new = Item {
            code,
            weight: PURE | 1,
        }
        .pack();
        if len < ITEMS {
            items.copy_within(at..len, at + 1);
            items[at] = new;
            if len + 1 < ITEMS {
                items[len + 1] = 0;
            }
            return;
        }
        let mut it = [0u32; ITEMS + 1];
        it[..at].copy_from_slice(&items[..at]);
        it[at] = new;
        it[at + 1..].copy_from_slice(&items[at..]);
        merge_cheapest(&mut it, seq);
        items.copy_from_slice(&it[..ITEMS]);
    }

    /// Quantile `p`: exact up to [`EXACT`] samples, else interpolated
    /// between the items' rank centres.
    fn quantile(&self, p: f64) -> Option<u32> {
        let c = self.count as usize;
        if c == 0 {
            return None;
        }
        if self.exact() {
            let h = p * (c - 1) as f64;
            let lo = h.floor() as usize;
            let hi = (lo + 1).min(c - 1);
            let f = h - lo as f64;
            let v = f64::from(self.w[lo]) + f * (f64::from(self.w[hi]) - f64::from(self.w[lo]));
            return Some(round_us(v));
        }
        let (min, max) = (f64::from(self.w[MIN]), f64::from(self.w[MAX]));
        let items = self.w[ITEM..]
            .iter()
            .map(|&w| Item::unpack(w))
            .take_while(|i| i.n() > 0);
        let total: u32 = items.clone().map(Item::n).sum();
        let h = p * f64::from(total - 1);
        // Knots (rank, value): the minimum at rank 0, each item at its
        // rank centre (both ends of its span when all its samples are
        // equal), the maximum at the last rank.
        let mut prev = (0.0, min);
        let mut cum = 0u32;
        let knots = items
            .flat_map(|i| {
                let (lo, n) = (f64::from(cum), f64::from(i.n()));
                cum += i.n();
                let v = f64::from(decode(i.code));
                let (a, b) = if i.pure() {
                    (lo, lo + n - 1.0)
                } else {
                    let mid = lo + (n - 1.0) / 2.0;
                    (mid, mid)
                };
                [(a, v), (b, v)]
            })
            .chain([(f64::from(total - 1), max)]);
        let mut v = max;
        for k in knots {
            if k.0 >= h {
                v = if k.0 > prev.0 {
                    prev.1 + (h - prev.0) / (k.0 - prev.0) * (k.1 - prev.1)
                } else {
                    k.1
                };
                break;
            }
            prev = k;
        }
        Some(round_us(v.clamp(min, max)))
    }

    pub fn summary(&self) -> Summary {
        if self.count == 0 {
            return Summary::default();
        }
        let c = self.count as usize;
        let (min, max) = if self.exact() {
            (self.w[0], self.w[c - 1])
        } else {
            (self.w[MIN], self.w[MAX])
        };
        Summary {
            count: self.count,
            min_us: Some(min),
            mean_us: Some(
                u32::try_from((self.sum_us + u64::from(self.count) / 2) / u64::from(self.count))
                    .unwrap_or(u32::MAX),
            ),
            max_us: Some(max),
            p50_us: self.quantile(0.5),
            p90_us: self.quantile(0.9),
        }
    }

    /// Sum of the samples, µs.
    pub fn sum_us(&self) -> u64 {
        self.sum_us
    }
}

/// Merges the neighbours `it[j]`, `it[j + 1]` of least cost, leaving
/// [`ITEMS`] items: their weight over the rank distance from their span to
/// the nearer target, plus [`NEAR_PERCENT`] (a pair whose span holds a target is
/// charged for its whole weight over `NEAR_PERCENT`, so items there stay light).
fn merge_cheapest(it: &mut [u32; ITEMS + 1], seq: usize) {
    let n = |w: u32| (w >> 16) & WEIGHT;
    // Ranks in hundredths of a sample, so the targets (50 % and 90 % of
    // the samples) and `NEAR_PERCENT` are whole numbers: integer arithmetic
    // throughout, exact (weights < 2^15, so every product < 2^40).
    let total = u64::from(it.iter().map(|&w| n(w)).sum::<u32>());
    let (t50, t90, near) = (50 * total, 90 * total, total * NEAR_PERCENT);
    let cost = |lo: u64, w: u64| {
        let hi = lo + 100 * w;
        let dist = |t: u64| t.saturating_sub(hi).max(lo.saturating_sub(t));
        dist(t50).min(dist(t90)) + near
    };
    // Least weight / distance, compared as cross products (no division).
    let w0 = u64::from(n(it[0]) + n(it[1]));
    let (mut best, mut best_w, mut best_d) = (0, w0, cost(0, w0));
    let mut lo = 100 * u64::from(n(it[0]));
    for j in 1..ITEMS {
        let a = u64::from(n(it[j]));
        let w = a + u64::from(n(it[j + 1]));
        let d = cost(lo, w);
        if w * best_d < best_w * d {
            (best, best_w, best_d) = (j, w, d);
        }
        lo += 100 * a;
    }
    let (a, b) = (Item::unpack(it[best]), Item::unpack(it[best + 1]));
    let (va, vb) = (decode(a.code), decode(b.code));
    // Values within a factor of 2 of each other merge into their weighted
    // mean (a centroid: the rank centres read back are then unbiased on
    // smooth inputs); farther apart (two modes, an outlier) the heavier
    // one's value stays, so no item sits in a gap no sample is in.
    let code = if vb <= va.saturating_mul(2) {
        let (wa, wb) = (u64::from(a.n()), u64::from(b.n()));
        let mean = (u64::from(va) * wa + u64::from(vb) * wb + (wa + wb) / 2) / (wa + wb);
        encode(mean as u32)
    } else {
        match a.n().cmp(&b.n()) {
            Ordering::Greater => a.code,
            Ordering::Less => b.code,
            Ordering::Equal if seq.is_multiple_of(2) => a.code,
            Ordering::Equal => b.code,
        }
    };
    let pure = if a.pure() && b.pure() && a.code == b.code {
        PURE
    } else {
        0
    };
    // At most the total weight, below 2^15 (`SCALE_FROM`).
    let weight = pure | (a.n() + b.n()).min(WEIGHT);
    it[best] = Item { code, weight }.pack();
    it.copy_within(best + 2.., best + 1);
}

#[inline]
fn round_us(v: f64) -> u32 {
    // `as` saturates (and maps NaN to 0): no panic on any input.
    v.round() as u32
}

#[cfg(test)]
#[path = "sketch_tests.rs"]
mod tests;
