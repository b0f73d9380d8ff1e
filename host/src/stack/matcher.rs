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

mod resolve;
mod state;
mod types;

use std::collections::{BTreeMap, HashMap, VecDeque};

use xdprobe_common::host::{StackEvent, layer as code};

use crate::hooks::Layer;
use crate::stack::stats::Summary;
use resolve::{expected, in_scope, report, resolve, trim};
pub use state::EARLY_NS;
use state::{Edges, Flow, FlowStats, Obs, Totals, Track, Unwrap};
pub use types::{
    End, EndReason, FlowKey, FlowReport, MatchCounters, MatcherConfig, RawSample, Segment,
    segment_name,
};

pub struct Matcher {
    cfg: MatcherConfig,
    flows: HashMap<FlowKey, Flow>,
    counters: MatchCounters,
    totals: Totals,
    edges: Edges,
}

impl Matcher {
    pub fn new(cfg: MatcherConfig) -> Matcher {
        Matcher {
            cfg,
            flows: HashMap::new(),
            counters: MatchCounters::default(),
            totals: Totals::default(),
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
            resolve(key, flow, cfg, self.edges, now_ns, true, &mut self.totals);
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

    /// How long a byte waits for its late layers before it is given up
    /// as slow (`cut`); a closing window's drain waits no longer.
    pub fn hold(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.cfg.hold_ns)
    }

    /// Resolves what the layers have all passed (no reports): the drain
    /// of a closing window.
    pub fn settle(&mut self, now_ns: u64) {
        let cfg = &self.cfg;
        let edges = self.edges;
        for (key, flow) in self.flows.iter_mut() {
            resolve(key, flow, cfg, edges, now_ns, false, &mut self.totals);
        }
    }

    /// The timed anchors since the last call (only with `raw_samples`).
    pub fn take_samples(&mut self) -> Vec<RawSample> {
        std::mem::take(&mut self.totals.raw)
    }

    pub fn counters(&self) -> MatchCounters {
        MatchCounters {
            cut: self.totals.cut,
            ..self.counters
        }
    }

    /// T8 of the bytes that entered within 5 ms of a window's opening
    /// (the probe's start is one) and of those that entered later, all
    /// flows: whether attaching disturbs what it times.
    pub fn window_latency(&self) -> (Summary, Summary) {
        (
            self.totals.t8_early.summary(),
            self.totals.t8_rest.summary(),
        )
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
            // The event names the closing socket's local end first: it
            // sends the flow `key` and receives its reverse.
            if let Some(f) = self.flows.get_mut(&key) {
                f.closed_tx.get_or_insert(ev.ts_ns);
            }
            if let Some(f) = self.flows.get_mut(&key.reverse()) {
                f.closed_rx.get_or_insert(ev.ts_ns);
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
                gave_up: Default::default(),
                first_ns: ev.ts_ns,
                last_ns: ev.ts_ns,
                closed_tx: None,
                closed_rx: None,
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
                    aged_to: 0,
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
                if flow.may_anchor(p) {
                    flow.anchors.entry(p).or_insert(ev.ts_ns);
                }
                p += u64::from(n);
                added += 1;
            }
        } else if matches!(layer, Layer::SockTx | Layer::SockRx) && flow.may_anchor(e - 1) {
            flow.anchors.entry(e - 1).or_insert(ev.ts_ns);
        }
        if flow.anchors.len() > cfg.max_anchors {
            // A fast flow fills the bound between two advances: settle
            // what every layer has passed before dropping anything.
            resolve(
                &key,
                flow,
                cfg,
                self.edges,
                ev.ts_ns,
                false,
                &mut self.totals,
            );
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
        let raw = &mut self.totals;
        let mut gone = Vec::new();
        for (key, flow) in self.flows.iter_mut() {
            resolve(key, flow, cfg, self.edges, now_ns, false, raw);
            trim(flow, cfg, now_ns);
            let ended = flow
                .ended_at()
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
                resolve(
                    &k,
                    &mut flow,
                    cfg,
                    self.edges,
                    now_ns,
                    true,
                    &mut self.totals,
                );
                if in_scope(&flow, cfg) {
                    out(report(&k, &flow, EndReason::Forced));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
