//! Latency histograms for Prometheus: fixed buckets (what a dashboard
//! sums across hosts) with the same samples' quantiles beside them, and
//! the per-segment set of them that the daemon's `[host]` agent and the
//! manager both expose, fed one timed byte ([`RawSample`]) at a time.

use std::collections::BTreeMap;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use crate::hooks::Layer;
use crate::stack::matcher::{RawSample, segment_name};
use crate::stack::quantiles::LogBuckets;

/// Upper bounds of the latency buckets, seconds: 1 µs to 1 s, 1-2-5 steps
/// (host segments are µs, the network ms).
pub const BUCKETS_S: [f64; 19] = [
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1,
    0.2, 0.5, 1.0,
];

/// A cumulative histogram with fixed buckets, and the same samples'
/// quantiles within 0.5 % of their value ([`crate::stack::quantiles`]): the fixed
/// buckets are a factor of 2–2.5 wide, too coarse to read a p50 from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last slot is +Inf.
    counts: [u64; BUCKETS_S.len() + 1],
    sum_s: f64,
    count: u64,
    fine: LogBuckets,
}

/// The quantiles exported beside each histogram.
pub const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

impl Histogram {
    pub fn observe_ns(&mut self, ns: u64) {
        let s = ns as f64 / 1e9;
        let i = BUCKETS_S.partition_point(|&b| b < s);
        self.counts[i] += 1;
        self.sum_s += s;
        self.count += 1;
        self.fine.add(ns);
    }

    /// The `q` quantile in seconds (nearest rank, within 0.5 %).
    pub fn quantile_s(&self, q: f64) -> Option<f64> {
        self.fine.quantile(q).map(|ns| ns / 1e9)
    }

    /// This histogram's [`QUANTILES`] as gauges of family `fam` with
    /// `labels` and `quantile`.
    pub fn encode_quantiles(
        &self,
        fam: &mut prometheus_client::encoding::MetricEncoder<'_>,
        labels: &[(&str, &str)],
    ) -> Result<(), std::fmt::Error> {
        for q in QUANTILES {
            let Some(v) = self.quantile_s(q) else {
                continue;
            };
            let qs = q.to_string();
            let mut l = labels.to_vec();
            l.push(("quantile", qs.as_str()));
            ConstGauge::new(v).encode(fam.encode_family(&l)?)?;
        }
        Ok(())
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// (upper bound, count in that bucket alone) per bucket, +Inf last:
    /// the encoder makes them cumulative.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        let mut out: Vec<(f64, u64)> = BUCKETS_S
            .iter()
            .zip(self.counts.iter())
            .map(|(b, c)| (*b, *c))
            .collect();
        // The encoder writes `+Inf` for `f64::MAX`.
        out.push((f64::MAX, self.counts[BUCKETS_S.len()]));
        out
    }

    pub fn sum_s(&self) -> f64 {
        self.sum_s
    }

    /// One histogram of family `fam` with `labels`.
    pub fn encode(
        &self,
        fam: &mut prometheus_client::encoding::MetricEncoder<'_>,
        labels: &[(&str, &str)],
    ) -> Result<(), std::fmt::Error> {
        fam.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            self.sum_s,
            self.count,
            &self.buckets(),
            None,
        )
    }
}

/// Every timed byte's time per segment, by segment name (`T1` … `T8`, or
/// merged as `T4+T5` across a layer left out).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegmentHistograms(BTreeMap<String, Histogram>);

impl SegmentHistograms {
    /// One timed byte: every segment between consecutive layers, and T8
    /// when both socket layers timed it.
    pub fn observe(&mut self, s: &RawSample) {
        for w in s.times.windows(2) {
            let ((la, ta), (lb, tb)) = (w[0], w[1]);
            self.0
                .entry(segment_name(la, lb))
                .or_default()
                .observe_ns(tb.saturating_sub(ta));
        }
        if let (Some(&(Layer::SockTx, t0)), Some(&(Layer::SockRx, tn))) =
            (s.times.first(), s.times.last())
        {
            self.0
                .entry("T8".to_owned())
                .or_default()
                .observe_ns(tn.saturating_sub(t0));
        }
    }

    pub fn get(&self, segment: &str) -> Option<&Histogram> {
        self.0.get(segment)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Two families: `name` (histograms, seconds, labelled by segment,
    /// described by `help`) and `name_quantile` (their [`QUANTILES`] as
    /// gauges).
    pub fn encode(
        &self,
        enc: &mut DescriptorEncoder,
        name: &str,
        help: &str,
    ) -> Result<(), std::fmt::Error> {
        let mut h =
            enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
        for (seg, hist) in &self.0 {
            hist.encode(&mut h, &[("segment", seg.as_str())])?;
        }
        let quantile = format!("{name}_quantile");
        let mut g = enc.encode_descriptor(
            &quantile,
            "Quantiles (0.5, 0.9, 0.99) of the same timed bytes, nearest rank within 0.5 %.",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        for (seg, hist) in &self.0 {
            hist.encode_quantiles(&mut g, &[("segment", seg.as_str())])?;
        }
        Ok(())
    }
}

impl std::ops::Index<&str> for SegmentHistograms {
    type Output = Histogram;

    fn index(&self, segment: &str) -> &Histogram {
        &self.0[segment]
    }
}
