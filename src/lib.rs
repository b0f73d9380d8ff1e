//! xdprobe's root package as a library: the live-capture path (XDP loader,
//! AF_XDP sockets, per-queue workers, daemon), so the `xdprobe` binary and
//! the privileged integration tests in `tests/live_*.rs` share one copy;
//! and the memory estimate every command makes before it allocates.

pub mod budget;
pub mod export_metrics;
pub mod live;
pub mod offline;
