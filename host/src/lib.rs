//! xdprobe's host side: what the running kernel offers (`kernel`), which
//! hooks observe what (`hooks`), and the host tools built on them —
//! stack-layer latency (`stack`) and kernel packet path tracing (`trace`).

pub mod connlat;
pub mod hooks;
pub mod kernel;
pub mod object;
pub mod scope;
pub mod stack;
pub mod trace;
