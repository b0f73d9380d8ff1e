//! The test bed the demo and the tests share: commands run to completion
//! with their stderr in the error (`cmd`), and network namespaces, veth
//! pairs, addresses and static neighbours (`netns`). Every call returns a
//! `Result`: the demo reports a failure, the tests' kit
//! (`xdprobe-test-support`) turns it into a panic naming the command.
//!
//! Only std and libc, so the demo's binary and every test crate can take
//! it without a cycle.

pub mod cmd;
pub mod netns;

pub use cmd::{CmdError, run, run_quiet};
pub use netns::{NetNs, VethOpts, addr, enter_netns, mac, neigh, rx_packets, unique, veth};
