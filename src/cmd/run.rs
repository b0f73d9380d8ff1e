//! `xdprobe run` (filled in by the live-appliance task).

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct RunArgs {}

pub fn run(_args: RunArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
