//! What every test crate of xdprobe shares, in one place instead of a copy
//! per crate: when a test may skip (`skip`: never under CI), scratch
//! directories (`TempDir`), network namespaces and veth pairs (`netns`),
//! child processes killed on drop and the collector side of IPFIX tests
//! (`collect`).
//!
//! Only std and libc, so any crate of the workspace can take it as a
//! dev-dependency without a cycle.

pub mod collect;
pub mod netns;
pub mod skip;
mod tmp;

pub use skip::{have, in_ci, is_root, require, require_root, require_tool};
pub use tmp::TempDir;
