//! Timestamp RTT on hand-built segments, through the TCP tracker as the
//! flow table drives it: first sighting, first echo, wrap-around, the
//! bounded ring, intervals and every counted anomaly; and a simulated pair
//! of endpoints checked against a brute-force reference.

use super::*;
use crate::metrics::tcp::{TcpTracker, TsCtx};
use crate::metrics::testkit::{Seg, tcp_record};
use crate::parse::TcpFlags;
use crate::record::FlowRecord;
use std::collections::BTreeMap;

const SYN: TcpFlags = TcpFlags::SYN;
const ACK: TcpFlags = TcpFlags::ACK;
const RST: TcpFlags = TcpFlags::RST;
const C: Dir = Dir::C2S;
const S: Dir = Dir::S2C;
const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// One flow: the tracker, its column entry and a worker's statistics.
#[derive(Default)]
struct F {
    t: TcpTracker,
    ts: TsRtt,
    w: TsRttWorker,
    seq: [u32; 2],
}

impl F {
    /// A segment with the option (TSval `v`, TSecr `e`) at `at` ns.
    fn ts(&mut self, dir: Dir, flags: TcpFlags, v: u32, e: u32, len: u32, at: u64) {
        self.seg(dir, flags, Some((v, e)), len, at);
    }

    fn seg(&mut self, dir: Dir, flags: TcpFlags, opt: Option<(u32, u32)>, len: u32, at: u64) {
        let i = dir.index();
        let seg = Seg::new(dir, flags)
            .seq(self.seq[i])
            .ack(self.seq[1 - i])
            .tsopt(opt)
            .len(len)
            .at(at);
        self.seq[i] = self.seq[i].wrapping_add(len + u32::from(flags.contains(SYN)));
        seg.feed(
            &mut self.t,
            Some(TsCtx {
                flow: &mut self.ts,
                worker: &mut self.w,
            }),
        );
    }

    fn rec(&self) -> FlowRecord {
        let mut r = tcp_record();
        self.t.fill(&mut r, Some(&self.ts));
        r
    }

    fn legs(&self) -> TsRttRecord {
        self.rec().npm.ts_rtt.expect("timestamp RTT present")
    }

    fn c(&self) -> TsRttCounters {
        self.w.counters
    }

    /// SYN (TSval 100) at 0, SYN+ACK (TSval 7000, TSecr 100) at 10 ms, ACK
    /// (TSval 105, TSecr 7000) at 15 ms.
    fn handshake() -> F {
        let mut f = F {
            seq: [1000, 5000],
            ..F::default()
        };
        f.ts(C, SYN, 100, 0, 0, 0);
        f.ts(S, SYN | ACK, 7000, 100, 0, 10 * MS);
        f.ts(C, ACK, 105, 7000, 0, 15 * MS);
        f
    }
}

fn leg(count: u32, min: u32, max: u32) -> (u32, Option<u32>, Option<u32>) {
    (count, Some(min), Some(max))
}

fn cmm(l: &TsRttLeg) -> (u32, Option<u32>, Option<u32>) {
    (l.count, l.min_us, l.max_us)
}

#[test]
fn metrics_tsrtt_handshake_legs_equal_net_times() {
    let f = F::handshake();
    let r = f.rec();
    let l = r.npm.ts_rtt.unwrap();
    // Server leg: SYN → SYN+ACK; client leg: SYN+ACK → ACK; as t_snt/t_cnt.
    assert_eq!(cmm(&l.server), leg(1, 10_000, 10_000));
    assert_eq!(cmm(&l.client), leg(1, 5_000, 5_000));
    assert_eq!(r.npm.server_net_us, Some(10_000));
    assert_eq!(r.npm.client_net_us, Some(5_000));
    assert_eq!(
        (l.server.p50_us, l.server.p90_us),
        (Some(10_000), Some(10_000))
    );
    assert_eq!(f.c(), TsRttCounters::default());
    assert_eq!(f.w.server().count, 1);
    assert_eq!(f.w.client().sum_us, 5_000);
}

#[test]
fn metrics_tsrtt_first_sighting_and_first_echo_only() {
    let mut f = F::handshake();
    // Three segments share TSval 200 (one clock tick); the sample starts at
    // the first of them.
    f.ts(C, ACK, 200, 7000, 1000, 20 * MS);
    f.ts(C, ACK, 200, 7000, 1000, 21 * MS);
    f.ts(C, ACK, 200, 7000, 1000, 22 * MS);
    // The server echoes 200 three times; only the first echo counts.
    f.ts(S, ACK, 7010, 200, 0, 30 * MS);
    f.ts(S, ACK, 7011, 200, 0, 31 * MS);
    f.ts(S, ACK, 7012, 200, 0, 40 * MS);
    let l = f.legs();
    assert_eq!(cmm(&l.server), leg(2, 10_000, 10_000)); // handshake + this
    // A retransmission repeating an old TSval is not a new sighting.
    f.ts(C, ACK, 200, 7012, 1000, 50 * MS);
    f.ts(S, ACK, 7013, 200, 0, 52 * MS);
    assert_eq!(f.legs().server.count, 2);
    // One with a fresh TSval (Linux) times that copy.
    f.ts(C, ACK, 260, 7013, 1000, 60 * MS);
    f.ts(S, ACK, 7014, 260, 0, 63 * MS);
    assert_eq!(cmm(&f.legs().server), leg(3, 3_000, 10_000));
    // The client leg: the handshake's 5 ms, 7012 (seen at 40 ms) echoed at
    // 50 ms, 7013 (52 ms) at 60 ms; 7010 and 7011 were never echoed.
    assert_eq!(cmm(&f.legs().client), leg(3, 5_000, 10_000));
    assert_eq!(f.c(), TsRttCounters::default());
}

#[test]
fn metrics_tsrtt_tsecr_without_ack_is_not_read() {
    let mut f = F::default();
    f.ts(C, SYN, 100, 0, 0, 0);
    // A SYN from the other side (simultaneous open) with a TSecr that
    // happens to equal 100: no ACK, no echo.
    f.ts(S, SYN, 900, 100, 0, MS);
    assert_eq!(f.legs().server.count, 0);
    assert_eq!(f.c(), TsRttCounters::default());
}

#[test]
fn metrics_tsrtt_wraps_around_the_tsval_space() {
    let mut f = F::default();
    let near = u32::MAX - 1;
    f.ts(C, TcpFlags::empty(), near, 0, 100, 0);
    f.ts(S, ACK, 50, near, 100, MS);
    f.ts(C, ACK, near.wrapping_add(3), 50, 100, 2 * MS); // 1: wrapped
    f.ts(S, ACK, 51, 1, 100, 4 * MS);
    let l = f.legs();
    assert_eq!(cmm(&l.server), leg(2, 1_000, 2_000));
    assert_eq!(cmm(&l.client), leg(1, 1_000, 1_000));
    // u32::MAX - 1 is *before* 1 in modular order: going back to it is a
    // backwards TSval, not a new one.
    f.ts(C, ACK, near, 51, 100, 5 * MS);
    assert_eq!(f.c().tsval_backwards, 1);
    assert_eq!(f.c().echo_unseen, 0);
}

#[test]
fn metrics_tsrtt_sequence_wrap_does_not_matter() {
    // Sequence numbers crossing 2^32 while timestamps flow: samples as usual.
    let mut f = F {
        seq: [u32::MAX - 500, u32::MAX - 100],
        ..F::default()
    };
    for i in 0..10u32 {
        let t = u64::from(i) * 10 * MS;
        // The first segment has nothing to echo yet.
        let flags = if i == 0 { TcpFlags::empty() } else { ACK };
        f.ts(C, flags, 1000 + i, 5000 + i, 300, t);
        f.ts(S, ACK, 5001 + i, 1000 + i, 300, t + 2 * MS);
    }
    let l = f.legs();
    assert_eq!(cmm(&l.server), leg(10, 2_000, 2_000));
    assert_eq!(cmm(&l.client), leg(9, 8_000, 8_000));
    assert_eq!(f.c(), TsRttCounters::default());
}

#[test]
fn metrics_tsrtt_full_ring_keeps_sampling_and_counts_what_it_misses() {
    // A bulk sender ticking every 1 ms with a 20 ms leg: 20 TSvals in
    // flight, more than the ring holds.
    let mut f = F::default();
    f.ts(S, SYN, 9, 0, 0, 0);
    let leg_ms = 20u64;
    let mut distinct_echoed = 0;
    for ms in 0..200u64 {
        let v = 1000 + ms as u32;
        f.ts(C, ACK, v, 9, 1448, ms * MS);
        if ms >= leg_ms {
            // The echo of the TSval sent leg_ms ago.
            f.ts(S, ACK, 9, v - leg_ms as u32, 0, ms * MS + 500 * US);
            distinct_echoed += 1;
        }
    }
    let l = f.legs().server;
    assert_eq!(l.count + l.missed, distinct_echoed);
    // At least the ring's worth per round trip, every one exact.
    assert!(l.count >= (180 / leg_ms as u32) * PENDING as u32, "{l:?}");
    assert_eq!((l.min_us, l.max_us), (Some(20_500), Some(20_500)));
    let c = f.c();
    assert!(c.untracked > 0 && c.missed == u64::from(l.missed), "{c:?}");
    assert_eq!(c.expired, 0, "in-flight entries are never dropped");
    assert_eq!(c.echo_unseen, 0, "{c:?}");
}

#[test]
fn metrics_tsrtt_oldest_dropped_once_superseded() {
    assert_eq!(PENDING, 4, "the case below fills a ring of 4");
    let mut f = F::default();
    // TSvals 1..=4 fill the ring; the other side echoes 3 (1 and 2 were on
    // segments it never acknowledged one by one).
    for v in 1..=4u32 {
        f.ts(C, ACK, v, 70, 100, u64::from(v) * MS);
    }
    f.ts(S, ACK, 70, 3, 0, 10 * MS);
    assert_eq!(cmm(&f.legs().server), leg(1, 7_000, 7_000));
    // Room for one; then 1 and 2 are superseded and go, oldest first.
    for v in 5..=7u32 {
        f.ts(C, ACK, v, 70, 100, u64::from(v) * MS);
    }
    let c = f.c();
    assert_eq!((c.expired, c.untracked), (2, 0), "{c:?}");
    // 7 is in the ring: its echo is a sample.
    f.ts(S, ACK, 71, 7, 0, 20 * MS);
    assert_eq!(cmm(&f.legs().server), leg(2, 7_000, 13_000));
    // An echo of 2 now (a very late, reordered ACK) is nothing: no sample,
    // no "missed" (it is older than what was echoed).
    f.ts(S, ACK, 72, 2, 0, 21 * MS);
    assert_eq!((f.legs().server.count, f.legs().server.missed), (2, 0));
}

#[test]
fn metrics_tsrtt_reordered_echo_still_matches() {
    let mut f = F::default();
    f.ts(C, ACK, 10, 70, 100, 0);
    f.ts(C, ACK, 11, 70, 100, MS);
    // Echo of 11 overtakes the echo of 10 on the way back.
    f.ts(S, ACK, 70, 11, 0, 5 * MS);
    f.ts(S, ACK, 70, 10, 0, 6 * MS);
    assert_eq!(cmm(&f.legs().server), leg(2, 4_000, 6_000));
}

#[test]
fn metrics_tsrtt_bad_input_counted_never_sampled() {
    // A TSecr echoing nothing seen: once per distinct value, no sample.
    let mut f = F::handshake();
    for i in 0..5 {
        f.ts(S, ACK, 7001, 424_242, 0, (20 + i) * MS);
    }
    f.ts(S, ACK, 7002, 99, 0, 30 * MS); // before the first TSval seen (100)
    assert_eq!(f.c().echo_unseen, 2);
    assert_eq!(f.legs().server.count, 1);

    // TSval going backwards: counted, not remembered.
    f.ts(C, ACK, 90, 7002, 0, 31 * MS);
    assert_eq!(f.c().tsval_backwards, 1);
    f.ts(S, ACK, 7003, 90, 0, 32 * MS);
    assert_eq!(f.legs().server.count, 1);

    // Capture time going backwards: an echo stamped before its TSval.
    f.ts(C, ACK, 300, 7003, 0, 40 * MS);
    f.ts(S, ACK, 7004, 300, 0, 39 * MS);
    assert_eq!(f.c().time_backwards, 1);
    assert_eq!(f.legs().server.count, 1);
    // And a segment stamped before the flow's first timestamped one.
    f.ts(C, ACK, 301, 7004, 0, 0);
    f.ts(S, ACK, 7005, 301, 0, 1);
    let mut g = F::default();
    g.ts(C, ACK, 5, 0, 0, 10 * MS);
    g.ts(S, ACK, 9, 5, 0, 9 * MS);
    assert_eq!(g.c().time_backwards, 1);
    assert_eq!(g.legs().server.count, 0);
}

#[test]
fn metrics_tsrtt_option_on_one_side_only() {
    // The client sends the option, the server never does (and its
    // segments cannot echo anything): one flow counted, no echo noise.
    let mut f = F::default();
    f.ts(C, SYN, 100, 0, 0, 0);
    f.seg(S, SYN | ACK, None, 0, MS);
    for i in 0..20u32 {
        f.ts(C, ACK, 101 + i, 0, 100, u64::from(2 + i) * MS);
        f.seg(S, ACK, None, 0, u64::from(2 + i) * MS + 500 * US);
    }
    let c = f.c();
    assert_eq!(c.one_sided_flows, 1);
    assert_eq!(c.echo_unseen, 0, "{c:?}");
    let l = f.legs();
    assert_eq!((l.server.count, l.client.count), (0, 0));
    // The other way round, decided on the plain side's first segment.
    let mut g = F::default();
    g.seg(C, ACK, None, 100, 0);
    g.ts(S, ACK, 5, 77, 100, MS);
    g.ts(S, ACK, 6, 78, 100, 2 * MS);
    assert_eq!(g.c().one_sided_flows, 1);
    assert_eq!(g.c().echo_unseen, 0);
    // An RST without the option does not make a flow one-sided.
    let mut h = F::handshake();
    h.seg(S, RST, None, 0, 20 * MS);
    assert_eq!(h.c().one_sided_flows, 0);
}

#[test]
fn metrics_tsrtt_none_without_the_option() {
    let mut f = F::default();
    f.seg(C, SYN, None, 0, 0);
    f.seg(S, SYN | ACK, None, 0, MS);
    f.seg(C, ACK, None, 0, 2 * MS);
    assert_eq!(f.rec().npm.ts_rtt, None);
    assert_eq!(f.c(), TsRttCounters::default());
}

#[test]
fn metrics_tsrtt_mid_stream_flow_measures_without_handshake() {
    let mut f = F::default();
    // Picked up mid-stream: the first echoes refer to TSvals sent before
    // the probe started (echo_unseen), then samples as usual.
    f.ts(C, ACK, 5000, 800, 1448, 0);
    f.ts(S, ACK, 900, 4990, 0, MS);
    f.ts(S, ACK, 901, 5000, 0, 3 * MS);
    f.ts(C, ACK, 5004, 901, 1448, 4 * MS);
    let r = f.rec();
    assert_eq!(r.npm.rtt_us, None);
    let l = r.npm.ts_rtt.unwrap();
    assert_eq!(cmm(&l.server), leg(1, 3_000, 3_000));
    // 900 was never echoed; 901, seen at 3 ms, is echoed at 4 ms.
    assert_eq!(cmm(&l.client), leg(1, 1_000, 1_000));
    assert_eq!(f.c().echo_unseen, 2); // 800 and 4990
}

#[test]
fn metrics_tsrtt_intervals_restart_samples_and_keep_pending() {
    let mut f = F::handshake();
    f.ts(C, ACK, 200, 7000, 100, 20 * MS);
    f.t.reset_interval(Some(&mut f.ts));
    let l = f.legs();
    assert_eq!((l.server.count, l.client.count), (0, 0));
    assert_eq!((l.server.min_us, l.server.p50_us), (None, None));
    // The TSval sent in the last interval is echoed in this one.
    f.ts(S, ACK, 7001, 200, 0, 27 * MS);
    assert_eq!(cmm(&f.legs().server), leg(1, 7_000, 7_000));
}

#[test]
fn metrics_tsrtt_long_flow_rebases_without_wrapping() {
    let mut f = F::default();
    // Two hours of a flow, one exchange a minute, one pending TSval left
    // unanswered at the start.
    f.ts(C, ACK, 1, 500, 100, 0);
    let mut t = 0;
    for i in 0..120u64 {
        t = (i + 1) * 60_000 * MS;
        let v = 10 + i as u32;
        f.ts(C, ACK, v, 500, 100, t);
        f.ts(S, ACK, 500, v, 0, t + 1234 * US);
    }
    let l = f.legs().server;
    assert_eq!(cmm(&l), leg(120, 1_234, 1_234));
    assert_eq!(f.c().expired, 1, "the TSval left unanswered 2 h ago");
    assert!(t > u64::from(u32::MAX) * US);
}

#[test]
fn metrics_tsrtt_microsecond_clock_over_hours() {
    // A 1 µs TSval clock (Linux tcp_usec_ts) passes 2^31 ticks in 36 min:
    // a long flow must keep comparing only recent values.
    let mut f = F::default();
    let (c0, s0) = (0xfff0_0000u32, 7u32);
    let mut last_s = None;
    for i in 0..240u64 {
        let t = i * 30_000 * MS; // every 30 s for 2 h
        let tus = (t / US) as u32;
        let flags = if last_s.is_some() {
            ACK
        } else {
            TcpFlags::empty()
        };
        f.ts(C, flags, c0.wrapping_add(tus), last_s.unwrap_or(0), 100, t);
        let sv = s0.wrapping_add(tus + 1_500);
        f.ts(S, ACK, sv, c0.wrapping_add(tus), 100, t + 1_500 * US);
        f.ts(C, ACK, c0.wrapping_add(tus + 2_500), sv, 0, t + 2_500 * US);
        last_s = Some(sv);
    }
    let l = f.legs();
    assert_eq!(cmm(&l.server), leg(240, 1_500, 1_500));
    assert_eq!(cmm(&l.client), leg(240, 1_000, 1_000));
    let c = f.c();
    assert_eq!(
        (c.echo_unseen, c.tsval_backwards, c.time_backwards),
        (0, 0, 0),
        "{c:?}"
    );
}

/// Two Linux-like endpoints (1 ms TSval clocks, RFC 7323 TS.Recent as the
/// latest TSval received, echoed on the next segment sent), random legs
/// and send times, the probe in between: against a brute-force reference
/// of the first sighting and first echo of every TSval.
#[test]
fn metrics_tsrtt_simulated_endpoints_match_brute_force() {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// (time µs, tie-break, what happens)
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Ev {
        /// Endpoint `i` sends its next segment.
        Send(usize),
        /// The probe sees a segment from `i`: TSval, TSecr.
        Probe(usize, u32, Option<u32>),
        /// A TSval from `i` reaches the other endpoint.
        Arrive(usize, u32),
    }
    let mut seed = 0x1234_5678_u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut any_missed = false;
    for case in 0..60 {
        // Probe → endpoint one-way delay (µs) per side, and send gaps: some
        // cases keep fewer TSvals in flight than the ring holds, some more.
        let d = [rnd(3_000) + 10, rnd(12_000) + 10];
        let gap = rnd(2_000) + 50;
        let off = [rnd(1 << 32) as u32, rnd(1 << 32) as u32];
        let mut q = BinaryHeap::new();
        let mut n = 0u64;
        let mut push = |q: &mut BinaryHeap<_>, t: u64, e: Ev| {
            n += 1;
            q.push(Reverse((t, n, e)));
        };
        push(&mut q, rnd(1_000), Ev::Send(0));
        push(&mut q, rnd(1_000), Ev::Send(1));
        let mut recent: [Option<u32>; 2] = [None; 2];
        let mut f = F::default();
        let mut seen: [BTreeMap<u32, u64>; 2] = Default::default();
        let mut echoed: [BTreeMap<u32, u64>; 2] = Default::default();
        while let Some(Reverse((t, _, ev))) = q.pop() {
            match ev {
                Ev::Send(i) if t < 300_000 => {
                    let v = off[i].wrapping_add((t / 1000) as u32);
                    push(&mut q, t + d[i], Ev::Probe(i, v, recent[i]));
                    push(&mut q, t + gap + rnd(gap), Ev::Send(i));
                }
                Ev::Send(_) => {}
                Ev::Probe(i, v, e) => {
                    let dir = if i == 0 { C } else { S };
                    let flags = if e.is_some() { ACK } else { TcpFlags::empty() };
                    f.ts(dir, flags, v, e.unwrap_or(0), 100, t * US);
                    seen[i].entry(v).or_insert(t);
                    if let Some(e) = e
                        && let Some(&s) = seen[1 - i].get(&e)
                    {
                        echoed[1 - i].entry(e).or_insert(t - s);
                    }
                    push(&mut q, t + d[1 - i], Ev::Arrive(i, v));
                }
                Ev::Arrive(i, v) => recent[1 - i] = Some(v),
            }
        }
        let l = f.legs();
        for (i, got) in [(0, l.server), (1, l.client)] {
            let want: Vec<u64> = echoed[i].values().copied().collect();
            assert_eq!(
                (got.count + got.missed) as usize,
                want.len(),
                "case {case} side {i}: {got:?}"
            );
            any_missed |= got.missed > 0;
            if got.missed == 0 && !want.is_empty() {
                let n = want.len() as u64;
                assert_eq!(got.min_us, want.iter().min().map(|&x| x as u32));
                assert_eq!(got.max_us, want.iter().max().map(|&x| x as u32));
                assert_eq!(
                    got.mean_us,
                    Some(((want.iter().sum::<u64>() + n / 2) / n) as u32)
                );
            }
        }
        let c = f.c();
        assert_eq!(
            (c.echo_unseen, c.tsval_backwards, c.time_backwards),
            (0, 0, 0),
            "case {case}: {c:?}"
        );
    }
    assert!(any_missed, "no case overflowed the ring");
}

#[test]
fn metrics_tsrtt_state_sizes() {
    assert_eq!(size_of::<TsRtt>(), 256);
}
