//! `xdprobe demo`: the probe's main job on a built-in default, so a fresh
//! machine shows real output with no NIC, capture or collector of its own.
//!
//! It runs the capture the project recorded itself (`assets/demo.pcap`:
//! real kernel TCP/TLS/DNS traffic through an impairing bridge, see
//! `assets/README.md`) through the same worker as `xdprobe pcap` and prints
//! the flows as a table.

use std::process::ExitCode;

use super::pcap::{FlowArgs, FormatArg, PcapArgs};

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Record output on stdout.
    #[arg(long, value_enum, default_value = "table")]
    pub format: FormatArg,
    #[command(flatten)]
    pub flow: FlowArgs,
}

/// The bundled capture, found next to the binary's source tree (cargo run) or
/// installed beside it.
fn demo_capture() -> anyhow::Result<std::path::PathBuf> {
    let candidates = [
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/demo.pcap"),
        std::env::current_exe()?
            .parent()
            .map(|d| d.join("demo.pcap"))
            .unwrap_or_default(),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow::anyhow!("bundled demo capture assets/demo.pcap not found"))
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let file = demo_capture()?;
    eprintln!(
        "xdprobe demo: flows of {} (recorded real traffic)",
        file.display()
    );
    super::pcap::run(PcapArgs {
        file,
        format: args.format,
        flow: args.flow,
        stats: true,
        export: vec![],
        pen: 32473,
    })
}
