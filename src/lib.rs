//! xdprobe's root package as a library: the daemon (`xdprobe run`: the
//! capture crate's workers, the exporter, the host agent, signals and
//! privileges), the metrics endpoint the daemon and the manager share, and
//! the memory estimate every command makes before it allocates; so the
//! `xdprobe` binary and the integration tests share one copy.

pub mod budget;
pub mod daemon;
pub mod l7_settings;
pub mod prom;
