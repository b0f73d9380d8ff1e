//! `xdprobe manager`'s I/O around the sans-IO fleet core
//! (`xdprobe_host::fleet::manager`), in the order data travels: `conns`
//! (agents' streams → frames) and `clock` (timing probes → offsets) feed
//! the core, whose reports go to `out` (JSON, IPFIX, SVG, metrics, join).
//! One mio loop owns the core; only the clock rounds run on a thread of
//! their own.

mod clock;
mod conns;
pub mod out;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use mio::{Events, Poll};
use xdprobe_config::ManagerConfig;
use xdprobe_host::fleet::manager::{Fleet, FleetConfig};
use xdprobe_host::fleet::metrics::ManagerMetrics;
use xdprobe_host::stack::agent::monotonic_ns;
use xdprobe_host::stack::matcher::MatcherConfig;
use xdprobe_host::sync::prober::BurstConfig;
use xdprobe_host::sync::responder::Responder;

use conns::{Conns, Incoming};
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
    let _metrics = if cfg.metrics.enabled {
        let (l, addr) = xdprobe::prom::MetricsServer::bind(cfg.metrics.listen)
            .with_context(|| format!("metrics.listen {}", cfg.metrics.listen))?;
        let metrics = xdprobe::prom::Metrics::new();
        metrics.register(xdprobe_host::fleet::metrics::MetricsCollector(
            shared.clone(),
        ));
        let server =
            xdprobe::prom::MetricsServer::start(l, metrics, xdprobe::prom::Limits::default())?;
        tracing::info!(%addr, "manager metrics");
        Some(server)
    } else {
        None
    };
    let mut outputs = Outputs::open(
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
    )?;
    let mut fleet = Fleet::new(FleetConfig {
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
    });

    let mut poll = Poll::new().context("creating the poller")?;
    let mut conns = Conns::bind(m.listen, poll.registry(), m.max_agents * 2)
        .with_context(|| format!("manager.listen {}", m.listen))?;
    let burst = BurstConfig {
        probes: m.sync_probes as usize,
        timeout: m.sync_timeout,
        ..BurstConfig::default()
    };
    let session = (monotonic_ns() as u32) ^ std::process::id();
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
            conns.on_event(poll.registry(), ev, &mut incoming);
        }
        let mut targets_changed = false;
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
        if targets_changed {
            clock.set_targets(targets(&fleet));
        }
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
        if last_advance.elapsed() >= ADVANCE_EVERY {
            last_advance = Instant::now();
            fleet.advance(monotonic_ns(), &mut |o| outputs.take(o));
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
        eprintln!(
            "manager: {summary:?}\nfleet: {:?}\nmatcher: {:?}\nagents: {:#?}\nconnections refused {}, broken {}; write errors {}, ipfix errors {}",
            fleet.counters(),
            fleet.matcher_counters(),
            fleet.agents(),
            conns.refused,
            conns.broken,
            outputs.write_errors,
            outputs.ipfix_errors,
        );
    }
    let _ = conns.connected();
    Ok(summary)
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
