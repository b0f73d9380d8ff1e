//! Where `docs/spec/npm-metrics.md` and Wireshark 4.0 (`packet-tcp.c`
//! `tcp_analyze_sequence_number`, `packet-dns.c`) really differ on a packet.
//! Each rule is a narrow predicate over tshark's own per-packet output; a
//! packet it names is an *exception*: the expected xdprobe value is
//! tshark's, moved by exactly that packet. Nothing else is tolerated.
//! `docs/npm-vs-wireshark.md` explains every rule.

use super::tshark::{F_ACK, F_FIN, F_RST, F_SYN, Pkt};

/// Out-of-order threshold without a handshake RTT (spec §3).
const DEFAULT_THRESHOLD_NS: u64 = 3_000_000;
/// Spec §3 fast-retransmission window.
const FAST_WINDOW_NS: u64 = 20_000_000;
/// Wireshark's DNS `retransmission_timer` default (packet-dns.c): a repeated
/// query at least this long after an unanswered one is a new transaction.
const WS_DNS_RETRANS_NS: u64 = 5_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// Wireshark tests "spurious" before "out of order"; the spec tests
    /// out of order (rule 2) before spurious (rule 3). A packet tshark
    /// flags spurious that meets rule 2 is out of order for us.
    SpuriousBeforeOoo,
    /// Wireshark's 20 ms fast-retransmission window runs from the reverse
    /// direction's last packet of any kind (`lastacktime`), the spec's from
    /// its last duplicate ACK. A packet tshark flags fast more than 20 ms
    /// after that duplicate ACK (a RST or window update with the same ACK
    /// came in between) is out of order (rule 2) or an ordinary
    /// retransmission for us.
    FastWindowFromLastPacket,
    /// Wireshark ends a run of duplicate ACKs at any reverse packet whose
    /// ACK *field* differs, even a RST without the ACK flag (field 0); the
    /// spec's run is made of duplicate ACKs and only ACK-flagged packets
    /// carry an ACK number. A segment that meets spec rule 1 after such a
    /// packet is a fast retransmission for us (tshark: out of order,
    /// spurious or ordinary).
    NoAckPacketEndsDupRun,
    /// Wireshark stores `initial_rtt` at the first ACK-flagged non-SYN
    /// packet after a SYN even when it is a RST (refused connection); the
    /// spec has no handshake there, so RTT is absent.
    RttFromRst,
    /// SYN, SYN+ACK and the handshake ACK carry the same timestamp (a
    /// capture clock coarser than the path's RTT): the spec's RTT is 0.
    /// Wireshark keeps `initial_rtt` "unset" while it is 0 and stores the
    /// delta of a later ACK-only packet instead (the client's first data,
    /// a server ACK …), which is no handshake time at all.
    InitialRttZeroIsUnset,
    /// A SYN retry captured after the SYN+ACK that the handshake ACK
    /// answers (the client's retry crossed the server's): Wireshark
    /// measures `initial_rtt` from that last SYN, the spec pairs the SYN+ACK
    /// with the SYN captured before it (`metrics/handshake.rs`).
    SynRetryAfterSynAck,
    /// Wireshark classifies a repeated ACK answering a keep-alive as
    /// "keep-alive ACK" and not as a duplicate ACK; it meets the spec's
    /// duplicate-ACK definition, so we count it.
    KeepAliveAckIsDupAck,
    /// DNS requests/responses on the port pair stop alternating (a new
    /// query while one is unanswered, or a stray response): the spec
    /// measures no SRT for the flow; tshark still times each response.
    DnsNotAlternating,
    /// A query repeated ≥ 5 s after an unanswered one with the same ID:
    /// Wireshark starts a new transaction, the spec measures from the
    /// first observation of the request.
    DnsRetryAfter5s,
    /// A DNS response in IP fragments: tshark times it at the reassembling
    /// (last) fragment, the probe at the first fragment, when the response
    /// is first captured (the probe does not reassemble).
    DnsFragmentedResponse,
    /// tshark's UDP conversation spans several VLANs; xdprobe keys flows by
    /// VLAN (the lead's flow key), so DNS transactions are tracked per VLAN.
    VlanKeyedFlows,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hit {
    pub flow: String,
    pub frame: u64,
    pub rule: Rule,
}

pub fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The sequence space a segment takes: its payload, one for a SYN, one
/// for a FIN (RFC 9293 §3.4, SEG.LEN).
pub fn seg_len(p: &Pkt) -> u32 {
    p.len + u32::from(p.flags & F_SYN != 0) + u32::from(p.flags & F_FIN != 0)
}

/// Spec §3's expected SEQ of a direction after `p` (highest SEQ +
/// SEG.LEN, only ever forward), with the time of the segment that set it.
pub fn advance_next(next: &mut Option<(u32, u64)>, p: &Pkt) {
    let end = p.seq.wrapping_add(seg_len(p));
    if next.is_none_or(|(n, _)| before(n, end)) {
        *next = Some((end, p.ts_ns));
    }
}

/// Per-direction adjustments for one TCP flow (index 0 = client→server).
#[derive(Debug, Default)]
pub struct TcpAdjust {
    pub spur_to_ooo: [u64; 2],
    pub fast_to_ooo: [u64; 2],
    pub fast_to_other: [u64; 2],
    /// Moved to fast, by tshark's class: [out of order, spurious, ordinary].
    pub to_fast: [[u64; 3]; 2],
    pub ka_ack_dup: [u64; 2],
    pub rtt_from_rst: bool,
    /// When Wireshark's handshake ended (its `initial_rtt` packet), ns.
    pub hs_end_ns: Option<u64>,
    /// Our RTT (ns) where `SynRetryAfterSynAck` applies; `None` there if no
    /// SYN precedes the SYN+ACK.
    pub rtt_override: Option<Option<u64>>,
}

/// Finds the TCP exceptions in one tshark stream. `client` is the oracle's
/// client endpoint (`addr:port`).
pub fn tcp_exceptions(flow: &str, pkts: &[Pkt], client: &str, hits: &mut Vec<Hit>) -> TcpAdjust {
    let mut adj = TcpAdjust::default();
    // Out-of-order threshold: the handshake RTT; 0 when that is 0 (then
    // tshark's `initial_rtt` is a later, unrelated delta).
    let zero_rtt = zero_rtt_handshake(pkts);
    let threshold = if zero_rtt {
        0
    } else {
        pkts.iter()
            .find_map(|p| p.initial_rtt_ns)
            .unwrap_or(DEFAULT_THRESHOLD_NS)
    };
    // Spec §3 expected SEQ (highest SEQ + SEG.LEN) and its time, per direction.
    let mut next: [Option<(u32, u64)>; 2] = [None, None];
    // Time of each direction's last duplicate ACK (tshark's flag).
    let mut last_dup: [Option<u64>; 2] = [None, None];
    // The spec's duplicate-ACK run per direction (from tshark's dup flags):
    // (ACK number, length), and whether a packet without the ACK flag came
    // after its last duplicate ACK.
    let mut run: [(u32, u32); 2] = [(0, 0); 2];
    let mut no_ack_after_dup = [false; 2];
    let mut syn_seen = false;
    let mut hs_closed = false;
    // (frame, ts) of the last SYN; ts of the last SYN+ACK and of the last
    // SYN before it.
    let mut last_syn: Option<(u64, u64)> = None;
    let mut last_synack: Option<(u64, Option<u64>)> = None;
    for p in pkts {
        let d = usize::from(p.src != client);
        let seg_len = seg_len(p);
        // Spec rule 2 (out of order) on this packet.
        let rule2 = next[d].is_some_and(|(n, t)| {
            before(p.seq, n)
                && p.ts_ns.saturating_sub(t) <= threshold
                && p.seq.wrapping_add(seg_len) != n
        });
        if p.a.spurious && p.len > 0 && rule2 {
            adj.spur_to_ooo[d] += 1;
            hits.push(Hit {
                flow: flow.into(),
                frame: p.frame,
                rule: Rule::SpuriousBeforeOoo,
            });
        }
        if p.a.fast && last_dup[1 - d].is_none_or(|t| p.ts_ns.saturating_sub(t) > FAST_WINDOW_NS) {
            if rule2 {
                adj.fast_to_ooo[d] += 1;
            } else {
                adj.fast_to_other[d] += 1;
            }
            hits.push(Hit {
                flow: flow.into(),
                frame: p.frame,
                rule: Rule::FastWindowFromLastPacket,
            });
        }
        let r = 1 - d;
        let spec_fast = next[d].is_some_and(|(n, _)| before(p.seq, n))
            && run[r].1 >= 2
            && run[r].0 == p.seq
            && last_dup[r].is_some_and(|t| p.ts_ns.saturating_sub(t) <= FAST_WINDOW_NS);
        if spec_fast
            && !p.a.fast
            && no_ack_after_dup[r]
            && (p.len > 0 || p.flags & (F_SYN | F_FIN) != 0)
        {
            let class = if p.a.ooo {
                0
            } else if p.a.spurious {
                1
            } else {
                2
            };
            adj.to_fast[d][class] += 1;
            hits.push(Hit {
                flow: flow.into(),
                frame: p.frame,
                rule: Rule::NoAckPacketEndsDupRun,
            });
        }
        if p.a.dup_ack {
            last_dup[d] = Some(p.ts_ns);
            run[d] = if run[d].0 == p.ack {
                (p.ack, run[d].1 + 1)
            } else {
                (p.ack, 1)
            };
            no_ack_after_dup[d] = false;
        } else if p.flags & F_ACK != 0 {
            if run[d].0 != p.ack {
                run[d] = (p.ack, 0);
            }
        } else {
            no_ack_after_dup[d] = true;
        }
        if p.a.keep_alive_ack {
            adj.ka_ack_dup[d] += 1;
            hits.push(Hit {
                flow: flow.into(),
                frame: p.frame,
                rule: Rule::KeepAliveAckIsDupAck,
            });
        }
        advance_next(&mut next[d], p);
        // Wireshark's initial_rtt: first (SYN|ACK)==ACK packet after a SYN.
        if p.flags & (F_SYN | F_ACK) == F_SYN {
            syn_seen = true;
            if !hs_closed {
                last_syn = Some((p.frame, p.ts_ns));
            }
        } else if p.flags & (F_SYN | F_ACK) == F_SYN | F_ACK && !hs_closed {
            last_synack = Some((p.ts_ns, last_syn.map(|(_, t)| t)));
        } else if syn_seen && !hs_closed && p.flags & (F_SYN | F_ACK) == F_ACK {
            hs_closed = true;
            adj.hs_end_ns = Some(p.ts_ns);
            if let (Some((frame, syn_ts)), Some((sa_ts, paired))) = (last_syn, last_synack)
                && syn_ts > sa_ts
            {
                hits.push(Hit {
                    flow: flow.into(),
                    frame,
                    rule: Rule::SynRetryAfterSynAck,
                });
                adj.rtt_override = Some(paired.map(|t| p.ts_ns - t));
            }
            if p.flags & F_RST != 0 {
                adj.rtt_from_rst = true;
                hits.push(Hit {
                    flow: flow.into(),
                    frame: p.frame,
                    rule: Rule::RttFromRst,
                });
            } else if zero_rtt {
                hits.push(Hit {
                    flow: flow.into(),
                    frame: p.frame,
                    rule: Rule::InitialRttZeroIsUnset,
                });
                adj.rtt_override = Some(Some(0));
            }
        }
    }
    adj
}

/// Whether the packet that closes Wireshark's handshake (the first
/// ACK-only packet after a SYN) is stamped with the last SYN's time, so
/// that its `initial_rtt` would be 0.
fn zero_rtt_handshake(pkts: &[Pkt]) -> bool {
    let mut syn_ts = None;
    for p in pkts {
        match p.flags & (F_SYN | F_ACK) {
            F_SYN => syn_ts = Some(p.ts_ns),
            F_ACK if syn_ts.is_some() => {
                return p.flags & F_RST == 0 && syn_ts == Some(p.ts_ns);
            }
            _ => {}
        }
    }
    false
}

/// The spec's DNS rules (§2) replayed on tshark's decoded messages.
#[derive(Debug, Default)]
struct DnsSpec {
    /// First pair: Δ (ns), retry-after-5 s frame, first-fragment frame.
    first: Option<(u64, Option<u64>, Option<u64>)>,
    count: u64,
    /// Every measured pair before a break: (response first seen, Δ), ns.
    pairs: Vec<(u64, u64)>,
    /// Frame and time where alternation broke.
    broken: Option<u64>,
    broken_ts: Option<u64>,
    /// tshark's `dns.time` values (ns).
    ws_times: Vec<u64>,
}

fn dns_spec(pkts: &[&Pkt], client: &str) -> DnsSpec {
    #[derive(Clone, Copy)]
    enum St {
        Idle,
        Pending {
            id: u16,
            since: u64,
            retry5: Option<u64>,
        },
        Answered {
            id: u16,
        },
    }
    let mut st = St::Idle;
    let mut out = DnsSpec::default();
    for p in pkts {
        let Some(dns) = p.dns else { continue };
        out.ws_times.extend(dns.time_ns);
        if out.broken.is_some() {
            continue;
        }
        // A fragmented message is first seen at its first fragment.
        let (seen_frame, seen_ts) = p.first_fragment.unwrap_or((p.frame, p.ts_ns));
        let from_client = p.src == client;
        st = match (from_client, dns.response, st) {
            (true, false, St::Idle | St::Answered { .. }) => St::Pending {
                id: dns.id,
                since: seen_ts,
                retry5: None,
            },
            (true, false, St::Pending { id, since, retry5 }) if id == dns.id => {
                let late = seen_ts.saturating_sub(since) >= WS_DNS_RETRANS_NS;
                St::Pending {
                    id,
                    since,
                    retry5: retry5.or(late.then_some(p.frame)),
                }
            }
            (false, true, St::Pending { id, since, retry5 }) if id == dns.id => {
                out.count += 1;
                out.pairs.push((seen_ts, seen_ts.saturating_sub(since)));
                let frag = (seen_frame != p.frame).then_some(seen_frame);
                out.first
                    .get_or_insert((seen_ts.saturating_sub(since), retry5, frag));
                St::Answered { id }
            }
            (false, true, St::Answered { id }) if id == dns.id => st,
            (false, true, St::Idle) => st,
            (true, false, _) | (false, true, _) => {
                out.broken = Some(p.frame);
                out.broken_ts = Some(seen_ts);
                st
            }
            _ => st,
        };
    }
    out
}

pub fn us(ns: u64) -> u64 {
    (ns + 500) / 1000
}

/// What xdprobe must report for one DNS flow (one VLAN).
#[derive(Debug)]
pub struct DnsExpect {
    pub vlan: Option<u16>,
    /// `srt_us` of the first record with a measurement (0 if none).
    pub srt_us: u64,
    pub count: u64,
    /// For per-interval records: the spec's pairs (response time, Δ) in ns
    /// and when alternation broke (nothing is measured from that interval on).
    pub pairs: Vec<(u64, u64)>,
    pub broken_ts: Option<u64>,
}

impl DnsExpect {
    fn from_spec(vlan: Option<u16>, s: DnsSpec, srt_us: u64, count: u64) -> Self {
        DnsExpect {
            vlan,
            srt_us,
            count,
            pairs: s.pairs,
            broken_ts: s.broken_ts,
        }
    }
}

/// Expected DNS SRT of one UDP port-53 tshark flow, per VLAN.
pub fn dns_expect(flow: &str, pkts: &[Pkt], client: &str, hits: &mut Vec<Hit>) -> Vec<DnsExpect> {
    let mut vlans: Vec<Option<u16>> = Vec::new();
    for p in pkts {
        if !vlans.contains(&p.vlan) {
            vlans.push(p.vlan);
        }
    }
    if vlans.len() > 1 {
        // tshark's conversation spans VLANs, xdprobe keys flows by VLAN:
        // each VLAN's flow gets the spec's values from tshark's packet times.
        let second = pkts
            .iter()
            .find(|p| p.vlan != vlans[0])
            .map_or(0, |p| p.frame);
        hits.push(Hit {
            flow: flow.into(),
            frame: second,
            rule: Rule::VlanKeyedFlows,
        });
        return vlans
            .into_iter()
            .map(|v| {
                let group: Vec<&Pkt> = pkts.iter().filter(|p| p.vlan == v).collect();
                let s = dns_spec(&group, client);
                let (srt, count) = match (s.broken, s.first) {
                    (None, Some((d, _, _))) => (us(d), s.count),
                    _ => (0, 0),
                };
                DnsExpect::from_spec(v, s, srt, count)
            })
            .collect();
    }
    let all: Vec<&Pkt> = pkts.iter().collect();
    let s = dns_spec(&all, client);
    let vlan = vlans.first().copied().flatten();
    if let Some(frame) = s.broken {
        // Only an exception where tshark does time a response.
        if !s.ws_times.is_empty() {
            hits.push(Hit {
                flow: flow.into(),
                frame,
                rule: Rule::DnsNotAlternating,
            });
        }
        return vec![DnsExpect::from_spec(vlan, s, 0, 0)];
    }
    if let Some((delta, retry5, frag)) = s.first
        && (retry5.is_some() || frag.is_some())
    {
        if let Some(frame) = retry5 {
            hits.push(Hit {
                flow: flow.into(),
                frame,
                rule: Rule::DnsRetryAfter5s,
            });
        }
        if let Some(frame) = frag {
            hits.push(Hit {
                flow: flow.into(),
                frame,
                rule: Rule::DnsFragmentedResponse,
            });
        }
        let count = s.count;
        return vec![DnsExpect::from_spec(vlan, s, us(delta), count)];
    }
    let (srt, count) = (
        s.ws_times.first().map_or(0, |&t| us(t)),
        s.ws_times.len() as u64,
    );
    vec![DnsExpect::from_spec(vlan, s, srt, count)]
}
