//! Matching observations across layers by cumulative bytes — the sans-IO
//! core of stack-layer latency: events and the current time in, per-flow
//! segment statistics out, no clock read and no I/O here.
//!
//! Per flow (one direction of a TCP connection, named by its data's
//! sender → receiver) and per (layer, network namespace), observations
//! form a *track*: byte ranges `[B, E)` in stream position (sequence
//! numbers unwrapped to 64 bits) with their times. A track only moves
//! forward: a range at or below the highest end seen is a retransmission
//! or reordering and is skipped, a partly old one is clipped — the spec's
//! rule that keeps matching O(n) (`spec: matching packets across layers`).
//!
//! *Anchors* are the bytes whose passage is timed: with sampling, the grid
//! bytes (sequence number a multiple of N) that every layer reports; without
//! it, the last byte of every send and every read. Layer j's time for anchor
//! p is the time of its observation with `B ≤ p < E` — the spec's
//! `B_j ≤ E_i ≤ E_j` with `p = E_i − 1`. An anchor is resolved once every
//! track that should see it has moved past it; it counts only when every
//! one of them saw it (a byte that was retransmitted at some layer has no
//! time there), so a flow's segments always add up to its T8.
//!
//! Which tracks "should see it": the sender's layers in the sender
//! socket's namespace, the receiver's in the receiver's. Other namespaces
//! (a bridge or router namespace on the same kernel) are hops, not ends,
//! and are ignored.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;
use xdprobe_common::host::{StackEvent, layer as code};

use crate::hooks::Layer;
use crate::stack::stats::{Samples, Summary};

/// One direction of a TCP connection: the data's sender → receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FlowKey {
    pub src: IpAddr,
    pub sport: u16,
    pub dst: IpAddr,
    pub dport: u16,
}

impl FlowKey {
    /// From an event's addresses; IPv4-mapped IPv6 addresses (a dual-stack
    /// socket talking IPv4) become IPv4, as the packets' headers say.
    pub fn of(ev: &StackEvent) -> Option<FlowKey> {
        let addr = |b: &[u8; 16]| -> Option<IpAddr> {
            match u16::from(ev.family) {
                2 => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
                10 => {
                    let a = Ipv6Addr::from(*b);
                    Some(match a.to_ipv4_mapped() {
                        Some(v4) => IpAddr::V4(v4),
                        None => IpAddr::V6(a),
                    })
                }
                _ => None,
            }
        };
        Some(FlowKey {
            src: addr(&ev.saddr)?,
            sport: ev.sport,
            dst: addr(&ev.daddr)?,
            dport: ev.dport,
        })
    }

    pub fn reverse(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            sport: self.dport,
            dst: self.src,
            dport: self.sport,
        }
    }
}

/// Limits and timing of the matcher.
#[derive(Clone, Debug)]
pub struct MatcherConfig {
    /// The sampling grid the programs use (0/1: none).
    pub sample_bytes: u32,
    /// How long an anchor waits for late layers (the socket-layer send is
    /// reported when the call returns, after the lower layers).
    pub hold_ns: u64,
    /// A flow with no event for this long is reported and forgotten.
    pub idle_ns: u64,
    /// Report long-lived flows this often (0: only when they end).
    pub report_ns: u64,
    pub max_flows: usize,
    pub max_obs_per_track: usize,
    pub max_anchors: usize,
    /// The layers the probe observes (an anchor seen by all of them needs
    /// no wait).
    pub attached: Vec<Layer>,
    /// Keep every timed anchor for [`Matcher::take_samples`] (the raw
    /// samples file).
    pub raw_samples: bool,
    /// Count at most one timed byte per flow per this interval (0: all):
    /// the time-based half of sampling, bounding the records a fast flow
    /// makes. The byte grid bounds the kernel's work; this bounds ours.
    pub min_interval_ns: u64,
    /// Only flows whose socket layer was seen (the probe scopes by process
    /// or cgroup, which only socket-layer events carry).
    pub require_socket: bool,
}

impl Default for MatcherConfig {
    fn default() -> Self {
        MatcherConfig {
            sample_bytes: 0,
            hold_ns: 250_000_000,
            idle_ns: 30_000_000_000,
            report_ns: 0,
            max_flows: 65_536,
            max_obs_per_track: 8192,
            max_anchors: 8192,
            attached: Layer::ALL.to_vec(),
            raw_samples: false,
            min_interval_ns: 0,
            require_socket: false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Obs {
    b: u64,
    e: u64,
    t: u64,
}

#[derive(Debug)]
struct Track {
    layer: Layer,
    netns: u32,
    obs: VecDeque<Obs>,
    /// Highest end position seen (0: none yet).
    highest: u64,
    tgid: u32,
}

impl Track {
    /// Time of the observation holding byte `pos`; `None` when the track
    /// skipped it.
    fn time_of(&self, pos: u64) -> Option<u64> {
        let i = self.obs.partition_point(|o| o.e <= pos);
        self.obs.get(i).filter(|o| o.b <= pos).map(|o| o.t)
    }
}

/// Turns 32-bit sequence numbers into positions that only grow. Positions
/// start at 2^32 so a first event's neighbours below it stay positive.
#[derive(Debug)]
struct Unwrap {
    seq: u32,
    pos: u64,
}

impl Unwrap {
    fn new(seq: u32) -> Self {
        Unwrap { seq, pos: 1 << 32 }
    }

    fn pos(&mut self, seq: u32) -> u64 {
        let d = seq.wrapping_sub(self.seq) as i32;
        let p = self.pos.saturating_add_signed(i64::from(d));
        if d > 0 {
            self.seq = seq;
            self.pos = p;
        }
        p
    }
}

#[derive(Debug, Default)]
struct FlowStats {
    segs: BTreeMap<(Layer, Layer), Samples>,
    t8: Samples,
    complete: u64,
    incomplete: u64,
    negative: u64,
    /// Timed bytes left out by the time-based sampling.
    thinned: u64,
    /// Timed bytes the observation's edges cut ([`FlowReport::edge`]).
    edge: u64,
    /// First layer's time of the last byte counted.
    last_counted_ns: Option<u64>,
}

#[derive(Debug)]
struct Flow {
    unwrap: Unwrap,
    /// A window opened since this flow's last event: the stream moved on
    /// unwatched by an unknown amount (more than 2^31 bytes at 20 Gbit/s
    /// in a second), so the next event starts a new stretch of positions.
    resync: bool,
    tracks: Vec<Track>,
    /// Position → event time the anchor was created.
    anchors: BTreeMap<u64, u64>,
    first_ns: u64,
    last_ns: u64,
    closed_ns: Option<u64>,
    report_start_ns: u64,
    record_seq: u32,
    skipped: u64,
    stats: FlowStats,
}

/// Why a report was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndReason {
    /// The socket closed.
    End,
    /// No event for the idle timeout.
    Idle,
    /// Periodic report of a flow that goes on.
    Active,
    /// The probe stopped.
    Forced,
}

/// One end of a flow as the probe saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct End {
    pub netns: u32,
    /// Process of the socket layer's events (0: none seen).
    pub pid: u32,
}

/// One segment between two observed layers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Segment {
    /// `T1`…`T7`, or `T4+T5` when the layer between had no hook.
    pub name: String,
    pub from: Layer,
    pub to: Layer,
    #[serde(flatten)]
    pub summary: Summary,
}

/// A flow's report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowReport {
    #[serde(flatten)]
    pub key: FlowKey,
    /// First and last event of the report, monotonic ns.
    pub start_ns: u64,
    pub end_ns: u64,
    pub end_reason: EndReason,
    pub record_seq: u32,
    pub sender: Option<End>,
    pub receiver: Option<End>,
    /// Layers that timed this flow's bytes, in stream order.
    pub layers: Vec<Layer>,
    pub segments: Vec<Segment>,
    /// End to end (sender socket → receiver socket), when both are here.
    pub t8: Option<Summary>,
    /// Anchors timed at every layer / dropped because a layer skipped
    /// them (retransmitted, reordered) or never reported them.
    pub complete: u64,
    pub incomplete: u64,
    /// Observations skipped as retransmitted or out of order.
    pub skipped: u64,
    /// Timed bytes left out by the time-based sampling.
    pub thinned: u64,
    /// Timed bytes cut by the edges of the observation, not by the
    /// network: already past the first layers when the probe (or a
    /// sampling window) started, or let in after a window's entry closed.
    /// Kept apart from `incomplete`, which means a layer really skipped
    /// the byte.
    pub edge: u64,
}

/// One timed anchor: the byte, and when each layer passed it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RawSample {
    #[serde(flatten)]
    pub key: FlowKey,
    /// Stream position (sequence number, unwrapped, relative to 2^32 at
    /// the flow's first event).
    pub pos: u64,
    /// (layer, monotonic ns) in stream order.
    pub times: Vec<(Layer, u64)>,
}

/// Matcher-wide counters (for `--stats`, logs, Prometheus).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MatchCounters {
    pub events: u64,
    pub flows: u64,
    pub flows_dropped: u64,
    pub anchors_dropped: u64,
    pub obs_trimmed: u64,
    pub bad_events: u64,
}

/// Segment name for the layers `from` → `to` (adjacent or not).
pub fn segment_name(from: Layer, to: Layer) -> String {
    let (a, b) = (from.index() + 1, to.index());
    if b == a {
        format!("T{a}")
    } else {
        (a..=b)
            .map(|i| format!("T{i}"))
            .collect::<Vec<_>>()
            .join("+")
    }
}

pub struct Matcher {
    cfg: MatcherConfig,
    flows: HashMap<FlowKey, Flow>,
    counters: MatchCounters,
    raw: Vec<RawSample>,
    edges: Edges,
}

/// When the current observation window opened and its entry closed
/// (monotonic ns, the events' clock): what tells an anchor cut by the
/// window from one a layer skipped.
#[derive(Clone, Copy, Debug, Default)]
struct Edges {
    opened_ns: Option<u64>,
    closing_ns: Option<u64>,
    /// The previous window's entry closing: what came up between it and
    /// this window's opening was let in unwatched.
    prev_closing_ns: Option<u64>,
    /// Everything detached (the drain ended).
    closed: bool,
}

impl Edges {
    /// `missing`: per expected track in stream order, whether it has no
    /// time for the anchor. Cut at the start: only a prefix is missing
    /// (the byte had passed those layers before they were watched) and
    /// the anchor came up within the hold after the opening. Cut at the
    /// end: the anchor came up after the entry closed, or only a suffix
    /// is missing once everything was detached (the drain gave up on it).
    fn cut(&self, created: u64, missing: &[bool], hold_ns: u64) -> bool {
        if self.closing_ns.is_some_and(|c| created >= c) {
            return true;
        }
        if let (Some(c), Some(o)) = (self.prev_closing_ns, self.opened_ns)
            && created >= c
            && created < o
        {
            return true;
        }
        let last_seen = missing.iter().rposition(|m| !m);
        let suffix = last_seen.is_some_and(|i| i + 1 < missing.len())
            && missing[..=last_seen.unwrap_or(0)].iter().all(|m| !m);
        if self.closed && suffix {
            return true;
        }
        let Some(open) = self.opened_ns else {
            return false;
        };
        let first_seen = missing.iter().position(|m| !m).unwrap_or(missing.len());
        let prefix = first_seen > 0 && missing[first_seen..].iter().all(|m| !m);
        prefix && created >= open && created - open <= hold_ns
    }
}

impl Matcher {
    pub fn new(cfg: MatcherConfig) -> Matcher {
        Matcher {
            cfg,
            flows: HashMap::new(),
            counters: MatchCounters::default(),
            raw: Vec::new(),
            edges: Edges::default(),
        }
    }

    /// Observation (re)started at `now_ns`: the probe attached, or a
    /// sampling window opened. Bytes already past the first layers then
    /// are counted as `edge`, not `incomplete`.
    pub fn window_opened(&mut self, now_ns: u64) {
        // What the last window left waiting is settled under its own
        // edges, and its observations are dropped: positions after the
        // gap are a new stretch.
        let cfg = &self.cfg;
        for (key, flow) in self.flows.iter_mut() {
            resolve(key, flow, cfg, self.edges, now_ns, true, &mut self.raw);
            for t in &mut flow.tracks {
                t.obs.clear();
            }
            flow.resync = true;
        }
        self.edges = Edges {
            opened_ns: Some(now_ns),
            closing_ns: None,
            prev_closing_ns: self.edges.closing_ns,
            closed: false,
        };
    }

    /// The window's drain ended: every layer program is detached.
    pub fn window_closed(&mut self) {
        self.edges.closed = true;
    }

    /// The window's entry closed at `now_ns`: anchors that come up after
    /// it are cut by the window.
    pub fn window_closing(&mut self, now_ns: u64) {
        self.edges.closing_ns = Some(now_ns);
    }

    /// Whether an anchor that came up before `ns` still waits for a layer
    /// that has it to come (a window keeps the lower layers attached
    /// until none does).
    pub fn pending_before(&self, ns: u64) -> bool {
        self.flows.values().any(|flow| {
            let tracks = expected(flow);
            flow.anchors.iter().any(|(&pos, &created)| {
                created < ns && !tracks.iter().all(|&i| flow.tracks[i].highest > pos)
            })
        })
    }

    /// Resolves what the layers have all passed (no reports): the drain
    /// of a closing window.
    pub fn settle(&mut self, now_ns: u64) {
        let cfg = &self.cfg;
        let edges = self.edges;
        for (key, flow) in self.flows.iter_mut() {
            resolve(key, flow, cfg, edges, now_ns, false, &mut self.raw);
        }
    }

    /// The timed anchors since the last call (only with `raw_samples`).
    pub fn take_samples(&mut self) -> Vec<RawSample> {
        std::mem::take(&mut self.raw)
    }

    pub fn counters(&self) -> MatchCounters {
        self.counters
    }

    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    pub fn on_event(&mut self, ev: &StackEvent) {
        self.counters.events += 1;
        let Some(key) = FlowKey::of(ev) else {
            self.counters.bad_events += 1;
            return;
        };
        if ev.layer == code::CLOSE {
            for k in [key, key.reverse()] {
                if let Some(f) = self.flows.get_mut(&k) {
                    f.closed_ns.get_or_insert(ev.ts_ns);
                }
            }
            return;
        }
        let Some(layer) = Layer::from_code(ev.layer) else {
            self.counters.bad_events += 1;
            return;
        };
        if !self.flows.contains_key(&key) && self.flows.len() >= self.cfg.max_flows {
            self.counters.flows_dropped += 1;
            return;
        }
        let cfg = &self.cfg;
        let counters = &mut self.counters;
        let flow = self.flows.entry(key).or_insert_with(|| {
            counters.flows += 1;
            Flow {
                unwrap: Unwrap::new(ev.seq),
                resync: false,
                tracks: Vec::new(),
                anchors: BTreeMap::new(),
                first_ns: ev.ts_ns,
                last_ns: ev.ts_ns,
                closed_ns: None,
                report_start_ns: ev.ts_ns,
                record_seq: 0,
                skipped: 0,
                stats: FlowStats::default(),
            }
        });
        flow.first_ns = flow.first_ns.min(ev.ts_ns);
        flow.last_ns = flow.last_ns.max(ev.ts_ns);
        if flow.resync {
            flow.resync = false;
            let top = flow.tracks.iter().map(|t| t.highest).max().unwrap_or(0);
            flow.unwrap = Unwrap {
                seq: ev.seq,
                pos: top.max(flow.unwrap.pos) + (1 << 32),
            };
        }
        let b0 = flow.unwrap.pos(ev.seq);
        let len = u64::from(ev.end.wrapping_sub(ev.seq));
        if len == 0 || len > 1 << 30 {
            counters.bad_events += 1;
            return;
        }
        let e = b0 + len;

        let ti = match flow
            .tracks
            .iter()
            .position(|t| t.layer == layer && t.netns == ev.netns)
        {
            Some(i) => i,
            None if flow.tracks.len() < 4 * Layer::ALL.len() => {
                flow.tracks.push(Track {
                    layer,
                    netns: ev.netns,
                    obs: VecDeque::new(),
                    highest: 0,
                    tgid: 0,
                });
                flow.tracks.len() - 1
            }
            None => {
                counters.bad_events += 1;
                return;
            }
        };
        let track = &mut flow.tracks[ti];
        if ev.tgid != 0 {
            track.tgid = ev.tgid;
        }
        if e <= track.highest {
            flow.skipped += 1;
            return;
        }
        let b = b0.max(track.highest);
        track.highest = e;
        track.obs.push_back(Obs { b, e, t: ev.ts_ns });
        if track.obs.len() > cfg.max_obs_per_track {
            track.obs.pop_front();
            counters.obs_trimmed += 1;
        }

        // Anchors this observation brings; none once a window's entry has
        // closed: those bytes were let in unwatched (the observation
        // still moves the track, for the anchors already waiting).
        if self.edges.closing_ns.is_some_and(|c| ev.ts_ns >= c) {
            return;
        }
        let n = cfg.sample_bytes;
        if n > 1 {
            let first_seq = ev.seq.wrapping_add((b - b0) as u32);
            let r = first_seq % n;
            let mut p = b + u64::from(if r == 0 { 0 } else { n - r });
            let mut added = 0;
            while p < e && added < 64 {
                flow.anchors.entry(p).or_insert(ev.ts_ns);
                p += u64::from(n);
                added += 1;
            }
        } else if matches!(layer, Layer::SockTx | Layer::SockRx) {
            flow.anchors.entry(e - 1).or_insert(ev.ts_ns);
        }
        if flow.anchors.len() > cfg.max_anchors {
            // A fast flow fills the bound between two advances: settle
            // what every layer has passed before dropping anything.
            resolve(&key, flow, cfg, self.edges, ev.ts_ns, false, &mut self.raw);
        }
        while flow.anchors.len() > cfg.max_anchors {
            flow.anchors.pop_first();
            counters.anchors_dropped += 1;
            flow.stats.incomplete += 1;
        }
    }

    /// Resolves what can be resolved at `now_ns` (monotonic, the clock of
    /// the events) and reports flows that ended, idled or are due.
    pub fn advance(&mut self, now_ns: u64, out: &mut impl FnMut(FlowReport)) {
        let cfg = &self.cfg;
        let raw = &mut self.raw;
        let mut gone = Vec::new();
        for (key, flow) in self.flows.iter_mut() {
            resolve(key, flow, cfg, self.edges, now_ns, false, raw);
            trim(flow, cfg, now_ns);
            let ended = flow
                .closed_ns
                .is_some_and(|c| now_ns.saturating_sub(c) > cfg.hold_ns);
            let idle = now_ns.saturating_sub(flow.last_ns) > cfg.idle_ns;
            if ended || idle {
                resolve(key, flow, cfg, self.edges, now_ns, true, raw);
                let reason = if ended {
                    EndReason::End
                } else {
                    EndReason::Idle
                };
                out(report(key, flow, reason));
                gone.push(*key);
            } else if cfg.report_ns > 0
                && now_ns.saturating_sub(flow.report_start_ns) >= cfg.report_ns
            {
                let r = report(key, flow, EndReason::Active);
                if (r.complete > 0 || r.incomplete > 0) && in_scope(flow, cfg) {
                    out(r);
                }
                flow.stats = FlowStats::default();
                flow.report_start_ns = now_ns;
                flow.record_seq += 1;
            }
        }
        for k in gone {
            self.flows.remove(&k);
        }
    }

    /// Reports every flow (the probe stops).
    pub fn finish(&mut self, now_ns: u64, out: &mut impl FnMut(FlowReport)) {
        let cfg = &self.cfg;
        let mut keys: Vec<_> = self.flows.keys().copied().collect();
        keys.sort();
        for k in keys {
            if let Some(mut flow) = self.flows.remove(&k) {
                resolve(&k, &mut flow, cfg, self.edges, now_ns, true, &mut self.raw);
                if in_scope(&flow, cfg) {
                    out(report(&k, &flow, EndReason::Forced));
                }
            }
        }
    }
}

/// With a process or cgroup scope, only flows whose socket layer the
/// kernel let through.
fn in_scope(flow: &Flow, cfg: &MatcherConfig) -> bool {
    !cfg.require_socket
        || flow
            .tracks
            .iter()
            .any(|t| matches!(t.layer, Layer::SockTx | Layer::TcpTx | Layer::SockRx))
}

/// The namespace of a flow's end: that of its socket-layer tracks, else
/// the only namespace its other tracks of that side have.
fn end_netns(flow: &Flow, tx: bool) -> Option<u32> {
    let side = |t: &&Track| t.layer.is_tx() == tx;
    let sock = |t: &&Track| {
        matches!(
            t.layer,
            Layer::SockTx | Layer::TcpTx | Layer::TcpRx | Layer::SockRx
        )
    };
    if let Some(t) = flow.tracks.iter().filter(side).find(sock) {
        return Some(t.netns);
    }
    let mut it = flow.tracks.iter().filter(side).map(|t| t.netns);
    let first = it.next()?;
    it.all(|n| n == first).then_some(first)
}

/// The tracks that time this flow's anchors, in stream order.
fn expected(flow: &Flow) -> Vec<usize> {
    let tx = end_netns(flow, true);
    let rx = end_netns(flow, false);
    let mut v: Vec<usize> = (0..flow.tracks.len())
        .filter(|&i| {
            let t = &flow.tracks[i];
            Some(t.netns) == if t.layer.is_tx() { tx } else { rx }
        })
        .collect();
    v.sort_by_key(|&i| flow.tracks[i].layer);
    v
}

fn resolve(
    key: &FlowKey,
    flow: &mut Flow,
    cfg: &MatcherConfig,
    edges: Edges,
    now_ns: u64,
    force: bool,
    raw: &mut Vec<RawSample>,
) {
    let tracks = expected(flow);
    if tracks.is_empty() {
        return;
    }
    let all_here = cfg
        .attached
        .iter()
        .all(|l| tracks.iter().any(|&i| flow.tracks[i].layer == *l));
    let mut times: Vec<(Layer, u64)> = Vec::with_capacity(tracks.len());
    let mut gaps: Vec<bool> = Vec::with_capacity(tracks.len());
    while let Some((&pos, &created)) = flow.anchors.first_key_value() {
        let passed = tracks.iter().all(|&i| flow.tracks[i].highest > pos);
        let old = now_ns.saturating_sub(created) > cfg.hold_ns;
        // Every layer the probe has saw it: no late event can change it.
        // Otherwise wait out the hold: a late layer may still report.
        if !(passed && all_here || old || force) {
            break;
        }
        flow.anchors.pop_first();
        times.clear();
        gaps.clear();
        for &i in &tracks {
            match flow.tracks[i].time_of(pos) {
                Some(t) => {
                    times.push((flow.tracks[i].layer, t));
                    gaps.push(false);
                }
                None => gaps.push(true),
            }
        }
        let missing = !passed || gaps.iter().any(|&g| g);
        if missing || times.len() < 2 {
            if edges.cut(created, &gaps, cfg.hold_ns) {
                flow.stats.edge += 1;
            } else {
                flow.stats.incomplete += 1;
            }
            continue;
        }
        let t0 = times[0].1;
        if cfg.min_interval_ns > 0
            && flow
                .stats
                .last_counted_ns
                .is_some_and(|l| t0.saturating_sub(l) < cfg.min_interval_ns)
        {
            flow.stats.thinned += 1;
            continue;
        }
        flow.stats.last_counted_ns = Some(t0);
        flow.stats.complete += 1;
        if cfg.raw_samples {
            raw.push(RawSample {
                key: *key,
                pos,
                times: times.clone(),
            });
        }
        for w in times.windows(2) {
            let ((la, ta), (lb, tb)) = (w[0], w[1]);
            if tb < ta {
                flow.stats.negative += 1;
            }
            flow.stats
                .segs
                .entry((la, lb))
                .or_default()
                .add(tb.saturating_sub(ta));
        }
        let (l0, t0) = times[0];
        let (ln, tn) = times[times.len() - 1];
        if l0 == Layer::SockTx && ln == Layer::SockRx {
            flow.stats.t8.add(tn.saturating_sub(t0));
        }
    }
}

/// Forgets observations no anchor can need any more: older than the hold
/// and below every pending anchor.
fn trim(flow: &mut Flow, cfg: &MatcherConfig, now_ns: u64) {
    let low = flow.anchors.first_key_value().map_or(u64::MAX, |(&p, _)| p);
    let cutoff = now_ns.saturating_sub(cfg.hold_ns);
    for t in &mut flow.tracks {
        while t
            .obs
            .front()
            .is_some_and(|o| o.e <= low && o.t < cutoff && t.obs.len() > 1)
        {
            t.obs.pop_front();
        }
    }
}

fn report(key: &FlowKey, flow: &Flow, reason: EndReason) -> FlowReport {
    let side = |tx: bool| {
        end_netns(flow, tx).map(|netns| End {
            netns,
            pid: flow
                .tracks
                .iter()
                .filter(|t| t.layer.is_tx() == tx && t.netns == netns && t.tgid != 0)
                .map(|t| t.tgid)
                .next()
                .unwrap_or(0),
        })
    };
    let mut layers: Vec<Layer> = expected(flow)
        .iter()
        .map(|&i| flow.tracks[i].layer)
        .collect();
    layers.dedup();
    let segments = flow
        .stats
        .segs
        .iter()
        .map(|(&(from, to), s)| Segment {
            name: segment_name(from, to),
            from,
            to,
            summary: s.summary(),
        })
        .collect();
    FlowReport {
        key: *key,
        start_ns: flow.report_start_ns.max(flow.first_ns),
        end_ns: flow.last_ns,
        end_reason: reason,
        record_seq: flow.record_seq,
        sender: side(true),
        receiver: side(false),
        layers,
        segments,
        t8: (!flow.stats.t8.is_empty()).then(|| flow.stats.t8.summary()),
        complete: flow.stats.complete,
        incomplete: flow.stats.incomplete,
        skipped: flow.skipped,
        thinned: flow.stats.thinned,
        edge: flow.stats.edge,
    }
}

#[cfg(test)]
mod tests;
