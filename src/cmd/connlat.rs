//! `xdprobe connlat`: the latency of every outgoing TCP connection on this
//! host, with the process that made it — the classic `tcpconnlat`, on a
//! tracepoint only (no kprobes needed). Failed attempts are listed too.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::parse_duration;
use xdprobe_host::clock::{WallClock, monotonic_ns};
use xdprobe_host::connlat::{ConnOptions, ConnProbe, Connection, Outcome};
use xdprobe_host::kernel::Kernel;

const EXIT_SETUP: u8 = 2;

#[derive(clap::Args, Debug)]
pub struct ConnlatArgs {
    /// Only connections made by this process (repeatable, at most 8).
    #[arg(long = "pid")]
    pub pids: Vec<u32>,
    /// Only successful connections at least this slow, µs (failures are
    /// always listed). Applied in the kernel.
    #[arg(long, default_value_t = 0)]
    pub min_us: u64,
    /// One JSON object per line instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Stop after this long (e.g. 30s); default: until SIGINT/SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Prefix each line with the seconds since the start (with --json:
    /// a `time_s` field).
    #[arg(long)]
    pub timestamp: bool,
}

fn outcome(c: &Connection) -> String {
    match c.outcome {
        Outcome::Established => "established".into(),
        Outcome::Refused => "refused".into(),
        Outcome::TimedOut => "timed out".into(),
        Outcome::Failed => format!("failed (errno {})", c.err),
    }
}

pub fn run(a: ConnlatArgs) -> anyhow::Result<ExitCode> {
    if let Err(e) = a
        .pids
        .iter()
        .try_for_each(|&p| xdprobe_host::scope::check_pid(p))
    {
        eprintln!("xdprobe connlat: --{e}");
        return Ok(ExitCode::from(EXIT_SETUP));
    }
    let kernel = match Kernel::open() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("xdprobe connlat: {e}");
            return Ok(ExitCode::from(EXIT_SETUP));
        }
    };
    let opts = ConnOptions {
        pids: a.pids.clone(),
        min_latency: Duration::from_micros(a.min_us),
    };
    super::host::warn_other_agents("conn_", "connect-latency probe");
    // Before attaching: a SIGTERM during setup ends the run cleanly.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let mut probe = match ConnProbe::start(&kernel, &opts) {
        Ok(p) => p,
        Err(e) if e.is_setup_error() => {
            eprintln!("xdprobe connlat: {e}");
            return Ok(ExitCode::from(EXIT_SETUP));
        }
        Err(e) => return Err(anyhow::Error::new(e).context("starting the connect-latency probe")),
    };
    tracing::info!("attached to {}", probe.hook());
    let clock = WallClock::now();
    let t0 = monotonic_ns();
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    if !a.json {
        if a.timestamp {
            write!(out, "{:<9} ", "TIME(s)")?;
        }
        writeln!(
            out,
            "{:<7} {:<16} {:<2} {:<25} {:<25} {:>5} {:>9} RESULT",
            "PID", "COMM", "IP", "SADDR", "DADDR", "DPORT", "LAT(ms)"
        )?;
    }
    let mut last_expiry = Instant::now();
    let mut err = None;
    loop {
        let done = a.duration.is_some_and(|d| started.elapsed() >= d);
        if stop.load(Ordering::Relaxed) || done {
            break;
        }
        let mut print = |c: Connection| {
            if let Err(e) = write_connection(&mut out, &a, &clock, t0, &c) {
                err.get_or_insert(e);
            }
        };
        if probe.drain(&mut print) > 0 {
            out.flush()?;
        }
        if let Some(e) = err.take() {
            // A closed pipe (`| head`) ends the run quietly.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::SUCCESS);
            }
            return Err(e.into());
        }
        if last_expiry.elapsed() >= Duration::from_secs(10) {
            probe.expire(monotonic_ns());
            last_expiry = Instant::now();
        }
        xdprobe_host::poll::wait_readable(probe.fd(), Duration::from_millis(50));
    }
    // What arrived after the last poll, written as every other line.
    probe.drain(|c| {
        let _ = write_connection(&mut out, &a, &clock, t0, &c);
    });
    let c = probe.counters();
    tracing::info!(
        started = c.started,
        reported = c.events,
        below_min = c.below_min,
        ringbuf_full = c.ringbuf_full,
        no_start = c.no_start,
        no_identity = c.no_identity,
        kernel_skipped = probe.kernel_skipped().unwrap_or(0),
        pending = probe.pending(),
        "connlat done"
    );
    Ok(ExitCode::SUCCESS)
}

/// One connection as a line of the table, or as a JSON object (`--json`).
fn write_connection(
    out: &mut impl Write,
    a: &ConnlatArgs,
    clock: &WallClock,
    t0: u64,
    c: &Connection,
) -> std::io::Result<()> {
    let since_start = c.start_ns.saturating_sub(t0) as f64 / 1e9;
    if a.json {
        let mut v = serde_json::to_value(c).unwrap_or_default();
        v["start_us"] = clock.unix_us(c.start_ns).into();
        if a.timestamp {
            // The table's TIME(s) column: seconds since the start, ms kept.
            v["time_s"] = ((since_start * 1e3).round() / 1e3).into();
        }
        serde_json::to_writer(&mut *out, &v).map_err(std::io::Error::from)?;
        return out.write_all(b"\n");
    }
    let ts = if a.timestamp {
        format!("{since_start:<9.3} ")
    } else {
        String::new()
    };
    writeln!(
        out,
        "{ts}{:<7} {:<16} {:<2} {:<25} {:<25} {:>5} {:>9.3} {}",
        c.pid,
        c.comm,
        if c.src.is_ipv4() { 4 } else { 6 },
        c.src,
        c.dst,
        c.dport,
        c.latency.as_secs_f64() * 1e3,
        outcome(c)
    )
}
