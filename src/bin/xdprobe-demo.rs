//! `xdprobe-demo` (also started as `xdprobe demo`): the probe's main job,
//! live, in one command.
//!
//! By default it builds a throw-away network in namespaces (client, an
//! impairing bridge, server, and a mirror port the probe listens on with
//! XDP/AF_XDP), drives real traffic through it, exports to a real collector
//! and prints the flows with RTT, SRT and retransmissions (see
//! the `xdprobe_demo` library). That needs root; without root, or with `--offline`, it
//! runs the bundled capture `assets/demo.pcap` (real kernel traffic the
//! project recorded, see `assets/README.md`) through `xdprobe pcap`.
//!
//! The hidden sub-commands are the demo's own traffic programs, started by
//! the demo with `ip netns exec` inside the client and server namespaces,
//! and one leg of its impairing bridge as a process, which the test rigs
//! start in namespaces of their own.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::Context;
use clap::Parser;
use xdprobe_demo::{self as demo, FormatArg, LiveOptions};

#[derive(Parser, Debug)]
#[command(
    name = "xdprobe-demo",
    version,
    about = "xdprobe's demo: the probe's main job live in throw-away namespaces (root), or on the bundled capture (--offline)",
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true
)]
pub struct DemoArgs {
    /// Run the bundled capture assets/demo.pcap instead of live traffic
    /// (no root, namespaces or XDP needed).
    #[arg(long)]
    pub offline: bool,
    /// Record output on stdout. With json, stdout carries only the records
    /// (one per line) and everything else goes to stderr.
    #[arg(long, value_enum, default_value = "table")]
    pub format: FormatArg,
    /// Live: how long the traffic runs, in seconds (1 to 120).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=120))]
    pub seconds: u64,
    /// Live: percentage of frames the bridge drops, each direction, after
    /// the probe's tap (so every loss shows as a retransmission), 0 to 50.
    #[arg(long, default_value_t = 1.0, value_parser = parse_pct)]
    pub loss: f64,
    /// Live: one-way delay between client and tap, each direction, in
    /// milliseconds (0 to 500); the handshake RTT is about twice this.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=500))]
    pub delay_ms: u64,
    /// Live: how long the HTTP-like server thinks before each response, in
    /// milliseconds (0 to 1000): the SRT of those flows.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub think_ms: u64,
    /// Live: how long the DNS responder takes per query, in milliseconds
    /// (0 to 1000): the SRT of the DNS flows.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub dns_delay_ms: u64,
    /// Live: seed of the bridge's random loss (same seed, same drop pattern
    /// for the same frame sequence).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Live: keep the demo's files (probe config and log, JSON records, the
    /// collector's files) in DIR instead of a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub keep_dir: Option<PathBuf>,
    /// Live: do not watch the client's and server's kernel stacks (the
    /// probe's `[host]` section), e.g. on a kernel without the tracepoints.
    #[arg(long)]
    pub no_host: bool,
    /// Live: draw where each flow's time went inside the hosts (stacked
    /// bars of the stack segments) into FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    #[command(subcommand)]
    pub helper: Option<Helper>,
}

/// The demo's traffic programs (hidden: the demo starts them itself).
#[derive(clap::Subcommand, Debug)]
pub enum Helper {
    #[command(hide = true)]
    Serve(demo::serve::ServeArgs),
    #[command(hide = true)]
    Client(demo::client::ClientArgs),
    /// One impairing bridge leg in the current namespace (test rigs).
    #[command(hide = true)]
    Bridge(demo::impair::BridgeArgs),
}

fn parse_pct(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=50.0).contains(&v) {
        Ok(v)
    } else {
        Err("must be between 0 and 50".into())
    }
}

/// The bundled capture, found next to the binary's source tree (cargo run) or
/// installed beside it.
fn demo_capture() -> anyhow::Result<PathBuf> {
    let candidates = [
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/demo.pcap"),
        std::env::current_exe()?
            .parent()
            .map(|d| d.join("demo.pcap"))
            .unwrap_or_default(),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .map(|p| p.canonicalize().unwrap_or(p))
        .ok_or_else(|| anyhow::anyhow!("bundled demo capture assets/demo.pcap not found"))
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("XDPROBE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match run(DemoArgs::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xdprobe demo: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    match args.helper {
        Some(Helper::Serve(a)) => return demo::serve::run(&a),
        Some(Helper::Client(a)) => return demo::client::run(&a),
        Some(Helper::Bridge(a)) => return demo::impair::run(&a),
        None => {}
    }
    if !args.offline {
        if demo::is_root() {
            return demo::run_live(&LiveOptions {
                format: args.format,
                seconds: args.seconds,
                loss_pct: args.loss,
                delay_ms: args.delay_ms,
                think_ms: args.think_ms,
                dns_delay_ms: args.dns_delay_ms,
                seed: args.seed,
                keep_dir: args.keep_dir,
                host: !args.no_host,
                plot: args.plot,
            });
        }
        eprintln!(
            "\n!!!! xdprobe demo: the live demo needs root (network namespaces, XDP).\n\
             !!!! Falling back to the bundled capture (--offline). Run it as root\n\
             !!!! (sudo make demo) to see the probe capture live traffic.\n"
        );
    }
    run_offline(args.format)
}

/// The bundled capture through the probe's own file command, so the
/// figures are exactly what `xdprobe pcap` prints.
fn run_offline(format: FormatArg) -> anyhow::Result<ExitCode> {
    let file = demo_capture()?;
    eprintln!(
        "xdprobe demo: flows of {} (recorded real traffic)",
        file.display()
    );
    let probe = demo::probe_binary()?;
    let status = Command::new(&probe)
        .arg("pcap")
        .arg(&file)
        .args(["--format", format.name(), "--stats"])
        .status()
        .with_context(|| format!("running {} pcap", probe.display()))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}
