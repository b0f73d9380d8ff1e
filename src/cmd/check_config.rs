//! `xdprobe check-config FILE`: validate a config file without touching a NIC.
//!
//! Exit 0 with a summary when the file is good; exit 2 with one
//! `FILE:LINE:COL: key: message` line per problem (on stderr) when it is not,
//! so it can gate `ExecStartPre=` and editors can jump to the line.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use xdprobe::budget::{self, Estimate};
use xdprobe::daemon;
use xdprobe_config::{
    Config, Environment, Handoff, Location, Mode, XdpMode, XskBind, format_duration,
};

/// Exit status for "the config is wrong" (1 stays "xdprobe itself failed").
const EXIT_BAD_CONFIG: u8 = 2;

#[derive(clap::Args)]
pub struct CheckConfigArgs {
    /// The TOML config file (the package installs a commented one as
    /// /etc/xdprobe/probe.toml; deploy/probe.toml in the source tree).
    pub file: PathBuf,
    /// Skip checks against this machine (that pinned cores exist, that
    /// collector host names resolve), to check a file meant for another host.
    #[arg(long)]
    pub no_machine_check: bool,
}

pub fn run(args: CheckConfigArgs) -> anyhow::Result<ExitCode> {
    let env = if args.no_machine_check {
        Environment::unchecked()
    } else {
        Environment::detect()
    };
    // Who may change the file: `run` refuses it as root (StrictModes).
    if let Some(p) = xdprobe_config::strict::mode_problem(&args.file) {
        eprintln!(
            "{}: warning: the file {p}; run as root, xdprobe refuses it (chmod go-w / chown root, or {}=1)",
            args.file.display(),
            xdprobe_config::strict::OVERRIDE_ENV
        );
    }
    match xdprobe_config::load_with(&args.file, &env) {
        Ok(config) => {
            let estimate = budget::for_daemon(&config, &daemon::flow_config(&config), false);
            let problems = if args.no_machine_check {
                Vec::new()
            } else {
                let mut p = exporter_check(&args.file, &config);
                p.extend(memory_check(&args.file, &estimate));
                p
            };
            if problems.is_empty() {
                print!(
                    "{}",
                    summary(&args.file.display().to_string(), &config, &estimate)
                );
                return Ok(ExitCode::SUCCESS);
            }
            for p in &problems {
                eprintln!("{p}");
            }
            let n = problems.len();
            eprintln!(
                "{}: {n} error{}",
                args.file.display(),
                if n == 1 { "" } else { "s" }
            );
            Ok(ExitCode::from(EXIT_BAD_CONFIG))
        }
        Err(errors) => {
            // ConfigErrors prints FILE:LINE:COL: key: message, one per line.
            eprintln!("{errors}");
            let n = errors.errors.len();
            eprintln!(
                "{}: {n} error{}",
                args.file.display(),
                if n == 1 { "" } else { "s" }
            );
            Ok(ExitCode::from(EXIT_BAD_CONFIG))
        }
    }
}

/// The config crate only checks collector URL syntax; the exporter's own
/// parser is the authority (and resolves host names, as the daemon will at
/// start). Its errors carry no span, so find the URL's line in the text.
fn exporter_check(file: &Path, config: &Config) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut problems = Vec::new();
    for (i, url) in config.export.collectors.iter().enumerate() {
        if let Err(e) = xdprobe_exporter::CollectorSpec::parse(url) {
            let pos = text
                .find(&format!("\"{url}\""))
                .or_else(|| text.find(url.as_str()))
                .unwrap_or(0);
            let at = Location::of_offset(&text, pos);
            problems.push(format!(
                "{}:{at}: export.collectors[{i}]: {e}",
                file.display()
            ));
        }
    }
    problems
}

/// The memory the daemon would allocate against what this machine has;
/// reported at `[flow] capacity` (the usual culprit), or line 1.
fn memory_check(file: &Path, estimate: &Estimate) -> Option<String> {
    let e = estimate.check(budget::available()).err()?;
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let at = text
        .find("capacity")
        .map_or(Location { line: 1, column: 1 }, |p| {
            Location::of_offset(&text, p)
        });
    Some(format!("{}:{at}: flow.capacity: {e}", file.display()))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// What the daemon would do with this file, in a few lines.
fn summary(file: &str, c: &Config, estimate: &Estimate) -> String {
    let mut s = format!("{file}: OK\n");
    let mode = match c.probe.mode {
        Mode::Appliance => "appliance (XDP drops what it does not capture)",
        Mode::Host => "host (XDP passes what it does not capture)",
    };
    let _ = writeln!(s, "  mode: {mode}");
    for i in &c.interfaces {
        let xdp = match i.xdp_mode {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
            XdpMode::Auto => "auto",
        };
        let bind = match i.xsk_bind {
            XskBind::Auto => "auto",
            XskBind::Copy => "copy",
            XskBind::ZeroCopy => "zero-copy",
        };
        let handoff = match i.handoff {
            Handoff::Auto => "auto",
            Handoff::On => "on",
            Handoff::Off => "off",
        };
        let queues: Vec<String> = i
            .queues
            .iter()
            .map(|q| format!("{}->core {}", q.queue, q.core))
            .collect();
        let _ = writeln!(
            s,
            "  interface {}: XDP {xdp}, AF_XDP {bind}, hand-off {handoff}, queues {}; UMEM {} x {} B per queue = {}",
            i.name,
            queues.join(", "),
            i.umem_frames,
            i.frame_size,
            mib(i.umem_bytes()),
        );
    }
    let f = &c.flow;
    let _ = writeln!(
        s,
        "  flows: {} per worker x {} workers; idle {}, active {}, TCP linger {}; NPM {}",
        f.capacity,
        c.workers().count(),
        format_duration(f.idle_timeout),
        format_duration(f.active_timeout),
        format_duration(f.tcp_end_linger),
        if f.npm { "on" } else { "off" },
    );
    let filter = if c.filter.is_empty() {
        "none (every packet)".to_owned()
    } else {
        let prefixes: Vec<String> = c.filter.prefixes.iter().map(ToString::to_string).collect();
        format!(
            "vlans {:?}, prefixes [{}], ports {:?}",
            c.filter.vlans,
            prefixes.join(", "),
            c.filter.ports
        )
    };
    let _ = writeln!(s, "  filter: {filter}");
    let collectors = if c.export.collectors.is_empty() {
        "none (records are counted, not exported)".to_owned()
    } else {
        c.export.collectors.join(", ")
    };
    let _ = writeln!(s, "  collectors: {collectors}");
    if c.metrics.enabled {
        let _ = writeln!(s, "  metrics: http://{}/metrics", c.metrics.listen);
    } else {
        let _ = writeln!(s, "  metrics: off");
    }
    let _ = writeln!(
        s,
        "  locked memory: {} of UMEM, plus rings and BPF maps",
        mib(c.umem_bytes())
    );
    let _ = writeln!(s, "  memory: {estimate}");
    s
}
