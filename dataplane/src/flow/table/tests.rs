use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::*;
use crate::parse::{TcpFlags, TcpMeta, TcpOptions};
use crate::record::Dir;
use entry::{Cold, Hot1, Hot2, TcpColdEntry};

const C: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
const S: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
const MS: u64 = 1_000_000;

fn tcp(src: IpAddr, sp: u16, dst: IpAddr, dp: u16, flags: TcpFlags) -> PacketMeta<'static> {
    PacketMeta {
        vlan: None,
        src,
        dst,
        proto: 6,
        ip_len: 40,
        length_clamped: false,
        tos: 0,
        ttl: 64,
        fragment: Fragment::None,
        src_port: sp,
        dst_port: dp,
        l4: L4::Tcp(TcpMeta {
            seq: 1,
            ack: 1,
            flags,
            window: 100,
            options: TcpOptions::default(),
        }),
        payload_len: 0,
        payload: &[],
    }
}

fn udp(src: IpAddr, sp: u16, dst: IpAddr, dp: u16, len: u32) -> PacketMeta<'static> {
    PacketMeta {
        proto: 17,
        l4: L4::Udp,
        ip_len: len,
        ..tcp(src, sp, dst, dp, TcpFlags::empty())
    }
}

fn cfg() -> FlowConfig {
    FlowConfig {
        capacity: 4,
        idle_timeout: Duration::from_secs(10),
        active_timeout: Duration::from_secs(60),
        tcp_linger: Duration::from_secs(1),
        npm: false,
        ts_rtt: false,
        frag_capacity: 4,
        l7: None,
    }
}

fn run(t: &mut FlowTable, pkts: &[(u64, PacketMeta<'static>)]) -> Vec<FlowRecord> {
    let mut out = vec![];
    for (ms, p) in pkts {
        t.process(p, Timestamp(ms * MS), &mut |r| out.push(r));
    }
    out
}

#[test]
fn both_directions_meet_and_syn_sender_is_client() {
    let mut t = FlowTable::new(&cfg());
    let mut recs = run(
        &mut t,
        &[
            (0, tcp(S, 80, C, 40000, TcpFlags::SYN)), // server-side port numbers do not matter: SYN sender is client
            (1, tcp(C, 40000, S, 80, TcpFlags::SYN | TcpFlags::ACK)),
            (2, tcp(S, 80, C, 40000, TcpFlags::ACK)),
        ],
    );
    assert!(recs.is_empty());
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!((r.client_addr, r.client_port), (S, 80));
    assert_eq!((r.server_addr, r.server_port), (C, 40000));
    assert!(!r.direction_guessed);
    assert_eq!((r.c2s.packets, r.s2c.packets), (2, 1));
    assert_eq!((r.c2s.bytes, r.s2c.bytes), (80, 40));
    assert_eq!(r.end_reason, EndReason::Forced);
    assert_eq!((r.start, r.end), (Timestamp(0), Timestamp(2 * MS)));
}

#[test]
fn mid_stream_flow_is_guessed_by_port() {
    let mut t = FlowTable::new(&cfg());
    let mut recs = run(&mut t, &[(0, tcp(S, 443, C, 51000, TcpFlags::ACK))]);
    t.flush(&mut |r| recs.push(r));
    let r = &recs[0];
    assert!(r.direction_guessed);
    assert_eq!(r.server_port, 443);
    assert_eq!(r.s2c.packets, 1);
}

#[test]
fn dns_port_decides_roles() {
    let mut t = FlowTable::new(&cfg());
    let mut recs = run(&mut t, &[(0, udp(S, 53, C, 53000, 90))]);
    t.flush(&mut |r| recs.push(r));
    assert!(!recs[0].direction_guessed);
    assert_eq!(recs[0].server_port, 53);
    assert_eq!(recs[0].s2c.bytes, 90);
}

#[test]
fn idle_timeout_on_packet_time() {
    let mut t = FlowTable::new(&cfg());
    let recs = run(
        &mut t,
        &[
            (0, udp(C, 51000, S, 2000, 50)),
            (9_999, udp(C, 51001, S, 2000, 50)),
            (10_000, udp(C, 51002, S, 2000, 50)), // flow 51000 idle for exactly 10 s
        ],
    );
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].client_port, 51000);
    assert_eq!(recs[0].end_reason, EndReason::Idle);
    assert_eq!(t.len(), 2);
}

#[test]
fn active_timeout_reports_and_continues() {
    let mut t = FlowTable::new(&cfg());
    let mut pkts = vec![];
    for s in 0..=130u64 {
        pkts.push((s * 1000, udp(C, 51000, S, 2000, 10)));
    }
    let mut recs = run(&mut t, &pkts);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs.iter().all(|r| r.end_reason == EndReason::Active));
    assert_eq!(recs[0].c2s.packets, 60); // 0..59 s; the packet at 60 s starts interval 2
    assert_eq!(recs[1].c2s.packets, 60);
    assert_eq!((recs[0].seq_in_flow, recs[1].seq_in_flow), (0, 1));
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs[2].c2s.packets, 11);
    assert_eq!(recs[2].end_reason, EndReason::Forced);
    let total: u64 = recs.iter().map(|r| r.c2s.packets).sum();
    assert_eq!(total, 131);
    assert_eq!(recs[1].start, Timestamp(60_000 * MS));
}

#[test]
fn fin_both_ways_ends_after_linger_and_late_ack_counts() {
    let mut t = FlowTable::new(&cfg());
    let recs = run(
        &mut t,
        &[
            (0, tcp(C, 40000, S, 80, TcpFlags::SYN)),
            (1, tcp(S, 80, C, 40000, TcpFlags::SYN | TcpFlags::ACK)),
            (2, tcp(C, 40000, S, 80, TcpFlags::FIN | TcpFlags::ACK)),
            (3, tcp(S, 80, C, 40000, TcpFlags::FIN | TcpFlags::ACK)),
            (4, tcp(C, 40000, S, 80, TcpFlags::ACK)), // last ACK within linger
            (2000, udp(C, 1, S, 2, 10)),              // time passes
        ],
    );
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].end_reason, EndReason::End);
    assert_eq!(recs[0].c2s.packets, 3);
    assert_eq!(
        recs[0].c2s.tcp_flags,
        (TcpFlags::SYN | TcpFlags::FIN | TcpFlags::ACK).bits()
    );
}

#[test]
fn rst_ends_and_syn_on_closing_tuple_starts_new_flow() {
    let mut t = FlowTable::new(&cfg());
    let recs = run(
        &mut t,
        &[
            (0, tcp(C, 40000, S, 80, TcpFlags::SYN)),
            (1, tcp(S, 80, C, 40000, TcpFlags::RST | TcpFlags::ACK)),
            (2, tcp(C, 40000, S, 80, TcpFlags::SYN)), // port reuse within linger
        ],
    );
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].end_reason, EndReason::End);
    assert_eq!(recs[0].c2s.packets + recs[0].s2c.packets, 2);
    assert_eq!(t.len(), 1);
}

#[test]
fn full_table_evicts_least_recently_seen() {
    let mut t = FlowTable::new(&cfg());
    let recs = run(
        &mut t,
        &[
            (0, udp(C, 50001, S, 9, 10)),
            (1, udp(C, 50002, S, 9, 10)),
            (2, udp(C, 50003, S, 9, 10)),
            (3, udp(C, 50004, S, 9, 10)),
            (4, udp(C, 50001, S, 9, 10)), // refresh flow 1: flow 2 is now the oldest
            (5, udp(C, 50005, S, 9, 10)),
        ],
    );
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].client_port, 50002);
    assert_eq!(recs[0].end_reason, EndReason::Evicted);
    assert_eq!(t.stats().evicted, 1);
    assert_eq!(t.len(), 4);
}

#[test]
fn later_fragments_join_first_fragment_flow() {
    let mut t = FlowTable::new(&cfg());
    let first = PacketMeta {
        fragment: Fragment::First { id: 77 },
        ..udp(C, 5353, S, 53, 1500)
    };
    let later = PacketMeta {
        fragment: Fragment::Later {
            id: 77,
            offset: 185,
            more: false,
        },
        src_port: 0,
        dst_port: 0,
        l4: L4::Fragment,
        ..udp(C, 0, S, 0, 300)
    };
    let mut recs = run(&mut t, &[(0, first), (1, later), (2, later)]);
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs.len(), 2);
    let dns = recs.iter().find(|r| r.server_port == 53).unwrap();
    assert_eq!(dns.c2s.bytes, 1800);
    // the second copy of the last fragment came after the datagram was complete
    let orphan = recs.iter().find(|r| r.server_port == 0).unwrap();
    assert_eq!(orphan.c2s.bytes + orphan.s2c.bytes, 300);
    assert_eq!(t.frag_stats().unattributed, 1);
}

#[test]
fn timestamps_going_backwards_do_not_expire_or_panic() {
    let mut t = FlowTable::new(&cfg());
    let mut recs = run(
        &mut t,
        &[(50_000, udp(C, 1, S, 2, 10)), (1_000, udp(C, 1, S, 2, 10))],
    );
    assert!(recs.is_empty());
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs[0].start, Timestamp(1_000 * MS));
    assert_eq!(recs[0].end, Timestamp(50_000 * MS));
}

#[test]
fn memory_per_flow() {
    use std::mem::size_of;
    let cfg = FlowConfig::default();
    let free = size_of::<u32>();
    // The index's buckets per flow at the default capacity.
    let index = (Index::memory_bytes(cfg.capacity) / cfg.capacity as u64) as usize;
    let (hot1, cold, hot2, tcp_cold) = (
        size_of::<Hot1>(),
        size_of::<Cold>(),
        size_of::<Hot2>(),
        size_of::<TcpColdEntry>(),
    );
    let (dns, v6, ts) = (
        size_of::<DnsTracker>() + free,
        size_of::<[Addr; 2]>() + free,
        size_of::<TsRtt>(),
    );
    let udp = hot1 + cold + free + index;
    let with_dns = udp + dns;
    let tcp = hot2 + tcp_cold + free + index;
    println!(
        "hot {hot1} B + cold {cold} B + free list {free} B + index {index} B => {udp} B per flow; \
         DNS + {dns} B => {with_dns} B; TCP: hot {hot2} B + cold {tcp_cold} B + {free} B + {index} B \
         => {tcp} B; + {ts} B with timestamp RTT => {} B; IPv6 + {v6} B",
        tcp + ts
    );
    println!(
        "up-front estimate at the default {} flows: {:.1} MiB",
        cfg.capacity,
        cfg.memory_bytes() as f64 / f64::from(1 << 20)
    );
    // What an ordinary packet touches: the index bucket and the hot lines.
    assert_eq!((hot1, hot2), (64, 128));
    // docs/flow-table.md states these. Before the hot/cold split an IPv4
    // flow took 150 / 194 / 394 / 650 B by the doc's count (which put the
    // index at 10 B), 176 / 220 / 420 / 676 B with the index as allocated
    // at the default capacity (36 B per flow), and with L7 on (the
    // default) 8 B more each for its column of handles, which the cold
    // entry now holds: no flow may cost more.
    let l7 = size_of::<xdprobe_l7::Slot>();
    assert_eq!(l7, 8);
    assert!(udp <= 150 + l7, "a flow without TCP state grew to {udp} B");
    assert!(with_dns <= 194 + l7, "a DNS flow grew to {with_dns} B");
    assert!(tcp <= 394 + l7, "a TCP flow grew to {tcp} B");
    assert!(tcp + ts <= 650 + l7, "a TCP flow with timestamp RTT grew");
    assert!(udp + v6 <= 176 + l7 && with_dns + v6 <= 220 + l7 && tcp + v6 <= 420 + l7);
    assert!(ts <= 256, "timestamp-RTT state grew to {ts} B");
}

#[test]
fn idle_boundaries_are_exact_although_expiry_is_lazy() {
    let mut t = FlowTable::new(&cfg());
    let p = udp(C, 51000, S, 2000, 10);
    let mut recs = run(
        &mut t,
        &[
            (0, p),
            (9_000, p),  // refreshes the flow
            (18_000, p), // 9 s after the last packet: same flow (sweep at 10 s requeued it)
            (28_000, p), // exactly the idle timeout after 18 s: a new flow
        ],
    );
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].c2s.packets, 3);
    assert_eq!(recs[0].end, Timestamp(18_000 * MS));
    assert_eq!(recs[0].end_reason, EndReason::Idle);
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs[1].c2s.packets, 1);
    assert_eq!(recs[1].start, Timestamp(28_000 * MS));
}

#[test]
fn idle_record_leaves_within_two_timeouts() {
    let mut t = FlowTable::new(&cfg());
    let mut out = vec![];
    t.process(&udp(C, 51000, S, 2000, 10), Timestamp(0), &mut |r| {
        out.push(r)
    });
    t.process(
        &udp(C, 51000, S, 2000, 10),
        Timestamp(5_000 * MS),
        &mut |r| out.push(r),
    );
    t.tick(Timestamp(14_999 * MS), &mut |r| out.push(r));
    assert!(out.is_empty());
    t.tick(Timestamp(24_998 * MS), &mut |r| out.push(r));
    assert!(out.is_empty());
    t.tick(Timestamp(25_000 * MS), &mut |r| out.push(r)); // last + 2 × idle
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].end, Timestamp(5_000 * MS));
}

#[test]
fn shorter_idle_timeout_applies_on_reload() {
    let mut t = FlowTable::new(&cfg());
    let mut out = vec![];
    t.process(&udp(C, 51000, S, 2000, 10), Timestamp(0), &mut |r| {
        out.push(r)
    });
    t.tick(Timestamp(3_000 * MS), &mut |r| out.push(r));
    assert!(out.is_empty());
    t.set_timeouts(&FlowConfig {
        idle_timeout: Duration::from_secs(2),
        ..cfg()
    });
    t.tick(Timestamp(3_001 * MS), &mut |r| out.push(r));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].end_reason, EndReason::Idle);
}

/// A SYN flood through a full table: one eviction per packet, every one
/// counted, and neither the index nor the slabs ever reallocate.
#[test]
fn a_flood_of_new_flows_evicts_each_and_never_grows_the_table() {
    let mut t = FlowTable::new(&FlowConfig {
        capacity: 64,
        ..cfg()
    });
    let (one, two) = (t.slabs.one.capacity(), t.slabs.tcp.capacity());
    let buckets = t.index.buckets();
    let mut records = 0u64;
    for i in 0..100_000u32 {
        let src = IpAddr::V4(Ipv4Addr::from_bits(0xc000_0200 | (i >> 16)));
        let p = tcp(src, i as u16, S, 80, TcpFlags::SYN);
        t.process(&p, Timestamp(u64::from(i) * 1_000), &mut |_| records += 1);
    }
    assert_eq!(t.index.buckets(), buckets);
    assert_eq!((t.slabs.one.capacity(), t.slabs.tcp.capacity()), (one, two));
    assert_eq!(two, 64, "the TCP slab grew");
    assert_eq!(t.slabs.tcp.len(), 64);
    assert_eq!(t.index.len(), 64);
    assert_eq!(t.len(), 64);
    assert_eq!(t.stats().evicted, 100_000 - 64);
    assert_eq!(records, 100_000 - 64);
}

/// A TCP flow begun by a non-first fragment (no TCP header) moves to the
/// TCP slab at its first segment, keeping its place in the index and on
/// the lists: its later packets and its FIN/RST closing find it.
#[test]
fn a_flow_begun_without_a_tcp_header_moves_at_its_first_segment() {
    let mut t = FlowTable::new(&cfg());
    let later = PacketMeta {
        fragment: Fragment::Later {
            id: 9,
            offset: 185,
            more: false,
        },
        src_port: 0,
        dst_port: 0,
        l4: L4::Fragment,
        ip_len: 300,
        ..tcp(C, 0, S, 0, TcpFlags::empty())
    };
    let mut recs = run(
        &mut t,
        &[
            (0, udp(C, 7, S, 8, 10)), // another flow, first on the lists
            (1, later),               // a port-less TCP flow
            (2, tcp(C, 0, S, 0, TcpFlags::ACK)),
            (3, tcp(S, 0, C, 0, TcpFlags::RST)),
            (4, tcp(C, 0, S, 0, TcpFlags::ACK)), // within the linger
        ],
    );
    assert!(recs.is_empty());
    assert_eq!((t.len(), t.slabs.one.len(), t.slabs.tcp.len()), (2, 1, 1));
    t.tick(Timestamp(2_000 * MS), &mut |r| recs.push(r));
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert_eq!(r.end_reason, EndReason::End);
    assert_eq!(r.c2s.packets + r.s2c.packets, 4);
    assert_eq!(r.c2s.bytes + r.s2c.bytes, 300 + 3 * 40);
    assert_eq!(
        r.c2s.tcp_flags | r.s2c.tcp_flags,
        (TcpFlags::ACK | TcpFlags::RST).bits()
    );
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs.len(), 2);
    assert!(t.is_empty());
}

/// IPv6 flows keep their addresses in a column: two flows that differ only
/// in an address stay apart, and records give the addresses back.
#[test]
fn ipv6_flows_are_told_apart_by_their_addresses() {
    use std::net::Ipv6Addr;
    let a = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let b = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));
    let c = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 3));
    let mut t = FlowTable::new(&cfg());
    let mut recs = run(
        &mut t,
        &[
            (0, udp(a, 5000, b, 6000, 100)),
            (1, udp(a, 5000, c, 6000, 100)),
            (2, udp(b, 6000, a, 5000, 100)),
        ],
    );
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs.len(), 2);
    let ab = recs
        .iter()
        .find(|r| r.server_addr == b || r.client_addr == b)
        .unwrap();
    assert_eq!(ab.c2s.packets + ab.s2c.packets, 2);
    let ac = recs
        .iter()
        .find(|r| r.server_addr == c || r.client_addr == c)
        .unwrap();
    assert_eq!(ac.c2s.packets + ac.s2c.packets, 1);
    assert_eq!(t.slabs.v6.len(), 0, "the address slots are given back");
}

/// The L7 parsers see a flow's payloads while its head's inspect bit is
/// set, and nothing after: an unrecognised UDP flow is done after `[l7]
/// packets` payloads a direction (here 2 + 2), later packets leave its
/// cold handle as it was, and its record still has its label. With L7
/// off no flow gets the bit.
#[test]
fn l7_inspection_ends_with_the_head_bit() {
    const JUNK: &[u8] = b"\x01\x02\x03 nothing any parser knows";
    let pkt = |src, sp, dst, dp| PacketMeta {
        payload_len: JUNK.len() as u32,
        payload: JUNK,
        ..udp(src, sp, dst, dp, 28 + JUNK.len() as u32)
    };
    let mut c = cfg();
    c.l7 = Some(xdprobe_l7::L7Config {
        packets: 2,
        ..Default::default()
    });
    let mut t = FlowTable::new(&c);
    let mut recs = vec![];
    let mut handles = vec![];
    for n in 0..6u64 {
        let p = if n % 2 == 0 {
            pkt(C, 40000, S, 7000)
        } else {
            pkt(S, 7000, C, 40000)
        };
        t.process(&p, Timestamp(n * MS), &mut |r| recs.push(r));
        let id = t.index.candidate(t.prepare(&p).hash).expect("the flow");
        handles.push((t.slabs.head_ref(id).l7_inspect_any(), t.slabs.cold(id).l7));
    }
    let inspecting: Vec<bool> = handles.iter().map(|h| h.0).collect();
    assert_eq!(inspecting, [true, true, true, false, false, false]);
    assert_ne!(
        handles[3].1,
        xdprobe_l7::Slot::default(),
        "the parsers saw it"
    );
    assert!(
        handles[3..].iter().all(|h| h.1 == handles[3].1),
        "{handles:?}"
    );
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].app, Some(xdprobe_l7::App::Unknown));
    assert_eq!((recs[0].c2s.packets, recs[0].s2c.packets), (3, 3));

    let mut t = FlowTable::new(&cfg());
    let p = pkt(C, 40000, S, 7000);
    t.process(&p, Timestamp(0), &mut |r| recs.push(r));
    let id = t.index.candidate(t.prepare(&p).hash).expect("the flow");
    assert!(!t.slabs.head_ref(id).l7_inspect_any());
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs[1].app, None);
}

/// A TCP direction whose stream start (the SYN seen, the first payload at
/// the byte after it) matched no parser is decided: its head bit is
/// cleared, so its later payloads touch no L7 state, while the other
/// direction is still inspected. Without the SYN (a flow picked up in its
/// middle) later payloads are still looked at.
#[test]
fn l7_a_stream_start_no_parser_knows_ends_that_direction() {
    const JUNK: &[u8] = b"\x01\x02\x03 nothing any parser knows";
    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
    let seg = |src, sp, dst, dp, flags, seq: u32, payload: &'static [u8]| {
        let mut p = tcp(src, sp, dst, dp, flags);
        if let L4::Tcp(t) = &mut p.l4 {
            t.seq = seq;
        }
        PacketMeta {
            payload,
            payload_len: payload.len() as u32,
            ip_len: 40 + payload.len() as u32,
            ..p
        }
    };
    let ack = TcpFlags::ACK;
    let mut c = cfg();
    c.npm = true;
    c.l7 = Some(xdprobe_l7::L7Config::default());
    let mut t = FlowTable::new(&c);
    let mut recs = vec![];
    let pkts = [
        seg(C, 40000, S, 8080, TcpFlags::SYN, 1000, &[]),
        seg(S, 8080, C, 40000, TcpFlags::SYN | ack, 5000, &[]),
        seg(C, 40000, S, 8080, ack, 1001, &[]),
        seg(C, 40000, S, 8080, ack, 1001, JUNK),
    ];
    for (n, p) in pkts.iter().enumerate() {
        t.process(p, Timestamp(n as u64 * MS), &mut |r| recs.push(r));
    }
    let id = t
        .index
        .candidate(t.prepare(&pkts[0]).hash)
        .expect("the flow");
    let head = *t.slabs.head_ref(id);
    assert!(!head.l7_inspect(Dir::C2S) && head.l7_inspect(Dir::S2C));
    let slot = t.slabs.cold(id).l7;
    // A request later in the same stream is not its start: not looked at.
    let get = seg(C, 40000, S, 8080, ack, 1001 + JUNK.len() as u32, GET);
    t.process(&get, Timestamp(5 * MS), &mut |r| recs.push(r));
    assert_eq!(t.slabs.cold(id).l7, slot, "the handle was not touched");
    let back = seg(S, 8080, C, 40000, ack, 5001, JUNK);
    t.process(&back, Timestamp(6 * MS), &mut |r| recs.push(r));
    assert!(!t.slabs.head_ref(id).l7_inspect_any(), "both decided");
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].app, Some(xdprobe_l7::App::Unknown));

    // Picked up mid-stream (no SYN): the junk does not decide, the request
    // after it labels the flow.
    let mut t = FlowTable::new(&c);
    let mid = [
        seg(C, 40001, S, 8080, ack, 7000, JUNK),
        seg(C, 40001, S, 8080, ack, 7000 + JUNK.len() as u32, GET),
    ];
    for (n, p) in mid.iter().enumerate() {
        t.process(p, Timestamp(n as u64 * MS), &mut |r| recs.push(r));
    }
    t.flush(&mut |r| recs.push(r));
    assert_eq!(recs[1].app, Some(xdprobe_l7::App::Http));
}
