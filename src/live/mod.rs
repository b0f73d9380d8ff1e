//! Live capture, in the order a frame travels: `xdp` (the kernel program's
//! loader: filter, timestamp, redirect) → `xsk` (one AF_XDP socket and UMEM
//! per RX queue) → `worker` (one pinned thread per queue; `steer` and
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
pub mod xsk;
