//! The metrics endpoint of the daemon and the manager: one [`Registry`]
//! that every subsystem adds its metric families to (the capture's in
//! `daemon::report`, the host agent's, the manager's; with
//! [`Metrics::register`], before or after the server starts), served as
//! OpenMetrics text at `GET /metrics` by `server`, whose connection limit
//! and timeouts keep idle, slow or oversized clients from blinding it.
//!
//! A subsystem adds a family by implementing
//! [`prometheus_client::collector::Collector`] (values read at scrape
//! time, as `daemon::report::ReportCollector` does) or by registering live
//! `prometheus_client` metrics (counters it increments itself) through
//! [`Metrics::with_registry`]. `prometheus_client` has no summary type:
//! a subsystem that keeps its own quantiles adds a [`SummaryFamily`],
//! rendered in OpenMetrics summary form after the registry's families.

mod server;

use std::sync::{Arc, RwLock};

use prometheus_client::collector::Collector;
use prometheus_client::registry::Registry;

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
    use super::*;

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
