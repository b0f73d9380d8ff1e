//! The exporter's families: per collector, what was sent, what will never
//! be (the "exporter failures" alert of deploy/prometheus/), what waits in
//! its queue, and whether a TCP collector is connected. Read at scrape
//! time from `Exporter::live_stats` (refreshed by the exporter thread
//! about once a second).

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use xdprobe_exporter::{CollectorStats, ExportStats};

#[derive(Debug, Clone)]
pub struct ExportCollector(pub Arc<Mutex<ExportStats>>);

type PerCollector = (&'static str, &'static str, fn(&CollectorStats) -> u64);

const COUNTERS: &[PerCollector] = &[
    (
        "xdprobe_export_records",
        "Flow records sent to the collector.",
        |c| c.records,
    ),
    (
        "xdprobe_export_messages",
        "IPFIX/NetFlow messages sent to the collector.",
        |c| c.messages,
    ),
    ("xdprobe_export_bytes", "Bytes of those messages.", |c| {
        c.octets
    }),
    (
        "xdprobe_export_records_not_sent",
        "Records that will never reach the collector: its queue overflowed while it was down, a send failed, or an ICMP error refused the datagram.",
        |c| c.not_sent,
    ),
    (
        "xdprobe_export_messages_failed",
        "File export: messages a write error lost (cut back out of the file, so it stays valid); their records are in records_not_sent.",
        |c| c.failed_messages,
    ),
    (
        "xdprobe_export_connects",
        "TCP connections made to the collector.",
        |c| c.connects,
    ),
];

impl Collector for ExportCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = match self.0.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        ConstCounter::new(s.records_received).encode(enc.encode_descriptor(
            "xdprobe_export_records_received",
            "Records the exporter took from the workers.",
            None,
            MetricType::Counter,
        )?)?;
        for (name, help, value) in COUNTERS {
            let mut fam = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for c in &s.collectors {
                let labels = [("collector", c.url.as_str())];
                ConstCounter::new(value(c)).encode(fam.encode_family(&labels)?)?;
            }
        }
        let mut fam = enc.encode_descriptor(
            "xdprobe_export_queued_records",
            "Records waiting in the collector's queue.",
            None,
            MetricType::Gauge,
        )?;
        for c in &s.collectors {
            let v = i64::try_from(c.queued).unwrap_or(i64::MAX);
            ConstGauge::new(v).encode(fam.encode_family(&[("collector", c.url.as_str())])?)?;
        }
        let mut fam = enc.encode_descriptor(
            "xdprobe_export_collector_up",
            "1 while the TCP connection to the collector is up (TCP collectors only).",
            None,
            MetricType::Gauge,
        )?;
        for c in &s.collectors {
            if let Some(up) = c.connected {
                let labels = [("collector", c.url.as_str())];
                ConstGauge::new(i64::from(up)).encode(fam.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prom::Metrics;

    #[test]
    fn collectors_render_with_their_url_and_tcp_state() {
        let stats = ExportStats {
            records_received: 9,
            channel_drops: 0,
            collectors: vec![
                CollectorStats {
                    url: "udp://192.0.2.1:4739".into(),
                    records: 7,
                    ..CollectorStats::default()
                },
                CollectorStats {
                    url: "tcp://192.0.2.2:4739".into(),
                    not_sent: 2,
                    queued: 5,
                    connected: Some(false),
                    ..CollectorStats::default()
                },
            ],
        };
        let m = Metrics::new();
        m.register(ExportCollector(Arc::new(Mutex::new(stats))));
        let t = m.render().unwrap();
        assert!(t.contains("xdprobe_export_records_received_total 9"), "{t}");
        assert!(t.contains("xdprobe_export_records_total{collector=\"udp://192.0.2.1:4739\"} 7"));
        assert!(t.contains(
            "xdprobe_export_records_not_sent_total{collector=\"tcp://192.0.2.2:4739\"} 2"
        ));
        assert!(t.contains("xdprobe_export_queued_records{collector=\"tcp://192.0.2.2:4739\"} 5"));
        assert!(t.contains("xdprobe_export_collector_up{collector=\"tcp://192.0.2.2:4739\"} 0"));
        assert!(
            !t.contains("xdprobe_export_collector_up{collector=\"udp"),
            "{t}"
        );
    }
}
