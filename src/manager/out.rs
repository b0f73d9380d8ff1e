//! Where the manager's results go: JSON lines (flow reports, clock
//! rounds, joined records), IPFIX host-stack records to the configured
//! collectors, the stacked-bar SVG, the Prometheus metrics, and the join
//! with the wire probe's records (followed in their JSON file as it
//! grows). Called from the main loop only; nothing here blocks for long.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{Value, json};
use xdprobe_exporter::encode::host::HostRecord;
use xdprobe_exporter::host_sender::HostSender;
use xdprobe_host::fleet::join::{Host, Joiner, Wire};
use xdprobe_host::fleet::manager::{CrossReport, FleetOut, Place};
use xdprobe_host::fleet::metrics::ManagerMetrics;
use xdprobe_host::stack::agent::WallClock;
use xdprobe_host::stack::matcher::FlowReport;
use xdprobe_host::stack::output::{self, Comms};

use super::clock::Round;

/// Reports kept for the picture (the busiest 40 are drawn).
const PLOT_KEEP: usize = 256;
const PLOT_EVERY: Duration = Duration::from_secs(5);
/// Wire-record bytes read per tick at most.
const FOLLOW_BUDGET: usize = 4 << 20;

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
    ipfix: HostSender,
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
                xdprobe_exporter::safe_file::create_new_or_truncate(p)?,
            )),
        };
        let ipfix = HostSender::open(&o.collectors, o.pen, o.observation_domain, o.mtu)
            .context("export.collectors")?;
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
            self.pending
                .push(xdprobe_host::fleet::record::host_record(r, &self.wall));
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
        let recs = std::mem::take(&mut self.pending);
        let before = self.ipfix.errors;
        self.ipfix.send(&recs);
        self.ipfix_errors += self.ipfix.errors - before;
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
