//! `xdprobe trace`: where a packet spends its time inside the kernel —
//! `list` what can be traced, `run` the tracer on a flow, `echo` marked
//! probes through it, and `report` the trails (`docs/host-trace.md`).

use std::io::Write;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use xdprobe_common::trace::Trail;
use xdprobe_host::kernel::{Kernel, kallsyms};
use xdprobe_host::stack::agent::WallClock;
use xdprobe_host::trace::list::{self, EntryKind};
use xdprobe_host::trace::points::{self, DEFAULT_POINTS};
use xdprobe_host::trace::probe::{self, RunStats, TraceOptions, TraceProbe};
use xdprobe_host::trace::record::TrailRecord;
use xdprobe_host::trace::report;

use super::host::netns_inode;
use super::parse_duration;

mod echo;

/// Exit status for "this kernel or command line cannot do that".
const EXIT_SETUP: u8 = 2;

#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    cmd: TraceCmd,
}

#[derive(clap::Subcommand, Debug)]
enum TraceCmd {
    /// What this kernel lets you instrument: tracepoints (tracefs) and
    /// function symbols (kallsyms), whether each carries an skb and
    /// whether `trace run` can attach to it.
    List(ListArgs),
    /// Follow the packets of a flow through the chosen points; one trail
    /// per packet (JSON lines with --out).
    Run(RunArgs),
    /// Active mode: return marked UDP probes (--listen), or send them and
    /// trace both directions (--send).
    Echo(EchoArgs),
    /// Per-step latency, queueing delay and the most common path of a
    /// trail file; --plot draws the waterfall.
    Report(ReportArgs),
}

#[derive(clap::Args, Debug)]
struct ListArgs {
    /// Name patterns (`net:*`, `ip_*rcv*`); a pattern with a colon
    /// matches tracepoints, one without matches functions and tracepoint
    /// names. Default: everything.
    patterns: Vec<String>,
    /// Only entries that carry an skb.
    #[arg(long)]
    skb: bool,
}

/// What to trace (shared by `run` and `echo`).
#[derive(clap::Args, Debug, Clone)]
pub(super) struct TracerArgs {
    /// Points to trace: comma-separated tracepoint names or patterns
    /// (`net:*,skb:*,qdisc:*`; repeatable). Default: net:*, qdisc:*, skb:*.
    #[arg(long)]
    pub(super) points: Vec<String>,
    /// More points, one per line (`#` comments).
    #[arg(long, value_name = "FILE")]
    pub(super) from: Option<PathBuf>,
    /// Follow only packets matching this pcap-filter expression (tcpdump
    /// syntax, over the packet from its IP header), e.g. 'udp dst port 7'.
    #[arg(long, default_value = "")]
    pub(super) flow: String,
    /// Start trails only in this network namespace: a name under
    /// /run/netns, a path, or an inode number (repeatable, at most 8).
    #[arg(long = "netns")]
    pub(super) netns: Vec<String>,
    /// Start trails only for packets with this skb mark: VALUE or
    /// VALUE/MASK (decimal or 0x hex).
    #[arg(long)]
    pub(super) mark: Option<String>,
    /// Packets followed at once (kernel map size).
    #[arg(long, default_value_t = 4096)]
    pub(super) max_trails: u32,
    /// A trail without a step for this long is ended (its free was not
    /// seen) and written.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub(super) idle: Duration,
    /// Print the tracer's counters at the end (stderr).
    #[arg(long)]
    pub(super) stats: bool,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    tracer: TracerArgs,
    /// Stop after this long (e.g. 10s); default: until SIGINT/SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Write the trails as JSON lines to FILE ("-": stdout) instead of
    /// printing one readable line each.
    #[arg(long, value_name = "FILE")]
    out: Option<String>,
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["listen", "send"])))]
pub(super) struct EchoArgs {
    /// Return marked probes arriving on this UDP port.
    #[arg(long, value_name = "PORT")]
    pub(super) listen: Option<u16>,
    /// Listening address (with --listen).
    #[arg(long, default_value = "0.0.0.0")]
    pub(super) bind: String,
    /// Send probes to HOST:PORT and trace both directions.
    #[arg(long, value_name = "HOST:PORT")]
    pub(super) send: Option<String>,
    /// Probes per second (with --send).
    #[arg(long, default_value_t = 100.0)]
    pub(super) rate: f64,
    /// Probes to send (with --send).
    #[arg(long, default_value_t = 100)]
    pub(super) count: u32,
    /// Probe payload bytes.
    #[arg(long, default_value_t = 64)]
    pub(super) size: usize,
    /// How long the sender waits for the last replies.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub(super) wait: Duration,
    /// With --listen: stop after this long.
    #[arg(long, value_parser = parse_duration)]
    pub(super) duration: Option<Duration>,
    /// Write the trails (JSON lines) here; required with --send. With
    /// --listen, also traces this host's side.
    #[arg(long, value_name = "FILE")]
    pub(super) out: Option<PathBuf>,
    #[command(flatten)]
    pub(super) tracer: TracerArgs,
}

#[derive(clap::Args, Debug)]
struct ReportArgs {
    /// A trail file from `trace run --out` or `trace echo --out`.
    file: PathBuf,
    /// Draw the per-step waterfall into FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print the report as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

pub fn run(a: TraceArgs) -> anyhow::Result<ExitCode> {
    match a.cmd {
        TraceCmd::List(l) => list_cmd(l),
        TraceCmd::Run(r) => run_cmd(r),
        TraceCmd::Echo(e) => echo::run(e),
        TraceCmd::Report(r) => report_cmd(r),
    }
}

pub(super) fn setup_error(what: impl std::fmt::Display) -> anyhow::Result<ExitCode> {
    eprintln!("xdprobe trace: {what}");
    Ok(ExitCode::from(EXIT_SETUP))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s += &format!(": {x}");
        src = x.source();
    }
    s
}

fn list_cmd(a: ListArgs) -> anyhow::Result<ExitCode> {
    let kernel = match Kernel::open() {
        Ok(k) => k,
        Err(e) => return setup_error(e),
    };
    let symbols = kallsyms::read().context("reading /proc/kallsyms")?;
    let l = list::list(&kernel, &symbols, &a.patterns)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for e in l.entries.iter().filter(|e| !a.skb || e.skb.is_some()) {
        writeln!(
            out,
            "{:<10} {:<48} {:<9} {}",
            e.kind.as_str(),
            e.name,
            e.skb
                .as_deref()
                .map_or("-".to_owned(), |s| format!("skb:{s}")),
            if e.attachable {
                "attachable"
            } else if e.kind == EntryKind::Function {
                "not attachable"
            } else {
                "no skb"
            }
        )?;
    }
    out.flush()?;
    eprintln!("{}", l.summary());
    Ok(ExitCode::SUCCESS)
}

/// `VALUE` or `VALUE/MASK`, decimal or 0x hex.
fn parse_mark(s: &str) -> anyhow::Result<(u32, u32)> {
    let num = |t: &str| -> anyhow::Result<u32> {
        let t = t.trim();
        match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(h) => u32::from_str_radix(h, 16),
            None => t.parse(),
        }
        .with_context(|| format!("--mark {s}: {t:?} is not a number"))
    };
    match s.split_once('/') {
        Some((v, m)) => Ok((num(v)?, num(m)?)),
        None => Ok((num(s)?, u32::MAX)),
    }
}

/// Points, filters and the kernel, checked; `Err(code)` on a setup error
/// already reported.
pub(super) fn prepare(
    t: &TracerArgs,
    default_flow: &str,
) -> Result<(Kernel, TraceOptions), ExitCode> {
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("xdprobe trace: {e}");
        ExitCode::from(EXIT_SETUP)
    };
    let kernel = Kernel::open().map_err(|e| fail(&e))?;
    let specs = if t.points.is_empty() && t.from.is_none() {
        vec![DEFAULT_POINTS.to_owned()]
    } else {
        t.points.clone()
    };
    let pts = points::choose(&kernel, &specs, t.from.as_deref()).map_err(|e| fail(&e))?;
    let netns = t
        .netns
        .iter()
        .map(|n| netns_inode(n))
        .collect::<anyhow::Result<Vec<_>>>()
        .map_err(|e| fail(&format!("{e:#}")))?;
    let mark = t
        .mark
        .as_deref()
        .map(parse_mark)
        .transpose()
        .map_err(|e| fail(&format!("{e:#}")))?;
    let flow = if t.flow.trim().is_empty() {
        default_flow.to_owned()
    } else {
        t.flow.clone()
    };
    Ok((
        kernel,
        TraceOptions {
            points: pts,
            flow,
            netns,
            mark,
            max_trails: t.max_trails,
            ring_bytes: 0,
        },
    ))
}

pub(super) fn start(
    kernel: &Kernel,
    opts: &TraceOptions,
) -> Result<TraceProbe, anyhow::Result<ExitCode>> {
    match TraceProbe::start(kernel, opts) {
        Ok(p) => {
            tracing::info!(
                points = p.points.len(),
                flow = %opts.flow,
                "tracing"
            );
            Ok(p)
        }
        Err(e) if e.is_setup_error() => Err(setup_error(error_chain(&e))),
        Err(e) => Err(Err(
            anyhow::anyhow!(error_chain(&e)).context("starting the path tracer")
        )),
    }
}

pub(super) fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    Ok(stop)
}

/// Where trails go: JSON lines, or one readable line each.
pub(super) enum Sink {
    Json(Box<dyn Write>),
    Text(Box<dyn Write>),
}

impl Sink {
    fn write(&mut self, r: &TrailRecord) -> std::io::Result<()> {
        match self {
            Sink::Json(w) => {
                serde_json::to_writer(&mut *w, r)?;
                writeln!(w)
            }
            Sink::Text(w) => writeln!(w, "{}", text_line(r)),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Json(w) | Sink::Text(w) => w.flush(),
        }
    }
}

fn text_line(r: &TrailRecord) -> String {
    let flow = r.flow.as_ref().map_or("?".to_owned(), |f| {
        let proto = match f.proto {
            6 => "tcp".to_owned(),
            17 => "udp".to_owned(),
            1 => "icmp".to_owned(),
            58 => "icmp6".to_owned(),
            p => format!("proto{p}"),
        };
        format!("{proto} {}:{} → {}:{}", f.src, f.sport, f.dst, f.dport)
    });
    let probe = r
        .probe
        .map_or(String::new(), |p| format!(" {} #{}", p.dir.as_str(), p.seq));
    let mut prev = 0;
    let steps: Vec<String> = r
        .steps
        .iter()
        .map(|s| {
            let d = s.t_ns.saturating_sub(prev);
            prev = s.t_ns;
            let name = s.point.split_once(':').map_or(s.point.as_str(), |(_, n)| n);
            format!("+{:.1}µs {name}", d as f64 / 1000.0)
        })
        .collect();
    let end = match (&r.drop_reason_name, r.drop_reason) {
        (Some(name), _) => format!("dropped: {name}"),
        (None, Some(reason)) => format!("dropped (reason {reason})"),
        (None, None) => r.end.clone(),
    };
    format!("{flow}{probe} len {} [{end}]: {}", r.len, steps.join(" "))
}

pub(super) fn print_stats(st: &RunStats, written: u64) {
    let k = &st.kernel;
    eprintln!(
        "trails: {written} written ({} ended idle); kernel: {} hits, {} started, {} finished, {} steps, {} steps lost, {} filtered, {} head reused, {} rekeyed, {} table full, {} ring buffer full, {} read failures, {} skb map full; {} point hits the kernel skipped (recursion_misses: another BPF program or a map call was running on that CPU)",
        st.idle_collected,
        k.hits,
        k.started,
        k.finished,
        k.steps,
        k.steps_lost,
        k.filtered,
        k.reused,
        k.rekeyed,
        k.table_full,
        k.ringbuf_full,
        k.read_failed,
        k.skbs_full,
        st.kernel_skipped
    );
}

/// Runs the tracer until `done()`, converting trails and writing them.
pub(super) fn trace_into(
    kernel: &Kernel,
    probe: &mut TraceProbe,
    idle: Duration,
    sink: &mut Sink,
    done: &mut dyn FnMut() -> bool,
) -> anyhow::Result<(RunStats, u64)> {
    let names: Vec<String> = probe.points.iter().map(|p| p.name.clone()).collect();
    let reasons = kernel
        .btf
        .enum_values("skb_drop_reason")
        .unwrap_or_default();
    let clock = WallClock::now();
    let mut written = 0u64;
    let mut err = None;
    let st = probe::run(probe, idle, done, &mut |t: &Trail| {
        let mut r = TrailRecord::from_trail(t, &names, |ns| clock.unix_us(ns));
        r.drop_reason_name = r.drop_reason.and_then(|n| {
            reasons
                .get(&n)
                .map(|s| s.trim_start_matches("SKB_DROP_REASON_").to_owned())
        });
        match sink.write(&r) {
            Ok(()) => written += 1,
            Err(e) => {
                err.get_or_insert(e);
            }
        }
    });
    sink.flush().context("writing the trails")?;
    if let Some(e) = err {
        return Err(anyhow::Error::new(e).context("writing the trails"));
    }
    Ok((st, written))
}

fn run_cmd(a: RunArgs) -> anyhow::Result<ExitCode> {
    let (kernel, opts) = match prepare(&a.tracer, "") {
        Ok(x) => x,
        Err(code) => return Ok(code),
    };
    let mut sink = match a.out.as_deref() {
        None => Sink::Text(Box::new(std::io::stdout())),
        Some("-") => Sink::Json(Box::new(std::io::stdout())),
        Some(p) => Sink::Json(Box::new(std::io::BufWriter::new(
            xdprobe_exporter::safe_file::create_new_or_truncate(std::path::Path::new(p))?,
        ))),
    };
    let mut probe = match start(&kernel, &opts) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let stop = stop_flag()?;
    let started = Instant::now();
    let (st, written) = trace_into(&kernel, &mut probe, a.tracer.idle, &mut sink, &mut || {
        stop.load(Ordering::Relaxed) || a.duration.is_some_and(|d| started.elapsed() >= d)
    })?;
    if a.tracer.stats {
        print_stats(&st, written);
    }
    Ok(ExitCode::SUCCESS)
}

fn report_cmd(a: ReportArgs) -> anyhow::Result<ExitCode> {
    // A file that is not there or not a trail file is bad input (exit 2),
    // as everywhere else.
    let f = match std::fs::File::open(&a.file) {
        Ok(f) => f,
        Err(e) => return setup_error(format!("{}: {e}", a.file.display())),
    };
    let trails = match report::read_trails(std::io::BufReader::new(f)) {
        Ok(t) => t,
        Err(e) => return setup_error(format!("{}: {}", a.file.display(), error_chain(&e))),
    };
    let r = report::report(&trails);
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        report::write_text(&mut out, &r)?;
    }
    if let Some(p) = &a.plot {
        xdprobe_host::trace::plot::waterfall(p, &r)
            .with_context(|| format!("drawing {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_parse() {
        assert_eq!(parse_mark("7").unwrap(), (7, u32::MAX));
        assert_eq!(parse_mark("0x10/0xf0").unwrap(), (16, 0xf0));
        assert!(parse_mark("x").is_err());
        assert!(parse_mark("1/").is_err());
    }
}
