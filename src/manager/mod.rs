//! `xdprobe manager`'s I/O around the sans-IO fleet core
//! (`xdprobe_host::fleet::manager`), in the order data travels: `conns`
//! (agents' streams → frames) and `clock` (timing probes → offsets) feed
//! the core, whose reports go to `out` (JSON, IPFIX, SVG, metrics, join).
//! One mio loop owns the core; only the clock rounds run on a thread of
//! their own.

mod clock;
mod conns;
pub mod out;
mod session;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use mio::{Events, Poll};
use xdprobe_common::host::StackEvent;
use xdprobe_config::ManagerConfig;
use xdprobe_host::fleet::manager::{Fleet, FleetConfig};
use xdprobe_host::fleet::metrics::ManagerMetrics;
use xdprobe_host::stack::agent::monotonic_ns;
use xdprobe_host::stack::matcher::MatcherConfig;
use xdprobe_host::sync::prober::BurstConfig;
use xdprobe_host::sync::responder::Responder;

use conns::{Conns, Incoming, Limits};
use out::{OutputOptions, Outputs};

/// How often the core resolves what it holds and the outputs tick.
const ADVANCE_EVERY: Duration = Duration::from_millis(50);

/// What the command line adds to the config file.
pub struct RunOptions {
    pub duration: Option<Duration>,
    pub stats: bool,
}

/// Everything the manager counted, for the end-of-run summary.
#[derive(Debug, Default)]
pub struct Summary {
    pub reports: u64,
    pub joined: u64,
    pub rounds: u64,
    pub rounds_failed: u64,
}

pub fn run(
    cfg: &ManagerConfig,
    opts: &RunOptions,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Summary> {
    let m = &cfg.manager;
    // veth ends towards agents: without an XDP program of their own, the
    // responders' replies would never be delivered.
    let mut pass = Vec::new();
    for iface in &m.veth_xdp {
        pass.push(
            Responder::pass_through(iface).with_context(|| format!("manager.veth_xdp: {iface}"))?,
        );
    }
    let shared = Arc::new(Mutex::new(ManagerMetrics::default()));
    let metrics_listener = if cfg.metrics.enabled {
        Some(
            xdprobe::prom::MetricsServer::bind(cfg.metrics.listen)
                .with_context(|| format!("metrics.listen {}", cfg.metrics.listen))?,
        )
    } else {
        None
    };
    let mut outputs = open_outputs(cfg, shared.clone())?;
    let mut fleet = Fleet::new(fleet_config(m));

    let tls = tls_config(&m.security)?;
    let mut poll = Poll::new().context("creating the poller")?;
    let mut conns = Conns::bind(m.listen, poll.registry(), tls, limits(m))
        .with_context(|| format!("manager.listen {}", m.listen))?;
    fewer_heap_arenas();
    let burst = BurstConfig {
        probes: m.sync_probes as usize,
        timeout: m.sync_timeout,
        ..BurstConfig::default()
    };
    let session = (monotonic_ns() as u32) ^ std::process::id();
    // Everything that needs root is done (the socket is bound, the veth
    // programs attached): from here on only CAP_NET_ADMIN (to detach them
    // at exit), and `user` if set. Before the clock thread starts, so it
    // inherits the reduced set.
    xdprobe::daemon::privs::drop_to(m.user.as_deref(), &MANAGER_KEEP)
        .context("dropping privileges")?;
    let _metrics = start_metrics(metrics_listener, &shared)?;
    let clock = clock::ClockThread::spawn(m.sync_interval, burst, session)
        .context("starting the clock-sync thread")?;
    tracing::info!(listen = %conns.local_addr()?, sync_interval = ?m.sync_interval, "manager listening");

    let started = Instant::now();
    let mut events = Events::with_capacity(256);
    let mut incoming = Vec::new();
    let mut last_advance = Instant::now();
    let mut summary = Summary::default();
    loop {
        if stop.load(Ordering::Relaxed) || opts.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(20)))
            && e.kind() != std::io::ErrorKind::Interrupted
        {
            return Err(e).context("manager poll");
        }
        for ev in events.iter() {
            conns.on_event(poll.registry(), ev, fleet.unsynced_bytes(), &mut incoming);
        }
        let targets_changed = take(&mut fleet, &mut conns, poll.registry(), &mut incoming);
        // Connections taken over by an authenticated reconnection.
        conns.reap(poll.registry(), &mut incoming);
        // The fleet's waiting events get what the connections leave.
        fleet.set_unsynced_budget(
            m.memory_limit.saturating_sub(conns.charged()) / std::mem::size_of::<StackEvent>(),
        );
        if targets_changed {
            clock.set_targets(targets(&fleet));
        }
        take_rounds(&clock, &mut fleet, &mut outputs, &mut summary);
        if last_advance.elapsed() >= ADVANCE_EVERY {
            last_advance = Instant::now();
            conns.tick(poll.registry(), Instant::now(), &mut incoming);
            fleet.advance(monotonic_ns(), &mut |o| outputs.take(o));
            let mut c = conns.counters.clone();
            c.held_bytes = conns.charged() as u64;
            c.unsynced_bytes = fleet.unsynced_bytes() as u64;
            outputs.metrics.conns = c;
            outputs.tick(fleet.agents());
        }
    }
    drop(clock);
    fleet.finish(monotonic_ns(), &mut |o| outputs.take(o));
    outputs.finish(fleet.agents());
    drop(pass);
    summary.reports = outputs.metrics.reports;
    summary.joined = outputs.metrics.joined;
    if opts.stats {
        print_stats(&summary, &fleet, &conns, &outputs);
    }
    let _ = conns.connected();
    Ok(summary)
}

/// What one connection may cost (`[manager]`'s bounds).
fn limits(m: &xdprobe_config::ManagerSettings) -> Limits {
    Limits {
        hello_timeout: m.hello_timeout,
        agent_timeout: m.agent_timeout,
        max_frame: m.max_frame,
        memory_limit: m.memory_limit,
        max_pending: m.max_agents.clamp(16, 1024),
    }
}

fn print_stats(summary: &Summary, fleet: &Fleet, conns: &Conns, outputs: &Outputs) {
    eprintln!(
        "manager: {summary:?}\nfleet: {:?}\nmatcher: {:?}\nagents: {:#?}\nconnections: {:?}; write errors {}, ipfix errors {}",
        fleet.counters(),
        fleet.matcher_counters(),
        fleet.agents(),
        conns.counters,
        outputs.write_errors,
        outputs.ipfix_errors,
    );
}

fn fleet_config(m: &xdprobe_config::ManagerSettings) -> FleetConfig {
    FleetConfig {
        matcher: MatcherConfig {
            sample_bytes: m.sample_bytes,
            hold_ns: m.hold.as_nanos() as u64,
            idle_ns: m.idle_timeout.as_nanos() as u64,
            report_ns: m.report_interval.map_or(0, |d| d.as_nanos() as u64),
            raw_samples: true,
            ..MatcherConfig::default()
        },
        max_unsynced: m.unsynced_events,
        max_agents: m.max_agents,
    }
}

fn open_outputs(
    cfg: &ManagerConfig,
    shared: Arc<Mutex<ManagerMetrics>>,
) -> anyhow::Result<Outputs> {
    let m = &cfg.manager;
    Outputs::open(
        &OutputOptions {
            json: m.json.clone(),
            plot: m.plot.clone(),
            wire_records: m.wire_records.clone(),
            collectors: cfg.export.collectors.clone(),
            pen: cfg.export.pen,
            observation_domain: cfg.export.observation_domain,
            mtu: cfg.export.mtu,
        },
        shared,
    )
}

/// The metrics server's thread, on the listener bound during setup.
fn start_metrics(
    listener: Option<(std::net::TcpListener, SocketAddr)>,
    shared: &Arc<Mutex<ManagerMetrics>>,
) -> anyhow::Result<Option<xdprobe::prom::MetricsServer>> {
    let Some((l, addr)) = listener else {
        return Ok(None);
    };
    let metrics = xdprobe::prom::Metrics::new();
    metrics.register(xdprobe_host::fleet::metrics::MetricsCollector(
        shared.clone(),
    ));
    let server = xdprobe::prom::MetricsServer::start(l, metrics, xdprobe::prom::Limits::default())?;
    tracing::info!(%addr, "manager metrics");
    Ok(Some(server))
}

/// What the connections brought, into the fleet core; true when the
/// clock-sync targets changed.
fn take(
    fleet: &mut Fleet,
    conns: &mut Conns,
    reg: &mio::Registry,
    incoming: &mut Vec<Incoming>,
) -> bool {
    let mut targets_changed = false;
    let mut refused = Vec::new();
    for i in incoming.drain(..) {
        match i {
            Incoming::Hello(h) => {
                if h.sample_bytes != fleet.sample_bytes() {
                    tracing::warn!(agent = %h.agent, agent_grid = h.sample_bytes, manager_grid = fleet.sample_bytes(),
                        "the agent samples on another grid than manager.sample_bytes: its bytes may not meet the other end's");
                }
                let name = h.agent.clone();
                if !fleet.hello(h) {
                    tracing::warn!(agent = %name, "too many agents: refused");
                    conns.refuse(reg, &name, &mut refused);
                }
                targets_changed = true;
            }
            Incoming::Events(a, evs) => fleet.events(&a, &evs),
            Incoming::Stats(a, s) => fleet.agent_stats(&a, s),
            Incoming::Gone(a) => {
                fleet.gone(&a);
                targets_changed = true;
            }
        }
    }
    // A refused agent's connection is gone: the next turn says so.
    incoming.append(&mut refused);
    targets_changed
}

/// The clock rounds done since the last turn.
fn take_rounds(
    clock: &clock::ClockThread,
    fleet: &mut Fleet,
    outputs: &mut Outputs,
    summary: &mut Summary,
) {
    while let Ok(r) = clock.rounds.try_recv() {
        summary.rounds += 1;
        match r.estimate {
            Some(e) => fleet.estimate(&r.agent, e),
            None => {
                summary.rounds_failed += 1;
                tracing::warn!(agent = %r.agent, target = %r.target, sent = r.sent, lost = r.lost, error = ?r.error,
                    "clock round without an answer (is the agent's responder on the interface the probes reach?)");
            }
        }
        let state = fleet.clock(&r.agent);
        outputs.round(&r, state);
    }
}

/// What the manager keeps after setup: CAP_NET_ADMIN, to detach the veth
/// pass-through programs at exit (their links go with the process anyway,
/// but a netlink-attached program would not).
const MANAGER_KEEP: [u32; 1] = [xdprobe::daemon::privs::CAP_NET_ADMIN];

/// The agents' channel: TLS from the config's files, or plaintext when
/// the config says `insecure = true`, with a warning nobody can miss.
pub fn tls_config(
    s: &xdprobe_config::ManagerSecurity,
) -> anyhow::Result<Option<Arc<xdprobe_host::fleet::tls::rustls::ServerConfig>>> {
    use xdprobe_config::ManagerSecurity;
    match s {
        ManagerSecurity::Tls {
            cert,
            key,
            ca,
            pinned,
        } => {
            let files = xdprobe_host::fleet::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
                pinned: pinned.clone(),
            };
            let c = xdprobe_host::fleet::tls::server_config(&files).context("manager TLS")?;
            Ok(Some(c))
        }
        ManagerSecurity::Insecure => {
            tracing::warn!(
                "INSECURE: manager.insecure = true — agents' connections are plaintext and \
                 unauthenticated: anyone who reaches the port can send events as any agent \
                 not connected right now"
            );
            Ok(None)
        }
        ManagerSecurity::Unset => anyhow::bail!(
            "[manager] sets neither TLS (tls_cert, tls_key, tls_ca) nor insecure = true"
        ),
    }
}

/// Each thread's first allocation would otherwise get a malloc arena of
/// its own, whose freed pages `malloc_trim` also has to find; the
/// manager's allocations are one thread's.
fn fewer_heap_arenas() {
    // SAFETY: mallopt with integer arguments; it only tunes the allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        // Buffers of 128 KiB and more come straight from mmap and go back
        // when freed (no dynamic threshold that keeps them on the heap).
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

/// Connected agents with a responder address that parses.
fn targets(fleet: &Fleet) -> Vec<clock::Target> {
    fleet
        .sync_targets()
        .into_iter()
        .filter_map(|(a, s, instance)| match s.parse::<SocketAddr>() {
            Ok(addr) => Some(clock::Target {
                agent: a,
                addr,
                instance,
            }),
            Err(_) => {
                tracing::warn!(agent = %a, sync = %s, "the agent's clock-sync address does not parse");
                None
            }
        })
        .collect()
}
