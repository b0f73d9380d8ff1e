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
use xdprobe_host::clock::WallClock;
use xdprobe_host::hooks::{Hook, Layer};
use xdprobe_host::kernel::Kernel;
use xdprobe_host::stack::agent::{self, Output};
use xdprobe_host::stack::matcher::{FlowReport, Matcher};
use xdprobe_host::stack::options::{StackOptions, Windows};
use xdprobe_host::stack::output::{self, Comms};
use xdprobe_host::stack::probe::StackProbe;

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
        o.windows = Some(Windows { window, every });
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

/// "This kernel or config cannot do that": said, and exit 2.
fn setup_error(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("xdprobe host: {e}");
    ExitCode::from(EXIT_SETUP)
}

pub fn run(a: HostArgs) -> anyhow::Result<ExitCode> {
    let (opts, host) = match options(&a) {
        Ok(o) => o,
        Err(e) => return Ok(setup_error(format!("{e:#}"))),
    };
    // Before attaching: a SIGTERM while the layers attach ends the run
    // cleanly once they are, instead of killing it half set up.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let probe = match attach(&opts)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let attached: Vec<Layer> = probe.attached.iter().map(|l| l.layer).collect();
    let hold = a.hold.unwrap_or(host.hold);
    let matcher = matcher(&a, &host, &opts, attached.clone());
    let samples = match &a.samples {
        None => None,
        Some(p) => Some(std::io::BufWriter::new(
            xdprobe_exporter::safe_file::create_new_or_truncate(p)?,
        )),
    };
    let json: Option<Box<dyn Write>> = match a.json.as_deref() {
        None => None,
        Some("-") => Some(Box::new(std::io::stdout().lock())),
        Some(p) => Some(Box::new(std::io::BufWriter::new(
            xdprobe_exporter::safe_file::create_new_or_truncate(std::path::Path::new(p))?,
        ))),
    };
    let mut w = Writers {
        json,
        samples,
        clock: WallClock::now(),
        comms: Comms::default(),
        reports: Vec::new(),
        write_err: None,
    };
    let mut side = match super::agent::AgentSide::start(&a.agent, opts.sample_bytes, &attached) {
        Ok(s) => s,
        Err(e) => return Ok(setup_error(format!("{e:#}"))),
    };
    let mut tap = output::CommTap {
        comms: w.comms.clone(),
        inner: side.as_mut().map(|s| s as &mut dyn agent::Tap),
    };
    // Dropping the agent at the end of its run detaches the programs.
    let stats =
        agent::Agent::new(probe, matcher).run(a.duration, &stop, &mut |o| w.take(o), &mut tap);
    drop(tap);
    if let Some(s) = side {
        s.finish(a.stats);
    }
    let reports = w.finish()?;
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

/// Opens the kernel and attaches the probe, saying which hooks each layer
/// took and which layers this kernel has no hook for; `Err(code)`: a
/// setup error, already said.
fn attach(opts: &StackOptions) -> anyhow::Result<Result<StackProbe, ExitCode>> {
    let kernel = match Kernel::open() {
        Ok(k) => k,
        Err(e) => return Ok(Err(setup_error(e))),
    };
    warn_other_agents("stack_", "stack-latency agent");
    let probe = match StackProbe::start(&kernel, opts) {
        Ok(p) => p,
        Err(e) if e.is_setup_error() => return Ok(Err(setup_error(e))),
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
    Ok(Ok(probe))
}

/// The matcher's settings: `[host]`, then the flags.
fn matcher(
    a: &HostArgs,
    host: &HostSettings,
    opts: &StackOptions,
    attached: Vec<Layer>,
) -> Matcher {
    let mut mc = xdprobe_host::scope::matcher_config(host, opts, attached);
    if let Some(h) = a.hold {
        mc.hold_ns = h.as_nanos() as u64;
    }
    mc.raw_samples = a.samples.is_some();
    // A one-off run reports flows when they end unless asked otherwise.
    mc.report_ns = a.interval.map_or(0, |d| d.as_nanos() as u64);
    if let Some(d) = a.sample_interval {
        mc.min_interval_ns = d.as_nanos() as u64;
    }
    Matcher::new(mc)
}

/// Where the agent's output goes: JSON reports, raw samples, and the
/// reports kept for the table and the plot. The first write error is
/// kept and returned at the end.
struct Writers {
    json: Option<Box<dyn Write>>,
    samples: Option<std::io::BufWriter<std::fs::File>>,
    clock: WallClock,
    comms: Comms,
    reports: Vec<FlowReport>,
    write_err: Option<std::io::Error>,
}

impl Writers {
    fn take(&mut self, o: Output) {
        match o {
            Output::Report(r) => {
                // Flushed per report (a flow's end, not per packet): a
                // report is readable (`tail -f`) when it is made.
                if let Some(w) = self.json.as_mut()
                    && let Err(e) = output::write_json(w, &r, &self.clock, &mut self.comms)
                        .and_then(|()| w.flush())
                {
                    self.write_err.get_or_insert(e);
                }
                self.reports.push(*r);
            }
            Output::Samples(raw) => {
                let Some(w) = self.samples.as_mut() else {
                    return;
                };
                for s in &raw {
                    let r = serde_json::to_writer(&mut *w, s)
                        .map_err(std::io::Error::from)
                        .and_then(|()| w.write_all(b"\n"));
                    if let Err(e) = r {
                        self.write_err.get_or_insert(e);
                    }
                }
            }
        }
    }

    /// Flushes the files; the reports.
    fn finish(self) -> anyhow::Result<Vec<FlowReport>> {
        if let Some(mut w) = self.json {
            w.flush().context("writing the JSON reports")?;
        }
        if let Some(mut w) = self.samples {
            w.flush().context("writing the samples")?;
        }
        if let Some(e) = self.write_err {
            return Err(anyhow::Error::new(e).context("writing the JSON reports"));
        }
        Ok(self.reports)
    }
}

/// `--stats`: bytes held out by the hold, and the sampling windows as
/// measured (the share attached is longer than nominal by the attaching
/// and the drains), with T8 of the bytes that entered in a window's first
/// 5 ms against the rest (whether attaching disturbs what it times).
fn print_windows(stats: &agent::RunStats, hold: Duration, windows: Option<Windows>) {
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
