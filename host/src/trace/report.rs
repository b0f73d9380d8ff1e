//! `xdprobe trace report`: per-step latency from trails.
//!
//! A step is a pair of consecutive points on a trail. Trails are grouped
//! by echo direction (request / reply) when they are echo probes, else
//! all together. Per group:
//! - the most common path, and for the trails that took exactly it, each
//!   step's latency in path order (what the waterfall draws);
//! - every step seen on any trail (a pair of point names), however often;
//! - queueing: from `qdisc:qdisc_enqueue` to the next `qdisc:qdisc_dequeue`
//!   on the same trail (the time the packet sat in the qdisc), or to the
//!   next `net:net_dev_start_xmit` when no dequeue was reported for it
//!   (`qdisc_dequeue` names only the first packet of a bulk dequeue).
//!
//! Figures are min / mean / p50 / p99 / max in µs (`stack::stats`).

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, Write};

use serde::Serialize;

use crate::stack::stats::{Samples, Summary};
use crate::trace::record::TrailRecord;
use crate::trace::segments::{self, JoinStats};

pub const ENQUEUE: &str = "qdisc:qdisc_enqueue";
pub const DEQUEUE: &str = "qdisc:qdisc_dequeue";
/// Where queueing ends when the qdisc reported no dequeue for the packet
/// (a bulk dequeue names only its first packet).
pub const START_XMIT: &str = "net:net_dev_start_xmit";

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepStat {
    pub from: String,
    pub to: String,
    #[serde(flatten)]
    pub summary: Summary,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupReport {
    /// `request`, `reply`, or `all`.
    pub name: String,
    pub trails: u64,
    /// Trails by how they ended.
    pub ends: BTreeMap<String, u64>,
    /// Dropped trails by the kernel's reason.
    pub drops: BTreeMap<String, u64>,
    /// Trails of packets cut into segments (GSO), left out of everything
    /// below: their segments' trails carry their steps
    /// (`trace::segments`).
    pub segmented: u64,
    /// The most common sequence of points, how many trails took it, and
    /// which share of the group's trails that is: a path taken by few
    /// is not the path of the packets, and the report says so.
    pub common_path: Vec<String>,
    pub common_count: u64,
    pub common_share: f64,
    /// The common path's steps in order (trails on that path only).
    pub path_steps: Vec<StepStat>,
    /// First to last point of the common path.
    pub path_total: Option<Summary>,
    /// Every step on any trail, most frequent first.
    pub steps: Vec<StepStat>,
    /// qdisc_enqueue → qdisc_dequeue (or → net_dev_start_xmit), and the
    /// share of the group's trails it was measured on.
    pub queueing: Option<Summary>,
    pub queueing_share: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub groups: Vec<GroupReport>,
    /// Segments joined to the packets they were cut from.
    pub segmentation: JoinStats,
}

/// Below this share of its group's trails, the most common path is
/// reported as such, not as the packets' path.
pub const FEW: f64 = 0.5;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("line {line}: {source}")]
    Parse {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("reading the trails")]
    Io(#[from] io::Error),
}

/// Reads trails, one JSON object per line (blank lines skipped).
pub fn read_trails(r: impl BufRead) -> Result<Vec<TrailRecord>, ReportError> {
    let mut out = Vec::new();
    for (i, l) in r.lines().enumerate() {
        let l = l?;
        if l.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(&l).map_err(|source| ReportError::Parse {
                line: i + 1,
                source,
            })?,
        );
    }
    Ok(out)
}

fn group_of(t: &TrailRecord) -> &'static str {
    match t.probe {
        Some(p) => p.dir.as_str(),
        None => "all",
    }
}

fn group(name: &str, all: &[&TrailRecord]) -> GroupReport {
    let (cut, trails): (Vec<&TrailRecord>, Vec<&TrailRecord>) =
        all.iter().partition(|t| t.segmented > 0);
    let mut ends: BTreeMap<String, u64> = BTreeMap::new();
    let mut drops: BTreeMap<String, u64> = BTreeMap::new();
    let mut paths: HashMap<Vec<&str>, u64> = HashMap::new();
    let mut pairs: HashMap<(&str, &str), Samples> = HashMap::new();
    let mut queueing = Samples::default();
    let mut queued = 0u64;
    for t in &trails {
        *ends.entry(t.end.clone()).or_default() += 1;
        if let Some(n) = t.drop_reason {
            let k = t.drop_reason_name.clone().unwrap_or_else(|| n.to_string());
            *drops.entry(k).or_default() += 1;
        }
        *paths.entry(t.path()).or_default() += 1;
        for w in t.steps.windows(2) {
            pairs
                .entry((w[0].point.as_str(), w[1].point.as_str()))
                .or_default()
                .add(w[1].t_ns.saturating_sub(w[0].t_ns));
        }
        let mut enq = None;
        let before = queueing.count();
        for s in &t.steps {
            if s.point == ENQUEUE {
                enq = Some(s.t_ns);
            } else if (s.point == DEQUEUE || s.point == START_XMIT)
                && let Some(e) = enq.take()
            {
                queueing.add(s.t_ns.saturating_sub(e));
            }
        }
        if queueing.count() > before {
            queued += 1;
        }
    }
    // Most common path; ties go to the longer, then the first in order.
    let (common, common_count) = paths
        .iter()
        .max_by(|a, b| {
            a.1.cmp(b.1)
                .then(a.0.len().cmp(&b.0.len()))
                .then(b.0.cmp(a.0))
        })
        .map(|(p, n)| (p.clone(), *n))
        .unwrap_or_default();
    let mut per_pos: Vec<Samples> = vec![Samples::default(); common.len().saturating_sub(1)];
    let mut total = Samples::default();
    for t in trails.iter().filter(|t| t.path() == common) {
        for (i, w) in t.steps.windows(2).enumerate() {
            per_pos[i].add(w[1].t_ns.saturating_sub(w[0].t_ns));
        }
        if let (Some(a), Some(b)) = (t.steps.first(), t.steps.last()) {
            total.add(b.t_ns.saturating_sub(a.t_ns));
        }
    }
    let path_steps = per_pos
        .iter()
        .enumerate()
        .map(|(i, s)| StepStat {
            from: common[i].to_owned(),
            to: common[i + 1].to_owned(),
            summary: s.summary(),
        })
        .collect();
    let mut steps: Vec<(&(&str, &str), &Samples)> = pairs.iter().collect();
    steps.sort_by(|a, b| b.1.count().cmp(&a.1.count()).then(a.0.cmp(b.0)));
    let share = |n: u64| {
        if trails.is_empty() {
            0.0
        } else {
            n as f64 / trails.len() as f64
        }
    };
    GroupReport {
        name: name.to_owned(),
        trails: trails.len() as u64,
        ends,
        drops,
        segmented: cut.len() as u64,
        common_path: common.iter().map(|s| s.to_string()).collect(),
        common_count,
        common_share: share(common_count),
        path_steps,
        path_total: (!total.is_empty()).then(|| total.summary()),
        steps: steps
            .into_iter()
            .map(|((a, b), s)| StepStat {
                from: a.to_string(),
                to: b.to_string(),
                summary: s.summary(),
            })
            .collect(),
        queueing: (!queueing.is_empty()).then(|| queueing.summary()),
        queueing_share: share(queued),
    }
}

/// The report over `trails`: request, reply, then the rest, after the
/// segments of GSO packets were joined to them (`trace::segments`).
pub fn report(trails: &[TrailRecord]) -> Report {
    let mut trails = trails.to_vec();
    let segmentation = segments::join(&mut trails);
    let mut groups = Vec::new();
    for name in ["request", "reply", "all"] {
        let g: Vec<&TrailRecord> = trails.iter().filter(|t| group_of(t) == name).collect();
        if !g.is_empty() {
            groups.push(group(name, &g));
        }
    }
    Report {
        groups,
        segmentation,
    }
}

fn short(point: &str) -> &str {
    point.split_once(':').map_or(point, |(_, n)| n)
}

fn row(w: &mut dyn Write, label: &str, s: &Summary) -> io::Result<()> {
    writeln!(
        w,
        "  {label:<52} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
        s.samples, s.min_us, s.mean_us, s.p50_us, s.p99_us, s.max_us
    )
}

/// The report as text tables.
pub fn write_text(w: &mut dyn Write, r: &Report) -> io::Result<()> {
    if r.groups.is_empty() {
        writeln!(w, "no trails")?;
    }
    for g in &r.groups {
        let ends: Vec<String> = g.ends.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(
            w,
            "== {}: {} trails ({})",
            g.name,
            g.trails,
            ends.join(", ")
        )?;
        if !g.drops.is_empty() {
            let d: Vec<String> = g.drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
            writeln!(w, "drops: {}", d.join(", "))?;
        }
        if g.segmented > 0 {
            writeln!(
                w,
                "segmented: {} packets were cut into segments (GSO); their {} segments' trails begin with their steps, and they are left out below",
                g.segmented, r.segmentation.segments
            )?;
        }
        let path: Vec<&str> = g.common_path.iter().map(|p| short(p)).collect();
        let few = g.common_share < FEW;
        writeln!(
            w,
            "most common path ({} of {} trails, {:.1} %){}: {}",
            g.common_count,
            g.trails,
            100.0 * g.common_share,
            if few {
                " — taken by few: the steps below are of these trails only, not the packets' path"
            } else {
                ""
            },
            path.join(" → ")
        )?;
        let head = format!(
            "  {:<52} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "step (µs)", "n", "min", "mean", "p50", "p99", "max"
        );
        writeln!(w, "{head}")?;
        for s in &g.path_steps {
            row(
                w,
                &format!("{} → {}", short(&s.from), short(&s.to)),
                &s.summary,
            )?;
        }
        if let Some(t) = &g.path_total {
            let label = if few {
                "first to last point (these trails)"
            } else {
                "whole path"
            };
            row(w, label, t)?;
        }
        if let Some(q) = &g.queueing {
            row(
                w,
                &format!(
                    "queueing (enqueue → dequeue; {:.1} % of trails)",
                    100.0 * g.queueing_share
                ),
                q,
            )?;
        }
        let others: Vec<&StepStat> = g
            .steps
            .iter()
            .filter(|s| {
                !g.path_steps
                    .iter()
                    .any(|p| p.from == s.from && p.to == s.to)
            })
            .collect();
        if !others.is_empty() {
            writeln!(w, "other steps (all trails):")?;
            for s in others {
                row(
                    w,
                    &format!("{} → {}", short(&s.from), short(&s.to)),
                    &s.summary,
                )?;
            }
        }
        writeln!(w)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::echo::Direction;
    use crate::trace::record::{ProbeRecord, StepRecord};

    fn trail(dir: Option<Direction>, steps: &[(&str, u64)]) -> TrailRecord {
        TrailRecord {
            first_us: 0,
            end: "consumed".into(),
            drop_reason: None,
            drop_reason_name: None,
            len: 60,
            flow: None,
            probe: dir.map(|dir| ProbeRecord {
                run: 1,
                seq: 0,
                dir,
            }),
            lost_steps: 0,
            mono_ns: None,
            tcp: None,
            segment_of: None,
            segmented: 0,
            steps: steps
                .iter()
                .map(|&(p, t)| StepRecord {
                    point: p.into(),
                    t_ns: t,
                    netns: 0,
                    ifindex: 0,
                    cpu: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn steps_paths_and_queueing() {
        let q = |t0: u64| {
            trail(
                Some(Direction::Request),
                &[
                    ("net:net_dev_queue", 0),
                    (ENQUEUE, 1_000),
                    (DEQUEUE, 1_000 + t0),
                    ("net:net_dev_start_xmit", 2_000 + t0),
                ],
            )
        };
        let mut trails: Vec<TrailRecord> = (1..=9).map(|i| q(i * 10_000)).collect();
        // A dropped one: another path.
        trails.push(trail(
            Some(Direction::Request),
            &[("net:net_dev_queue", 0), ("skb:kfree_skb", 500)],
        ));
        trails.push(trail(
            Some(Direction::Reply),
            &[("net:net_dev_queue", 0), ("net:net_dev_start_xmit", 700)],
        ));
        let r = report(&trails);
        assert_eq!(r.groups.len(), 2);
        let g = &r.groups[0];
        assert_eq!(
            (g.name.as_str(), g.trails, g.common_count),
            ("request", 10, 9)
        );
        assert_eq!(
            g.common_path,
            [
                "net:net_dev_queue",
                ENQUEUE,
                DEQUEUE,
                "net:net_dev_start_xmit"
            ]
        );
        assert_eq!(g.path_steps.len(), 3);
        assert_eq!(g.path_steps[0].summary.mean_us, 1.0);
        assert_eq!(g.path_steps[1].summary.min_us, 10.0);
        assert_eq!(g.path_steps[1].summary.max_us, 90.0);
        assert!((g.path_steps[1].summary.p50_us - 50.0).abs() <= 0.25);
        let qd = g.queueing.unwrap();
        assert_eq!((qd.samples, qd.mean_us), (9, 50.0));
        assert!(g.steps.iter().any(|s| s.to == "skb:kfree_skb"));
        assert_eq!(g.path_total.unwrap().max_us, 92.0);
        let reply = &r.groups[1];
        assert_eq!(reply.path_steps[0].summary.mean_us, 0.7);
        assert!(reply.queueing.is_none());
        let mut text = Vec::new();
        write_text(&mut text, &r).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("net_dev_queue → qdisc_enqueue"), "{text}");
        assert!(text.contains("other steps"), "{text}");
    }

    #[test]
    fn a_path_few_trails_took_is_not_called_the_whole_path() {
        // 3 of 10 trails take the common path: the others are all
        // different (as fragments of a packet's trail would be).
        let mut trails: Vec<TrailRecord> = (0..3)
            .map(|_| trail(None, &[("net:net_dev_queue", 0), ("net:net_dev_xmit", 900)]))
            .collect();
        for i in 0..7u64 {
            let p = format!("net:point{i}");
            trails.push(trail(None, &[(p.as_str(), 0), (DEQUEUE, 10)]));
        }
        // A packet cut into segments: left out of the group's figures.
        let mut cut = trail(None, &[("net:net_dev_queue", 0), (ENQUEUE, 5)]);
        cut.segmented = 3;
        trails.push(cut);
        let r = report(&trails);
        let g = &r.groups[0];
        assert_eq!((g.trails, g.segmented, g.common_count), (10, 1, 3));
        assert!((g.common_share - 0.3).abs() < 1e-9);
        assert_eq!(g.queueing_share, 0.0);
        let mut text = Vec::new();
        write_text(&mut text, &r).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("taken by few"), "{text}");
        assert!(!text.contains("whole path"), "{text}");
        assert!(
            text.contains("first to last point (these trails)"),
            "{text}"
        );
    }

    #[test]
    fn bad_lines_name_their_number() {
        let e = read_trails(&b"\n{\"x\":1}\n"[..]).unwrap_err().to_string();
        assert!(e.starts_with("line 2"), "{e}");
        assert!(read_trails(&b""[..]).unwrap().is_empty());
        assert!(report(&[]).groups.is_empty());
    }
}
