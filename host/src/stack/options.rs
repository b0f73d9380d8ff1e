//! What a stack probe is asked to observe: hooks, layers, scope, the
//! sampling grid and the time-sampling windows. Plain data, below every
//! other stack module: the probe, its hook resolution and the agent's
//! window schedule all read it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::hooks::{Hook, Layer};

/// What to observe and report.
#[derive(Clone, Debug, Default)]
pub struct StackOptions {
    /// Per layer, hooks replacing the defaults (`[host.hooks]`). A hook
    /// named here must exist; a default that the kernel lacks just leaves
    /// its layer out.
    pub hooks: BTreeMap<Layer, Vec<Hook>>,
    /// Layers to observe; empty: all.
    pub layers: Vec<Layer>,
    /// Sampling grid in stream bytes (0: every observation).
    pub sample_bytes: u32,
    /// In-kernel scope: ports (either end), network namespace inodes,
    /// processes (socket layers).
    pub ports: Vec<u16>,
    pub netns: Vec<u32>,
    pub tgids: Vec<u32>,
    /// cgroup v2 IDs (the inode of the cgroup's directory).
    pub cgroups: Vec<u64>,
    /// Ring buffer size in bytes (power of two, ≥ one page); 0: 4 MiB.
    pub ring_bytes: u32,
    /// Time sampling: the layer programs attached only `window` out of
    /// every `every` ([`Windows`]); `None`: always.
    pub windows: Option<Windows>,
    /// Benchmark only: attach programs that return at once
    /// ([`crate::object::STACKFLOOR`]) at the hooks the real ones would take, to
    /// measure what the kernel charges for running any program there.
    /// Nothing is observed.
    pub empty_programs: bool,
}

/// Time sampling: the layer programs are attached for `window` out of
/// every `every`, and detached in between, so that between windows the
/// probe costs the kernel nothing per packet (not even the empty
/// program's dispatch a byte-grid filter pays on every skb).
///
/// A window opens by attaching the layers from the receiving socket back
/// to the send path's entry, so every byte it lets in meets every layer;
/// it closes the entry first and the rest only once the bytes let in
/// have passed them all, for at most the matcher's hold (`--hold`): the
/// bytes still on their way then are counted as cut, not dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub window: Duration,
    pub every: Duration,
}
