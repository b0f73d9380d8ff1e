//! `xdprobe host`: a one-off stack-layer latency run on this host — where
//! inside the kernel each TCP flow's time goes (T1…T8), for a duration or
//! until Ctrl-C. The daemon's `[host]` section runs the same always-on.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;

use super::parse_duration;
use xdprobe_config::HostSettings;
use xdprobe_host::hooks::{Hook, Layer};
use xdprobe_host::kernel::Kernel;
use xdprobe_host::stack::agent::{self, Output, WallClock};
use xdprobe_host::stack::matcher::Matcher;
use xdprobe_host::stack::output::{self, Comms};
use xdprobe_host::stack::probe::{StackOptions, StackProbe};

/// Exit status for "this kernel or config cannot do that" (as check-config).
const EXIT_SETUP: u8 = 2;

#[derive(clap::Args, Debug)]
pub struct HostArgs {
    /// Take the scope, sampling, layers and hooks from this config file's
    /// `[host]` section (the flags below add to or override it).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Stop after this long (e.g. 30s, 2m); default: until SIGINT/SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// One sample per this many stream bytes (the byte whose sequence
    /// number is a multiple of it, so every layer and host picks the same);
    /// 0: time every send and read. Default 72400.
    #[arg(long)]
    pub sample_bytes: Option<u32>,
    /// Only flows with this port at either end (repeatable, at most 16).
    #[arg(long = "port")]
    pub ports: Vec<u16>,
    /// Only this network namespace: a name under /run/netns, a path, or an
    /// inode number (repeatable, at most 8).
    #[arg(long = "netns")]
    pub netns: Vec<String>,
    /// Only sockets of this process (repeatable, at most 8).
    #[arg(long = "pid")]
    pub pids: Vec<u32>,
    /// Only sockets of processes in this cgroup (v2 path, e.g.
    /// /sys/fs/cgroup/system.slice/nginx.service; repeatable, at most 8).
    #[arg(long = "cgroup")]
    pub cgroups: Vec<PathBuf>,
    /// Count at most one timed byte per flow per this interval (e.g. 10ms),
    /// on top of the byte grid.
    #[arg(long, value_parser = parse_duration)]
    pub sample_interval: Option<Duration>,
    /// Time sampling: attach the layer programs for this long (e.g. 50ms)
    /// out of every `--sample-window-every`, detached in between, so the
    /// probe costs nothing per packet outside the windows; 0: always.
    #[arg(long, value_parser = parse_duration)]
    pub sample_window: Option<Duration>,
    /// Period of the sampling windows (default 1s).
    #[arg(long, value_parser = parse_duration)]
    pub sample_window_every: Option<Duration>,
    /// How long a timed byte waits for the layers it has not reached
    /// yet, and a closing window for the bytes it let in, before it is
    /// given up as slow: counted as `cut` in the reports and --stats
    /// (default 250ms).
    #[arg(long, value_parser = parse_duration)]
    pub hold: Option<Duration>,
    /// Use this hook for a layer instead of the default, e.g.
    /// `dev_tx=tracepoint:net:net_dev_xmit` (repeatable; a layer given
    /// several times takes them in order).
    #[arg(long = "hook", value_name = "LAYER=KIND:TARGET")]
    pub hooks: Vec<String>,
    /// Observe only these layers (comma-separated keys: sock_tx, tcp_tx,
    /// ip_tx, dev_tx, dev_rx, ip_rx, tcp_rx, sock_rx); segments across a
    /// left-out layer are merged.
    #[arg(long, value_delimiter = ',')]
    pub layers: Vec<String>,
    /// Report long-lived flows this often (e.g. 10s); default: when they end.
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// Write each flow report as a JSON line to FILE ("-": stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Write every timed byte (its flow, stream position and the time each
    /// layer passed it) as a JSON line to FILE, for plots of your own.
    #[arg(long, value_name = "FILE")]
    pub samples: Option<PathBuf>,
    /// Draw the flows' segments as stacked bars into FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Print the kernel and matcher counters at the end.
    #[arg(long)]
    pub stats: bool,
    /// Benchmark only (hidden): attach empty programs at the same hooks,
    /// the kernel's own cost of running any program there
    /// (benches/host_overhead.sh). Reports nothing.
    #[arg(long, hide = true)]
    pub empty_programs: bool,
    #[command(flatten)]
    pub agent: super::agent::AgentArgs,
}

/// `/run/netns/NAME`, a path, or an inode number → the namespace inode.
pub(crate) fn netns_inode(s: &str) -> anyhow::Result<u32> {
    xdprobe_host::scope::netns_inode(s).with_context(|| format!("--netns {s}"))
}

/// The probe's options: the config file's `[host]` (or its defaults),
/// then the flags.
fn options(a: &HostArgs) -> anyhow::Result<(StackOptions, HostSettings)> {
    let host = match &a.config {
        Some(p) => xdprobe_config::load(p)?.host,
        None => HostSettings::default(),
    };
    let mut o = xdprobe_host::scope::stack_options(&host)?;
    for h in &a.hooks {
        let (layer, hook) = h
            .split_once('=')
            .with_context(|| format!("--hook {h}: expected LAYER=KIND:TARGET"))?;
        let layer =
            Layer::from_key(layer).with_context(|| format!("--hook {h}: no layer {layer:?}"))?;
        let hook: Hook = hook.parse().with_context(|| format!("--hook {h}"))?;
        o.hooks.entry(layer).or_default().push(hook);
    }
    if !a.layers.is_empty() {
        o.layers = a
            .layers
            .iter()
            .map(|k| Layer::from_key(k).with_context(|| format!("--layers: no layer {k:?}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
    }
    if let Some(n) = a.sample_bytes {
        o.sample_bytes = n;
    }
    let window = a.sample_window.unwrap_or(host.sample_window);
    let every = a.sample_window_every.unwrap_or(host.sample_window_every);
    o.windows = None;
    if !window.is_zero() {
        anyhow::ensure!(
            window < every && every <= Duration::from_secs(60),
            "--sample-window {window:?} must be shorter than --sample-window-every {every:?} (at most 60s)"
        );
        // The manager matches two agents' streams without knowing either's
        // windows: it would read their edges as skipped bytes.
        anyhow::ensure!(
            a.agent.manager.is_none(),
            "--sample-window does not combine with --manager yet: the manager's matching does not know the agents' windows"
        );
        o.windows = Some(agent::Windows { window, every });
    }
    o.ports.extend(&a.ports);
    for n in &a.netns {
        o.netns.push(netns_inode(n)?);
    }
    o.tgids.extend(&a.pids);
    // A scope that can match nothing (a port 0, a process that is not
    // there) would run and report nothing: say so instead.
    xdprobe_host::scope::check_scope(&o.ports, &o.tgids)
        .map_err(|e| anyhow::anyhow!("{}", flag_words(&e.to_string())))?;
    o.empty_programs = a.empty_programs;
    for p in &a.cgroups {
        o.cgroups
            .push(xdprobe_host::scope::cgroup_id(p).with_context(|| "--cgroup".to_owned())?);
    }
    Ok((o, host))
}

/// A scope error as the command line names things (`--pid`, `--port`).
fn flag_words(e: &str) -> String {
    format!("--{e}")
}

/// Warns of other processes running the same kind of probe (named by
/// their programs' prefix): both work, but every hook then runs both
/// programs, twice the cost inside the paths being timed.
pub(crate) fn warn_other_agents(prefix: &str, what: &str) {
    for h in xdprobe_host::kernel::agents::others_holding(&[prefix]) {
        tracing::warn!(
            "another {what} is running: {h}, holding {}; both observe every hook, each costing the kernel its own program run per packet",
            h.programs.join(", ")
        );
    }
}

pub fn run(a: HostArgs) -> anyhow::Result<ExitCode> {
    let (opts, host) = match options(&a) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xdprobe host: {e:#}");
            return Ok(ExitCode::from(EXIT_SETUP));
        }
    };
    let kernel = match Kernel::open() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("xdprobe host: {e}");
            return Ok(ExitCode::from(EXIT_SETUP));
        }
    };
    warn_other_agents("stack_", "stack-latency agent");
    let mut probe = match StackProbe::start(&kernel, &opts) {
        Ok(p) => p,
        Err(e) if e.is_setup_error() => {
            eprintln!("xdprobe host: {e}");
            return Ok(ExitCode::from(EXIT_SETUP));
        }
        Err(e) => return Err(anyhow::Error::new(e).context("starting the host probes")),
    };
    for l in &probe.attached {
        let hooks: Vec<String> = l.hooks.iter().map(ToString::to_string).collect();
        tracing::info!(layer = l.layer.key(), hooks = %hooks.join(", "), "attached");
    }
    let attached: Vec<Layer> = probe.attached.iter().map(|l| l.layer).collect();
    for l in Layer::ALL.iter().filter(|l| !attached.contains(l)) {
        if opts.layers.is_empty() || opts.layers.contains(l) {
            tracing::warn!(
                layer = l.key(),
                "no hook on this kernel: the segments on either side are reported merged"
            );
        }
    }
    let hold = a.hold.unwrap_or(host.hold);
    let mut mc = xdprobe_host::scope::matcher_config(&host, &opts, attached.clone());
    if let Some(h) = a.hold {
        mc.hold_ns = h.as_nanos() as u64;
    }
    mc.raw_samples = a.samples.is_some();
    // A one-off run reports flows when they end unless asked otherwise.
    mc.report_ns = a.interval.map_or(0, |d| d.as_nanos() as u64);
    if let Some(d) = a.sample_interval {
        mc.min_interval_ns = d.as_nanos() as u64;
    }
    let mut matcher = Matcher::new(mc);
    let mut samples = match &a.samples {
        None => None,
        Some(p) => Some(std::io::BufWriter::new(
            xdprobe_exporter::safe_file::create_new_or_truncate(p)?,
        )),
    };

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let mut json: Option<Box<dyn Write>> = match a.json.as_deref() {
        None => None,
        Some("-") => Some(Box::new(std::io::stdout().lock())),
        Some(p) => Some(Box::new(std::io::BufWriter::new(
            xdprobe_exporter::safe_file::create_new_or_truncate(std::path::Path::new(p))?,
        ))),
    };
    let clock = WallClock::now();
    let mut comms = Comms::default();
    let tap_comms = comms.clone();
    let mut reports = Vec::new();
    let mut write_err = None;
    let mut on_output = |o: Output| match o {
        Output::Report(r) => {
            // Flushed per report (a flow's end, not per packet): a
            // report is readable (`tail -f`) when it is made.
            if let Some(w) = json.as_mut()
                && let Err(e) =
                    output::write_json(w, &r, &clock, &mut comms).and_then(|()| w.flush())
            {
                write_err.get_or_insert(e);
            }
            reports.push(*r);
        }
        Output::Samples(raw) => {
            if let Some(w) = samples.as_mut() {
                for s in &raw {
                    let r = serde_json::to_writer(&mut *w, s)
                        .map_err(std::io::Error::from)
                        .and_then(|()| w.write_all(b"\n"));
                    if let Err(e) = r {
                        write_err.get_or_insert(e);
                    }
                }
            }
        }
    };
    let mut side = match super::agent::AgentSide::start(&a.agent, opts.sample_bytes, &attached) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xdprobe host: {e:#}");
            return Ok(ExitCode::from(EXIT_SETUP));
        }
    };
    let mut tap = output::CommTap {
        comms: tap_comms,
        inner: side.as_mut().map(|s| s as &mut dyn agent::Tap),
    };
    let stats = agent::run_with(
        &mut probe,
        &mut matcher,
        a.duration,
        &stop,
        &mut on_output,
        &mut tap,
    );
    drop(tap);
    drop(probe); // detach before printing
    if let Some(s) = side {
        s.finish(a.stats);
    }
    if let Some(mut w) = json {
        w.flush().context("writing the JSON reports")?;
    }
    if let Some(mut w) = samples {
        w.flush().context("writing the samples")?;
    }
    if let Some(e) = write_err {
        return Err(anyhow::Error::new(e).context("writing the JSON reports"));
    }
    if let Some(p) = &a.plot {
        xdprobe_host::stack::plot::stacked_bars(p, &reports)
            .with_context(|| format!("drawing {}", p.display()))?;
    }
    if a.json.as_deref() != Some("-") {
        output::write_table(&mut std::io::stdout().lock(), &reports)?;
    }
    if a.stats {
        eprintln!(
            "kernel: {:?}\nkernel skipped runs: {} (the programs' recursion_misses)\nmatcher: {:?}\nreports: {}",
            stats.kernel, stats.kernel_skipped, stats.matcher, stats.reports
        );
        print_windows(&stats, hold, opts.windows);
    }
    Ok(ExitCode::SUCCESS)
}

/// `--stats`: bytes held out by the hold, and the sampling windows as
/// measured (the share attached is longer than nominal by the attaching
/// and the drains), with T8 of the bytes that entered in a window's first
/// 5 ms against the rest (whether attaching disturbs what it times).
fn print_windows(stats: &agent::RunStats, hold: Duration, windows: Option<agent::Windows>) {
    eprintln!(
        "held out (slower than the hold, {} ms): {} timed bytes",
        hold.as_millis(),
        stats.matcher.cut
    );
    let (Some(t), Some(w)) = (stats.window, windows) else {
        return;
    };
    let run = stats.elapsed.as_secs_f64().max(1e-9);
    let pct = |d: Duration| 100.0 * d.as_secs_f64() / run;
    eprintln!(
        "sampling windows: {} ({:.1} % of {:.1} s attached, measured: entry open {:.1} %, draining {:.1} %; nominal {:.1} %; {} drains ended at the hold with bytes on their way)",
        t.windows,
        pct(t.attached),
        run,
        pct(t.entry_open),
        pct(t.draining),
        100.0 * w.window.as_secs_f64() / w.every.as_secs_f64(),
        t.drain_cut
    );
    let (e, r) = (&stats.t8_early, &stats.t8_rest);
    eprintln!(
        "T8 of bytes entering in a window's first 5 ms: {} samples, p50 {:.1} µs, p90 {:.1} µs; later: {} samples, p50 {:.1} µs, p90 {:.1} µs",
        e.samples, e.p50_us, e.p90_us, r.samples, r.p50_us, r.p90_us
    );
}
