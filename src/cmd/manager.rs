//! `xdprobe manager -c FILE`: the cross-host manager. Host agents
//! (`xdprobe host --manager`) stream their sampled observations to it; it
//! measures each agent's clock with XDP-stamped timing probes, matches the
//! two ends of every flow by stream bytes and writes per-flow T1…T8
//! records with the network segment T4 between the hosts
//! (`docs/host-crosshost.md`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;

use super::parse_duration;

use crate::manager::{self, RunOptions};

/// Exit status for a config that cannot be used (as check-config).
const EXIT_SETUP: u8 = 2;

#[derive(clap::Args, Debug)]
pub struct ManagerArgs {
    /// Config file: its [manager], [export] and [metrics] sections
    /// ([[interface]] is not needed).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: PathBuf,
    /// Only check the file (exit 0, or 2 with every error).
    #[arg(long)]
    pub check: bool,
    /// Stop after this long (e.g. 10m); default: until SIGINT/SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// JSON lines to FILE instead of manager.json.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw the flows into FILE.svg instead of manager.plot.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Print the counters at the end.
    #[arg(long)]
    pub stats: bool,
}

pub fn run(a: ManagerArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = match xdprobe_config::load_manager(&a.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(EXIT_SETUP));
        }
    };
    if a.check {
        println!("{}: ok", a.config.display());
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(j) = a.json {
        cfg.manager.json = Some(j);
    }
    if let Some(p) = a.plot {
        cfg.manager.plot = Some(p);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let s = manager::run(
        &cfg,
        &RunOptions {
            duration: a.duration,
            stats: a.stats,
        },
        &stop,
    )?;
    tracing::info!(
        reports = s.reports,
        joined = s.joined,
        rounds = s.rounds,
        failed_rounds = s.rounds_failed,
        "manager stopped"
    );
    Ok(ExitCode::SUCCESS)
}
