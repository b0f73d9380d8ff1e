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
//! [`Metrics::with_registry`].

mod report;
mod server;

use std::sync::{Arc, RwLock};

use prometheus_client::collector::Collector;
use prometheus_client::registry::Registry;

pub use report::{QueueReport, Report, ReportCollector};
pub use server::{Limits, MetricsServer};

/// The shared registry: scrapes read it, subsystems register into it.
#[derive(Clone, Default)]
pub struct Metrics {
    registry: Arc<RwLock<Registry>>,
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
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
