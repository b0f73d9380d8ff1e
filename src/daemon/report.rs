//! The capture's own metric families and the periodic log line, both from
//! one [`Report`] that the daemon refreshes about once a second from the
//! XDP counters, the sockets' kernel statistics and the workers' published
//! snapshots. Nothing here touches a worker's hot path.

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use xdprobe_common::XdpCounters;

use xdprobe_capture::worker::queue::Snapshot;

use crate::prom::{SummaryFamily, SummaryPoint};

/// One queue's view: its worker's snapshot (with its socket's statistics).
#[derive(Clone, Debug, Default)]
pub struct QueueReport {
    pub iface: String,
    pub worker: Snapshot,
}

/// Everything the endpoint and the log line show.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Per interface: name and the XDP program's counters (all CPUs).
    pub xdp: Vec<(String, XdpCounters)>,
    pub queues: Vec<QueueReport>,
}

/// The report as metric families: a [`Collector`] the registry asks on
/// every scrape (it reads the report the daemon last refreshed).
#[derive(Debug, Clone)]
pub struct ReportCollector(pub Arc<Mutex<Report>>);

/// Counter families with one value per queue, labelled iface and queue.
type PerQueue = (&'static str, &'static str, fn(&QueueReport) -> u64);

const QUEUE_COUNTERS: &[PerQueue] = &[
    (
        "xdprobe_xsk_rx_dropped",
        "AF_XDP socket: frames dropped by the kernel.",
        |r| r.worker.socket.rx_dropped,
    ),
    (
        "xdprobe_xsk_rx_ring_full",
        "AF_XDP socket: RX ring full (user space too slow).",
        |r| r.worker.socket.rx_ring_full,
    ),
    (
        "xdprobe_xsk_rx_fill_ring_empty",
        "AF_XDP socket: fill ring empty when a frame arrived.",
        |r| r.worker.socket.rx_fill_ring_empty,
    ),
    (
        "xdprobe_xsk_rx_invalid_descs",
        "AF_XDP socket: invalid RX descriptors.",
        |r| r.worker.socket.rx_invalid_descs,
    ),
    (
        "xdprobe_worker_rx_frames",
        "Frames read from the queue's socket.",
        |r| r.worker.live.rx_frames,
    ),
    (
        "xdprobe_worker_rx_bytes",
        "Bytes read from the queue's socket.",
        |r| r.worker.live.rx_bytes,
    ),
    (
        "xdprobe_worker_rx_errors",
        "Failed reads of the queue's socket.",
        |r| r.worker.live.rx_errors,
    ),
    (
        "xdprobe_worker_handoff_out",
        "Frames handed to the worker owning their flow.",
        |r| r.worker.live.handed_off,
    ),
    (
        "xdprobe_worker_handoff_full",
        "Frames lost to a full hand-off ring.",
        |r| r.worker.live.handoff_full,
    ),
    (
        "xdprobe_worker_handoff_in",
        "Frames received from other workers.",
        |r| r.worker.live.handoff_in,
    ),
    (
        "xdprobe_worker_ts_fallback",
        "Frames stamped at read time (no XDP timestamp).",
        |r| r.worker.live.ts_fallback,
    ),
    (
        "xdprobe_worker_records",
        "Flow records sent to the exporter.",
        |r| r.worker.live.records_out,
    ),
    (
        "xdprobe_worker_records_dropped",
        "Flow records dropped at a full exporter channel.",
        |r| r.worker.live.records_dropped,
    ),
    (
        "xdprobe_worker_frames",
        "Frames accounted by the flow worker.",
        |r| r.worker.flows.frames,
    ),
    ("xdprobe_worker_flows_created", "Flows created.", |r| {
        r.worker.flows.table.flows_created
    }),
    (
        "xdprobe_worker_flows_evicted",
        "Flows ended early by a full table.",
        |r| r.worker.flows.table.evicted,
    ),
    (
        "xdprobe_worker_ip_length_clamped",
        "Packets whose IP length claimed more than their frame held (counted as the frame).",
        |r| r.worker.flows.ip_length_clamped,
    ),
    (
        "xdprobe_worker_fragments_unattributed",
        "Later IP fragments whose first fragment was not seen.",
        |r| r.worker.flows.frags.unattributed,
    ),
    (
        "xdprobe_worker_fragments_evicted",
        "First fragments pushed out of a full fragment table.",
        |r| r.worker.flows.frags.evicted,
    ),
    (
        "xdprobe_worker_fragments_expired",
        "First fragments whose datagram did not end within 30 s.",
        |r| r.worker.flows.frags.expired,
    ),
];

fn queue_labels(r: &QueueReport) -> [(&'static str, String); 2] {
    [
        ("iface", r.iface.clone()),
        ("queue", r.worker.queue.to_string()),
    ]
}

impl Collector for ReportCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(r) = self.0.lock() else {
            return Ok(());
        };
        let mut xdp = enc.encode_descriptor(
            "xdprobe_xdp_packets",
            "Frames seen by the XDP program, by outcome.",
            None,
            MetricType::Counter,
        )?;
        for (iface, c) in &r.xdp {
            for (result, v) in [
                ("seen", c.seen),
                ("redirected", c.redirected),
                ("filtered", c.filtered),
                ("non_ip", c.non_ip),
                ("redirect_failed", c.redirect_failed),
                ("meta_failed", c.meta_failed),
                ("unclassified", c.unclassified),
            ] {
                let labels = [("iface", iface.as_str()), ("result", result)];
                ConstCounter::new(v).encode(xdp.encode_family(&labels)?)?;
            }
        }
        for (name, help, value) in QUEUE_COUNTERS {
            let mut fam = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for q in &r.queues {
                let labels = queue_labels(q);
                ConstCounter::new(value(q)).encode(fam.encode_family(&labels)?)?;
            }
        }
        let mut fam = enc.encode_descriptor(
            "xdprobe_worker_active_flows",
            "Flows in the table now.",
            None,
            MetricType::Gauge,
        )?;
        for q in &r.queues {
            let labels = queue_labels(q);
            let v = i64::try_from(q.worker.flows.active_flows).unwrap_or(i64::MAX);
            ConstGauge::new(v).encode(fam.encode_family(&labels)?)?;
        }
        let mut fam = enc.encode_descriptor(
            "xdprobe_worker_parse_drops",
            "Frames the parser refused, by reason.",
            None,
            MetricType::Counter,
        )?;
        for q in &r.queues {
            for (reason, v) in q.worker.flows.drops.iter() {
                let [iface, queue] = queue_labels(q);
                let labels = [iface, queue, ("reason", reason.to_owned())];
                ConstCounter::new(v).encode(fam.encode_family(&labels)?)?;
            }
        }
        let mut fam = enc.encode_descriptor(
            "xdprobe_tcp_ts_rtt_events",
            "Timestamp-RTT events by kind: TSvals not remembered (untracked), dropped unanswered (expired), echoes of unremembered TSvals (missed), bad input (echo_unseen, tsval_backwards, time_backwards), one-sided flows.",
            None,
            MetricType::Counter,
        )?;
        for q in &r.queues {
            for (event, v) in q.worker.flows.ts_rtt.counters.iter() {
                let [iface, queue] = queue_labels(q);
                let labels = [iface, queue, ("event", event.to_owned())];
                ConstCounter::new(v).encode(fam.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// Timestamp RTT per worker and leg as a summary: quantiles of the last
/// complete 10 s window of packet time (NaN when there is none), sum and
/// count since start.
#[derive(Debug, Clone)]
pub struct TsRttSummary(pub Arc<Mutex<Report>>);

impl SummaryFamily for TsRttSummary {
    fn describe(&self) -> (&'static str, &'static str) {
        (
            "xdprobe_tcp_ts_rtt_seconds",
            "RTT from TCP timestamps, probe -> endpoint -> probe, by leg (server: probe -> server -> probe); quantiles over the last complete 10 s window.",
        )
    }

    fn points(&self) -> Vec<SummaryPoint> {
        let Ok(r) = self.0.lock() else {
            return Vec::new();
        };
        let secs = |us: Option<u32>| us.map_or(f64::NAN, |v| f64::from(v) / 1e6);
        let mut v = Vec::new();
        for q in &r.queues {
            let ts = &q.worker.flows.ts_rtt;
            for (leg, t) in [("server", ts.server()), ("client", ts.client())] {
                let [iface, queue] = queue_labels(q);
                let w = t.last_window.map(|(s, _)| s).unwrap_or_default();
                v.push(SummaryPoint {
                    labels: vec![iface, queue, ("leg", leg.to_owned())],
                    quantiles: vec![(0.5, secs(w.p50_us)), (0.9, secs(w.p90_us))],
                    sum: t.sum_us as f64 / 1e6,
                    count: t.count,
                });
            }
        }
        v
    }
}

impl Report {
    /// The periodic log line's fields, summed over queues.
    pub fn totals(&self) -> (u64, u64, u64, u64, u64, u64) {
        let xdp_seen = self.xdp.iter().map(|(_, c)| c.seen).sum();
        let frames = self.queues.iter().map(|q| q.worker.live.rx_frames).sum();
        let flows = self
            .queues
            .iter()
            .map(|q| q.worker.flows.active_flows)
            .sum();
        let records = self.queues.iter().map(|q| q.worker.live.records_out).sum();
        let sock_drops = self
            .queues
            .iter()
            .map(|q| q.worker.socket.rx_dropped + q.worker.socket.rx_ring_full)
            .sum();
        let lost = self
            .queues
            .iter()
            .map(|q| q.worker.live.handoff_full + q.worker.live.records_dropped)
            .sum();
        (xdp_seen, frames, flows, records, sock_drops, lost)
    }
}

impl Report {
    /// What the exporter's options records carry, summed over queues:
    /// parse drops, flow-table evictions, fragment-table evictions.
    pub fn probe_totals(&self) -> (u64, u64, u64) {
        self.queues.iter().fold((0, 0, 0), |(d, e, f), q| {
            let s = &q.worker.flows;
            (
                d + s.drops.total(),
                e + s.table.evicted,
                f + s.frags.evicted,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prom::Metrics;

    #[test]
    fn report_families_render_with_labels_and_totals() {
        let report = Arc::new(Mutex::new(Report {
            xdp: vec![(
                "eth1".into(),
                XdpCounters {
                    seen: 7,
                    ..XdpCounters::default()
                },
            )],
            queues: vec![QueueReport {
                iface: "eth1".into(),
                worker: Snapshot {
                    queue: 3,
                    ..Snapshot::default()
                },
            }],
        }));
        report.lock().unwrap().queues[0].worker.flows.table.evicted = 42;
        let m = Metrics::new();
        m.register(ReportCollector(report));
        let text = m.render().unwrap();
        assert!(
            text.contains("# TYPE xdprobe_xdp_packets counter"),
            "{text}"
        );
        assert!(text.contains("xdprobe_xdp_packets_total{iface=\"eth1\",result=\"seen\"} 7"));
        assert!(text.contains("xdprobe_worker_flows_evicted_total{iface=\"eth1\",queue=\"3\"} 42"));
        assert!(
            text.contains("xdprobe_worker_fragments_evicted_total{iface=\"eth1\",queue=\"3\"} 0")
        );
        assert!(text.contains("xdprobe_worker_parse_drops_total{iface=\"eth1\",queue=\"3\",reason=\"timestamp_out_of_range\"} 0"));
        assert!(text.contains("xdprobe_worker_active_flows{iface=\"eth1\",queue=\"3\"} 0"));
        assert!(text.ends_with("# EOF\n"));
    }
}
