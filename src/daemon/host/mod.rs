//! The daemon's `[host]` agent: stack-layer latency and connect latency of
//! this host's own kernel, always on, beside (or without) the wire capture.
//!
//! The programs are loaded and attached at start, while the daemon still
//! holds its privileges ([`HostProbes::open`]); one thread then drains
//! them ([`HostAgent::spawn`]) and hands out:
//! - JSON lines (`host_stack` reports, `connect` attempts) to the daemon's
//!   JSON output, where `host_stack` reports join the wire record of their
//!   connection (`sink::JsonItem`);
//! - IPFIX host-stack records (templates 320/321) to `[host] collectors` (UDP
//!   and file collectors; not the flow collectors, which would count them
//!   as flows);
//! - Prometheus families: per-segment latency histograms over every timed
//!   byte, a connect-latency histogram, the kernel and matcher counters;
//! - the connections this host started, by connection, for the wire
//!   records' process fields ([`Conns`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use xdprobe_config::Config;
use xdprobe_dataplane::Process;
use xdprobe_exporter::host_sender::HostSender;
use xdprobe_host::clock::{WallClock, monotonic_ns};
use xdprobe_host::connlat::{ConnOptions, ConnProbe, Connection, Outcome};
use xdprobe_host::fleet::join::{ConnKey, Host};
use xdprobe_host::fleet::manager::CrossReport;
use xdprobe_host::fleet::record::host_record;
use xdprobe_host::hooks::Layer;
use xdprobe_host::kernel::Kernel;
use xdprobe_host::stack::agent::{ADVANCE_EVERY, Agent, GC_EVERY, Output};
use xdprobe_host::stack::matcher::{FlowReport, Matcher};
use xdprobe_host::stack::output::{self, CommTap, Comms};
use xdprobe_host::stack::probe::StackProbe;

use super::join::{HostLine, JsonItem};

mod conns;
mod metrics;

pub use conns::Conns;
pub use metrics::{HostCollector, HostMetrics};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("[host]: {0}")]
    Kernel(#[from] xdprobe_host::kernel::KernelError),
    #[error("[host]: {0}")]
    Scope(#[from] xdprobe_host::scope::ScopeError),
    #[error("[host]: {0}")]
    Probe(#[from] xdprobe_host::stack::error::ProbeError),
    #[error("[host]: {0}")]
    Collectors(#[from] xdprobe_exporter::host_sender::HostSenderError),
    #[error("[host]: starting its thread")]
    Thread(#[source] std::io::Error),
    #[error(
        "[host] collectors: {0} is also an [export] collector; give the host-stack records a file of their own"
    )]
    SharedFile(String),
}

impl HostError {
    /// About what the kernel or the config offers (exit 2), not a failure.
    pub fn is_setup_error(&self) -> bool {
        match self {
            HostError::Kernel(_) | HostError::Scope(_) | HostError::SharedFile(_) => true,
            HostError::Probe(p) => p.is_setup_error(),
            _ => false,
        }
    }
}

/// The probes, loaded and attached (before privileges are dropped).
pub struct HostProbes {
    stack: Option<(StackProbe, Matcher)>,
    conn: Option<ConnProbe>,
    ipfix: HostSender,
    connlat_min: Duration,
}

impl HostProbes {
    /// Loads what `[host]` asks for; `None` when it asks for nothing.
    pub fn open(cfg: &Config) -> Result<Option<HostProbes>, HostError> {
        let h = &cfg.host;
        if !h.any() {
            return Ok(None);
        }
        let kernel = Kernel::open()?;
        let stack = if h.stack {
            let opts = xdprobe_host::scope::stack_options(h)?;
            let probe = StackProbe::start(&kernel, &opts)?;
            let attached: Vec<Layer> = probe.attached.iter().map(|l| l.layer).collect();
            for l in &probe.attached {
                let hooks: Vec<String> = l.hooks.iter().map(ToString::to_string).collect();
                tracing::info!(layer = l.layer.key(), hooks = %hooks.join(", "), "host stack layer attached");
            }
            let mut mc = xdprobe_host::scope::matcher_config(h, &opts, attached);
            // Every timed byte feeds the histograms.
            mc.raw_samples = true;
            Some((probe, Matcher::new(mc)))
        } else {
            None
        };
        let conn = if h.connlat {
            let c = ConnProbe::start(
                &kernel,
                &ConnOptions {
                    pids: Vec::new(),
                    min_latency: Duration::ZERO,
                },
            )?;
            tracing::info!(hook = c.hook(), "host connect latency attached");
            Some(c)
        } else {
            None
        };
        // A file both exporters wrote would hold two sets of templates and
        // sequence numbers.
        if let Some(c) = h
            .collectors
            .iter()
            .find(|c| c.starts_with("file://") && cfg.export.collectors.contains(c))
        {
            return Err(HostError::SharedFile(c.clone()));
        }
        let ipfix = if h.stack {
            HostSender::open(
                &h.collectors,
                cfg.export.pen,
                cfg.export.observation_domain,
                cfg.export.mtu,
            )?
        } else {
            HostSender::open(&[], 0, 0, 1500)?
        };
        Ok(Some(HostProbes {
            stack,
            conn,
            ipfix,
            connlat_min: h.connlat_min,
        }))
    }
}

/// The running agent.
pub struct HostAgent {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub conns: Arc<Conns>,
    pub metrics: Arc<Mutex<HostMetrics>>,
}

impl HostAgent {
    /// `conns`: where the connections this host starts are kept for the
    /// wire records (shared with the workers' sinks).
    pub fn spawn(
        probes: HostProbes,
        json: Option<Sender<JsonItem>>,
        conns: Arc<Conns>,
    ) -> Result<HostAgent, HostError> {
        let stop = Arc::new(AtomicBool::new(false));
        let metrics = Arc::new(Mutex::new(HostMetrics::default()));
        let comms = Comms::default();
        let sinks = Sinks {
            json,
            conns: conns.clone(),
            metrics: metrics.clone(),
            local: HostMetrics::default(),
            wall: WallClock::now(),
            comms: comms.clone(),
            agent: xdprobe_exporter::hostname(),
            pending: Vec::new(),
            ipfix: probes.ipfix,
            connlat_min: probes.connlat_min,
        };
        let (stack, conn) = (probes.stack, probes.conn);
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xdprobe-host".into())
            .spawn(move || {
                let mut run = Run {
                    // The window schedule starts with the thread.
                    stack: stack.map(|(probe, matcher)| Agent::new(probe, matcher)),
                    conn,
                    // The process may be gone by the time its flow ends.
                    tap: CommTap { comms, inner: None },
                    sinks,
                };
                run.run(&s);
            })
            .map_err(HostError::Thread)?;
        Ok(HostAgent {
            stop,
            thread: Some(thread),
            conns,
            metrics,
        })
    }

    /// Reports every open flow and detaches the programs.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The agent's thread: the stack agent and the connect probe, stepped in
/// turn.
struct Run {
    stack: Option<Agent>,
    conn: Option<ConnProbe>,
    tap: CommTap<'static>,
    sinks: Sinks,
}

impl Run {
    fn run(&mut self, stop: &AtomicBool) {
        let mut last_publish = Instant::now();
        let mut last_expire = Instant::now();
        while !stop.load(Ordering::Acquire) {
            let mut n = 0;
            let mut wait = ADVANCE_EVERY;
            // Reports and metrics when the stack agent advanced (every
            // ADVANCE_EVERY), not on every batch.
            let mut due = last_publish.elapsed() >= ADVANCE_EVERY;
            if let Some(agent) = self.stack.as_mut() {
                let sinks = &mut self.sinks;
                let step = agent.step(&mut |o| sinks.output(o), &mut self.tap);
                (n, wait, due) = (step.drained, step.wait, step.advanced);
            }
            if let Some(c) = self.conn.as_mut() {
                let mut conns = Vec::new();
                n += c.drain(|c| conns.push(c));
                for c in conns {
                    self.sinks.connection(c);
                }
            }
            if due {
                self.publish();
                last_publish = Instant::now();
            }
            if last_expire.elapsed() >= GC_EVERY {
                if let Some(c) = self.conn.as_mut() {
                    c.expire(monotonic_ns());
                }
                last_expire = Instant::now();
            }
            if n == 0 {
                // Between windows too, the connect probe is drained
                // every 500 ms at least.
                std::thread::sleep(
                    wait.clamp(Duration::from_millis(1), Duration::from_millis(500)),
                );
            }
        }
        if let Some(agent) = self.stack.take() {
            let sinks = &mut self.sinks;
            let stats = agent.finish(&mut |o| sinks.output(o), &mut self.tap);
            let l = &mut self.sinks.local;
            (l.stack_kernel, l.stack_skipped, l.matcher) =
                (stats.kernel, stats.kernel_skipped, stats.matcher);
            (l.windows, l.attached_secs) = (stats.windows, stats.observed.as_secs_f64());
        }
        self.publish();
        tracing::info!(reports = self.sinks.local.reports, "host agent stopped");
    }

    /// Reads the counters, sends the pending IPFIX records and publishes
    /// the metrics.
    fn publish(&mut self) {
        let l = &mut self.sinks.local;
        if let Some(a) = self.stack.as_ref() {
            (l.stack_kernel, l.stack_skipped) = (a.probe().counters(), a.probe().kernel_skipped());
            l.matcher = a.matcher().counters();
            let (windows, attached) = a.attached();
            (l.windows, l.attached_secs) = (windows, attached.as_secs_f64());
        }
        if let Some(c) = self.conn.as_ref() {
            l.conn_kernel = c.counters();
            l.conn_skipped = c.kernel_skipped().unwrap_or(0);
        }
        self.sinks.flush();
    }
}

/// Where the thread's findings go: JSON lines, IPFIX records, metrics and
/// the connection table.
struct Sinks {
    json: Option<Sender<JsonItem>>,
    conns: Arc<Conns>,
    metrics: Arc<Mutex<HostMetrics>>,
    /// The thread's own copy, published each tick.
    local: HostMetrics,
    wall: WallClock,
    comms: Comms,
    agent: String,
    pending: Vec<xdprobe_exporter::encode::host::HostRecord>,
    ipfix: HostSender,
    connlat_min: Duration,
}

impl Sinks {
    fn output(&mut self, o: Output) {
        match o {
            Output::Report(r) => self.report(*r),
            // Every timed byte feeds the histograms.
            Output::Samples(raw) => raw.iter().for_each(|s| self.local.segments.observe(s)),
        }
    }

    fn flush(&mut self) {
        let before = self.ipfix.errors;
        let recs = std::mem::take(&mut self.pending);
        if !self.ipfix.is_empty() {
            // Also refreshes the UDP templates when due.
            self.ipfix.send(&recs);
        }
        self.local.ipfix_errors += self.ipfix.errors - before;
        if let Ok(mut m) = self.metrics.lock() {
            *m = self.local.clone();
        }
    }

    fn report(&mut self, r: FlowReport) {
        self.local.reports += 1;
        let k = r.key;
        let mut line = output::to_json(&r, &self.wall, &mut self.comms);
        line["host"] = self.agent.clone().into();
        let join = Host {
            sender: (k.src, k.sport),
            receiver: (k.dst, k.dport),
            start_us: self.wall.unix_us(r.start_ns),
            end_us: self.wall.unix_us(r.end_ns),
            report: line.clone(),
        };
        if !self.ipfix.is_empty() {
            let cross = CrossReport::local(r, &self.agent);
            self.pending.push(host_record(&cross, &self.wall));
        }
        if let Some(j) = &self.json {
            let _ = j.try_send(JsonItem::Other(HostLine {
                line,
                join: Some(join),
            }));
        }
    }

    fn connection(&mut self, c: Connection) {
        let outcome = match c.outcome {
            Outcome::Established => "established",
            Outcome::Refused => "refused",
            Outcome::TimedOut => "timed_out",
            Outcome::Failed => "failed",
        };
        *self.local.attempts.entry(outcome).or_default() += 1;
        if c.outcome == Outcome::Established {
            self.local.connect.observe_ns(c.latency.as_nanos() as u64);
            self.conns.insert(
                ConnKey::new((c.src, c.sport), (c.dst, c.dport)),
                Process::new(
                    c.pid,
                    &c.comm,
                    u32::try_from(c.latency.as_micros()).unwrap_or(u32::MAX),
                ),
            );
        }
        let show = c.outcome != Outcome::Established || c.latency >= self.connlat_min;
        if show && let Some(j) = &self.json {
            let mut line = serde_json::to_value(&c).unwrap_or_default();
            line["type"] = "connect".into();
            line["start_us"] = self.wall.unix_us(c.start_ns).into();
            line["host"] = self.agent.clone().into();
            let _ = j.try_send(JsonItem::Other(HostLine { line, join: None }));
        }
    }
}
