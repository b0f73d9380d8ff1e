//! Live capture, in the order a frame travels: `xdp` (the kernel program's
//! loader: filter, timestamp, redirect) → the AF_XDP source
//! (`xdprobe_dataplane::source::afxdp`: one socket and UMEM per RX queue,
//! beside the pcap source) → `worker` (one pinned thread per queue; `steer`,
//! `handoff` and `merge` bring both directions of a flow to one worker,
//! unless `rss` says the NIC already does) → `sink`
//! (records to the exporter / JSON) ; `prom` and `daemon` (signals, reload,
//! privileges) run the whole as `xdprobe run`.

pub mod clock;
pub mod daemon;
pub mod handoff;
pub mod host;
pub mod lograte;
pub mod merge;
pub mod privs;
pub mod prom;
pub mod rss;
pub mod sink;
pub mod steer;
pub mod worker;
pub mod xdp;
