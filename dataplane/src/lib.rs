//! xdprobe's data plane, laid out in the order a packet travels:
//!
//! `source` (pcap/pcapng files, AF_XDP) → `parse` (zero-copy header views,
//! one summary per packet) → `flow` (per-worker table, expiry) → `metrics`
//! (NPM: RTT, SRT, retransmissions) → `record` (finished records) →
//! `output` (JSON/table/CSV; IPFIX lives in the exporter crate).
//!
//! Everything from `parse` on is sans-IO: it takes a packet and its capture
//! timestamp and never reads a clock, so files, live capture and unit tests
//! drive the same code.

pub mod flow;
pub mod metrics;
pub mod output;
pub mod parse;
pub mod record;
pub mod source;
pub mod time;
pub mod worker;

/// The L7 parsers (`xdprobe-l7`), for the crates that read records.
pub use xdprobe_l7 as l7;

pub use flow::FlowConfig;
pub use record::{Dir, EndReason, FlowRecord, Process};
pub use time::Timestamp;
pub use worker::{Worker, WorkerStats};
