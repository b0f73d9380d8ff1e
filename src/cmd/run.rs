//! `xdprobe run -c probe.toml`: the live appliance in the foreground (for
//! systemd). See `xdprobe::daemon` for the start-up order, signals
//! and privileges.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use xdprobe::daemon::{self, DaemonError, JsonOut, RunOptions};

/// Exit status for "the config is wrong" (as `check-config`).
const EXIT_BAD_CONFIG: u8 = 2;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The TOML config file (the package installs a commented one as
    /// /etc/xdprobe/probe.toml; deploy/probe.toml in the source tree).
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
    /// Also write every flow record as a JSON line to FILE ("-": stdout),
    /// besides exporting it.
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Do not hand frames between workers, whatever the interfaces'
    /// `handoff` keys say. Only correct when the NIC sends both directions
    /// of a connection to the same queue (symmetric RSS key, see
    /// deploy/setup-nic.sh) or with a single queue.
    #[arg(long)]
    pub no_handoff: bool,
    /// Stamp frames when user space reads them instead of in XDP. Only for
    /// measuring what XDP timestamps are worth (BENCHMARKS.md); never in
    /// production.
    #[arg(long, hide = true)]
    pub read_time_stamps: bool,
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let opts = RunOptions {
        config: args.config,
        json: args.json.map(|j| {
            if j == "-" {
                JsonOut::Stdout
            } else {
                JsonOut::File(PathBuf::from(j))
            }
        }),
        no_handoff: args.no_handoff,
        tick: Duration::from_millis(100),
        read_time_stamps: args.read_time_stamps,
    };
    match daemon::run(&opts) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(DaemonError::Config(e)) => {
            eprintln!("{e}");
            Ok(ExitCode::from(EXIT_BAD_CONFIG))
        }
        Err(DaemonError::Host(e)) if e.is_setup_error() => {
            eprintln!("xdprobe run: {e}");
            Ok(ExitCode::from(EXIT_BAD_CONFIG))
        }
        Err(e) => Err(e.into()),
    }
}
