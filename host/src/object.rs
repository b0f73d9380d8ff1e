//! The tracing objects, compiled for `bpfel-unknown-none` by `build.rs`.
//! Empty when the binary was built with `AYA_BUILD_SKIP=1`.

/// Stack-layer latency programs (`host-prog/src/bin/stacklat/`).
pub static STACKLAT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stacklat"));
/// The same programs with empty bodies, for the overhead benchmark's floor
/// (`host-prog/src/bin/stackfloor.rs`).
pub static STACKFLOOR: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stackfloor"));

/// Connect-latency program (`host-prog/src/bin/connlat.rs`).
pub static CONNLAT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/connlat"));
/// Kernel packet path tracer (`host-prog/src/bin/pathtrace.rs`).
pub static PATHTRACE: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/pathtrace"));
/// Clock-sync XDP responder (`host-prog/src/bin/clocksync.rs`).
pub static CLOCKSYNC: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/clocksync"));
