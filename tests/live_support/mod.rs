//! Helpers for the privileged live-capture tests: crafted frames of every
//! encapsulation (`frames`), the probe (`probe`), the capture rig (`rig`)
//! and the time order of its captures (`order`), topologies with the
//! demo's bridge (`topo`) and traffic (`traffic`). The root check and network namespaces come from the
//! workspace's test-support crate.
#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses a different subset"
)]

pub mod frames;
pub mod order;
pub mod probe;
pub mod rig;
pub mod topo;
pub mod traffic;

pub use xdprobe_test_support::netns::*;
pub use xdprobe_test_support::{require_root, require_tool};
