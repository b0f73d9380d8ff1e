//! The demo, live: the probe's main job end to end on one machine.
//!
//! 1. Builds four network namespaces (`topo`): a client and a server joined
//!    through an impairing user-space bridge (`bridge`: delay, seeded loss),
//!    and the middle link mirrored with `tc mirred` onto a veth whose far
//!    end, in the probe namespace, is the probe's capture port.
//! 2. Starts a real collector there (`collector`: nfdump's nfcapd) and the
//!    real probe (`probe`: `xdprobe run`, XDP + AF_XDP, exporting IPFIX).
//! 3. Runs the demo's own server and client (`serve`, `client`, `dns`)
//!    with `ip netns exec`: HTTP-like exchanges with a think time, bulk TCP
//!    both ways, DNS lookups, a refused connection.
//! 4. Stops the probe with SIGTERM (it flushes every flow), then nfcapd,
//!    and prints the probe's flows (`records`), what the collector got, and
//!    the counters of every piece.
//!
//! Every namespace, process and file is removed on every exit path: each
//! is held by a guard that cleans up on drop, SIGINT/SIGTERM turn into an
//! orderly return through those drops, and a start-up sweep removes what
//! a killed earlier run left.

use std::{
    fmt::Write as _,
    io::Write as _,
    path::{Path, PathBuf},
    process::{ExitCode, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::bridge::{Bridge, Impair, Leg, LegStats};
use crate::collector::{self, Collector};
use crate::probe::{self, Probe};
use crate::proc::{self, Child, Interrupt, Interrupted};
use crate::topo::{self, LEG_A, LEG_B, SERVER_IP, Topology};
use crate::{FormatArg, records};

/// Settings of a live run (see `xdprobe demo --help`).
pub struct LiveOptions {
    pub format: FormatArg,
    pub seconds: u64,
    pub loss_pct: f64,
    pub delay_ms: u64,
    pub think_ms: u64,
    pub dns_delay_ms: u64,
    pub seed: u64,
    pub keep_dir: Option<PathBuf>,
    /// The probe also watches the client's and server's kernel stacks.
    pub host: bool,
    pub plot: Option<PathBuf>,
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs the live demo; exit 130 when interrupted (after cleaning up).
pub fn run_live(o: &LiveOptions) -> anyhow::Result<ExitCode> {
    let interrupt = Interrupt::install()?;
    match live(o, &interrupt) {
        Err(e) if e.downcast_ref::<Interrupted>().is_some() => {
            eprintln!("xdprobe demo: interrupted; namespaces, processes and files removed");
            Ok(ExitCode::from(130))
        }
        r => r,
    }
}

macro_rules! say {
    ($($t:tt)*) => { eprintln!("xdprobe demo: {}", format!($($t)*)) };
}

/// The demo's files: a temporary directory removed on drop, or the user's
/// `--keep-dir`, kept.
struct WorkDir {
    path: PathBuf,
    keep: bool,
}

const WORK_PREFIX: &str = "xdpdemo-";

impl WorkDir {
    fn new(keep: Option<&Path>) -> anyhow::Result<WorkDir> {
        let (path, keep) = match keep {
            Some(d) => (d.to_owned(), true),
            None => (
                std::env::temp_dir().join(format!("{WORK_PREFIX}{}", std::process::id())),
                false,
            ),
        };
        if !keep {
            let _ = std::fs::remove_dir_all(&path);
        }
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir { path, keep })
    }

    /// Removes temporary directories of demos that died without cleaning
    /// up.
    fn sweep_stale() {
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(WORK_PREFIX))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !topo::process_alive(pid) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn check_tools() -> anyhow::Result<()> {
    let missing: Vec<&str> = ["ip", "tc", "ethtool"]
        .into_iter()
        .filter(|t| !proc::in_path(t))
        .collect();
    if !missing.is_empty() {
        bail!(
            "the live demo needs {} (iproute2, ethtool: deploy/bootstrap.sh installs them); \
             `xdprobe demo --offline` runs without them",
            missing.join(", ")
        );
    }
    Ok(())
}

/// Leg A (client side): the delay, both ways, and the server→client loss.
/// Leg B (server side): the client→server loss. Loss is after the tap in
/// both directions.
fn legs(o: &LiveOptions) -> [Leg; 2] {
    let delay = Duration::from_millis(o.delay_ms);
    let imp = |delay, loss_pct, salt: u64| Impair {
        delay,
        loss_pct,
        seed: o.seed.wrapping_mul(0x9E37_79B9).wrapping_add(salt),
        ..Impair::default()
    };
    [
        Leg {
            a: LEG_A.0.into(),
            b: LEG_A.1.into(),
            a_to_b: imp(delay, 0.0, 1),
            b_to_a: imp(delay, o.loss_pct, 2),
        },
        Leg {
            a: LEG_B.0.into(),
            b: LEG_B.1.into(),
            a_to_b: imp(Duration::ZERO, o.loss_pct, 3),
            b_to_a: imp(Duration::ZERO, 0.0, 4),
        },
    ]
}

/// Everything a run measured, for printing.
struct Results {
    outcome: probe::Outcome,
    collected: collector::Collected,
    bridge: Vec<LegStats>,
    client_ok: bool,
    /// The client process: the host agent reports every connect on this
    /// machine, and the demo shows its own.
    client_pid: u32,
    traffic_log: String,
}

fn live(o: &LiveOptions, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    check_tools()?;
    let swept = topo::sweep_stale();
    if !swept.is_empty() {
        say!(
            "removed namespaces an earlier, killed demo left: {}",
            swept.join(" ")
        );
    }
    WorkDir::sweep_stale();
    let exe = std::env::current_exe().context("locating the demo's own binary")?;
    let probe_exe = crate::probe_binary()?;
    let work = WorkDir::new(o.keep_dir.as_deref())?;

    say!(
        "building the network: client 192.0.2.1 -- bridge -- server 192.0.2.2, middle link mirrored to the probe"
    );
    let topo = Topology::build()?;
    say!(
        "namespaces {} {} {} {}",
        topo.client.name,
        topo.middle.name,
        topo.server.name,
        topo.probe.name
    );
    let mut bridge = Bridge::start(
        Some(&topo.middle.path()),
        &legs(o),
        Duration::from_secs(o.seconds + 120),
    )?;
    say!(
        "bridge: {} ms one-way delay client<->tap, {} % loss each way after the tap (seed {})",
        o.delay_ms,
        o.loss_pct,
        o.seed
    );
    let collector = Collector::start(&topo.probe, &work.path, interrupt)?;
    say!("collector: {}", collector.describe());
    let host = o
        .host
        .then(|| probe::HostWatch::new(&[&topo.client.name, &topo.server.name]));
    let probe = Probe::start(
        &topo.probe,
        &probe_exe,
        &work.path,
        &collector.url(),
        host.as_ref(),
        interrupt,
    )?;
    say!(
        "probe: `xdprobe run` capturing on {} (XDP native, AF_XDP copy mode, 1 queue), exporting IPFIX to {}",
        topo::PROBE_IFACE,
        collector.url()
    );

    let ready = work.path.join("server.ready");
    let mut serve = topo.server.command(&exe);
    serve
        .args(["serve", "--addr", SERVER_IP])
        .args(["--think-ms", &o.think_ms.to_string()])
        .args(["--dns-delay-ms", &o.dns_delay_ms.to_string()])
        .args(["--lifetime-s", &(o.seconds + 60).to_string()])
        .arg("--ready")
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(log_file(&work.path, "server.log")?);
    let mut server = Child::spawn("demo server", serve)?;
    interrupt.wait_for(Duration::from_secs(10), "the demo server", || {
        if let Some(st) = server.try_wait() {
            bail!("the demo server exited at start ({st})");
        }
        Ok(ready.exists())
    })?;

    say!(
        "traffic for {} s: HTTP-like sessions (server thinks {} ms), bulk TCP both ways, DNS (responder takes {} ms), a refused connection",
        o.seconds,
        o.think_ms,
        o.dns_delay_ms
    );
    let mut client_cmd = topo.client.command(&exe);
    client_cmd
        .args(["client", "--server", SERVER_IP])
        .args(["--seconds", &o.seconds.to_string()])
        .stdout(Stdio::null())
        .stderr(log_file(&work.path, "client.log")?);
    let mut client = Child::spawn("demo client", client_cmd)?;
    let client_pid = client.pid();
    let client_status = client.wait_timeout(Duration::from_secs(o.seconds + 30), interrupt)?;
    // The last FIN/ACKs cross the delayed leg, and the probe's TCP end
    // linger (1 s) reports those flows as ended.
    interrupt.sleep(Duration::from_millis(1500))?;

    say!("stopping the probe with SIGTERM: it detaches XDP and flushes every flow");
    let outcome = probe.stop();
    server.stop(libc::SIGTERM, Duration::from_secs(5));
    let bridge_stats = bridge.stop()?;
    let collected = collector.finish()?;
    let traffic_log = ["client.log", "server.log"]
        .iter()
        .map(|f| std::fs::read_to_string(work.path.join(f)).unwrap_or_default())
        .collect::<String>();
    let results = Results {
        outcome,
        collected,
        bridge: bridge_stats,
        client_ok: client_status.is_some_and(|s| s.success()),
        client_pid,
        traffic_log,
    };
    let code = report(o, &results, started.elapsed())?;
    if work.keep {
        say!("files kept in {}", work.path.display());
    }
    Ok(code)
}

fn log_file(dir: &Path, name: &str) -> anyhow::Result<std::fs::File> {
    std::fs::File::create(dir.join(name)).with_context(|| format!("creating {name}"))
}

/// Prints the results; the exit code says whether the run did its job.
fn report(o: &LiveOptions, r: &Results, took: Duration) -> anyhow::Result<ExitCode> {
    let json_mode = matches!(o.format, FormatArg::Json);
    let out = &r.outcome;
    // Connects of other processes on this machine (the agent watches the
    // whole kernel) are not the demo's: left out of its output.
    let foreign = |v: &serde_json::Value| {
        v["type"] == "connect" && v["pid"].as_u64() != Some(u64::from(r.client_pid))
    };
    let parsed: Vec<(&String, Option<serde_json::Value>)> = out
        .lines
        .iter()
        .map(|l| (l, serde_json::from_str(l).ok()))
        .filter(|(_, v)| !v.as_ref().is_some_and(foreign))
        .collect();
    let values: Vec<&serde_json::Value> = parsed.iter().filter_map(|(_, v)| v.as_ref()).collect();
    // Wire records have no `type`; the host agent's lines do.
    let (wire, host): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = values
        .iter()
        .copied()
        .partition(|v| v.get("type").is_none());
    let recs: Vec<_> = wire
        .iter()
        .copied()
        .filter_map(records::from_json)
        .collect();

    // Records: stdout. With --format json, nothing else goes there.
    let mut stdout = std::io::stdout().lock();
    let mut text = String::new();
    match o.format {
        FormatArg::Json => {
            for (l, _) in &parsed {
                writeln!(stdout, "{l}")?;
            }
        }
        FormatArg::Table => {
            let _ = writeln!(
                text,
                "\n== Flows the probe measured (XDP/AF_XDP on the mirror port, {} records) ==\n",
                recs.len()
            );
            stdout.write_all(text.as_bytes())?;
            text.clear();
            records::write_table(&recs, &mut stdout)?;
        }
        FormatArg::Csv => {
            let mut w = xdprobe_dataplane::output::RecordWriter::new(
                &mut stdout,
                xdprobe_dataplane::output::Format::Csv,
            );
            for rec in &recs {
                w.write(rec)?;
            }
        }
        FormatArg::None => {}
    }
    stdout.flush()?;

    let expect = records::Expect {
        delay_ms: o.delay_ms,
        think_ms: o.think_ms,
        dns_delay_ms: o.dns_delay_ms,
    };
    let _ = writeln!(text, "\nWhat to look at:");
    for h in records::highlights(&recs, &expect) {
        let _ = writeln!(text, "  {h}");
    }
    let heading = match r.collected.flows {
        Some(_) => "What the collector received (IPFIX; nfdump shows no NPM elements)",
        None => "Export",
    };
    let _ = writeln!(text, "\n== {heading} ==\n\n{}", r.collected.text);
    let _ = writeln!(text, "\n== Counters ==");
    if let Some(s) = &out.capture_stats {
        let _ = writeln!(text, "probe:     {s}");
    }
    if let Some(s) = &out.exporter_stats {
        let s = s.strip_prefix("stats=").unwrap_or(s);
        let _ = writeln!(text, "exporter:  {s}");
    }
    let _ = writeln!(text, "bridge:    {}", bridge_line(&r.bridge));
    for l in r.traffic_log.lines() {
        let _ = writeln!(text, "traffic:   {l}");
    }

    let mut failures = Vec::new();
    if !out.status.is_some_and(|s| s.success()) {
        failures.push(format!(
            "the probe did not exit cleanly ({:?}); its log ends:\n{}",
            out.status,
            probe::tail(&out.log, 20)
        ));
    }
    if recs.is_empty() || recs.len() != wire.len() {
        failures.push(format!(
            "{} of the probe's {} wire JSON lines read as records",
            recs.len(),
            wire.len()
        ));
    }
    if o.host {
        host_section(&mut text, &host, o.plot.as_deref(), &mut failures);
    }
    match r.collected.flows {
        Some(n) if n == wire.len() => {
            let _ = writeln!(
                text,
                "collector: {n} flow records received, as many as the probe emitted"
            );
        }
        Some(n) => failures.push(format!(
            "the collector received {n} flow records, the probe emitted {}",
            wire.len()
        )),
        None => {}
    }
    if !r.client_ok {
        let _ = writeln!(
            text,
            "note:      some client exchanges failed (see traffic: lines); heavy loss can do that"
        );
    }
    let _ = writeln!(text, "wall time: {:.1} s", took.as_secs_f64());
    if json_mode {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    for f in &failures {
        eprintln!("xdprobe demo: FAILED: {f}");
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What the probe's host agent saw inside the client's and server's
/// kernels: per TCP flow the stack segments' medians, the connections'
/// connect latency, and how many host reports joined their wire record.
fn host_section(
    text: &mut String,
    host: &[&serde_json::Value],
    plot: Option<&Path>,
    failures: &mut Vec<String>,
) {
    let of = |t: &'static str| host.iter().filter(move |v| v["type"] == t);
    let _ = writeln!(
        text,
        "\n== Inside the hosts (eBPF on this kernel's tracepoints; p50 µs per segment) ==\n"
    );
    let segs = ["T1", "T2", "T3", "T4", "T5", "T6", "T7"];
    let _ = write!(text, "{:<40} {:>7}", "FLOW (sender -> receiver)", "SAMPLES");
    for s in segs.iter().chain(&["T8"]) {
        let _ = write!(text, " {s:>8}");
    }
    let _ = writeln!(text);
    let mut bars = Vec::new();
    let mut reports: Vec<&&serde_json::Value> = of("host_stack")
        .filter(|v| v["complete"].as_u64().unwrap_or(0) > 0)
        .collect();
    reports.sort_by_key(|v| std::cmp::Reverse(v["complete"].as_u64().unwrap_or(0)));
    for v in reports.iter().take(12) {
        let flow = format!(
            "{}:{} -> {}:{}",
            v["src"].as_str().unwrap_or("?"),
            v["sport"],
            v["dst"].as_str().unwrap_or("?"),
            v["dport"]
        );
        let _ = write!(text, "{flow:<40} {:>7}", v["complete"]);
        let mut seg_means = Vec::new();
        if let Some(m) = v["segments"].as_object() {
            for s in segs {
                let cell = m
                    .iter()
                    .find(|(k, _)| *k == s || k.starts_with(&format!("{s}+")))
                    .and_then(|(_, x)| x["p50_us"].as_f64())
                    .map_or("-".to_owned(), |p| format!("{p:.1}"));
                let _ = write!(text, " {cell:>8}");
            }
            for (k, x) in m {
                if let Some(mean) = x["mean_us"].as_f64() {
                    seg_means.push((k.clone(), mean));
                }
            }
        }
        let t8 = v["t8"]["p50_us"]
            .as_f64()
            .map_or("-".to_owned(), |p| format!("{p:.1}"));
        let _ = writeln!(text, " {t8:>8}");
        seg_means.sort_by(|a, b| a.0.cmp(&b.0));
        bars.push(xdprobe_host::stack::plot::Bar {
            label: format!(
                "{}:{} → {}",
                v["src"].as_str().unwrap_or("?"),
                v["sport"],
                v["dport"]
            ),
            segments: seg_means,
        });
    }
    let _ = writeln!(
        text,
        "T1 socket→TCP  T2 TCP→IP  T3 IP→device (qdisc)  T4 the network (here: the bridge's delay)\n\
         T5 device→IP  T6 IP→TCP  T7 TCP→the reader  T8 end to end (both ends on this kernel)"
    );
    let mut connects: Vec<f64> = of("connect")
        .filter(|v| v["outcome"] == "established")
        .filter_map(|v| v["latency_us"].as_f64())
        .collect();
    connects.sort_by(f64::total_cmp);
    let failed = of("connect")
        .filter(|v| v["outcome"] != "established")
        .count();
    if let Some(mid) = connects.get(connects.len() / 2) {
        let _ = writeln!(
            text,
            "connect(): {} connections by the client process, median {:.2} ms (one RTT through the bridge), {failed} refused or failed",
            connects.len(),
            mid / 1000.0
        );
    }
    let joined = of("joined").count();
    let _ = writeln!(
        text,
        "joined:    {joined} host reports matched to the wire record of their connection (JSON type \"joined\")"
    );
    if reports.is_empty() {
        failures.push("the host agent reported no TCP flow (see the probe log)".into());
    }
    if let Some(p) = plot {
        match xdprobe_host::stack::plot::draw_bars(p, &bars) {
            Ok(()) => {
                let _ = writeln!(text, "picture:   {}", p.display());
            }
            Err(e) => failures.push(format!("{}: {e}", p.display())),
        }
    }
}

fn bridge_line(legs: &[LegStats]) -> String {
    let (Some(a), Some(b)) = (legs.first(), legs.get(1)) else {
        return "no counters".into();
    };
    let pct = |lost: u64, of: u64| {
        if of == 0 {
            0.0
        } else {
            lost as f64 * 100.0 / of as f64
        }
    };
    let (c2s_in, c2s_lost) = (a.a_to_b.received, b.a_to_b.lost);
    let (s2c_in, s2c_lost) = (b.b_to_a.received, a.b_to_a.lost);
    let other: u64 = legs
        .iter()
        .flat_map(|l| [l.a_to_b, l.b_to_a])
        .map(|d| d.overflow + d.oversize + d.tx_errors)
        .sum();
    format!(
        "client->server {c2s_in} frames, {c2s_lost} dropped ({:.2} %); \
         server->client {s2c_in} frames, {s2c_lost} dropped ({:.2} %); \
         {other} lost otherwise (queue full, oversize, send error)",
        pct(c2s_lost, c2s_in),
        pct(s2c_lost, s2c_in)
    )
}
