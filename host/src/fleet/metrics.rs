//! The manager's Prometheus metrics, kept in one plain struct: segment
//! latency histograms (every timed byte, T1…T8), per-agent clock gauges
//! and stream counters. [`ManagerMetrics::render`] writes the text
//! exposition format (0.0.4); the struct has no registry of its own, so a
//! metrics library can take its values over as they are.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::fleet::manager::AgentView;
use crate::stack::matcher::{RawSample, segment_name};

/// Upper bounds of the latency buckets, seconds: 1 µs to 1 s, 1-2-5 steps
/// (host segments are µs, the network ms).
pub const BUCKETS_S: [f64; 19] = [
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1,
    0.2, 0.5, 1.0,
];

/// A cumulative histogram with fixed buckets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last slot is +Inf.
    counts: [u64; BUCKETS_S.len() + 1],
    sum_s: f64,
    count: u64,
}

impl Histogram {
    pub fn observe_ns(&mut self, ns: u64) {
        let s = ns as f64 / 1e9;
        let i = BUCKETS_S.partition_point(|&b| b < s);
        self.counts[i] += 1;
        self.sum_s += s;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cum = 0u64;
        for (b, c) in BUCKETS_S.iter().zip(self.counts.iter()) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {cum}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum_s);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
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
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(8192);
        let h = "xdprobe_manager_segment_latency_seconds";
        let _ = writeln!(
            o,
            "# HELP {h} Time timed bytes spent per segment (T1..T7 between layers, T4 across the network, T8 socket to socket), all flows.\n# TYPE {h} histogram"
        );
        for (seg, hist) in &self.segments {
            hist.render(&mut o, h, &format!("segment=\"{}\"", escape(seg)));
        }
        let gauge = |o: &mut String, name: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        };
        let counter = |o: &mut String, name: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
        };
        type Field = fn(&AgentView) -> Option<f64>;
        let per_agent = |o: &mut String, name: &str, f: Field| {
            for a in &self.agents {
                if let Some(v) = f(a) {
                    let _ = writeln!(o, "{name}{{agent=\"{}\"}} {v}", escape(&a.agent));
                }
            }
        };
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
            gauge(&mut o, name, help);
            per_agent(&mut o, name, f);
        }
        let counters: [(&str, &str, Field); 6] = [
            (
                "xdprobe_manager_events_total",
                "Events received from the agent.",
                |a| Some(a.counters.events as f64),
            ),
            (
                "xdprobe_manager_unsynced_dropped_total",
                "Events dropped while waiting for the agent's first clock round.",
                |a| Some(a.counters.unsynced_dropped as f64),
            ),
            (
                "xdprobe_manager_sync_rounds_total",
                "Clock rounds that gave an estimate.",
                |a| Some(a.counters.sync_rounds as f64),
            ),
            (
                "xdprobe_manager_agent_connects_total",
                "Connections the agent made.",
                |a| Some(a.counters.connects as f64),
            ),
            (
                "xdprobe_agent_dropped_events_total",
                "Events the agent dropped (its buffer, hand-off or a lost connection), as it last reported.",
                |a| Some(a.reported.dropped() as f64),
            ),
            (
                "xdprobe_agent_buffered_events",
                "Events waiting in the agent's buffer, as it last reported.",
                |a| Some(a.reported.buffered as f64),
            ),
        ];
        for (name, help, f) in counters {
            if name.ends_with("_total") {
                counter(&mut o, name, help);
            } else {
                gauge(&mut o, name, help);
            }
            per_agent(&mut o, name, f);
        }
        counter(
            &mut o,
            "xdprobe_manager_sync_rounds_failed_total",
            "Clock rounds without a single answer.",
        );
        for (a, n) in &self.sync_rounds_failed {
            let _ = writeln!(
                o,
                "xdprobe_manager_sync_rounds_failed_total{{agent=\"{}\"}} {n}",
                escape(a)
            );
        }
        counter(
            &mut o,
            "xdprobe_manager_reports_total",
            "Flow reports written.",
        );
        let _ = writeln!(o, "xdprobe_manager_reports_total {}", self.reports);
        counter(
            &mut o,
            "xdprobe_manager_joined_total",
            "Host reports joined with a wire record.",
        );
        let _ = writeln!(o, "xdprobe_manager_joined_total {}", self.joined);
        o
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
        assert_eq!(
            line(&format!("{h}_bucket{{segment=\"T4\",le=\"0.001\"}}")),
            "1"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{segment=\"T4\",le=\"0.005\"}}")),
            "2"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{segment=\"T4\",le=\"0.01\"}}")),
            "3"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{segment=\"T4\",le=\"+Inf\"}}")),
            "4"
        );
        assert_eq!(line(&format!("{h}_count{{segment=\"T8\"}}")), "3");
        assert!(text.contains("# TYPE xdprobe_manager_segment_latency_seconds histogram"));
    }
}
