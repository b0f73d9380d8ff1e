//! Resolving anchors (the time each layer passed a timed byte) into
//! segment samples, forgetting what no anchor needs, and reports.

use crate::hooks::Layer;
use crate::stack::matcher::state::{EARLY_NS, Edges, Flow, Totals, Track, held_out};
use crate::stack::matcher::types::{
    End, EndReason, FlowKey, FlowReport, MatcherConfig, RawSample, Segment, segment_name,
};

/// With a process or cgroup scope, only flows whose socket layer the
/// kernel let through.
pub(super) fn in_scope(flow: &Flow, cfg: &MatcherConfig) -> bool {
    !cfg.require_socket
        || flow
            .tracks
            .iter()
            .any(|t| matches!(t.layer, Layer::SockTx | Layer::TcpTx | Layer::SockRx))
}

/// The namespace of a flow's end: that of its socket-layer tracks, else
/// the only namespace its other tracks of that side have.
pub(super) fn end_netns(flow: &Flow, tx: bool) -> Option<u32> {
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
pub(super) fn expected(flow: &Flow) -> Vec<usize> {
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

pub(super) fn resolve(
    key: &FlowKey,
    flow: &mut Flow,
    cfg: &MatcherConfig,
    edges: Edges,
    now_ns: u64,
    force: bool,
    totals: &mut Totals,
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
            flow.give_up(pos);
            // A layer's time forgotten as older than the hold: the byte
            // passed it that long ago and is not through yet (a read that
            // ends on it came after the hold).
            let aged = tracks
                .iter()
                .zip(&gaps)
                .any(|(&i, &g)| g && pos < flow.tracks[i].aged_to);
            if edges.cut(created, &gaps, cfg.hold_ns) {
                flow.stats.edge += 1;
            } else if aged || held_out(&edges, old, &gaps) {
                flow.stats.cut += 1;
                totals.cut += 1;
            } else {
                flow.stats.incomplete += 1;
            }
            continue;
        }
        count(key, flow, cfg, edges, pos, &times, totals);
    }
}

/// A byte every layer timed: into the flow's segments and T8 (unless the
/// time-based sampling leaves it out), the raw samples, and the early /
/// later T8 split of windows.
fn count(
    key: &FlowKey,
    flow: &mut Flow,
    cfg: &MatcherConfig,
    edges: Edges,
    pos: u64,
    times: &[(Layer, u64)],
    totals: &mut Totals,
) {
    let t0 = times[0].1;
    if cfg.min_interval_ns > 0
        && flow
            .stats
            .last_counted_ns
            .is_some_and(|l| t0.saturating_sub(l) < cfg.min_interval_ns)
    {
        flow.stats.thinned += 1;
        return;
    }
    flow.stats.last_counted_ns = Some(t0);
    flow.stats.complete += 1;
    if cfg.raw_samples {
        totals.raw.push(RawSample {
            key: *key,
            pos,
            times: times.to_vec(),
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
        let t8 = tn.saturating_sub(t0);
        flow.stats.t8.add(t8);
        let early = edges
            .opened_ns
            .is_some_and(|o| t0 >= o && t0 - o < EARLY_NS);
        if early {
            totals.t8_early.add(t8);
        } else {
            totals.t8_rest.add(t8);
        }
    }
}

/// Forgets observations no anchor can need any more: older than the hold
/// and below every pending anchor.
pub(super) fn trim(flow: &mut Flow, cfg: &MatcherConfig, now_ns: u64) {
    let low = flow.anchors.first_key_value().map_or(u64::MAX, |(&p, _)| p);
    let cutoff = now_ns.saturating_sub(cfg.hold_ns);
    for t in &mut flow.tracks {
        while t
            .obs
            .front()
            .is_some_and(|o| o.e <= low && o.t < cutoff && t.obs.len() > 1)
        {
            if let Some(o) = t.obs.pop_front() {
                t.aged_to = t.aged_to.max(o.e);
            }
        }
    }
}

pub(super) fn report(key: &FlowKey, flow: &Flow, reason: EndReason) -> FlowReport {
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
        cut: flow.stats.cut,
    }
}
