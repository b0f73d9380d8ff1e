//! The exporter's per-collector counters on the metrics endpoint, read
//! from the exporter's live snapshot at each scrape: what each collector
//! got, and what it lost (a file export's failed writes above all, which
//! would otherwise only show in the log).

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use xdprobe_exporter::CollectorStats;

/// Registered by the daemon: `xdprobe_export_*_total{collector="URL"}`.
#[derive(Debug, Clone)]
pub struct ExportCollector(pub Arc<Mutex<Vec<CollectorStats>>>);

impl Collector for ExportCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(v) = self.0.lock() else {
            return Ok(());
        };
        type Field = fn(&CollectorStats) -> u64;
        let families: [(&str, &str, Field); 4] = [
            (
                "xdprobe_export_messages",
                "Messages the collector got (files: written whole).",
                |c| c.messages,
            ),
            (
                "xdprobe_export_records",
                "Flow records in those messages.",
                |c| c.records,
            ),
            (
                "xdprobe_export_messages_failed",
                "File export: messages lost to a write error (cut back out of the file).",
                |c| c.failed_messages,
            ),
            (
                "xdprobe_export_records_not_sent",
                "Records that will never reach the collector (buffer overflow, send or write errors).",
                |c| c.not_sent,
            ),
        ];
        for (name, help, f) in families {
            let mut fam = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for c in v.iter() {
                ConstCounter::new(f(c))
                    .encode(fam.encode_family(&[("collector", c.url.as_str())])?)?;
            }
        }
        Ok(())
    }
}
