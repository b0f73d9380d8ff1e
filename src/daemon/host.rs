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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use xdprobe_common::host::{ConnCounters, StackCounters};
use xdprobe_config::Config;
use xdprobe_dataplane::Process;
use xdprobe_exporter::host_sender::HostSender;
use xdprobe_host::connlat::{ConnOptions, ConnProbe, Connection, Outcome};
use xdprobe_host::fleet::join::{ConnKey, Host};
use xdprobe_host::fleet::manager::CrossReport;
use xdprobe_host::fleet::metrics::Histogram;
use xdprobe_host::fleet::record::host_record;
use xdprobe_host::hooks::Layer;
use xdprobe_host::kernel::Kernel;
use xdprobe_host::stack::agent::{
    DRAIN_BATCH, GC_AGE, GC_EVERY, Horizon, Schedule, WallClock, monotonic_ns,
};
use xdprobe_host::stack::matcher::{FlowReport, MatchCounters, Matcher, RawSample, segment_name};
use xdprobe_host::stack::output::{self, Comms};
use xdprobe_host::stack::probe::StackProbe;

use super::join::{HostLine, JsonItem};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("[host]: {0}")]
    Kernel(#[from] xdprobe_host::kernel::KernelError),
    #[error("[host]: {0}")]
    Scope(#[from] xdprobe_host::scope::ScopeError),
    #[error("[host]: {0}")]
    Probe(#[from] xdprobe_host::stack::probe::ProbeError),
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

/// The connections this host started, by connection (ends unordered),
/// for the wire sink. Bounded: the oldest go first, and entries older than
/// `KEEP` are forgotten.
#[derive(Default)]
pub struct Conns {
    inner: Mutex<ConnsInner>,
}

#[derive(Default)]
struct ConnsInner {
    map: HashMap<ConnKey, (Instant, Process)>,
    order: VecDeque<(Instant, ConnKey)>,
}

const CONNS_MAX: usize = 65_536;
const CONNS_KEEP: Duration = Duration::from_secs(3600);

impl Conns {
    fn insert(&self, key: ConnKey, info: Process) {
        let Ok(mut g) = self.inner.lock() else { return };
        let now = Instant::now();
        g.map.insert(key, (now, info));
        g.order.push_back((now, key));
        while g.order.len() > CONNS_MAX
            || g.order
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > CONNS_KEEP)
        {
            let Some((t, k)) = g.order.pop_front() else {
                break;
            };
            if g.map.get(&k).is_some_and(|(t2, _)| *t2 == t) {
                g.map.remove(&k);
            }
        }
    }

    /// The process that started the connection between `a` and `b`.
    pub fn get(&self, a: (IpAddr, u16), b: (IpAddr, u16)) -> Option<Process> {
        let g = self.inner.lock().ok()?;
        g.map.get(&ConnKey::new(a, b)).map(|(_, i)| *i)
    }
}

/// The workers' sinks look up the process of a connection here.
impl xdprobe_capture::sink::Processes for Conns {
    fn process(&self, a: (IpAddr, u16), b: (IpAddr, u16)) -> Option<Process> {
        self.get(a, b)
    }
}

/// What the agent counted, for the metrics endpoint.
#[derive(Clone, Debug, Default)]
pub struct HostMetrics {
    /// By segment name, every timed byte.
    pub segments: BTreeMap<String, Histogram>,
    /// Successful connects.
    pub connect: Histogram,
    /// Attempts by outcome.
    pub attempts: BTreeMap<&'static str, u64>,
    pub stack_kernel: StackCounters,
    pub conn_kernel: ConnCounters,
    /// Runs of the connect program the kernel skipped (its own count).
    pub conn_skipped: u64,
    /// Runs of the stack programs the kernel skipped.
    pub stack_skipped: u64,
    /// Time sampling: windows opened and seconds the layer programs were
    /// attached (0 without `sample_window`).
    pub windows: u64,
    pub attached_secs: f64,
    pub matcher: MatchCounters,
    pub reports: u64,
    pub ipfix_errors: u64,
}

impl HostMetrics {
    fn observe(&mut self, s: &RawSample) {
        for w in s.times.windows(2) {
            let ((la, ta), (lb, tb)) = (w[0], w[1]);
            self.segments
                .entry(segment_name(la, lb))
                .or_default()
                .observe_ns(tb.saturating_sub(ta));
        }
        if let (Some(&(Layer::SockTx, t0)), Some(&(Layer::SockRx, tn))) =
            (s.times.first(), s.times.last())
        {
            self.segments
                .entry("T8".to_owned())
                .or_default()
                .observe_ns(tn.saturating_sub(t0));
        }
    }
}

/// The agent's metrics as a registry collector, read at every scrape.
#[derive(Clone)]
pub struct HostCollector(pub Arc<Mutex<HostMetrics>>);

impl std::fmt::Debug for HostCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostCollector")
    }
}

impl Collector for HostCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(m) = self.0.lock() else {
            return Ok(());
        };
        let unit = prometheus_client::registry::Unit::Seconds;
        let mut h = enc.encode_descriptor(
            "xdprobe_host_segment_latency",
            "Time this host's timed bytes spent per stack segment (T1..T7, T8 socket to socket), all flows.",
            Some(&unit),
            MetricType::Histogram,
        )?;
        for (seg, hist) in &m.segments {
            hist.encode(&mut h, &[("segment", seg.as_str())])?;
        }
        let mut g = enc.encode_descriptor(
            "xdprobe_host_segment_latency_quantile",
            "Quantiles (0.5, 0.9, 0.99) of the same timed bytes, nearest rank within 0.5 %.",
            Some(&unit),
            MetricType::Gauge,
        )?;
        for (seg, hist) in &m.segments {
            hist.encode_quantiles(&mut g, &[("segment", seg.as_str())])?;
        }
        let mut h = enc.encode_descriptor(
            "xdprobe_host_connect_latency",
            "connect() to ESTABLISHED of this host's outgoing TCP connections.",
            Some(&unit),
            MetricType::Histogram,
        )?;
        m.connect.encode(&mut h, &[])?;
        let mut fam = enc.encode_descriptor(
            "xdprobe_host_connect_attempts",
            "Outgoing TCP connection attempts, by outcome.",
            None,
            MetricType::Counter,
        )?;
        for (outcome, n) in &m.attempts {
            ConstCounter::new(*n).encode(fam.encode_family(&[("outcome", *outcome)])?)?;
        }
        let k = &m.stack_kernel;
        let c = &m.conn_kernel;
        let mt = &m.matcher;
        for (name, help, v) in [
            (
                "xdprobe_host_events",
                "Observations the stack programs reported.",
                k.events,
            ),
            (
                "xdprobe_host_events_lost",
                "Observations lost to a full ring buffer.",
                k.ringbuf_full,
            ),
            (
                "xdprobe_host_no_entry",
                "Socket-layer sends without a recorded call entry.",
                k.no_entry,
            ),
            (
                "xdprobe_host_read_failed",
                "Kernel memory reads that failed.",
                k.read_failed,
            ),
            (
                "xdprobe_host_unsampled",
                "Observations holding no sample byte.",
                k.unsampled,
            ),
            (
                "xdprobe_host_filtered",
                "Observations outside the scope.",
                k.filtered,
            ),
            (
                "xdprobe_host_runs_skipped",
                "Stack program runs the kernel skipped (their recursion_misses): observations no program saw.",
                m.stack_skipped,
            ),
            (
                "xdprobe_host_windows",
                "Time-sampling windows opened (sample_window).",
                m.windows,
            ),
            ("xdprobe_host_flows", "Flows the matcher tracked.", mt.flows),
            (
                "xdprobe_host_flows_dropped",
                "Flows not tracked (table full).",
                mt.flows_dropped,
            ),
            (
                "xdprobe_host_anchors_dropped",
                "Timed bytes dropped (per-flow bound).",
                mt.anchors_dropped,
            ),
            (
                "xdprobe_host_held_out",
                "Timed bytes given up as slow: not at every layer when the hold ran out.",
                mt.cut,
            ),
            ("xdprobe_host_reports", "Flow reports written.", m.reports),
            (
                "xdprobe_host_ipfix_errors",
                "Host-stack IPFIX messages not sent.",
                m.ipfix_errors,
            ),
            (
                "xdprobe_host_connects_started",
                "Connections seen entering SYN_SENT.",
                c.started,
            ),
            (
                "xdprobe_host_connects_lost",
                "Connect reports lost to a full ring buffer.",
                c.ringbuf_full,
            ),
            (
                "xdprobe_host_connect_runs_skipped",
                "State changes the kernel did not run the connect program for (its recursion_misses).",
                m.conn_skipped,
            ),
        ] {
            ConstCounter::new(v).encode(enc.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        ConstCounter::new(m.attached_secs).encode(enc.encode_descriptor(
            "xdprobe_host_attached_seconds",
            "Time the stack layer programs were attached (all of it without sample_window).",
            None,
            MetricType::Counter,
        )?)?;
        Ok(())
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
        let mut run = Run {
            probes,
            json,
            conns: conns.clone(),
            metrics: metrics.clone(),
            local: HostMetrics::default(),
            wall: WallClock::now(),
            comms: Comms::default(),
            agent: xdprobe_exporter::hostname(),
            pending: Vec::new(),
            horizon: Horizon::default(),
        };
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xdprobe-host".into())
            .spawn(move || run.run(&s))
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

struct Run {
    probes: HostProbes,
    json: Option<Sender<JsonItem>>,
    conns: Arc<Conns>,
    metrics: Arc<Mutex<HostMetrics>>,
    /// The thread's own copy, published each tick.
    local: HostMetrics,
    wall: WallClock,
    comms: Comms,
    agent: String,
    pending: Vec<xdprobe_exporter::encode::host::HostRecord>,
    /// What the matcher has seen of the ring (`agent::Horizon`).
    horizon: Horizon,
}

impl Run {
    fn run(&mut self, stop: &AtomicBool) {
        let mut last_gc = Instant::now();
        let mut last_advance = Instant::now();
        let started = Instant::now();
        let mut schedule = self.probes.stack.as_mut().and_then(|(probe, matcher)| {
            matcher.window_opened(monotonic_ns());
            probe.windows.map(|w| Schedule::new(w, Instant::now()))
        });
        while !stop.load(Ordering::Acquire) {
            let mut n = 0;
            let mut wait = Duration::from_millis(50);
            if let Some((probe, matcher)) = self.probes.stack.as_mut() {
                let (comms, horizon) = (&mut self.comms, &mut self.horizon);
                let k = probe.drain_some(DRAIN_BATCH, |ev| {
                    // The process may be gone by the time its flow ends.
                    if ev.tgid != 0 {
                        comms.remember(ev.tgid);
                    }
                    horizon.seen(ev.ts_ns);
                    matcher.on_event(ev)
                });
                horizon.drained(k, DRAIN_BATCH);
                n += k;
                if let Some(s) = schedule.as_mut() {
                    let next = s.step(probe, matcher);
                    // Between windows: nothing to drain until the next.
                    wait = if s.is_closed() {
                        next.min(Duration::from_millis(500))
                    } else {
                        wait.min(next)
                    };
                    let (w, secs, _) = s.totals();
                    (self.local.windows, self.local.attached_secs) = (w, secs.as_secs_f64());
                } else {
                    self.local.attached_secs = started.elapsed().as_secs_f64();
                }
            }
            let mut conns = Vec::new();
            if let Some(c) = self.probes.conn.as_mut() {
                n += c.drain(|c| conns.push(c));
            }
            for c in conns {
                self.connection(c);
            }
            // Reports and metrics every 50 ms, not on every batch.
            if last_advance.elapsed() >= Duration::from_millis(50) {
                self.advance(false);
                last_advance = Instant::now();
            }
            if last_gc.elapsed() >= GC_EVERY && schedule.as_ref().is_none_or(Schedule::is_closed) {
                let now = monotonic_ns();
                if let Some((p, _)) = self.probes.stack.as_mut() {
                    p.gc(now, GC_AGE.as_nanos() as u64);
                }
                if let Some(c) = self.probes.conn.as_mut() {
                    c.expire(now);
                }
                last_gc = Instant::now();
            }
            if n == 0 {
                std::thread::sleep(wait.max(Duration::from_millis(1)));
            }
        }
        if let Some((probe, matcher)) = self.probes.stack.as_mut() {
            probe.drain(|ev| matcher.on_event(ev));
        }
        self.advance(true);
        tracing::info!(reports = self.local.reports, "host agent stopped");
    }

    fn advance(&mut self, finish: bool) {
        let mut reports = Vec::new();
        if let Some((probe, matcher)) = self.probes.stack.as_mut() {
            if finish {
                matcher.finish(monotonic_ns(), &mut |r| reports.push(r));
            } else {
                matcher.advance(self.horizon.now_ns(), &mut |r| reports.push(r));
            }
            for s in matcher.take_samples() {
                self.local.observe(&s);
            }
            self.local.stack_kernel = probe.counters();
            self.local.stack_skipped = probe.kernel_skipped();
            self.local.matcher = matcher.counters();
        }
        for r in reports {
            self.report(r);
        }
        if let Some(c) = self.probes.conn.as_ref() {
            self.local.conn_kernel = c.counters();
            self.local.conn_skipped = c.kernel_skipped().unwrap_or(0);
        }
        let before = self.probes.ipfix.errors;
        let recs = std::mem::take(&mut self.pending);
        if !self.probes.ipfix.is_empty() {
            // Also refreshes the UDP templates when due.
            self.probes.ipfix.send(&recs);
        }
        self.local.ipfix_errors += self.probes.ipfix.errors - before;
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
        if !self.probes.ipfix.is_empty() {
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
        let show = c.outcome != Outcome::Established || c.latency >= self.probes.connlat_min;
        if show && let Some(j) = &self.json {
            let mut line = serde_json::to_value(&c).unwrap_or_default();
            line["type"] = "connect".into();
            line["start_us"] = self.wall.unix_us(c.start_ns).into();
            line["host"] = self.agent.clone().into();
            let _ = j.try_send(JsonItem::Other(HostLine { line, join: None }));
        }
    }
}
