//! xdprobe's host side: what the running kernel offers (`kernel`), which
//! hooks observe what (`hooks`), and the host tools built on them —
//! stack-layer latency (`stack`).

pub mod connlat;
pub mod hooks;
pub mod kernel;
pub mod object;
pub mod stack;
