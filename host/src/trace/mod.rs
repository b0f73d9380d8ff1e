//! Kernel packet path tracing (`xdprobe trace`): which tracepoints each
//! packet of a chosen flow passed and when — points chosen and resolved
//! (`points`), what the kernel offers (`list`), the tracer itself
//! (`probe`), trails as records (`record`), the active echo mode
//! (`echo`), segments of GSO packets joined to the packets they were cut
//! from (`segments`), and the per-step statistics and picture (`report`,
//! `plot`).

pub mod attach;
pub mod echo;
pub mod list;
pub mod plot;
pub mod points;
pub mod probe;
pub mod record;
pub mod report;
pub mod segments;
