//! xdprobe's demo, kept out of the appliance: a throw-away network in
//! namespaces (an impairing user-space bridge, a mirror port), real
//! traffic (HTTP-like sessions, bulk TCP, DNS) and a real collector, with
//! the real probe — the `xdprobe` binary, run as a child process — capturing
//! it. `xdprobe demo` hands over to this crate's `xdprobe-demo` binary.
//!
//! The bridge is a library module too: the probe's live tests impair their
//! traffic with the same one.

pub mod bridge;
pub mod client;
mod collector;
pub mod dns;
pub mod impair;
mod live;
mod packet;
mod probe;
mod proc;
mod records;
pub mod serve;
mod topo;
mod traffic;

use std::path::PathBuf;

pub use live::{LiveOptions, is_root, run_live};

/// How the demo prints the probe's records on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// One JSON object per record per line.
    Json,
    /// Aligned columns for a terminal.
    Table,
    /// CSV with a header line.
    Csv,
    /// No record output (just the summary).
    None,
}

impl FormatArg {
    /// The name `xdprobe pcap --format` takes.
    pub fn name(self) -> &'static str {
        match self {
            FormatArg::Json => "json",
            FormatArg::Table => "table",
            FormatArg::Csv => "csv",
            FormatArg::None => "none",
        }
    }
}

/// The probe the demo runs: `$XDPROBE_BIN`, else the `xdprobe` installed
/// beside this binary (as cargo builds them), else `xdprobe` on `PATH`.
pub fn probe_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("XDPROBE_BIN") {
        return Ok(PathBuf::from(p));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("xdprobe")));
    if let Some(p) = beside.filter(|p| p.is_file()) {
        return Ok(p);
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("xdprobe"))
            .find(|p| p.is_file())
    });
    on_path.ok_or_else(|| {
        anyhow::anyhow!(
            "the demo runs the probe binary `xdprobe`, which is neither beside this one nor on PATH \
             (build both: cargo build --release -p xdprobe --bins; or set XDPROBE_BIN)"
        )
    })
}
