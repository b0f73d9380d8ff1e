//! Tests of the time-ordering stage: order within the window, late
//! packets, strays and clock steps, the ring's bound and compaction.

use super::*;
use crate::source::pcap::testutil::{self as tu, Order};

const T: u32 = 1_700_000_000;

/// The seed `tu::frame` made a frame from (31 · 223 ≡ 1 mod 256).
fn tag(frame: &[u8]) -> u8 {
    frame.first().map_or(0, |b| b.wrapping_mul(223))
}

/// A classic pcap with one record per (µs offset, tag byte).
fn file(recs: &[(u32, u8)]) -> Vec<u8> {
    let mut v = tu::pcap_header(Order::Le, false, 65535, 1);
    for &(us, tag) in recs {
        let f = tu::frame(tag, 60);
        v.extend(tu::pcap_record(
            Order::Le,
            T + us / 1_000_000,
            us % 1_000_000,
            &f,
            60,
        ));
    }
    v
}

/// (µs offset, tag) of every packet, in the order handed out.
fn order(bytes: &[u8], batch: usize) -> (Vec<(u64, u8)>, ReorderStats) {
    let r = PcapReader::from_bytes(bytes).expect("header");
    let mut t = TimeOrdered::new(r);
    let mut got = Vec::new();
    loop {
        let mut out = vec![Frame::default(); batch];
        let n = t.next_batch(&mut out).expect("clean file");
        if n == 0 {
            break;
        }
        for p in &out[..n] {
            let us = p.ts.as_micros() - u64::from(T) * 1_000_000;
            got.push((us, tag(p.data)));
        }
    }
    (got, t.stats())
}

#[test]
fn in_order_files_come_out_as_they_are() {
    let recs: Vec<(u32, u8)> = (0..100).map(|i| (i * 700, i as u8)).collect();
    for batch in [1, 3, 16] {
        let (got, st) = order(&file(&recs), batch);
        let want: Vec<(u64, u8)> = recs.iter().map(|&(u, t)| (u64::from(u), t)).collect();
        assert_eq!(got, want);
        assert_eq!(st, ReorderStats::default());
    }
}

#[test]
fn a_synack_written_before_its_syn_is_put_after_it() {
    // SYN at 1000 µs written after the SYN+ACK at 1100 µs (1 ms skew).
    let recs = [(1100, 2), (1000, 1), (1300, 3), (5000, 4)];
    let (got, st) = order(&file(&recs), 16);
    assert_eq!(got, vec![(1000, 1), (1100, 2), (1300, 3), (5000, 4)]);
    assert_eq!(st.reordered, 1);
}

/// A long stream with jitter inside the window: everything comes out
/// in time order (file order among equal times) across the ring's
/// compactions, whatever the batch size.
#[test]
fn jitter_within_the_window_is_sorted_across_compactions() {
    let recs: Vec<(u32, u8)> = (0..5000u32)
        .map(|i| (i * 100 + (i * 7 % 15) * 100, i as u8))
        .collect();
    let mut want: Vec<(u64, u8)> = recs.iter().map(|&(u, t)| (u64::from(u), t)).collect();
    want.sort_by_key(|&(u, _)| u);
    for batch in [1, 7, 16, 256] {
        let (got, st) = order(&file(&recs), batch);
        assert_eq!(got, want, "batch {batch}");
        assert!(
            st.reordered > 0 && st.late == 0 && st.overflow == 0,
            "{st:?}"
        );
    }
}

#[test]
fn equal_timestamps_keep_file_order() {
    let recs = [(10, 1), (10, 2), (10, 3), (9, 4), (10, 5)];
    let (got, _) = order(&file(&recs), 2);
    assert_eq!(got, vec![(9, 4), (10, 1), (10, 2), (10, 3), (10, 5)]);
}

#[test]
fn a_late_packet_keeps_its_file_place_and_a_stray_is_dropped() {
    // 2.5 ms back: late. Everything before it goes first.
    let recs = [(10_000, 1), (11_500, 2), (9_000, 3), (12_000, 4)];
    let (got, st) = order(&file(&recs), 16);
    assert_eq!(got, vec![(10_000, 1), (11_500, 2), (9_000, 3), (12_000, 4)]);
    assert_eq!((st.late, st.late_dropped, st.reordered), (1, 0, 0));
    // Stamped 0 (53 years back) in the middle of a flow, and two
    // strays an hour back: dropped, counted, nothing else touched.
    let recs = [
        (3_600_000_000, 1),
        (0, 9),
        (5, 2),
        (6, 3),
        (3_600_000_100, 4),
    ];
    let (got, st) = order(&file(&recs), 16);
    let tags: Vec<u8> = got.iter().map(|g| g.1).collect();
    assert_eq!(tags, vec![1, 4]);
    assert_eq!((st.late, st.late_dropped, st.steps), (3, 3, 0));
    // Strays at the very end of the file are dropped too.
    let recs = [(3_600_000_000, 1), (5, 2)];
    let (got, st) = order(&file(&recs), 1);
    assert_eq!(got.len(), 1);
    assert_eq!(st.late_dropped, 1);
}

#[test]
fn a_stray_far_ahead_does_not_make_the_rest_late() {
    // A stamp an hour ahead, then the capture goes on: nothing is
    // late; the stray comes last (its time), nothing is lost.
    let recs = [(1_000, 1), (4_000_000_000, 2), (2_000, 3), (3_000, 4)];
    let (got, st) = order(&file(&recs), 16);
    let tags: Vec<u8> = got.iter().map(|g| g.1).collect();
    assert_eq!(tags, vec![1, 3, 4, 2]);
    assert_eq!((st.late, st.late_dropped), (0, 0));
}

#[test]
fn a_clock_stepping_back_keeps_every_packet_in_file_order() {
    // An hour, then a run of late packets: a step, not strays.
    let mut recs = vec![(3_600_000_000, 1), (3_600_000_500, 2)];
    recs.extend((0..200u32).map(|i| (5 + i * 10, (3 + i % 250) as u8)));
    let (got, st) = order(&file(&recs), 16);
    assert_eq!(got.len(), recs.len());
    let want: Vec<u8> = recs.iter().map(|r| r.1).collect();
    let tags: Vec<u8> = got.iter().map(|g| g.1).collect();
    assert_eq!(tags, want);
    assert_eq!((st.steps, st.late_dropped), (1, 0));
    assert_eq!(st.late, STEP_RUN as u64 + 1);
}

#[test]
fn exactly_the_window_back_is_still_sorted() {
    let recs = [(2_000, 1), (0, 2)];
    let (got, _) = order(&file(&recs), 16);
    assert_eq!(got, vec![(0, 2), (2_000, 1)]);
}

#[test]
fn a_full_ring_lets_the_oldest_out_early() {
    // CAPACITY + 10 packets within one window, the last one earliest.
    let mut recs: Vec<(u32, u8)> = (0..CAPACITY as u32 + 10).map(|i| (500, i as u8)).collect();
    recs.push((400, 0xee));
    let (got, st) = order(&file(&recs), 16);
    assert_eq!(got.len(), recs.len());
    // The ring filled after CAPACITY packets; from then on every read
    // let one out early, the 400 µs one included (it was then the
    // oldest). It still precedes every 500 µs packet held with it.
    assert_eq!(st.overflow, 12);
    let pos = got.iter().position(|g| g == &(400, 0xee)).unwrap();
    assert_eq!(pos, 11);
}

#[test]
fn an_error_comes_after_the_packets_before_it() {
    let mut bytes = file(&[(100, 1), (50, 2)]);
    bytes.extend_from_slice(&[1, 2, 3]); // a cut record header
    let r = PcapReader::from_bytes(&bytes[..]).expect("header");
    let mut t = TimeOrdered::new(r);
    {
        let mut out = [Frame::default(); 16];
        assert_eq!(t.next_batch(&mut out).expect("two packets first"), 2);
        assert_eq!(out[0].ts.as_micros() % 1_000_000, 50);
    }
    for _ in 0..2 {
        let mut out = [Frame::default(); 16];
        assert!(t.next_batch(&mut out).is_err(), "the error, repeated");
    }
}

/// Every packet of `bytes` as the plain reader hands it out, owned.
fn plain(bytes: &[u8]) -> Vec<(Frame<'static>, Vec<u8>)> {
    let mut r = PcapReader::from_bytes(bytes).expect("header");
    let mut v = Vec::new();
    while let Some(p) = r.next_packet().expect("clean file") {
        v.push((Frame { data: &[], ..p }, p.data.to_vec()));
    }
    v
}

/// The same through the stage, in batches of 16.
fn staged(bytes: &[u8]) -> Vec<(Frame<'static>, Vec<u8>)> {
    let mut t = TimeOrdered::new(PcapReader::from_bytes(bytes).expect("header"));
    let mut v = Vec::new();
    loop {
        let mut out = [Frame::default(); 16];
        let n = t.next_batch(&mut out).expect("clean file");
        if n == 0 {
            return v;
        }
        for p in &out[..n] {
            v.push((Frame { data: &[], ..*p }, p.data.to_vec()));
        }
    }
}

/// The stage holds packets by their place in the file, not as frames:
/// every field of every frame comes out as the reader gave it, for both
/// formats and byte orders, clipped packets and several interfaces with
/// their own link types included.
#[test]
fn held_packets_keep_every_field() {
    let mut files = Vec::new();
    for o in [Order::Le, Order::Be] {
        // Snapshot length 50: the 60-byte frames are clipped.
        let mut v = tu::pcap_header(o, true, 50, 113 | 0x1000_0000);
        for i in 0..40u32 {
            let f = tu::frame(i as u8, 20 + (i as usize * 7) % 40);
            v.extend(tu::pcap_record(o, T, i * 1000, &f, 90));
        }
        files.push(v);
        let mut v = tu::shb(o);
        v.extend(tu::idb(o, 1, 0, None, None));
        v.extend(tu::idb(o, 101, 30, Some(6), None));
        for i in 0..40u64 {
            let f = tu::frame(i as u8, 20 + (i as usize * 5) % 30);
            let ts = u64::from(T) * 1_000_000 + i * 900;
            v.extend(tu::epb(o, (i % 2) as u32, ts, &f, 70));
        }
        files.push(v);
    }
    for f in &files {
        let want = plain(f);
        assert_eq!(want.len(), 40);
        assert!(want.iter().any(|(p, d)| d.len() < p.wire_len as usize));
        assert_eq!(staged(f), want);
    }
}
