//! What the daemon's `[host]` agent counted, as Prometheus families:
//! per-segment latency histograms over every timed byte (the manager's
//! type, `stack::histogram`), a connect-latency histogram, and the
//! kernel's, the matcher's and the exporter's counters.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Unit;
use xdprobe_common::host::{ConnCounters, StackCounters};
use xdprobe_host::stack::histogram::{Histogram, SegmentHistograms};
use xdprobe_host::stack::matcher::MatchCounters;

/// What the agent counted, for the metrics endpoint.
#[derive(Clone, Debug, Default)]
pub struct HostMetrics {
    /// By segment name, every timed byte.
    pub segments: SegmentHistograms,
    /// Successful connects.
    pub connect: Histogram,
    /// Attempts by outcome.
    pub attempts: BTreeMap<&'static str, u64>,
    pub stack_kernel: StackCounters,
    pub conn_kernel: ConnCounters,
    /// Runs of the connect program the kernel skipped (its own count).
    pub conn_skipped: u64,
    /// Runs of the stack programs the kernel skipped.
    pub stack_skipped: u64,
    /// Time sampling: windows opened and seconds the layer programs were
    /// attached (0 without `sample_window`).
    pub windows: u64,
    pub attached_secs: f64,
    pub matcher: MatchCounters,
    pub reports: u64,
    pub ipfix_errors: u64,
}

impl HostMetrics {
    fn encode(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.segments.encode(
            enc,
            "xdprobe_host_segment_latency",
            "Time this host's timed bytes spent per stack segment (T1..T7, T8 socket to socket), all flows.",
        )?;
        let mut h = enc.encode_descriptor(
            "xdprobe_host_connect_latency",
            "connect() to ESTABLISHED of this host's outgoing TCP connections.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        self.connect.encode(&mut h, &[])?;
        let mut fam = enc.encode_descriptor(
            "xdprobe_host_connect_attempts",
            "Outgoing TCP connection attempts, by outcome.",
            None,
            MetricType::Counter,
        )?;
        for (outcome, n) in &self.attempts {
            ConstCounter::new(*n).encode(fam.encode_family(&[("outcome", *outcome)])?)?;
        }
        for (name, help, v) in self.counters() {
            ConstCounter::new(v).encode(enc.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        ConstCounter::new(self.attached_secs).encode(enc.encode_descriptor(
            "xdprobe_host_attached_seconds",
            "Time the stack layer programs were attached (all of it without sample_window).",
            None,
            MetricType::Counter,
        )?)?;
        Ok(())
    }

    /// The plain counters: name, help, value.
    fn counters(&self) -> [(&'static str, &'static str, u64); 17] {
        let (k, c, mt) = (&self.stack_kernel, &self.conn_kernel, &self.matcher);
        [
            (
                "xdprobe_host_events",
                "Observations the stack programs reported.",
                k.events,
            ),
            (
                "xdprobe_host_events_lost",
                "Observations lost to a full ring buffer.",
                k.ringbuf_full,
            ),
            (
                "xdprobe_host_no_entry",
                "Socket-layer sends without a recorded call entry.",
                k.no_entry,
            ),
            (
                "xdprobe_host_read_failed",
                "Kernel memory reads that failed.",
                k.read_failed,
            ),
            (
                "xdprobe_host_unsampled",
                "Observations holding no sample byte.",
                k.unsampled,
            ),
            (
                "xdprobe_host_filtered",
                "Observations outside the scope.",
                k.filtered,
            ),
            (
                "xdprobe_host_runs_skipped",
                "Stack program runs the kernel skipped (their recursion_misses): observations no program saw.",
                self.stack_skipped,
            ),
            (
                "xdprobe_host_windows",
                "Time-sampling windows opened (sample_window).",
                self.windows,
            ),
            ("xdprobe_host_flows", "Flows the matcher tracked.", mt.flows),
            (
                "xdprobe_host_flows_dropped",
                "Flows not tracked (table full).",
                mt.flows_dropped,
            ),
            (
                "xdprobe_host_anchors_dropped",
                "Timed bytes dropped (per-flow bound).",
                mt.anchors_dropped,
            ),
            (
                "xdprobe_host_held_out",
                "Timed bytes given up as slow: not at every layer when the hold ran out.",
                mt.cut,
            ),
            (
                "xdprobe_host_reports",
                "Flow reports written.",
                self.reports,
            ),
            (
                "xdprobe_host_ipfix_errors",
                "Host-stack IPFIX messages not sent.",
                self.ipfix_errors,
            ),
            (
                "xdprobe_host_connects_started",
                "Connections seen entering SYN_SENT.",
                c.started,
            ),
            (
                "xdprobe_host_connects_lost",
                "Connect reports lost to a full ring buffer.",
                c.ringbuf_full,
            ),
            (
                "xdprobe_host_connect_runs_skipped",
                "State changes the kernel did not run the connect program for (its recursion_misses).",
                self.conn_skipped,
            ),
        ]
    }
}

/// The agent's metrics as a registry collector, read at every scrape.
#[derive(Clone)]
pub struct HostCollector(pub Arc<Mutex<HostMetrics>>);

impl std::fmt::Debug for HostCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostCollector")
    }
}

impl Collector for HostCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(m) = self.0.lock() else {
            return Ok(());
        };
        m.encode(&mut enc)
    }
}
