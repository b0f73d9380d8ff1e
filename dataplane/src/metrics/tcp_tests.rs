//! Hand-built segment sequences for `TcpTracker`: every classification
//! branch and its boundary and the handshake choices (SRT and TLS in
//! `tcp_srt_tests.rs`, receive-window events in `tcp_window_tests.rs`).

use super::TcpTracker;
use crate::metrics::testkit::{Seg, tcp_record};
use crate::parse::TcpFlags;
use crate::record::{Dir, DirStats, FlowRecord, Npm};

const SYN: TcpFlags = TcpFlags::SYN;
const ACK: TcpFlags = TcpFlags::ACK;
const FIN: TcpFlags = TcpFlags::FIN;
const RST: TcpFlags = TcpFlags::RST;
const PSH: TcpFlags = TcpFlags::PSH;
const C: Dir = Dir::C2S;
const S: Dir = Dir::S2C;
const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// A test flow: one tracker fed hand-built segments.
#[derive(Default)]
struct F {
    t: TcpTracker,
}

impl F {
    /// Feeds a segment at `ts` ns with `len` payload bytes of zeros.
    fn seg(&mut self, dir: Dir, flags: TcpFlags, seq: u32, ack: u32, len: u32, ts: u64) {
        self.seg_w(dir, flags, seq, ack, 1000, len, ts);
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "a segment is spelled out field by field, as on the wire"
    )]
    fn seg_w(
        &mut self,
        dir: Dir,
        flags: TcpFlags,
        seq: u32,
        ack: u32,
        win: u16,
        len: u32,
        ts: u64,
    ) {
        Seg::new(dir, flags)
            .seq(seq)
            .ack(ack)
            .win(win)
            .len(len)
            .at(ts)
            .feed(&mut self.t, None);
    }

    fn seg_p(&mut self, dir: Dir, flags: TcpFlags, seq: u32, ack: u32, p: &[u8], ts: u64) {
        Seg::new(dir, flags)
            .seq(seq)
            .ack(ack)
            .payload(p)
            .at(ts)
            .feed(&mut self.t, None);
    }

    fn rec(&self) -> FlowRecord {
        let mut r = tcp_record();
        self.t.fill(&mut r, None);
        r
    }

    fn npm(&self) -> Npm {
        self.rec().npm
    }

    fn d(&self, dir: Dir) -> DirStats {
        *self.rec().dir(dir)
    }

    /// SYN at 0, SYN+ACK at 10 ms, ACK at 15 ms (RTT 15 ms). Client ISN
    /// `c`, server ISN `s`; next client byte c+1, next server byte s+1.
    fn handshake(c: u32, s: u32) -> F {
        let mut f = F::default();
        f.seg(C, SYN, c, 0, 0, 0);
        f.seg(S, SYN | ACK, s, c.wrapping_add(1), 0, 10 * MS);
        f.seg(C, ACK, c.wrapping_add(1), s.wrapping_add(1), 0, 15 * MS);
        f
    }
}

/// (retrans, fast, spurious, other, ooo, keepalive, dup_ack)
fn counts(d: DirStats) -> [u32; 7] {
    [
        d.retrans,
        d.retrans_fast,
        d.retrans_spurious,
        d.retrans_other,
        d.ooo,
        d.keepalive,
        d.dup_ack,
    ]
}

// ---------------------------------------------------------------- handshake

#[test]
fn metrics_tcp_handshake_rtt() {
    let f = F::handshake(1000, 5000);
    let n = f.npm();
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (Some(10_000), Some(5_000), Some(15_000))
    );
    assert_eq!(counts(f.d(C)), [0; 7]);
    assert_eq!(counts(f.d(S)), [0; 7]);
}

#[test]
fn metrics_tcp_syn_retry_counts_last_syn() {
    let mut f = F::default();
    f.seg(C, SYN, 1000, 0, 0, 0);
    f.seg(C, SYN, 1000, 0, 0, 1000 * MS);
    f.seg(S, SYN | ACK, 5000, 1001, 0, 1010 * MS);
    f.seg(C, ACK, 1001, 5001, 0, 1015 * MS);
    let n = f.npm();
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (Some(10_000), Some(5_000), Some(15_000))
    );
    // The retried SYN is a retransmission (SYN counts as one byte).
    assert_eq!(counts(f.d(C)), [1, 0, 0, 1, 0, 0, 0]);
}

#[test]
fn metrics_tcp_synack_retry_counts_last_synack() {
    let mut f = F::default();
    f.seg(C, SYN, 1000, 0, 0, 0);
    f.seg(S, SYN | ACK, 5000, 1001, 0, 10 * MS);
    f.seg(S, SYN | ACK, 5000, 1001, 0, 1010 * MS);
    f.seg(C, ACK, 1001, 5001, 0, 1015 * MS);
    let n = f.npm();
    // t_snt takes the server's retry wait; t_snt + t_cnt = ACK - SYN.
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (Some(1_010_000), Some(5_000), Some(1_015_000))
    );
    assert_eq!(counts(f.d(S)), [1, 0, 0, 1, 0, 0, 0]);
}

#[test]
fn metrics_tcp_syn_retry_after_synack_pairs_with_next_synack() {
    let mut f = F::default();
    f.seg(C, SYN, 1000, 0, 0, 0);
    f.seg(S, SYN | ACK, 5000, 1001, 0, 10 * MS);
    f.seg(C, SYN, 1000, 0, 0, 1000 * MS); // the SYN+ACK got lost after the probe
    f.seg(S, SYN | ACK, 5000, 1001, 0, 1012 * MS);
    f.seg(C, ACK, 1001, 5001, 0, 1015 * MS);
    let n = f.npm();
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (Some(12_000), Some(3_000), Some(15_000))
    );
}

#[test]
fn metrics_tcp_missing_handshake_is_absent_not_zero() {
    let mut f = F::default();
    f.seg(C, ACK | PSH, 1000, 5000, 100, 0);
    f.seg(S, ACK | PSH, 5000, 1100, 200, 7 * MS);
    let n = f.npm();
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (None, None, None)
    );
    // SRT still measured, with t_snt = 0.
    assert_eq!((n.srt_us, n.srt_count), (Some(7000), 1));
    // A stray SYN later does not invent a handshake.
    f.seg(C, SYN, 1, 0, 0, 8 * MS);
    f.seg(S, SYN | ACK, 2, 2, 0, 9 * MS);
    f.seg(C, ACK, 2, 3, 0, 10 * MS);
    assert_eq!(f.npm().rtt_us, None);
}

#[test]
fn metrics_tcp_missing_syn() {
    let mut f = F::default();
    f.seg(S, SYN | ACK, 5000, 1001, 0, 10 * MS);
    f.seg(C, ACK, 1001, 5001, 0, 15 * MS);
    let n = f.npm();
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (None, Some(5_000), None)
    );
}

#[test]
fn metrics_tcp_missing_synack_rtt_from_syn_to_ack() {
    // Asymmetric routing: the probe sees only client->server.
    let mut f = F::default();
    f.seg(C, SYN, 1000, 0, 0, 0);
    f.seg(C, ACK, 1001, 5001, 0, 905 * US);
    let n = f.npm();
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (None, None, Some(905))
    );
}

#[test]
fn metrics_tcp_out_of_order_handshake() {
    // SYN+ACK captured before the SYN.
    let mut f = F::default();
    f.seg(S, SYN | ACK, 5000, 1001, 0, 10 * MS);
    f.seg(C, SYN, 1000, 0, 0, 11 * MS);
    f.seg(C, ACK, 1001, 5001, 0, 15 * MS);
    let n = f.npm();
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (None, Some(5_000), None)
    );

    // ACK captured before the SYN+ACK.
    let mut f = F::default();
    f.seg(C, SYN, 1000, 0, 0, 0);
    f.seg(C, ACK, 1001, 5001, 0, 15 * MS);
    f.seg(S, SYN | ACK, 5000, 1001, 0, 16 * MS);
    let n = f.npm();
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (Some(16_000), None, None)
    );
}

#[test]
fn metrics_tcp_rst_does_not_complete_handshake() {
    let mut f = F::default();
    f.seg(C, SYN, 1000, 0, 0, 0);
    f.seg(S, SYN | ACK, 5000, 1001, 0, 10 * MS);
    f.seg(C, RST | ACK, 1001, 5001, 0, 12 * MS);
    let n = f.npm();
    assert_eq!(
        (n.server_net_us, n.client_net_us, n.rtt_us),
        (Some(10_000), None, None)
    );
}

// ------------------------------------------------------ classification

#[test]
fn metrics_tcp_fast_retransmission_and_20ms_boundary() {
    for (delay, fast) in [(0, true), (20 * MS, true), (20 * MS + 1, false)] {
        let mut f = F::handshake(1000, 5000);
        // RTT 15 ms. Server sends 4 segments of 100 at 100 ms; the first is lost.
        for i in 0..4u32 {
            f.seg(
                S,
                ACK,
                5001 + i * 100,
                1001,
                100,
                100 * MS + u64::from(i) * US,
            );
        }
        // Client: 2 ACKs repeating the handshake ACK (SEQ, ACK, window):
        // both are duplicate ACKs.
        f.seg(C, ACK, 1001, 5001, 0, 121 * MS);
        f.seg(C, ACK, 1001, 5001, 0, 122 * MS);
        assert_eq!(f.d(C).dup_ack, 2);
        f.seg(S, ACK, 5001, 1001, 100, 122 * MS + delay);
        let d = f.d(S);
        if fast {
            assert_eq!(counts(d), [1, 1, 0, 0, 0, 0, 0], "delay {delay}");
        } else {
            // 20 ms + 1 ns after the last dup ACK, and far beyond the
            // out-of-order threshold since the highest segment: ordinary.
            assert_eq!(counts(d), [1, 0, 0, 1, 0, 0, 0], "delay {delay}");
        }
    }
}

#[test]
fn metrics_tcp_one_dup_ack_is_not_enough_for_fast() {
    let mut f = F::handshake(1000, 5000);
    for i in 0..3u32 {
        f.seg(S, ACK, 5001 + i * 100, 1001, 100, 100 * MS);
    }
    f.seg(C, ACK, 1001, 5001, 0, 121 * MS); // repeats the handshake ACK: dup #1
    f.seg(S, ACK, 5001, 1001, 100, 122 * MS);
    assert_eq!(counts(f.d(S)), [1, 0, 0, 1, 0, 0, 0]);
    assert_eq!(f.d(C).dup_ack, 1);
}

#[test]
fn metrics_tcp_fast_needs_seq_equal_dup_ack_number() {
    let mut f = F::handshake(1000, 5000);
    for i in 0..4u32 {
        f.seg(S, ACK, 5001 + i * 100, 1001, 100, 100 * MS);
    }
    for k in 0..3 {
        f.seg(C, ACK, 1001, 5001, 0, 120 * MS + k);
    }
    f.seg(S, ACK, 5101, 1001, 100, 125 * MS); // not the dup ACKs' number
    assert_eq!(counts(f.d(S)), [1, 0, 0, 1, 0, 0, 0]);
}

#[test]
fn metrics_tcp_out_of_order_threshold_boundary() {
    // With a handshake: threshold = RTT = 15 ms.
    for (gap, ooo) in [(15 * MS - US, true), (15 * MS, true), (15 * MS + US, false)] {
        let mut f = F::handshake(1000, 5000);
        f.seg(S, ACK, 5001, 1001, 100, 100 * MS);
        f.seg(S, ACK, 5201, 1001, 100, 100 * MS + 1); // 5101..5201 missing
        f.seg(S, ACK, 5101, 1001, 100, 100 * MS + 1 + gap);
        let want = if ooo {
            [0, 0, 0, 0, 1, 0, 0]
        } else {
            [1, 0, 0, 1, 0, 0, 0]
        };
        assert_eq!(counts(f.d(S)), want, "gap {gap}");
    }
    // Without a handshake: threshold = 3 ms.
    for (gap, ooo) in [(3 * MS - US, true), (3 * MS, true), (3 * MS + US, false)] {
        let mut f = F::default();
        f.seg(S, ACK, 5001, 1001, 100, 0);
        f.seg(S, ACK, 5201, 1001, 100, 1);
        f.seg(S, ACK, 5101, 1001, 100, 1 + gap);
        let want = if ooo {
            [0, 0, 0, 0, 1, 0, 0]
        } else {
            [1, 0, 0, 1, 0, 0, 0]
        };
        assert_eq!(counts(f.d(S)), want, "gap {gap}");
    }
}

#[test]
fn metrics_tcp_resend_of_last_segment_is_retransmission_not_ooo() {
    let mut f = F::handshake(1000, 5000);
    f.seg(S, ACK, 5001, 1001, 100, 100 * MS);
    f.seg(S, ACK, 5101, 1001, 100, 100 * MS);
    f.seg(S, ACK, 5101, 1001, 100, 101 * MS); // within threshold, ends at expected
    assert_eq!(counts(f.d(S)), [1, 0, 0, 1, 0, 0, 0]);
}

#[test]
fn metrics_tcp_spurious_retransmission() {
    let mut f = F::handshake(1000, 5000);
    f.seg(S, ACK, 5001, 1001, 100, 100 * MS);
    f.seg(S, ACK, 5101, 1001, 100, 100 * MS);
    f.seg(C, ACK, 1001, 5201, 0, 110 * MS); // everything acked
    f.seg(S, ACK, 5001, 1001, 100, 400 * MS);
    assert_eq!(counts(f.d(S)), [1, 0, 1, 0, 0, 0, 0]);
    // Partly acked data is not spurious: SEQ + len must be <= ACK.
    f.seg(S, ACK, 5201, 1001, 100, 500 * MS);
    f.seg(S, ACK, 5151, 1001, 100, 900 * MS);
    assert_eq!(counts(f.d(S)), [2, 0, 1, 1, 0, 0, 0]);
}

#[test]
fn metrics_tcp_spec_order_ooo_before_spurious() {
    // Acked data resent within the threshold and not ending at expected:
    // out of order by rule 2, although rule 3 (spurious) also matches.
    let mut f = F::handshake(1000, 5000);
    f.seg(S, ACK, 5001, 1001, 100, 100 * MS);
    f.seg(S, ACK, 5101, 1001, 100, 100 * MS);
    f.seg(C, ACK, 1001, 5201, 0, 101 * MS);
    f.seg(S, ACK, 5001, 1001, 100, 102 * MS);
    assert_eq!(counts(f.d(S)), [0, 0, 0, 0, 1, 0, 0]);
    // (Fast and spurious cannot both match: fast needs SEQ = the dup ACKs'
    // number, which is the reverse side's last ACK, and spurious needs
    // SEQ + len <= that same ACK.)
}

#[test]
fn metrics_tcp_keepalive_definition() {
    let mut f = F::handshake(1000, 5000);
    f.seg(C, ACK, 1000, 5001, 0, 1000 * MS); // SEQ = expected - 1, len 0
    f.seg(C, ACK, 1000, 5001, 1, 2000 * MS); // len 1 (garbage byte)
    assert_eq!(counts(f.d(C)), [0, 0, 0, 0, 0, 2, 0]);
    // Len 2 at expected - 1 is data, evaluated: a retransmission.
    f.seg(C, ACK, 1000, 5001, 2, 3000 * MS);
    assert_eq!(counts(f.d(C)), [1, 0, 0, 1, 0, 2, 0]);
    // A FIN at expected - 1 is never a keep-alive.
    let mut f = F::handshake(1000, 5000);
    f.seg(C, FIN | ACK, 1000, 5001, 0, 1000 * MS);
    assert_eq!(counts(f.d(C)), [1, 0, 0, 1, 0, 0, 0]);
    // Keep-alive data is not a request for SRT.
    let mut f = F::handshake(1000, 5000);
    f.seg(C, ACK, 1000, 5001, 1, 1000 * MS);
    f.seg(S, ACK, 5001, 1001, 10, 1001 * MS);
    assert_eq!(f.npm().srt_count, 0);
}

#[test]
fn metrics_tcp_dup_ack_definition() {
    let mut f = F::handshake(1000, 5000);
    f.seg(S, ACK, 5001, 1001, 100, 100 * MS);
    f.seg_w(C, ACK, 1001, 5101, 1000, 0, 101 * MS);
    f.seg_w(C, ACK, 1001, 5101, 1000, 0, 102 * MS); // dup
    f.seg_w(C, ACK, 1001, 5101, 999, 0, 103 * MS); // window differs: window update
    f.seg_w(C, ACK, 1001, 5101, 999, 0, 104 * MS); // dup (same as previous)
    f.seg_w(C, ACK, 1001, 5102, 999, 0, 105 * MS); // ACK differs
    f.seg_w(C, ACK | FIN, 1001, 5102, 999, 0, 106 * MS); // FIN: never dup
    f.seg_w(C, ACK, 1002, 5102, 999, 0, 107 * MS); // dup: SEQ = expected after FIN
    f.seg_w(C, ACK, 1003, 5102, 999, 0, 108 * MS); // SEQ != expected
    f.seg_w(C, TcpFlags::empty(), 1002, 5102, 999, 0, 109 * MS); // no ACK flag
    f.seg_w(C, ACK, 1002, 5102, 999, 0, 110 * MS); // previous had no ACK: not dup
    assert_eq!(f.d(C).dup_ack, 3);
    // A data segment repeating ACK and window is not a dup ACK.
    f.seg_w(C, ACK, 1002, 5102, 999, 5, 111 * MS);
    assert_eq!(f.d(C).dup_ack, 3);
}

#[test]
fn metrics_tcp_syn_and_fin_count_as_one_byte() {
    let mut f = F::handshake(1000, 5000);
    // Data right after the SYN's byte is new, not a retransmission.
    f.seg(C, ACK, 1001, 5001, 100, 20 * MS);
    f.seg(C, FIN | ACK, 1101, 5001, 0, 30 * MS);
    // The next segment after the FIN is at 1102: a pure ACK there is fine,
    // at 1101 with no data it would be a keep-alive.
    f.seg(C, ACK, 1102, 5002, 0, 40 * MS);
    assert_eq!(counts(f.d(C)), [0; 7]);
    // FIN resent 1 ms later (within the threshold): SEQ + 1 = expected, so
    // it is a retransmission of the last segment, not out of order.
    f.seg(C, FIN | ACK, 1101, 5002, 0, 31 * MS);
    assert_eq!(counts(f.d(C)), [1, 0, 0, 1, 0, 0, 0]);
}

#[test]
fn metrics_tcp_sequence_wraparound() {
    let isn = u32::MAX - 150;
    let mut f = F::handshake(1000, isn);
    // 3 x 100 bytes crossing 2^32: isn+1, isn+101, isn+201 (wrapped).
    let s = |k: u32| isn.wrapping_add(1 + 100 * k);
    f.seg(S, ACK, s(0), 1001, 100, 100 * MS);
    f.seg(S, ACK, s(1), 1001, 100, 100 * MS);
    f.seg(S, ACK, s(2), 1001, 100, 100 * MS);
    assert!(s(2) < 100, "the test must cross 2^32");
    assert_eq!(
        counts(f.d(S)),
        [0; 7],
        "no false retransmission across the wrap"
    );
    // Client ACKs everything (ACK number wrapped too).
    f.seg(C, ACK, 1001, s(3), 0, 120 * MS);
    // Resend of the pre-wrap segment: spurious (acked) by wrapped compare.
    f.seg(S, ACK, s(0), 1001, 100, 500 * MS);
    // Resend of the wrapped segment, not acked part: plain retransmission.
    f.seg(S, ACK, s(3), 1001, 100, 501 * MS); // new data, normal
    f.seg(S, ACK, s(3), 1001, 100, 900 * MS);
    assert_eq!(counts(f.d(S)), [2, 0, 1, 1, 0, 0, 0]);
    // Dup ACKs and fast retransmission with wrapped numbers.
    for k in 0..3 {
        f.seg(C, ACK, 1001, s(3), 0, 1000 * MS + k);
    }
    f.seg(S, ACK, s(3), 1001, 100, 1001 * MS);
    assert_eq!(f.d(S).retrans_fast, 1);
}

#[path = "tcp_srt_tests.rs"]
mod srt;

#[path = "tcp_window_tests.rs"]
mod window;
