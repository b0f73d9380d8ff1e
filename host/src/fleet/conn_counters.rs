//! What the manager's connection guard did (`xdprobe manager`'s
//! `conns`): connections accepted and closed by reason, refusals, the
//! memory held. Exported with the manager's metrics
//! (`xdprobe_manager_connections_*`).

use std::collections::BTreeMap;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;

/// Reasons a connection is closed, as counted and labelled.
pub const CLOSE_REASONS: [&str; 13] = [
    // The agent closed it, or the stream broke (bad frame, I/O error).
    "closed",
    "broken",
    // TLS handshake or record failure (no or wrong certificate …).
    "tls",
    // The certificate does not name the HELLO's agent.
    "cert_name",
    // Without TLS, a second connection under a connected name.
    "name_taken",
    // An authenticated reconnection replaced it.
    "taken_over",
    "hello_timeout",
    "idle",
    "frame_too_long",
    // Its read would have passed `memory_limit`.
    "memory",
    // The oldest of too many connections without a HELLO.
    "evicted",
    // The fleet remembers `max_agents` names already.
    "too_many_agents",
    "other",
];

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ConnCounters {
    pub accepted: u64,
    /// By [`CLOSE_REASONS`] entry.
    pub closed: BTreeMap<&'static str, u64>,
    /// Pending connections pushed out by newer ones (also in `closed`).
    pub pending_evicted: u64,
    /// STATS frames ignored because their values cannot be true.
    pub stats_invalid: u64,
    /// HELLOs whose clock-sync address was not the connection's (the
    /// connection's was used).
    pub sync_redirects: u64,
    /// Authenticated reconnections that took a live session over.
    pub takeovers: u64,
    /// Bytes the connections hold now (partial frames, TLS buffers).
    pub held_bytes: u64,
    /// Bytes of events waiting for a clock round.
    pub unsynced_bytes: u64,
}

impl ConnCounters {
    pub fn count_close(&mut self, reason: &'static str) {
        let r = CLOSE_REASONS
            .iter()
            .copied()
            .find(|r| *r == reason)
            .unwrap_or("other");
        *self.closed.entry(r).or_default() += 1;
    }

    pub fn closed(&self, reason: &str) -> u64 {
        self.closed.get(reason).copied().unwrap_or(0)
    }

    pub fn encode(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut fam = enc.encode_descriptor(
            "xdprobe_manager_connections_closed",
            "Agent connections the manager closed, by reason.",
            None,
            MetricType::Counter,
        )?;
        for r in CLOSE_REASONS {
            ConstCounter::new(self.closed(r)).encode(fam.encode_family(&[("reason", r)])?)?;
        }
        for (name, help, v) in [
            (
                "xdprobe_manager_connections_accepted",
                "Agent connections accepted.",
                self.accepted,
            ),
            (
                "xdprobe_manager_stats_invalid",
                "STATS frames ignored: values that cannot be true.",
                self.stats_invalid,
            ),
            (
                "xdprobe_manager_sync_redirects",
                "HELLOs naming a clock-sync address other than the connection's (not used).",
                self.sync_redirects,
            ),
            (
                "xdprobe_manager_takeovers",
                "Authenticated reconnections that replaced a live connection.",
                self.takeovers,
            ),
        ] {
            ConstCounter::new(v).encode(enc.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        for (name, help, v) in [
            (
                "xdprobe_manager_connection_bytes",
                "Bytes the agent connections hold (partial frames, TLS buffers).",
                self.held_bytes,
            ),
            (
                "xdprobe_manager_unsynced_bytes",
                "Bytes of events waiting for their agent's first clock round.",
                self.unsynced_bytes,
            ),
        ] {
            ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
                .encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}
