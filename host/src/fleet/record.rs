//! A flow report as an IPFIX host-stack record (templates 320/321,
//! `xdprobe_exporter::encode::host`): the manager's cross-host reports and
//! the daemon's one-host ones alike.

use xdprobe_exporter::encode::host::{HostRecord, SegmentStats};

use crate::clock::WallClock;
use crate::fleet::manager::{CrossReport, Place};
use crate::stack::matcher::{EndReason, FlowReport};
use crate::stack::stats::Summary;

impl CrossReport {
    /// A report of this host's own kernel, its ends named `agent`.
    pub fn local(report: FlowReport, agent: &str) -> CrossReport {
        let place = |e: Option<crate::stack::matcher::End>| {
            e.map(|e| Place {
                agent: agent.to_owned(),
                netns: e.netns,
                pid: e.pid,
                clock: None,
            })
        };
        CrossReport {
            sender: place(report.sender),
            receiver: place(report.receiver),
            report,
        }
    }
}

pub fn stats(s: &Summary) -> SegmentStats {
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
