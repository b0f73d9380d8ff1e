//! The manager's Prometheus metrics, kept in one plain struct: segment
//! latency histograms (every timed byte, T1…T8), per-agent clock gauges
//! and stream counters. [`MetricsCollector`] hands them to a
//! `prometheus_client` registry at scrape time (the daemon's endpoint
//! serves the same registry type), so the exposition format is the
//! Prometheus project's own encoder's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

pub use crate::fleet::conn_counters::ConnCounters;
use crate::fleet::manager::AgentView;
use crate::stack::matcher::{RawSample, segment_name};
use crate::stack::quantiles::LogBuckets;

/// Upper bounds of the latency buckets, seconds: 1 µs to 1 s, 1-2-5 steps
/// (host segments are µs, the network ms).
pub const BUCKETS_S: [f64; 19] = [
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1,
    0.2, 0.5, 1.0,
];

/// A cumulative histogram with fixed buckets, and the same samples'
/// quantiles within 0.5 % of their value (`stack::quantiles`): the fixed
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

/// Everything the manager exposes.
#[derive(Clone, Debug, Default)]
pub struct ManagerMetrics {
    /// By segment name (`T1` … `T8`, or merged `T4+T5`).
    pub segments: BTreeMap<String, Histogram>,
    pub agents: Vec<AgentView>,
    pub reports: u64,
    pub joined: u64,
    pub sync_rounds_failed: BTreeMap<String, u64>,
    /// The connection guard's counters.
    pub conns: ConnCounters,
}

impl ManagerMetrics {
    /// One timed byte: every segment between consecutive layers, and T8
    /// when both socket layers timed it.
    pub fn observe(&mut self, s: &RawSample) {
        for w in s.times.windows(2) {
            let ((la, ta), (lb, tb)) = (w[0], w[1]);
            self.segments
                .entry(segment_name(la, lb))
                .or_default()
                .observe_ns(tb.saturating_sub(ta));
        }
        if let (Some(&(first, t0)), Some(&(last, tn))) = (s.times.first(), s.times.last())
            && first == crate::hooks::Layer::SockTx
            && last == crate::hooks::Layer::SockRx
        {
            self.segments
                .entry("T8".to_owned())
                .or_default()
                .observe_ns(tn.saturating_sub(t0));
        }
    }

    /// The exposition text (OpenMetrics, as the endpoint serves it).
    pub fn render(&self) -> String {
        let mut r = prometheus_client::registry::Registry::default();
        r.register_collector(Box::new(MetricsCollector(Arc::new(Mutex::new(
            self.clone(),
        )))));
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        out
    }

    /// Per agent: connected, and its clock's last estimate.
    fn encode_agent_gauges(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        type Field = fn(&AgentView) -> Option<f64>;
        let gauges: [(&str, &str, Field); 5] = [
            (
                "xdprobe_manager_agent_connected",
                "1 while the agent's stream is up.",
                |a| Some(f64::from(u8::from(a.connected))),
            ),
            (
                "xdprobe_manager_clock_offset_seconds",
                "The agent's clock minus the manager's, last round.",
                |a| a.clock.map(|c| c.offset_ns as f64 / 1e9),
            ),
            (
                "xdprobe_manager_clock_uncertainty_seconds",
                "Half-width of the range the offset is proven to lie in.",
                |a| a.clock.map(|c| c.uncertainty_ns as f64 / 1e9),
            ),
            (
                "xdprobe_manager_clock_drift_ppm",
                "The agent's clock rate minus the manager's, fitted over the rounds.",
                |a| a.clock.map(|c| c.drift_ppm),
            ),
            (
                "xdprobe_manager_clock_min_delay_seconds",
                "Least probe round trip of the last round.",
                |a| a.clock.map(|c| c.min_delay_ns as f64 / 1e9),
            ),
        ];
        for (name, help, f) in gauges {
            let mut fam = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for a in &self.agents {
                if let Some(v) = f(a) {
                    ConstGauge::new(v)
                        .encode(fam.encode_family(&[("agent", a.agent.as_str())])?)?;
                }
            }
        }
        Ok(())
    }

    fn encode(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut h = enc.encode_descriptor(
            "xdprobe_manager_segment_latency",
            "Time timed bytes spent per segment (T1..T7 between layers, T4 across the network, T8 socket to socket), all flows.",
            Some(&prometheus_client::registry::Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (seg, hist) in &self.segments {
            hist.encode(&mut h, &[("segment", seg.as_str())])?;
        }
        let mut g = enc.encode_descriptor(
            "xdprobe_manager_segment_latency_quantile",
            "Quantiles (0.5, 0.9, 0.99) of the same timed bytes, nearest rank within 0.5 %.",
            Some(&prometheus_client::registry::Unit::Seconds),
            MetricType::Gauge,
        )?;
        for (seg, hist) in &self.segments {
            hist.encode_quantiles(&mut g, &[("segment", seg.as_str())])?;
        }
        self.encode_agent_gauges(enc)?;
        type Count = fn(&AgentView) -> u64;
        let counters: [(&str, &str, Count); 5] = [
            (
                "xdprobe_manager_events",
                "Events received from the agent.",
                |a| a.counters.events,
            ),
            (
                "xdprobe_manager_unsynced_dropped",
                "Events dropped while waiting for the agent's first clock round.",
                |a| a.counters.unsynced_dropped,
            ),
            (
                "xdprobe_manager_sync_rounds",
                "Clock rounds that gave an estimate.",
                |a| a.counters.sync_rounds,
            ),
            (
                "xdprobe_manager_agent_connects",
                "Connections the agent made.",
                |a| a.counters.connects,
            ),
            (
                "xdprobe_agent_dropped_events",
                "Events the agent dropped (its buffer, hand-off or a lost connection), as it last reported.",
                |a| a.reported.dropped(),
            ),
        ];
        for (name, help, f) in counters {
            let mut fam = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for a in &self.agents {
                ConstCounter::new(f(a))
                    .encode(fam.encode_family(&[("agent", a.agent.as_str())])?)?;
            }
        }
        let mut fam = enc.encode_descriptor(
            "xdprobe_agent_buffered_events",
            "Events waiting in the agent's buffer, as it last reported.",
            None,
            MetricType::Gauge,
        )?;
        for a in &self.agents {
            ConstGauge::new(i64::try_from(a.reported.buffered).unwrap_or(i64::MAX))
                .encode(fam.encode_family(&[("agent", a.agent.as_str())])?)?;
        }
        let mut fam = enc.encode_descriptor(
            "xdprobe_manager_sync_rounds_failed",
            "Clock rounds without a single answer.",
            None,
            MetricType::Counter,
        )?;
        for (a, n) in &self.sync_rounds_failed {
            ConstCounter::new(*n).encode(fam.encode_family(&[("agent", a.as_str())])?)?;
        }
        for (name, help, v) in [
            (
                "xdprobe_manager_reports",
                "Flow reports written.",
                self.reports,
            ),
            (
                "xdprobe_manager_joined",
                "Host reports joined with a wire record.",
                self.joined,
            ),
        ] {
            ConstCounter::new(v).encode(enc.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        self.conns.encode(enc)?;
        Ok(())
    }
}

/// The manager's metrics as a registry collector, read at every scrape.
#[derive(Debug, Clone)]
pub struct MetricsCollector(pub Arc<Mutex<ManagerMetrics>>);

impl Collector for MetricsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(m) = self.0.lock() else {
            return Ok(());
        };
        m.encode(&mut enc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::Layer;
    use crate::stack::matcher::FlowKey;

    fn sample(times: &[(Layer, u64)]) -> RawSample {
        RawSample {
            key: FlowKey {
                src: "198.51.100.1".parse().unwrap(),
                sport: 1,
                dst: "198.51.100.2".parse().unwrap(),
                dport: 2,
            },
            pos: 1 << 32,
            times: times.to_vec(),
        }
    }

    #[test]
    fn buckets_are_cumulative_and_t8_spans_the_sockets() {
        let mut m = ManagerMetrics::default();
        for t4 in [5_000_000u64, 5_100_000, 20_000_000] {
            m.observe(&sample(&[
                (Layer::SockTx, 0),
                (Layer::DevTx, 3_000),
                (Layer::DevRx, 3_000 + t4),
                (Layer::SockRx, 10_000 + t4),
            ]));
        }
        // Without both sockets there is no T8.
        m.observe(&sample(&[(Layer::DevTx, 0), (Layer::DevRx, 700)]));
        let t4 = &m.segments["T4"];
        assert_eq!(t4.count(), 4);
        assert_eq!(m.segments["T8"].count(), 3);
        assert_eq!(m.segments["T1+T2+T3"].count(), 3);
        let text = m.render();
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.starts_with(needle))
                .unwrap_or_else(|| panic!("no {needle} in\n{text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_owned()
        };
        let h = "xdprobe_manager_segment_latency_seconds";
        let _ = &h;
        assert_eq!(
            line(&format!("{h}_bucket{{le=\"0.001\",segment=\"T4\"}}")),
            "1"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{le=\"0.005\",segment=\"T4\"}}")),
            "2"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{le=\"0.01\",segment=\"T4\"}}")),
            "3"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{le=\"+Inf\",segment=\"T4\"}}")),
            "4"
        );
        assert_eq!(line(&format!("{h}_count{{segment=\"T8\"}}")), "3");
        assert!(text.contains("# TYPE xdprobe_manager_segment_latency_seconds histogram"));
        // The quantiles beside it, from the same samples.
        let q = "xdprobe_manager_segment_latency_quantile_seconds";
        let p50: f64 = line(&format!("{q}{{segment=\"T8\",quantile=\"0.5\"}}"))
            .parse()
            .unwrap();
        let want = m.segments["T8"].quantile_s(0.5).unwrap();
        assert!((p50 - want).abs() <= 1e-12, "{p50} vs {want}");
    }
}
