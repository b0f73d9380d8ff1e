//! What every test crate of xdprobe shares, in one place instead of a copy
//! per crate: when a test may skip (`skip`: never under CI; the
//! `require_root!` macro names the test), scratch directories (`TempDir`),
//! network namespaces and veth pairs (`netns`: the demo's test bed,
//! panicking), child processes killed on drop and waits on a condition
//! instead of fixed sleeps (`child`), the collector side of export tests
//! (`collect`, `collectors`), captures of many flows (`flows`).
//!
//! Only std, libc and the test bed, so any crate of the workspace can take
//! it as a dev-dependency without a cycle.

pub mod child;
pub mod collect;
pub mod collectors;
pub mod flows;
pub mod netns;
pub mod skip;
mod tmp;

pub use child::{ChildGuard, signal, strip_ansi, wait_exit, wait_for, wait_until};
pub use skip::{have, in_ci, is_root, require, require_root, require_tool};
pub use tmp::TempDir;

/// Runs the tests of one binary that take this one at a time: tests that
/// time real traffic through a user-space bridge must not share the
/// machine's two cores with another such test (a starved worker or bridge
/// shows as misordered frames or extra delay). Tolerates a panicked holder.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
