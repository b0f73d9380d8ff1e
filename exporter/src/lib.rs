//! IPFIX (RFC 7011, RFC 5103 biflows, RFC 5655 files) and NetFlow v9
//! (RFC 3954) export of xdprobe flow records, laid out in the order a
//! record travels:
//!
//! `exporter` (workers' bounded channel → one mio thread) → `link` (per
//! collector: bounded queue) → `encode` (templates from `template`, fields
//! from `ie`, message writer for `ipfix` / `nfv9`) → `transport` (UDP,
//! TCP with reconnect, file). `collector` parses the collector URLs,
//! `stats` holds the counters that the options records (RFC 7011 §4)
//! report.
//!
//! ```no_run
//! use xdprobe_exporter::{CollectorSpec, Exporter, ExporterConfig};
//! let cfg = ExporterConfig {
//!     collectors: vec![CollectorSpec::parse("udp://127.0.0.1:4739")?],
//!     ..ExporterConfig::default()
//! };
//! let exporter = Exporter::spawn(cfg)?;
//! let tx = exporter.sender();
//! # let record: xdprobe_dataplane::FlowRecord = todo!();
//! tx.send_blocking(record);
//! drop(tx);
//! let stats = exporter.shutdown()?;
//! # Ok::<(), xdprobe_exporter::ExporterError>(())
//! ```

pub mod collector;
pub mod encode;
mod exporter;
pub mod host_sender;
pub mod ie;
pub mod ie_l7;
mod link;
pub mod safe_file;
pub mod stats;
pub mod template;
pub mod template_l7;
mod transport;

use std::sync::Arc;
use std::time::Duration;

pub use collector::{CollectorSpec, Target};
pub use exporter::{Exporter, Full, RecordSender};
pub use stats::{CollectorStats, ExportStats, ProbeCounters};
pub use template::{Format, Mode, Profile};
/// The reconnecting non-blocking TCP transport, for other streams that
/// want the same discipline (the host agents' stream to their manager).
pub use transport::tcp::{Change as TcpChange, TcpOut};

/// Everything the exporter needs; `Default` gives working values.
#[derive(Clone, Debug)]
pub struct ExporterConfig {
    pub collectors: Vec<CollectorSpec>,
    /// Enterprise number of the NPM elements (default 32473, the RFC 5612
    /// documentation PEN: set your organisation's).
    pub pen: u32,
    /// Path MTU in bytes; a message is at most this minus the IP and UDP
    /// (or TCP) headers. Default 1500.
    pub mtu: usize,
    /// UDP: resend templates after this long (default 60 s)…
    pub template_refresh: Duration,
    /// …or after this many messages, whichever first (default 100).
    pub template_refresh_packets: u32,
    /// Exporter statistics options record interval (default 60 s).
    pub options_interval: Duration,
    /// Records kept per TCP collector while it is unreachable (default
    /// 100000, as `[export] tcp_buffer_records`: about 20 MB); the oldest
    /// are dropped beyond, counted.
    pub tcp_buffer_records: usize,
    /// First and longest TCP reconnect backoff (default 100 ms, 2 s).
    pub tcp_reconnect_min: Duration,
    pub tcp_reconnect_max: Duration,
    /// Worker → exporter channel size in records (default 65536).
    pub channel_capacity: usize,
    /// IPFIX Observation Domain ID / v9 Source ID (default 1).
    pub observation_domain: u32,
    /// How long `shutdown` waits for TCP collectors (default 5 s).
    pub shutdown_timeout: Duration,
    /// The probe's counters for the options records (parse drops as
    /// ignoredPacketTotalCount, flow- and fragment-table evictions), when
    /// the data plane provides them; 0 otherwise.
    pub probe_counters: Option<Arc<ProbeCounters>>,
    /// What the collector's users see as the name of this observation
    /// domain (IPFIX observationDomainName, sent with every template
    /// (re)send), e.g. `"xdprobe edge1: eth0,eth1"`. `None`: `"xdprobe on
    /// <hostname>"`; `Some("")`: not sent. Cut to fit next to the templates
    /// in one message. NetFlow v9 cannot carry it (no variable-length
    /// fields).
    pub observation_name: Option<String>,
    /// Flow templates carry the local process of a connection (PID, name,
    /// connect latency: `ie::process`), for a daemon that watches its own
    /// kernel (`[host] connlat`).
    pub process_fields: bool,
}

impl ExporterConfig {
    /// The observationDomainName this configuration sends.
    pub fn resolved_observation_name(&self) -> String {
        self.observation_name
            .clone()
            .unwrap_or_else(|| format!("xdprobe on {}", hostname()))
    }
}

/// This machine's host name, for observation names (`/proc`, so no libc
/// call; `"unknown-host"` if it cannot be read).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string())
}

impl Default for ExporterConfig {
    fn default() -> Self {
        ExporterConfig {
            collectors: Vec::new(),
            pen: ie::PEN_DOCUMENTATION,
            mtu: 1500,
            template_refresh: Duration::from_secs(60),
            template_refresh_packets: 100,
            options_interval: Duration::from_secs(60),
            tcp_buffer_records: 100_000,
            tcp_reconnect_min: Duration::from_millis(100),
            tcp_reconnect_max: Duration::from_secs(2),
            channel_capacity: 65_536,
            observation_domain: 1,
            shutdown_timeout: Duration::from_secs(5),
            probe_counters: None,
            observation_name: None,
            process_fields: false,
        }
    }
}

/// Exporter errors (configuration and start-up; per-record outcomes are
/// counters, not errors).
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("collector {url:?}: {reason}")]
    BadCollector { url: String, reason: String },
    #[error("collector {url:?}: MTU {mtu} too small, templates need a {needed}-byte message")]
    MtuTooSmall {
        url: String,
        mtu: usize,
        needed: usize,
    },
    #[error("collector {url:?}")]
    Io {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the exporter's poller")]
    Poll(#[source] std::io::Error),
    #[error("cannot start the exporter thread")]
    Thread(#[source] std::io::Error),
    #[error("the exporter thread panicked")]
    ThreadPanicked,
    #[error("the exporter thread has stopped")]
    Stopped,
}
