//! A finished trail as user space keeps it: point names instead of
//! indices, times relative to the first step, the packet's flow read from
//! the header bytes the kernel kept, and — for the echo mode's probes —
//! which probe and direction it was. One JSON object per line in files.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};
use xdprobe_common::trace::{TRACE_MAX_STEPS, Trail, end};

use crate::trace::echo::{self, Direction};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// `sys:name` of the tracepoint.
    pub point: String,
    /// Nanoseconds since the trail's first step.
    pub t_ns: u64,
    /// Network namespace inode and interface index of the skb's device
    /// (0: none, or not read at this point).
    pub netns: u32,
    pub ifindex: u32,
    pub cpu: u16,
}

/// Addresses and ports from the packet's headers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowRecord {
    /// IP protocol number.
    pub proto: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// 0 for protocols without ports.
    pub sport: u16,
    pub dport: u16,
}

/// The TCP payload a trail's packet carried when it started: sequence
/// number and length (a GSO packet's whole payload, a segment's share).
/// What survives segmentation: the segments of one GSO packet carry
/// parts of its range (`trace::segments` joins them by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpRange {
    pub seq: u32,
    pub len: u32,
}

impl TcpRange {
    /// Whether `o` lies inside this range and is smaller (wrap-aware).
    pub fn holds(&self, o: &TcpRange) -> bool {
        let start = o.seq.wrapping_sub(self.seq);
        o.len < self.len && start < self.len && start + o.len <= self.len
    }
}

/// A segment's place in the packet it was cut from (`trace::segments`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentOf {
    /// The packet's TCP payload before segmentation.
    pub packet: TcpRange,
    /// Steps taken from the packet's trail (before this segment existed).
    pub steps: u16,
}

/// An echo probe's identity (`echo` module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRecord {
    pub run: u32,
    pub seq: u32,
    pub dir: Direction,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrailRecord {
    /// Unix time of the first step, µs.
    pub first_us: u64,
    /// `consumed`, `dropped`, `reused` (another packet used its buffer:
    /// its free was not seen), `idle` (no step for the idle time),
    /// `stopped` (open when tracing stopped).
    pub end: String,
    /// Kernel drop reason number (`enum skb_drop_reason`) when dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_reason: Option<u32>,
    /// Its name in the running kernel (`NO_SOCKET`, `QDISC_DROP`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_reason_name: Option<String>,
    /// Bytes from the IP header on, when the trail started.
    pub len: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeRecord>,
    /// Steps past the trail's capacity, not kept.
    #[serde(default)]
    pub lost_steps: u16,
    /// Kernel monotonic time of the first step, ns (to line trails up
    /// with each other exactly; `first_us` is for people).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mono_ns: Option<u64>,
    /// The TCP payload the packet carried, for TCP packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpRange>,
    /// This packet was cut from a larger one (GSO), whose steps before
    /// the cut open this trail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_of: Option<SegmentOf>,
    /// This packet was cut into this many traced segments (their trails
    /// carry its steps); its own trail ends at the cut.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub segmented: u32,
    pub steps: Vec<StepRecord>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The TCP payload range of a packet from its first bytes (IP header on)
/// and its length from the IP header.
pub fn tcp_range(hdr: &[u8], total: u32) -> Option<TcpRange> {
    let (f, l4) = flow_of(hdr)?;
    if f.proto != 6 {
        return None;
    }
    let th = hdr.get(l4..l4 + 13)?;
    let seq = u32::from_be_bytes([th[4], th[5], th[6], th[7]]);
    let doff = u32::from(th[12] >> 4) * 4;
    let len = total.checked_sub(l4 as u32 + doff)?;
    Some(TcpRange { seq, len })
}

pub fn end_name(e: u8) -> &'static str {
    match e {
        end::CONSUMED => "consumed",
        end::DROPPED => "dropped",
        end::REUSED => "reused",
        end::IDLE => "idle",
        end::STOPPED => "stopped",
        _ => "open",
    }
}

/// The flow of a packet from its first bytes (IP header on).
pub fn flow_of(hdr: &[u8]) -> Option<(FlowRecord, usize)> {
    let v = hdr.first()? >> 4;
    let (proto, src, dst, l4) = match v {
        4 if hdr.len() >= 20 => {
            let ihl = usize::from(hdr[0] & 0x0f) * 4;
            let s: [u8; 4] = hdr[12..16].try_into().ok()?;
            let d: [u8; 4] = hdr[16..20].try_into().ok()?;
            // A later fragment has no transport header.
            let frag = u16::from_be_bytes([hdr[6], hdr[7]]) & 0x1fff != 0;
            (
                hdr[9],
                IpAddr::V4(Ipv4Addr::from(s)),
                IpAddr::V4(Ipv4Addr::from(d)),
                (!frag).then_some(ihl),
            )
        }
        6 if hdr.len() >= 40 => {
            let s: [u8; 16] = hdr[8..24].try_into().ok()?;
            let d: [u8; 16] = hdr[24..40].try_into().ok()?;
            (
                hdr[6],
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                Some(40),
            )
        }
        _ => return None,
    };
    let ports = l4.filter(|_| matches!(proto, 6 | 17 | 132)).and_then(|o| {
        let p = hdr.get(o..o + 4)?;
        Some((
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ))
    });
    let (sport, dport) = ports.unwrap_or((0, 0));
    Some((
        FlowRecord {
            proto,
            src,
            dst,
            sport,
            dport,
        },
        l4.unwrap_or(hdr.len()),
    ))
}

impl TrailRecord {
    /// `names[i]` is point `i`'s name; `unix_us` converts the kernel's
    /// monotonic time.
    pub fn from_trail(t: &Trail, names: &[String], unix_us: impl Fn(u64) -> u64) -> TrailRecord {
        let n = usize::from(t.n_steps).min(TRACE_MAX_STEPS);
        let first = t.steps.first().map_or(t.first_ns, |s| s.ts_ns);
        let steps = t.steps[..n]
            .iter()
            .map(|s| StepRecord {
                point: names
                    .get(usize::from(s.point))
                    .cloned()
                    .unwrap_or_else(|| format!("point{}", s.point)),
                t_ns: s.ts_ns.saturating_sub(first),
                netns: s.netns,
                ifindex: s.ifindex,
                cpu: s.cpu,
            })
            .collect();
        let hdr = &t.hdr[..usize::from(t.caplen).min(t.hdr.len())];
        let flow = flow_of(hdr);
        let probe = flow.as_ref().and_then(|(f, l4)| {
            if f.proto != 17 {
                return None;
            }
            let payload = hdr.get(l4 + 8..)?;
            let (run, seq, dir) = echo::parse_mark(payload)?;
            Some(ProbeRecord { run, seq, dir })
        });
        TrailRecord {
            first_us: unix_us(first),
            end: end_name(t.end).to_owned(),
            drop_reason: (t.end == end::DROPPED).then_some(t.drop_reason),
            drop_reason_name: None,
            len: t.pkt_len,
            flow: flow.map(|(f, _)| f),
            probe,
            lost_steps: t.lost_steps,
            mono_ns: (n > 0).then_some(first),
            tcp: tcp_range(hdr, t.pkt_len),
            segment_of: None,
            segmented: 0,
            steps,
        }
    }

    /// The points in order, for paths.
    pub fn path(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.point.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdprobe_common::trace::TraceStep;

    #[test]
    fn flows_from_v4_and_v6_headers() {
        let mut v4 = vec![0u8; 28];
        v4[0] = 0x45;
        v4[9] = 17;
        v4[12..16].copy_from_slice(&[192, 0, 2, 1]);
        v4[16..20].copy_from_slice(&[192, 0, 2, 2]);
        v4[20..24].copy_from_slice(&[0x9c, 0x40, 0, 7]);
        let (f, l4) = flow_of(&v4).unwrap();
        assert_eq!(l4, 20);
        assert_eq!((f.proto, f.sport, f.dport), (17, 40000, 7));
        assert_eq!(f.src.to_string(), "192.0.2.1");
        v4[6] = 0x00;
        v4[7] = 0x10; // later fragment
        assert_eq!(flow_of(&v4).unwrap().0.dport, 0);

        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[6] = 6;
        v6[8..12].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        v6[23] = 1;
        v6[24..28].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        v6[39] = 2;
        v6[40..44].copy_from_slice(&[0, 80, 0x9c, 0x41]);
        let (f, _) = flow_of(&v6).unwrap();
        assert_eq!(f.dst.to_string(), "2001:db8::2");
        assert_eq!((f.proto, f.sport, f.dport), (6, 80, 40001));
        assert!(flow_of(&[0x45, 0, 0]).is_none());
        assert!(flow_of(&[]).is_none());
    }

    #[test]
    fn trail_becomes_a_record_with_relative_times_and_names() {
        let mut t = Trail::ZERO;
        t.end = end::DROPPED;
        t.drop_reason = 5;
        t.n_steps = 2;
        t.pkt_len = 60;
        t.steps[0] = TraceStep {
            ts_ns: 1_000,
            point: 1,
            ifindex: 3,
            ..TraceStep::ZERO
        };
        t.steps[1] = TraceStep {
            ts_ns: 4_500,
            point: 0,
            ..TraceStep::ZERO
        };
        let names = vec!["skb:kfree_skb".to_owned(), "net:net_dev_queue".to_owned()];
        let r = TrailRecord::from_trail(&t, &names, |ns| ns / 1000 + 7);
        assert_eq!(r.first_us, 8);
        assert_eq!(r.end, "dropped");
        assert_eq!(r.drop_reason, Some(5));
        assert_eq!(r.path(), ["net:net_dev_queue", "skb:kfree_skb"]);
        assert_eq!(r.steps[1].t_ns, 3_500);
        assert_eq!(r.steps[0].ifindex, 3);
        let line = serde_json::to_string(&r).unwrap();
        let back: TrailRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
    }
}
