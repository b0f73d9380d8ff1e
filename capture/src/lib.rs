//! The packet path from a source to records, in the order a frame travels:
//!
//! - live: `xdp` loads the kernel program (filter, timestamp, redirect) →
//!   the AF_XDP source (`xdprobe_dataplane::source::afxdp`, one socket per
//!   RX queue) → `worker::queue` (one pinned thread per queue; `clock`
//!   turns the XDP timestamps into Unix time);
//! - capture files: `xdprobe_dataplane::source::pcap` → `worker::file`
//!   (threads taking turns at reading);
//! - both: `steer` names the worker that owns a frame's flow, and
//!   `handoff` brings it there (unless `rss` says the NIC already does),
//!   each worker feeds its own `xdprobe_dataplane::Worker`, and `sink`
//!   sends the finished records on (exporter, JSON lines).
//!
//! The XDP program (`xdp-prog/`) is built by this crate's `build.rs`, as
//! `host/` builds `host-prog/`. The daemon (`xdprobe run`) and the
//! commands wire these together in the root package.

pub mod clock;
pub mod handoff;
pub mod lograte;
pub mod rss;
pub mod sink;
pub mod steer;
pub mod worker;
pub mod xdp;
