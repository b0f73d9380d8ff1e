//! `xdprobe`: the command-line edge. Errors are `anyhow` here and typed
//! (`thiserror`) in the library crates.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod cmd;
mod manager;

#[derive(Parser)]
#[command(
    name = "xdprobe",
    version,
    // Every subcommand answers --version, and its man page footer names it.
    propagate_version = true,
    about = "Passive flow probe with network performance metrics"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Read a pcap/pcapng file and print (and optionally export) its flow records.
    Pcap(cmd::pcap::PcapArgs),
    /// Run the probe's main job live in throw-away namespaces (root), or on
    /// the bundled capture (--offline): the separate `xdprobe-demo` binary.
    #[command(disable_help_flag = true)]
    Demo(cmd::demo::DemoArgs),
    /// Run the live appliance from a config file (foreground, for systemd).
    Run(cmd::run::RunArgs),
    /// Validate a config file; exit 2 with the key and line of every error.
    CheckConfig(cmd::check_config::CheckConfigArgs),
    /// Where inside this host's kernel each TCP flow's time goes (T1…T8),
    /// for a duration or until Ctrl-C (root).
    Host(Box<cmd::host::HostArgs>),
    /// Latency of every outgoing TCP connection, with the process that made
    /// it (root).
    Connlat(cmd::connlat::ConnlatArgs),
    /// Where a packet spends its time inside this kernel: tracepoints each
    /// packet of a flow passes, per-step latency, an echo mode (root).
    Trace(cmd::trace::TraceArgs),
    /// Join the host agents' observations across hosts: clock sync with
    /// XDP timing probes, T4 (the network) and T8 end to end (root for
    /// manager.veth_xdp only).
    Manager(cmd::manager::ManagerArgs),
    /// Write the man pages or shell completions (packaging only).
    #[command(hide = true)]
    Generate(cmd::generate::GenerateArgs),
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pcap(a) => cmd::pcap::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::CheckConfig(a) => cmd::check_config::run(a),
        Command::Host(a) => cmd::host::run(*a),
        Command::Connlat(a) => cmd::connlat::run(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::Manager(a) => cmd::manager::run(a),
        Command::Generate(a) => cmd::generate::run(a, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xdprobe: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr, in colour only when stderr is a terminal (a journal,
/// a file or a pipe gets plain text) and `NO_COLOR` is not set.
fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("XDPROBE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
}
