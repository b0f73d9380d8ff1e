//! xdprobe's host side: what the running kernel offers (`kernel`), which
//! hooks observe what (`hooks`), and the host tools built on them —
//! stack-layer latency (`stack`), kernel packet path tracing (`trace`);
//! across hosts, clock alignment (`sync`) and the agents' stream to a
//! manager (`fleet`).

pub mod clock;
pub mod connlat;
pub mod fleet;
pub mod hooks;
pub mod kernel;
pub mod object;
pub mod poll;
pub mod scope;
pub mod stack;
pub mod sync;
pub mod trace;
