use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::stack::stats::Summary;

const SNS: u32 = 1001; // sender's namespace
const RNS: u32 = 1002; // receiver's namespace
const HOP: u32 = 1003; // a bridge namespace in between

fn ev(layer: u8, seq: u32, len: u32, t_us: u64, netns: u32) -> StackEvent {
    let mut e = StackEvent {
        ts_ns: t_us * 1000,
        seq,
        end: seq.wrapping_add(len),
        netns,
        layer,
        family: 2,
        sport: 40000,
        dport: 5201,
        ..StackEvent::default()
    };
    e.saddr[..4].copy_from_slice(&[192, 0, 2, 1]);
    e.daddr[..4].copy_from_slice(&[192, 0, 2, 2]);
    if matches!(layer, code::SOCK_TX | code::SOCK_RX) {
        e.tgid = if layer == code::SOCK_TX { 11 } else { 22 };
    }
    e
}

/// One write of `len` bytes at `seq` passing all eight layers, layer k at
/// `t0 + offs[k]` µs; the device and IP layers also see it in a hop
/// namespace at absurd times that must not count.
fn pass_all(m: &mut Matcher, seq: u32, len: u32, t0: u64, offs: [u64; 8]) {
    let order = [
        code::IP_TX,
        code::DEV_TX,
        code::DEV_RX,
        code::IP_RX,
        code::TCP_RX,
        code::SOCK_RX,
        code::TCP_TX,
        code::SOCK_TX, // reported when the call returns: last
    ];
    for l in order {
        let ns = if l <= code::DEV_TX { SNS } else { RNS };
        m.on_event(&ev(l, seq, len, t0 + offs[usize::from(l - 1)], ns));
        if matches!(l, code::DEV_RX | code::IP_RX | code::IP_TX | code::DEV_TX) {
            m.on_event(&ev(l, seq, len, t0 + 999_999, HOP));
        }
    }
}

fn collect(m: &mut Matcher, now_us: u64) -> Vec<FlowReport> {
    let mut v = Vec::new();
    m.advance(now_us * 1000, &mut |r| v.push(r));
    v
}

fn finish(m: &mut Matcher, now_us: u64) -> Vec<FlowReport> {
    let mut v = Vec::new();
    m.finish(now_us * 1000, &mut |r| v.push(r));
    v
}

fn seg<'a>(r: &'a FlowReport, name: &str) -> &'a Summary {
    &r.segments
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", r.segments))
        .summary
}

#[test]
fn eight_layers_give_seven_segments_that_sum_to_t8() {
    let mut m = Matcher::new(MatcherConfig::default());
    let offs = [0, 3, 10, 14, 5014, 5020, 5031, 5100];
    for i in 0..10u32 {
        pass_all(
            &mut m,
            1000 + i * 1448,
            1448,
            100_000 + u64::from(i) * 10_000,
            offs,
        );
    }
    let r = finish(&mut m, 10_000_000);
    assert_eq!(r.len(), 1);
    let r = &r[0];
    assert_eq!(r.complete, 10);
    assert_eq!(r.incomplete, 0);
    assert_eq!(r.layers, Layer::ALL.to_vec());
    let names: Vec<_> = r.segments.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["T1", "T2", "T3", "T4", "T5", "T6", "T7"]);
    assert_eq!(seg(r, "T1").mean_us, 3.0);
    assert_eq!(seg(r, "T3").p50_us, 4.0);
    assert_eq!(seg(r, "T4").p99_us, 5000.0);
    assert_eq!(seg(r, "T7").max_us, 69.0);
    let sum: f64 = r.segments.iter().map(|s| s.summary.mean_us).sum();
    assert_eq!(sum, r.t8.unwrap().mean_us);
    assert_eq!(r.t8.unwrap().mean_us, 5100.0);
    assert_eq!(
        r.sender,
        Some(End {
            netns: SNS,
            pid: 11
        })
    );
    assert_eq!(
        r.receiver,
        Some(End {
            netns: RNS,
            pid: 22
        })
    );
    assert_eq!(r.key.src, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
}

#[test]
fn segmentation_differs_between_layers() {
    // One 64 KiB TSO write on the sender, 45 frames of 1448 on the receiver
    // (the last one shorter); the socket reads 16 KiB at a time.
    let mut m = Matcher::new(MatcherConfig::default());
    let seq = 7_000_000u32;
    let total = 65_160u32;
    m.on_event(&ev(code::IP_TX, seq, total, 10, SNS));
    m.on_event(&ev(code::DEV_TX, seq, total, 12, SNS));
    for k in 0..45u32 {
        let s = seq + k * 1448;
        let len = 1448.min(total - k * 1448);
        m.on_event(&ev(code::DEV_RX, s, len, 100 + u64::from(k), RNS));
        m.on_event(&ev(code::IP_RX, s, len, 200 + u64::from(k), RNS));
        m.on_event(&ev(code::TCP_RX, s, len, 300 + u64::from(k), RNS));
    }
    for k in 0..4u32 {
        let s = seq + k * 16_384;
        let len = 16_384.min(total - k * 16_384);
        m.on_event(&ev(code::SOCK_RX, s, len, 1000 + u64::from(k) * 10, RNS));
    }
    m.on_event(&ev(code::TCP_TX, seq, total, 5, SNS));
    m.on_event(&ev(code::SOCK_TX, seq, total, 1, SNS));
    let r = &finish(&mut m, 1_000_000)[0];
    // Anchors: the end of the write (1) and of each read (4), one shared.
    assert_eq!(r.complete, 4);
    let t7 = seg(r, "T7");
    assert_eq!(t7.samples, 4);
    // The read ending at byte 16383 ends in frame 11 (bytes 15928..17376);
    // the last read (ending at 65159, in frame 44) waited least.
    assert_eq!(t7.max_us, 1000.0 - 311.0);
    assert_eq!(t7.min_us, 1030.0 - 344.0);
    let t4 = seg(r, "T4");
    assert_eq!(t4.max_us, (100 + 44 - 12) as f64);
}

#[test]
fn retransmitted_and_reordered_ranges_are_skipped() {
    let mut m = Matcher::new(MatcherConfig::default());
    let offs = [0, 1, 2, 3, 4, 5, 6, 7];
    pass_all(&mut m, 0, 1000, 1000, offs);
    // The sender's device sends 0..1000 again (a retransmission): skipped.
    m.on_event(&ev(code::DEV_TX, 0, 1000, 90_000, SNS));
    // The receiver sees 2000..3000 before 1000..2000: the late one is
    // skipped there, so the anchor at 1999 misses DEV_RX and is left out.
    m.on_event(&ev(code::SOCK_TX, 1000, 2000, 2000, SNS));
    m.on_event(&ev(code::TCP_TX, 1000, 2000, 2001, SNS));
    m.on_event(&ev(code::IP_TX, 1000, 2000, 2002, SNS));
    m.on_event(&ev(code::DEV_TX, 1000, 2000, 2003, SNS));
    m.on_event(&ev(code::DEV_RX, 2000, 1000, 2004, RNS));
    m.on_event(&ev(code::DEV_RX, 1000, 1000, 2005, RNS));
    for l in [code::IP_RX, code::TCP_RX] {
        m.on_event(&ev(l, 1000, 2000, 2006, RNS));
    }
    m.on_event(&ev(code::SOCK_RX, 1000, 1000, 2007, RNS));
    m.on_event(&ev(code::SOCK_RX, 2000, 1000, 2008, RNS));
    let r = &finish(&mut m, 10_000_000)[0];
    assert_eq!(r.skipped, 2);
    // Anchors: 999 (complete), 1999 (DEV_RX skipped it), 2999 (complete).
    assert_eq!(r.complete, 2);
    assert_eq!(r.incomplete, 1);
}

#[test]
fn sampling_grid_anchors_are_the_same_bytes_at_every_layer() {
    let cfg = MatcherConfig {
        sample_bytes: 10_000,
        ..MatcherConfig::default()
    };
    let mut m = Matcher::new(cfg);
    // 95 000 bytes from seq 5000: grid bytes 10000, 20000, …, 90000 (9).
    for i in 0..95u32 {
        pass_all(
            &mut m,
            5000 + i * 1000,
            1000,
            u64::from(i) * 100,
            [0, 1, 2, 3, 4, 5, 6, 7],
        );
    }
    let r = &finish(&mut m, 10_000_000)[0];
    assert_eq!(r.complete, 9);
    assert_eq!(r.t8.unwrap().samples, 9);
}

#[test]
fn sequence_numbers_wrap() {
    let mut m = Matcher::new(MatcherConfig::default());
    let start = u32::MAX - 2500;
    for i in 0..5u32 {
        pass_all(
            &mut m,
            start.wrapping_add(i * 1000),
            1000,
            u64::from(i) * 100,
            [0, 1, 2, 3, 4, 5, 6, 7],
        );
    }
    let r = &finish(&mut m, 10_000_000)[0];
    assert_eq!(r.complete, 5);
    assert_eq!(r.skipped, 0);
}

#[test]
fn one_end_only_gives_that_ends_segments() {
    // A receiver on this host, its sender elsewhere: T5–T7, no T4, no T8.
    let mut m = Matcher::new(MatcherConfig::default());
    for i in 0..3u32 {
        let t = u64::from(i) * 1000;
        m.on_event(&ev(code::DEV_RX, i * 100, 100, t, RNS));
        m.on_event(&ev(code::IP_RX, i * 100, 100, t + 2, RNS));
        m.on_event(&ev(code::TCP_RX, i * 100, 100, t + 5, RNS));
        m.on_event(&ev(code::SOCK_RX, i * 100, 100, t + 9, RNS));
    }
    // Nothing resolves before the hold: the sender's layers might still come.
    assert!(collect(&mut m, 100).is_empty());
    let r = &finish(&mut m, 10_000_000)[0];
    let names: Vec<_> = r.segments.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["T5", "T6", "T7"]);
    assert!(r.t8.is_none());
    assert!(r.sender.is_none());
    assert_eq!(r.complete, 3);
}

#[test]
fn a_layer_without_hook_merges_its_neighbours() {
    let cfg = MatcherConfig {
        attached: vec![Layer::SockTx, Layer::TcpTx, Layer::DevTx, Layer::SockRx],
        ..MatcherConfig::default()
    };
    let mut m = Matcher::new(cfg);
    m.on_event(&ev(code::DEV_TX, 0, 100, 20, SNS));
    m.on_event(&ev(code::SOCK_RX, 0, 100, 90, RNS));
    m.on_event(&ev(code::TCP_TX, 0, 100, 5, SNS));
    m.on_event(&ev(code::SOCK_TX, 0, 100, 1, SNS));
    let r = &collect(&mut m, 200)[..];
    assert!(r.is_empty(), "resolved, but the flow goes on");
    let r = &finish(&mut m, 300)[0];
    let names: Vec<_> = r.segments.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["T1", "T2+T3", "T4+T5+T6+T7"]);
    assert_eq!(seg(r, "T2+T3").mean_us, 15.0);
}

#[test]
fn close_reports_after_the_hold_and_idle_flows_expire() {
    let cfg = MatcherConfig {
        idle_ns: 5_000_000_000,
        ..MatcherConfig::default()
    };
    let mut m = Matcher::new(cfg);
    pass_all(&mut m, 0, 100, 0, [0, 1, 2, 3, 4, 5, 6, 7]);
    let mut close = ev(code::CLOSE, 0, 0, 10_000, SNS);
    // The close event names the socket's local end first: the receiver here.
    std::mem::swap(&mut close.saddr, &mut close.daddr);
    std::mem::swap(&mut close.sport, &mut close.dport);
    m.on_event(&close);
    assert!(collect(&mut m, 10_100).is_empty());
    let r = collect(&mut m, 300_000);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].end_reason, EndReason::End);
    assert_eq!(m.flows(), 0);

    pass_all(&mut m, 5000, 100, 1_000_000, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(collect(&mut m, 2_000_000).is_empty());
    let r = collect(&mut m, 7_000_000);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].end_reason, EndReason::Idle);
}

#[test]
fn periodic_reports_restart_the_figures() {
    let cfg = MatcherConfig {
        report_ns: 1_000_000_000,
        ..MatcherConfig::default()
    };
    let mut m = Matcher::new(cfg);
    pass_all(&mut m, 0, 100, 0, [0, 10, 20, 30, 40, 50, 60, 70]);
    let r = collect(&mut m, 1_500_000);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].record_seq, r[0].end_reason), (0, EndReason::Active));
    pass_all(
        &mut m,
        100,
        100,
        1_600_000,
        [0, 20, 40, 60, 80, 100, 120, 140],
    );
    let r = finish(&mut m, 1_700_000);
    assert_eq!(r[0].record_seq, 1);
    assert_eq!(r[0].complete, 1);
    assert_eq!(r[0].t8.unwrap().mean_us, 140.0);
}

#[test]
fn state_stays_bounded() {
    let cfg = MatcherConfig {
        max_flows: 10,
        max_obs_per_track: 16,
        max_anchors: 32,
        ..MatcherConfig::default()
    };
    let mut m = Matcher::new(cfg);
    // 1000 reads on a flow whose sender never shows: anchors pile up.
    for i in 0..1000u32 {
        m.on_event(&ev(code::SOCK_RX, i * 10, 10, u64::from(i), RNS));
        m.on_event(&ev(code::DEV_TX, i * 10, 10, u64::from(i), SNS));
    }
    let c = m.counters();
    assert!(c.anchors_dropped >= 1000 - 32);
    assert!(c.obs_trimmed >= 1000 - 16);
    for p in 0..20u16 {
        let mut e = ev(code::SOCK_RX, 0, 10, 1, RNS);
        e.sport = 1000 + p;
        m.on_event(&e);
    }
    assert_eq!(m.flows(), 10);
    assert_eq!(m.counters().flows_dropped, 11);
}

#[test]
fn garbage_events_are_counted_not_trusted() {
    let mut m = Matcher::new(MatcherConfig::default());
    let mut e = ev(code::SOCK_RX, 0, 10, 1, RNS);
    e.family = 99;
    m.on_event(&e);
    let mut e = ev(42, 0, 10, 1, RNS);
    e.layer = 42;
    m.on_event(&e);
    m.on_event(&ev(code::SOCK_RX, 5, 0, 1, RNS));
    assert_eq!(m.counters().bad_events, 3);
}

#[test]
fn segment_names() {
    assert_eq!(segment_name(Layer::SockTx, Layer::TcpTx), "T1");
    assert_eq!(segment_name(Layer::DevTx, Layer::DevRx), "T4");
    assert_eq!(segment_name(Layer::DevTx, Layer::IpRx), "T4+T5");
    assert_eq!(
        segment_name(Layer::SockTx, Layer::SockRx),
        "T1+T2+T3+T4+T5+T6+T7"
    );
}

#[test]
fn time_based_sampling_counts_one_byte_per_interval() {
    let cfg = MatcherConfig {
        min_interval_ns: 50_000_000,
        ..MatcherConfig::default()
    };
    let mut m = Matcher::new(cfg);
    // 100 writes, one every 10 ms: at most one per 50 ms counts.
    for i in 0..100u32 {
        pass_all(
            &mut m,
            i * 100,
            100,
            u64::from(i) * 10_000,
            [0, 1, 2, 3, 4, 5, 6, 7],
        );
    }
    let r = &finish(&mut m, 10_000_000)[0];
    assert_eq!(r.complete, 20);
    assert_eq!(r.thinned, 80);
    assert_eq!(r.t8.unwrap().samples, 20);
}

#[test]
fn a_process_scope_reports_only_flows_whose_sockets_it_saw() {
    let cfg = MatcherConfig {
        sample_bytes: 100,
        require_socket: true,
        ..MatcherConfig::default()
    };
    let mut m = Matcher::new(cfg);
    // A flow seen only at the device layers (another process's).
    m.on_event(&ev(code::DEV_TX, 0, 1000, 1, SNS));
    m.on_event(&ev(code::DEV_RX, 0, 1000, 2, RNS));
    assert!(finish(&mut m, 10_000_000).is_empty());
    pass_all(&mut m, 0, 1000, 1, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(finish(&mut m, 10_000_000).len(), 1);
}

/// Only the layers from `from` (a layer code) on see this write: the
/// earlier ones had passed it before they were watched.
fn pass_from(m: &mut Matcher, from: u8, seq: u32, len: u32, t0: u64) {
    for l in [
        code::TCP_TX,
        code::IP_TX,
        code::DEV_TX,
        code::DEV_RX,
        code::IP_RX,
        code::TCP_RX,
        code::SOCK_RX,
    ] {
        if l >= from {
            let ns = if l <= code::DEV_TX { SNS } else { RNS };
            m.on_event(&ev(l, seq, len, t0 + u64::from(l), ns));
        }
    }
}

#[test]
fn bytes_in_flight_when_a_window_opens_are_edge_not_incomplete() {
    let mut m = Matcher::new(MatcherConfig::default());
    m.window_opened(100_000 * 1000);
    // Two writes already past the socket and TCP layers at the opening.
    pass_from(&mut m, code::IP_TX, 1000, 1448, 100_010);
    pass_from(&mut m, code::IP_TX, 2448, 1448, 100_020);
    let offs = [0, 3, 10, 14, 20, 26, 31, 40];
    for i in 0..5u32 {
        pass_all(
            &mut m,
            3896 + i * 1448,
            1448,
            101_000 + u64::from(i) * 100,
            offs,
        );
    }
    let r = finish(&mut m, 10_000_000);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].complete, r[0].incomplete, r[0].edge), (5, 0, 2));
    // The same two writes long after the opening: a layer really skipped
    // them, which is what `incomplete` says.
    let mut m = Matcher::new(MatcherConfig::default());
    m.window_opened(0);
    pass_from(&mut m, code::IP_TX, 1000, 1448, 1_000_000);
    pass_from(&mut m, code::IP_TX, 2448, 1448, 1_000_010);
    pass_all(&mut m, 3896, 1448, 1_001_000, offs);
    let r = finish(&mut m, 10_000_000);
    assert_eq!((r[0].complete, r[0].incomplete, r[0].edge), (1, 2, 0));
}

#[test]
fn a_closing_window_finishes_what_it_let_in_and_times_nothing_after() {
    let mut m = Matcher::new(MatcherConfig::default());
    m.window_opened(0);
    let offs = [0, 3, 10, 14, 20, 26, 31, 40];
    pass_all(&mut m, 1000, 1448, 500, offs);
    // A write let in before the entry closes (its socket-layer send is
    // reported when the call returns: last); the lower layers see it
    // after the closing.
    for l in [code::TCP_TX, code::SOCK_TX] {
        m.on_event(&ev(l, 2448, 1448, 1000 + offs[usize::from(l - 1)], SNS));
    }
    m.window_closing(1050 * 1000);
    m.settle(1050 * 1000);
    assert!(
        m.pending_before(1050 * 1000),
        "its receiver side is still to come"
    );
    pass_from(&mut m, code::IP_TX, 2448, 1448, 1_100);
    // Bytes sent after the closing: the lower layers still run (the drain)
    // but bring no anchors of their own.
    pass_from(&mut m, code::TCP_TX, 3896, 1448, 1_200);
    m.settle(1300 * 1000);
    assert!(!m.pending_before(1050 * 1000));
    m.window_closed();
    let r = finish(&mut m, 10_000_000);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].complete, r[0].incomplete, r[0].edge), (2, 0, 0));
    assert_eq!(r[0].t8.unwrap().samples, 2);
}

#[test]
fn a_window_after_a_gap_of_more_than_2_gib_still_matches() {
    let mut m = Matcher::new(MatcherConfig::default());
    let offs = [0, 3, 10, 14, 20, 26, 31, 40];
    m.window_opened(0);
    pass_all(&mut m, 1000, 1448, 1000, offs);
    m.window_closing(2000 * 1000);
    m.window_closed();
    // Three GiB later (a fast flow, unwatched for a second): read as a
    // 32-bit difference this is a step back, which the tracks would
    // skip as a retransmission.
    let seq = 1000u32.wrapping_add(3 << 30);
    m.window_opened(1_000_000 * 1000);
    for i in 0..3u32 {
        pass_all(
            &mut m,
            seq.wrapping_add(i * 1448),
            1448,
            1_000_100 + u64::from(i) * 100,
            offs,
        );
    }
    let r = finish(&mut m, 10_000_000);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].complete, r[0].incomplete, r[0].skipped), (4, 0, 0));
    assert_eq!(seg(&r[0], "T4").max_us, 6.0);
}

/// The sender's layers and the receiver's up to TCP see a write; the
/// reader has not read it yet.
fn pass_until_read(m: &mut Matcher, seq: u32, len: u32, t0: u64) {
    for l in [
        code::IP_TX,
        code::DEV_TX,
        code::DEV_RX,
        code::IP_RX,
        code::TCP_RX,
        code::TCP_TX,
        code::SOCK_TX,
    ] {
        let ns = if l <= code::DEV_TX { SNS } else { RNS };
        m.on_event(&ev(l, seq, len, t0 + u64::from(l), ns));
    }
}

#[test]
fn bytes_slower_than_the_hold_are_counted_cut_not_incomplete() {
    let cfg = MatcherConfig {
        hold_ns: 100_000_000,
        ..MatcherConfig::default()
    };
    let mut m = Matcher::new(cfg);
    let offs = [0, 3, 10, 14, 20, 26, 31, 40];
    pass_all(&mut m, 1000, 1448, 1_000, offs);
    // Waits in the receive queue longer than the hold.
    pass_until_read(&mut m, 2448, 1448, 2_000);
    collect(&mut m, 150_000);
    m.on_event(&ev(code::SOCK_RX, 2448, 1448, 180_000, RNS));
    // A byte the IP layer skipped in the middle: a layer's loss.
    for l in [
        code::TCP_TX,
        code::DEV_RX,
        code::TCP_RX,
        code::SOCK_RX,
        code::SOCK_TX,
    ] {
        let ns = if l <= code::DEV_TX { SNS } else { RNS };
        m.on_event(&ev(l, 3896, 1448, 200_000 + u64::from(l), ns));
    }
    pass_all(&mut m, 5344, 1448, 201_000, offs);
    let r = finish(&mut m, 10_000_000);
    assert_eq!(r.len(), 1);
    let r = &r[0];
    assert_eq!((r.complete, r.cut, r.incomplete, r.edge), (2, 1, 1, 0));
    assert_eq!(m.counters().cut, 1);
    // The same slow byte under a hold longer than its wait is timed.
    let mut m = Matcher::new(MatcherConfig {
        hold_ns: 500_000_000,
        ..MatcherConfig::default()
    });
    pass_until_read(&mut m, 2448, 1448, 2_000);
    collect(&mut m, 150_000);
    m.on_event(&ev(code::SOCK_RX, 2448, 1448, 180_000, RNS));
    let r = finish(&mut m, 10_000_000);
    assert_eq!((r[0].complete, r[0].cut), (1, 0));
    assert!(r[0].t8.unwrap().max_us > 170_000.0);
}

#[test]
fn a_flow_ends_when_its_reader_closes_not_when_the_sender_does() {
    let mut m = Matcher::new(MatcherConfig::default());
    let offs = [0, 1, 2, 3, 4, 5, 6, 7];
    pass_all(&mut m, 0, 100, 0, offs);
    // The sender's socket (local end first, as the event names it) is
    // done: its FIN was acknowledged while the reader still reads.
    m.on_event(&ev(code::CLOSE, 0, 0, 10_000, SNS));
    assert!(collect(&mut m, 1_000_000).is_empty(), "the reader is here");
    pass_all(&mut m, 100, 100, 1_100_000, offs);
    let mut close = ev(code::CLOSE, 0, 0, 1_200_000, RNS);
    std::mem::swap(&mut close.saddr, &mut close.daddr);
    std::mem::swap(&mut close.sport, &mut close.dport);
    m.on_event(&close);
    let r = collect(&mut m, 1_500_000);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].end_reason, r[0].complete), (EndReason::End, 2));
}
