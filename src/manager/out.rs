//! Where the manager's results go: JSON lines (flow reports, clock
//! rounds, joined records), IPFIX host-stack records to the configured
//! collectors, the stacked-bar SVG, the Prometheus metrics, and the join
//! with the wire probe's records (followed in their JSON file as it
//! grows). Called from the main loop only; nothing here blocks for long.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{Value, json};
use xdprobe_exporter::encode::host::{HostEncoder, HostRecord, SegmentStats};
use xdprobe_exporter::{CollectorSpec, Target};
use xdprobe_host::fleet::join::{Host, Joiner, Wire};
use xdprobe_host::fleet::manager::{CrossReport, FleetOut, Place};
use xdprobe_host::fleet::metrics::ManagerMetrics;
use xdprobe_host::stack::agent::WallClock;
use xdprobe_host::stack::matcher::{EndReason, FlowReport};
use xdprobe_host::stack::output::{self, Comms};
use xdprobe_host::stack::stats::Summary;

use super::clock::Round;

/// Reports kept for the picture (the busiest 40 are drawn).
const PLOT_KEEP: usize = 256;
const PLOT_EVERY: Duration = Duration::from_secs(5);
/// UDP collectors get the templates again this often (RFC 7011 §8.4).
const TEMPLATE_EVERY: Duration = Duration::from_secs(60);
/// Wire-record bytes read per tick at most.
const FOLLOW_BUDGET: usize = 4 << 20;

enum Ipfix {
    Udp {
        sock: UdpSocket,
        to: SocketAddr,
        enc: HostEncoder,
        templates_at: Option<Instant>,
    },
    File {
        w: BufWriter<File>,
        enc: HostEncoder,
        templated: bool,
    },
}

/// The wire probe's JSON lines, read as they are appended.
struct Follow {
    path: PathBuf,
    file: Option<File>,
    pos: u64,
    partial: Vec<u8>,
}

impl Follow {
    /// New complete lines since the last call.
    fn lines(&mut self) -> Vec<Value> {
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
            self.pos = 0;
        }
        let Some(f) = self.file.as_mut() else {
            return Vec::new();
        };
        // Truncated or replaced: start over.
        if f.metadata().map(|m| m.len()).unwrap_or(0) < self.pos {
            self.pos = 0;
            self.partial.clear();
        }
        if f.seek(SeekFrom::Start(self.pos)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        let n = f
            .take(FOLLOW_BUDGET as u64)
            .read_to_end(&mut buf)
            .unwrap_or(0);
        self.pos += n as u64;
        self.partial.extend_from_slice(&buf);
        let mut out = Vec::new();
        while let Some(i) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                out.push(v);
            }
        }
        out
    }
}

pub struct Outputs {
    wall: WallClock,
    json: Option<BufWriter<File>>,
    ipfix: Vec<Ipfix>,
    pending: Vec<HostRecord>,
    join: Option<(Joiner, Follow)>,
    plot: Option<PathBuf>,
    plotted: VecDeque<FlowReport>,
    plot_due: bool,
    plot_at: Instant,
    pub metrics: ManagerMetrics,
    shared: Arc<Mutex<ManagerMetrics>>,
    pub write_errors: u64,
    pub ipfix_errors: u64,
}

pub struct OutputOptions {
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub wire_records: Option<PathBuf>,
    pub collectors: Vec<String>,
    pub pen: u32,
    pub observation_domain: u32,
    pub mtu: u16,
}

impl Outputs {
    pub fn open(o: &OutputOptions, shared: Arc<Mutex<ManagerMetrics>>) -> anyhow::Result<Outputs> {
        let json = match &o.json {
            None => None,
            Some(p) => Some(BufWriter::new(
                File::create(p).with_context(|| format!("creating {}", p.display()))?,
            )),
        };
        let mut ipfix = Vec::new();
        for url in &o.collectors {
            let spec =
                CollectorSpec::parse(url).with_context(|| format!("export.collectors: {url}"))?;
            let max = usize::from(o.mtu).saturating_sub(48);
            let enc = HostEncoder::new(o.pen, o.observation_domain, max);
            match spec.target {
                Target::Udp(to) => {
                    let bind = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
                    let sock =
                        UdpSocket::bind(bind).with_context(|| format!("socket for {url}"))?;
                    sock.set_nonblocking(true)?;
                    ipfix.push(Ipfix::Udp {
                        sock,
                        to,
                        enc,
                        templates_at: None,
                    });
                }
                Target::File(p) => ipfix.push(Ipfix::File {
                    w: BufWriter::new(
                        File::create(&p).with_context(|| format!("creating {}", p.display()))?,
                    ),
                    enc,
                    templated: false,
                }),
                Target::Tcp(_) => {
                    tracing::warn!(collector = %url, "host-stack records go to UDP and file collectors only: skipped");
                }
            }
        }
        Ok(Outputs {
            wall: WallClock::now(),
            json,
            ipfix,
            pending: Vec::new(),
            join: o.wire_records.as_ref().map(|p| {
                (
                    Joiner::default(),
                    Follow {
                        path: p.clone(),
                        file: None,
                        pos: 0,
                        partial: Vec::new(),
                    },
                )
            }),
            plot: o.plot.clone(),
            plotted: VecDeque::new(),
            plot_due: false,
            plot_at: Instant::now(),
            metrics: ManagerMetrics::default(),
            shared,
            write_errors: 0,
            ipfix_errors: 0,
        })
    }

    fn line(&mut self, v: &Value) {
        if let Some(w) = self.json.as_mut() {
            let r = serde_json::to_writer(&mut *w, v)
                .map_err(std::io::Error::from)
                .and_then(|()| w.write_all(b"\n"));
            if r.is_err() {
                self.write_errors += 1;
            }
        }
    }

    /// A flow report: JSON line, IPFIX record, the picture, the join.
    pub fn report(&mut self, r: &CrossReport) {
        self.metrics.reports += 1;
        let v = report_json(r, &self.wall);
        self.line(&v);
        if !self.ipfix.is_empty() {
            self.pending.push(host_record(r, &self.wall));
        }
        if self.plot.is_some() && r.report.complete > 0 {
            if self.plotted.len() >= PLOT_KEEP {
                self.plotted.pop_front();
            }
            self.plotted.push_back(r.report.clone());
            self.plot_due = true;
        }
        if let Some((j, _)) = self.join.as_mut() {
            let k = r.report.key;
            let h = Host {
                sender: (k.src, k.sport),
                receiver: (k.dst, k.dport),
                start_us: self.wall.unix_us(r.report.start_ns),
                end_us: self.wall.unix_us(r.report.end_ns),
                report: v,
            };
            let joined = j.host(h, unix_us_now());
            self.joined(joined);
        }
    }

    fn joined(&mut self, joined: Vec<xdprobe_host::fleet::join::Joined>) {
        for j in joined {
            self.metrics.joined += 1;
            let v = serde_json::to_value(&j).unwrap_or_default();
            self.line(&v);
        }
    }

    /// One clock round's outcome.
    pub fn round(&mut self, r: &Round, clock: Option<xdprobe_host::sync::estimate::ClockState>) {
        if r.estimate.is_none() {
            *self
                .metrics
                .sync_rounds_failed
                .entry(r.agent.clone())
                .or_default() += 1;
        }
        let v = json!({
            "type": "clock_sync",
            "agent": r.agent,
            "target": r.target.to_string(),
            "at_us": r.estimate.map(|e| self.wall.unix_us(e.at_ns)),
            "estimate": r.estimate,
            "drift_ppm": clock.map(|c| c.drift_ppm),
            "step_ns": clock.map(|c| c.step_ns),
            "sent": r.sent,
            "lost": r.lost,
            "error": r.error,
        });
        self.line(&v);
    }

    /// What the fleet core hands out.
    pub fn take(&mut self, o: FleetOut<'_>) {
        match o {
            FleetOut::Report(r) => self.report(&r),
            FleetOut::Sample(s) => self.metrics.observe(s),
        }
    }

    /// Housekeeping: follow the wire records, send IPFIX, flush, redraw,
    /// publish the metrics.
    pub fn tick(&mut self, agents: Vec<xdprobe_host::fleet::manager::AgentView>) {
        if let Some((j, f)) = self.join.as_mut() {
            let now = unix_us_now();
            let mut joined = Vec::new();
            for v in f.lines() {
                if let Some(w) = Wire::from_json(v) {
                    joined.extend(j.wire(w, now));
                }
            }
            j.expire(now);
            self.joined(joined);
        }
        self.send_ipfix();
        if let Some(w) = self.json.as_mut()
            && w.flush().is_err()
        {
            self.write_errors += 1;
        }
        if self.plot_due && self.plot_at.elapsed() >= PLOT_EVERY {
            self.draw();
        }
        self.metrics.agents = agents;
        if let Ok(mut m) = self.shared.lock() {
            *m = self.metrics.clone();
        }
    }

    fn send_ipfix(&mut self) {
        let now = Instant::now();
        let export_time = u32::try_from(unix_us_now() / 1_000_000).unwrap_or(u32::MAX);
        let recs = std::mem::take(&mut self.pending);
        for out in &mut self.ipfix {
            match out {
                Ipfix::Udp {
                    sock,
                    to,
                    enc,
                    templates_at,
                } => {
                    let mut msgs = Vec::new();
                    if templates_at.is_none_or(|t| now.duration_since(t) >= TEMPLATE_EVERY) {
                        msgs.push(enc.templates(export_time));
                        *templates_at = Some(now);
                    }
                    if !recs.is_empty() {
                        msgs.extend(enc.records(&recs, export_time));
                    }
                    for m in msgs {
                        if sock.send_to(&m, *to).is_err() {
                            self.ipfix_errors += 1;
                        }
                    }
                }
                Ipfix::File { w, enc, templated } => {
                    if recs.is_empty() {
                        continue;
                    }
                    let mut msgs = Vec::new();
                    if !*templated {
                        msgs.push(enc.templates(export_time));
                        *templated = true;
                    }
                    msgs.extend(enc.records(&recs, export_time));
                    for m in msgs {
                        if w.write_all(&m).is_err() {
                            self.ipfix_errors += 1;
                        }
                    }
                    if w.flush().is_err() {
                        self.ipfix_errors += 1;
                    }
                }
            }
        }
    }

    fn draw(&mut self) {
        self.plot_due = false;
        self.plot_at = Instant::now();
        if let Some(p) = &self.plot {
            let v: Vec<FlowReport> = self.plotted.iter().cloned().collect();
            if let Err(e) = xdprobe_host::stack::plot::stacked_bars(p, &v) {
                tracing::warn!(error = %e, path = %p.display(), "drawing the plot");
            }
        }
    }

    pub fn finish(&mut self, agents: Vec<xdprobe_host::fleet::manager::AgentView>) {
        self.tick(agents);
        if self.plot_due {
            self.draw();
        }
    }
}

fn unix_us_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn place_json(p: &Option<Place>) -> Value {
    match p {
        None => Value::Null,
        Some(p) => json!({
            "agent": p.agent,
            "netns": p.netns,
            "pid": p.pid,
            "clock": p.clock.map(|c| json!({
                "offset_ns": c.offset_ns,
                "uncertainty_ns": c.uncertainty_ns,
                "drift_ppm": c.drift_ppm,
                "min_delay_ns": c.min_delay_ns,
            })),
        }),
    }
}

/// The host probe's JSON shape (`type: host_stack`, segments by name),
/// with the ends named by agent and the clock alignment's bound.
pub fn report_json(r: &CrossReport, wall: &WallClock) -> Value {
    let mut bare = r.report.clone();
    // The manager cannot name another host's processes: no /proc lookup.
    bare.sender = None;
    bare.receiver = None;
    let mut v = output::to_json(&bare, wall, &mut Comms::default());
    if let Some(o) = v.as_object_mut() {
        o.insert("sender".into(), place_json(&r.sender));
        o.insert("receiver".into(), place_json(&r.receiver));
        o.insert("cross_host".into(), Value::Bool(r.crosses_hosts()));
        o.insert(
            "clock_uncertainty_us".into(),
            json!(r.clock_uncertainty_ns() as f64 / 1000.0),
        );
    }
    v
}

fn stats(s: &Summary) -> SegmentStats {
    let ns = |us: f64| (us * 1000.0).round().max(0.0) as u64;
    SegmentStats {
        min_ns: ns(s.min_us),
        mean_ns: ns(s.mean_us),
        p50_ns: ns(s.p50_us),
        p99_ns: ns(s.p99_us),
        max_ns: ns(s.max_us),
    }
}

/// The IPFIX form of a report.
pub fn host_record(r: &CrossReport, wall: &WallClock) -> HostRecord {
    let f = &r.report;
    let mut segments = [None; 8];
    let mut merged = false;
    for s in &f.segments {
        let first = s
            .name
            .trim_start_matches('T')
            .split('+')
            .next()
            .and_then(|n| n.parse::<usize>().ok());
        if let Some(k) = first.filter(|k| (1..=7).contains(k)) {
            merged |= s.name.contains('+');
            segments[k - 1] = Some(stats(&s.summary));
        }
    }
    if let Some(t8) = &f.t8 {
        segments[7] = Some(stats(t8));
    }
    let flags = u8::from(r.sender.is_some())
        | u8::from(r.receiver.is_some()) << 1
        | u8::from(r.crosses_hosts()) << 2
        | u8::from(merged) << 3;
    let agent = |p: &Option<Place>| p.as_ref().map(|p| p.agent.clone()).unwrap_or_default();
    HostRecord {
        src: Some(f.key.src),
        sport: f.key.sport,
        dst: Some(f.key.dst),
        dport: f.key.dport,
        start_us: wall.unix_us(f.start_ns),
        end_us: wall.unix_us(f.end_ns),
        end_reason: match f.end_reason {
            EndReason::Idle => 1,
            EndReason::Active => 2,
            EndReason::End => 3,
            EndReason::Forced => 4,
        },
        record_seq: f.record_seq,
        segments,
        complete: f.complete,
        incomplete: f.incomplete,
        clock_uncertainty_ns: r.crosses_hosts().then(|| r.clock_uncertainty_ns()),
        flags,
        sender_agent: agent(&r.sender),
        receiver_agent: agent(&r.receiver),
    }
}
