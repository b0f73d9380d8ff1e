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
    path::{Path, PathBuf},
    process::{ExitCode, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::FormatArg;

mod report;
use crate::bridge::{Bridge, Impair, Leg, LegStats};
use crate::collector::{self, Collector};
use crate::probe::{self, Probe};
use crate::proc::{self, Child, Interrupt, Interrupted};
use crate::topo::{self, LEG_A, LEG_B, SERVER_IP, Topology};

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

/// Everything a run measured, for printing (`report`).
pub(crate) struct Results {
    pub outcome: probe::Outcome,
    pub collected: collector::Collected,
    pub bridge: Vec<LegStats>,
    pub client_ok: bool,
    /// The client process: the host agent reports every connect on this
    /// machine, and the demo shows its own.
    pub client_pid: u32,
    pub traffic_log: String,
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

    let mut server = start_server(o, &topo, &exe, &work.path, interrupt)?;

    say!(
        "traffic for {} s: HTTP-like sessions (server thinks {} ms), bulk TCP both ways, DNS (responder takes {} ms), a refused connection",
        o.seconds,
        o.think_ms,
        o.dns_delay_ms
    );
    let (client_status, client_pid) = run_client(o, &topo, &exe, &work.path, interrupt)?;
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
    let code = report::report(o, &results, started.elapsed())?;
    if work.keep {
        say!("files kept in {}", work.path.display());
    }
    Ok(code)
}

/// The demo's server in the server namespace, once it says it is ready.
fn start_server(
    o: &LiveOptions,
    topo: &Topology,
    exe: &Path,
    dir: &Path,
    interrupt: &Interrupt,
) -> anyhow::Result<Child> {
    let ready = dir.join("server.ready");
    let mut serve = topo.server.command(exe);
    serve
        .args(["serve", "--addr", SERVER_IP])
        .args(["--think-ms", &o.think_ms.to_string()])
        .args(["--dns-delay-ms", &o.dns_delay_ms.to_string()])
        .args(["--lifetime-s", &(o.seconds + 60).to_string()])
        .arg("--ready")
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(log_file(dir, "server.log")?);
    let mut server = Child::spawn("demo server", serve)?;
    interrupt.wait_for(Duration::from_secs(10), "the demo server", || {
        if let Some(st) = server.try_wait() {
            bail!("the demo server exited at start ({st})");
        }
        Ok(ready.exists())
    })?;
    Ok(server)
}

/// The demo's client in the client namespace, run to its end: its exit
/// status (`None` when it had to be stopped) and its PID.
fn run_client(
    o: &LiveOptions,
    topo: &Topology,
    exe: &Path,
    dir: &Path,
    interrupt: &Interrupt,
) -> anyhow::Result<(Option<std::process::ExitStatus>, u32)> {
    let mut client_cmd = topo.client.command(exe);
    client_cmd
        .args(["client", "--server", SERVER_IP])
        .args(["--seconds", &o.seconds.to_string()])
        .stdout(Stdio::null())
        .stderr(log_file(dir, "client.log")?);
    let mut client = Child::spawn("demo client", client_cmd)?;
    let pid = client.pid();
    let status = client.wait_timeout(Duration::from_secs(o.seconds + 30), interrupt)?;
    Ok((status, pid))
}

fn log_file(dir: &Path, name: &str) -> anyhow::Result<std::fs::File> {
    std::fs::File::create(dir.join(name)).with_context(|| format!("creating {name}"))
}
