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
#[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
pub struct ManagerArgs {
    #[command(subcommand)]
    pub cmd: Option<ManagerCmd>,
    /// Config file: its [manager], [export] and [metrics] sections
    /// ([[interface]] is not needed).
    #[arg(short = 'c', long = "config", value_name = "FILE", required = true)]
    pub config: Option<PathBuf>,
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

#[derive(clap::Subcommand, Debug)]
pub enum ManagerCmd {
    /// Write a private CA and the TLS certificates of the manager and of
    /// its agents (PEM; keys mode 0600, never through a symlink). An
    /// existing CA in DIR is reused, so agents can be added later.
    GenCerts(GenCertsArgs),
}

#[derive(clap::Args, Debug)]
pub struct GenCertsArgs {
    /// Where the files go (created if missing).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Host names or IP addresses the agents dial the manager by
    /// (--manager HOST:PORT); repeat. None: no manager certificate.
    #[arg(long = "manager", value_name = "NAME|IP")]
    pub manager: Vec<String>,
    /// Agent names (their --agent-name), one certificate each; repeat.
    #[arg(long = "agent", value_name = "NAME")]
    pub agent: Vec<String>,
}

fn gen_certs(a: &GenCertsArgs) -> anyhow::Result<ExitCode> {
    let made = xdprobe_host::fleet::certs::generate(&a.dir, &a.manager, &a.agent)?;
    for p in &made {
        println!("{}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// What `--check` says about the agents' channel.
fn channel(s: &xdprobe_config::ManagerSecurity) -> String {
    use xdprobe_config::ManagerSecurity;
    match s {
        ManagerSecurity::Tls {
            cert, ca, pinned, ..
        } => {
            let trust = match (ca, pinned.len()) {
                (Some(ca), 0) => format!("agents' certificates from the CA {}", ca.display()),
                (Some(ca), n) => format!("the CA {} and {n} pinned certificate(s)", ca.display()),
                (None, n) => format!("{n} pinned agent certificate(s)"),
            };
            format!(
                "mutual TLS 1.3 as {}; {trust}; each agent's certificate must name it",
                cert.display()
            )
        }
        ManagerSecurity::Insecure => {
            "INSECURE: plaintext, no authentication (insecure = true)".into()
        }
        ManagerSecurity::Unset => "not configured".into(),
    }
}

pub fn run(a: ManagerArgs) -> anyhow::Result<ExitCode> {
    if let Some(ManagerCmd::GenCerts(g)) = &a.cmd {
        return gen_certs(g);
    }
    let Some(config) = a.config else {
        anyhow::bail!("-c FILE is required");
    };
    let mut cfg = match xdprobe_config::load_manager(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(EXIT_SETUP));
        }
    };
    if a.check {
        // The TLS files are read as the manager would, so a wrong path or
        // a key that does not match shows here.
        if let Err(e) = manager::tls_config(&cfg.manager.security) {
            eprintln!("{}: {e:#}", config.display());
            return Ok(ExitCode::from(EXIT_SETUP));
        }
        println!("{}: ok", config.display());
        println!("  agents' channel: {}", channel(&cfg.manager.security));
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
