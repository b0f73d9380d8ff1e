//! What the matcher takes and gives: flow keys, its settings, reports,
//! raw samples and counters.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;
use xdprobe_common::host::StackEvent;

use crate::hooks::Layer;
use crate::stack::stats::Summary;

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
    /// Timed bytes held out because they were slow: they had not reached
    /// every layer when the hold ([`MatcherConfig::hold_ns`], `--hold`)
    /// ran out, or when a sampling window's drain (bounded by the hold)
    /// ended. Apart from `incomplete` (a layer skipped the byte) and
    /// `edge`; a report's percentiles leave them out, so this says how
    /// many of the slowest bytes are not in them.
    pub cut: u64,
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
    /// Timed bytes held out, all flows ([`FlowReport::cut`]).
    pub cut: u64,
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
