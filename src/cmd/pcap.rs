//! `xdprobe pcap FILE`.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct PcapArgs {}

pub fn run(_args: PcapArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
