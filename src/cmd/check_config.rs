//! `xdprobe check_config` (filled in by the live-appliance task).

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct CheckConfigArgs {}

pub fn run(_args: CheckConfigArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
