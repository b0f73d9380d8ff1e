//! The metrics endpoint: one [`Registry`] that every subsystem adds its
//! metric families to (the capture's own in `report`; more with
//! [`Metrics::register`], before or after the server starts), served as
//! OpenMetrics text at `GET /metrics` by `server`, whose connection limit
//! and timeouts keep idle, slow or oversized clients from blinding it.
//!
//! A subsystem adds a family by implementing
//! [`prometheus_client::collector::Collector`] (values read at scrape
//! time, as `report::ReportCollector` does) or by registering live
//! `prometheus_client` metrics (counters it increments itself) through
//! [`Metrics::with_registry`]. `prometheus_client` has no summary type:
//! a subsystem that keeps its own quantiles adds a [`SummaryFamily`],
//! rendered in OpenMetrics summary form after the registry's families.

mod export;
mod report;
mod server;

use std::sync::{Arc, RwLock};

use prometheus_client::collector::Collector;
use prometheus_client::registry::Registry;

pub use export::ExportCollector;
pub use report::{QueueReport, Report, ReportCollector, TsRttSummary};
pub use server::{Limits, MetricsServer};

/// The shared registry: scrapes read it, subsystems register into it.
#[derive(Clone, Default)]
pub struct Metrics {
    registry: Arc<RwLock<Registry>>,
    summaries: Arc<RwLock<Vec<Box<dyn SummaryFamily>>>>,
}

/// One summary family, values read at scrape time.
pub trait SummaryFamily: Send + Sync + 'static {
    /// Name (without suffixes) and help text.
    fn describe(&self) -> (&'static str, &'static str);
    /// Per label set: the labels (`k="v",…`), the quantiles (quantile,
    /// value; NaN when there is none), the sum and the count.
    fn points(&self) -> Vec<SummaryPoint>;
}

/// One label set of a summary family.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryPoint {
    pub labels: Vec<(&'static str, String)>,
    pub quantiles: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: u64,
}

fn render_summary(out: &mut String, f: &dyn SummaryFamily) {
    use std::fmt::Write;
    let (name, help) = f.describe();
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
    for p in f.points() {
        let labels: Vec<String> = p
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect();
        let l = labels.join(",");
        let sep = if l.is_empty() { "" } else { "," };
        let braced = if l.is_empty() {
            String::new()
        } else {
            format!("{{{l}}}")
        };
        for (q, v) in &p.quantiles {
            let v = if v.is_nan() {
                "NaN".to_owned()
            } else {
                v.to_string()
            };
            let _ = writeln!(out, "{name}{{{l}{sep}quantile=\"{q}\"}} {v}");
        }
        let _ = writeln!(out, "{name}_sum{braced} {}", p.sum);
        let _ = writeln!(out, "{name}_count{braced} {}", p.count);
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a summary family asked for its points on every scrape.
    pub fn register_summary(&self, family: impl SummaryFamily) {
        let mut g = match self.summaries.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        g.push(Box::new(family));
    }

    /// Adds a collector asked for its families on every scrape.
    pub fn register(&self, collector: impl Collector) {
        self.with_registry(|r| r.register_collector(Box::new(collector)));
    }

    /// Direct access, for registering live metrics or sub-registries.
    pub fn with_registry<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        let mut guard = match self.registry.write() {
            Ok(g) => g,
            // A panic elsewhere while registering leaves a usable registry.
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// The exposition text (OpenMetrics 1.0, ending in `# EOF`).
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let guard = match self.registry.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut out = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &guard)?;
        let summaries = match self.summaries.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if !summaries.is_empty() {
            // Before the terminating `# EOF`.
            let end = out.rfind("# EOF").unwrap_or(out.len());
            out.truncate(end);
            for f in summaries.iter() {
                render_summary(&mut out, f.as_ref());
            }
            out.push_str("# EOF\n");
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::live::worker::Snapshot;
    use xdprobe_common::XdpCounters;

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

    #[test]
    fn another_subsystem_adds_its_family_to_the_same_endpoint() {
        use prometheus_client::metrics::counter::Counter;
        let m = Metrics::new();
        let c: Counter = Counter::default();
        m.with_registry(|r| r.register("xdprobe_host_events", "Host-side events.", c.clone()));
        c.inc_by(5);
        assert!(m.render().unwrap().contains("xdprobe_host_events_total 5"));
    }
}
