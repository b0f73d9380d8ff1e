//! `xdprobe demo`.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct DemoArgs {}

pub fn run(_args: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
