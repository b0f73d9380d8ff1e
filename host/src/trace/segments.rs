//! Following a packet through segmentation: a GSO packet (a TCP send of
//! up to 64 KB) is cut into MTU-sized segments — by a shaping qdisc
//! (`tbf` segments what exceeds its burst), or by the device layer for a
//! device without GSO — and each segment is a new `sk_buff` with a new
//! data buffer: its trail starts where it was made (`qdisc_dequeue`,
//! `net_dev_start_xmit`), and the packet's own trail ends at the cut.
//! Nothing the tracer keys packets by survives the cut; what does is the
//! flow and the TCP sequence range: a segment carries part of its
//! packet's range.
//!
//! So, per flow and in time order: a TCP trail whose range lies strictly
//! inside the range of an earlier trail of the same flow, which started
//! at another point (a retransmission of the same bytes starts where its
//! original did) and was last seen at most [`WINDOW_NS`] before, is a
//! segment of that packet. Its trail then opens with the packet's steps
//! from before the segment's first one (the packet's free at the cut
//! left out): `net_dev_queue → qdisc_enqueue → qdisc_dequeue →
//! net_dev_start_xmit …`, from the socket's hand-off to the device. The
//! packet's trail is kept, marked `segmented` (how many of its segments
//! were found), and left out of the paths and steps of a report.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::trace::record::{SegmentOf, StepRecord, TrailRecord};

/// A segment must appear within this long of its packet's last step.
pub const WINDOW_NS: u64 = 2_000_000_000;

/// Candidates looked at per segment (the flow's latest trails).
const LOOK_BACK: usize = 512;

/// Points that free a packet: not part of a segment's path.
fn frees(point: &str) -> bool {
    matches!(point, "skb:consume_skb" | "skb:kfree_skb")
}

/// What joining found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JoinStats {
    /// Packets cut into segments (with at least one segment found).
    pub packets: u64,
    /// Segments whose trail now carries their packet's steps.
    pub segments: u64,
}

type FlowKey = (u8, IpAddr, IpAddr, u16, u16);

/// What a segment needs of its packet's trail.
struct Packet {
    mono: u64,
    first_us: u64,
    last_abs: u64,
    range: crate::trace::record::TcpRange,
    first_point: String,
    steps: Vec<StepRecord>,
}

impl Packet {
    fn of(t: &TrailRecord) -> Option<Packet> {
        let mono = t.mono_ns?;
        Some(Packet {
            mono,
            first_us: t.first_us,
            last_abs: mono + t.steps.last()?.t_ns,
            range: t.tcp?,
            first_point: t.steps.first()?.point.clone(),
            steps: t.steps.clone(),
        })
    }
}

/// Joins every segment's trail to its packet's (see the module doc).
pub fn join(trails: &mut [TrailRecord]) -> JoinStats {
    let mut order: Vec<usize> = (0..trails.len())
        .filter(|&i| {
            let t = &trails[i];
            t.mono_ns.is_some() && t.tcp.is_some() && t.flow.is_some() && !t.steps.is_empty()
        })
        .collect();
    order.sort_by_key(|&i| trails[i].mono_ns);
    let mut by_flow: HashMap<FlowKey, Vec<usize>> = HashMap::new();
    let mut st = JoinStats::default();
    for i in order {
        let Some(f) = trails[i].flow.as_ref() else {
            continue;
        };
        let key = (f.proto, f.src, f.dst, f.sport, f.dport);
        let seen = by_flow.entry(key).or_default();
        if let Some(p) = find_packet(trails, seen, i) {
            let packet = Packet::of(&trails[p]);
            if let Some(packet) = packet
                && attach(&mut trails[i], &packet)
            {
                if trails[p].segmented == 0 {
                    st.packets += 1;
                }
                trails[p].segmented += 1;
                st.segments += 1;
            }
        }
        seen.push(i);
        if seen.len() > 4 * LOOK_BACK {
            seen.drain(..2 * LOOK_BACK);
        }
    }
    st
}

/// The latest earlier trail of the flow that segment `i` was cut from.
fn find_packet(trails: &[TrailRecord], seen: &[usize], i: usize) -> Option<usize> {
    let c = &trails[i];
    let (cm, cr) = (c.mono_ns?, c.tcp?);
    let cfirst = &c.steps.first()?.point;
    seen.iter().rev().take(LOOK_BACK).copied().find(|&p| {
        let t = &trails[p];
        let (Some(pm), Some(pr), Some(last)) = (t.mono_ns, t.tcp, t.steps.last()) else {
            return false;
        };
        pr.holds(&cr)
            && pm <= cm
            && cm <= pm + last.t_ns + WINDOW_NS
            && t.steps.first().is_some_and(|s| &s.point != cfirst)
    })
}

/// Opens `seg`'s trail with `packet`'s steps from before it. False when
/// the packet has none (nothing to add).
fn attach(seg: &mut TrailRecord, packet: &Packet) -> bool {
    let Some(sm) = seg.mono_ns else {
        return false;
    };
    if packet.last_abs < packet.mono || packet.first_point.is_empty() {
        return false;
    }
    let before: Vec<StepRecord> = packet
        .steps
        .iter()
        .filter(|s| packet.mono + s.t_ns < sm && !frees(&s.point))
        .cloned()
        .collect();
    if before.is_empty() {
        return false;
    }
    let shift = sm - packet.mono;
    let n = before.len();
    let mut steps = before;
    steps.extend(seg.steps.drain(..).map(|mut s| {
        s.t_ns += shift;
        s
    }));
    seg.steps = steps;
    seg.mono_ns = Some(packet.mono);
    seg.first_us = packet.first_us;
    seg.segment_of = Some(SegmentOf {
        packet: packet.range,
        steps: u16::try_from(n).unwrap_or(u16::MAX),
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::{FlowRecord, TcpRange};

    fn trail(mono: u64, seq: u32, len: u32, steps: &[(&str, u64)]) -> TrailRecord {
        TrailRecord {
            first_us: mono / 1000,
            end: "consumed".into(),
            drop_reason: None,
            drop_reason_name: None,
            len: len + 52,
            flow: Some(FlowRecord {
                proto: 6,
                src: "192.0.2.1".parse().unwrap(),
                dst: "192.0.2.2".parse().unwrap(),
                sport: 40000,
                dport: 5201,
            }),
            probe: None,
            lost_steps: 0,
            mono_ns: Some(mono),
            tcp: Some(TcpRange { seq, len }),
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

    fn path(t: &TrailRecord) -> Vec<(&str, u64)> {
        t.steps.iter().map(|s| (s.point.as_str(), s.t_ns)).collect()
    }

    #[test]
    fn segments_of_a_gso_packet_carry_its_steps_from_before_the_cut() {
        // A 4344-byte GSO packet (seq near the wrap) cut by the qdisc at
        // enqueue into three segments, dequeued 1, 2 and 3 ms later.
        let seq = u32::MAX - 1000;
        let mut trails = vec![
            trail(
                1_000_000,
                seq,
                4344,
                &[
                    ("net:net_dev_queue", 0),
                    ("skb:consume_skb", 20_000),
                    ("qdisc:qdisc_enqueue", 22_000),
                ],
            ),
            trail(
                2_022_000,
                seq.wrapping_add(1448),
                1448,
                &[("net:net_dev_start_xmit", 0), ("net:netif_rx", 1_000)],
            ),
            trail(
                1_022_000 + 1_000_000 - 5_000,
                seq,
                1448,
                &[
                    ("qdisc:qdisc_dequeue", 0),
                    ("net:net_dev_start_xmit", 2_000),
                ],
            ),
            // A retransmission of the first segment, later: its own packet.
            trail(
                1_500_000,
                seq,
                1448,
                &[("net:net_dev_queue", 0), ("net:net_dev_start_xmit", 3_000)],
            ),
            // Another flow's packet with the same numbers: not a segment.
            {
                let mut t = trail(
                    1_030_000,
                    seq.wrapping_add(2896),
                    1448,
                    &[("net:net_dev_start_xmit", 0)],
                );
                t.flow.as_mut().unwrap().sport = 40001;
                t
            },
        ];
        let st = join(&mut trails);
        assert_eq!(
            st,
            JoinStats {
                packets: 1,
                segments: 2
            }
        );
        assert_eq!(trails[0].segmented, 2);
        assert_eq!(
            path(&trails[2]),
            [
                ("net:net_dev_queue", 0),
                ("qdisc:qdisc_enqueue", 22_000),
                ("qdisc:qdisc_dequeue", 1_017_000),
                ("net:net_dev_start_xmit", 1_019_000),
            ]
        );
        assert_eq!(trails[2].mono_ns, Some(1_000_000));
        assert_eq!(trails[2].segment_of.unwrap().steps, 2);
        assert_eq!(trails[1].steps[2].point, "net:net_dev_start_xmit");
        assert_eq!(trails[1].steps[2].t_ns, 1_022_000);
        assert!(trails[3].segment_of.is_none(), "a retransmission");
        assert!(trails[4].segment_of.is_none(), "another flow");
    }

    #[test]
    fn ranges_hold_across_the_wrap() {
        let p = TcpRange {
            seq: u32::MAX - 10,
            len: 100,
        };
        assert!(p.holds(&TcpRange { seq: 5, len: 50 }));
        assert!(!p.holds(&TcpRange { seq: 80, len: 50 }));
        assert!(!p.holds(&p));
        assert!(!p.holds(&TcpRange {
            seq: u32::MAX - 20,
            len: 5
        }));
    }
}
