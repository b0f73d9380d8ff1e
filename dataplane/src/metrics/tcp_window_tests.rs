//! `TcpTracker` receive-window events by hand-built segments: zero window,
//! the zero-window ACK that is not a duplicate ACK, window full with and
//! without window scaling (the expected values are Wireshark 4.0's, checked
//! on real captures by `tests/npm_oracle.rs`).

use super::*;

impl F {
    /// A SYN or SYN+ACK carrying the window-scale option `ws` (or none).
    fn syn_ws(&mut self, dir: Dir, flags: TcpFlags, seq: u32, ack: u32, win: u16, ws: Option<u8>) {
        Seg::new(dir, flags)
            .seq(seq)
            .ack(ack)
            .win(win)
            .wscale(ws)
            .feed(&mut self.t, None);
    }

    /// Handshake with the given window-scale options; the SYN+ACK
    /// advertises `synack_win`. Next client byte 1001, next server byte
    /// 5001.
    fn handshake_ws(c_ws: Option<u8>, s_ws: Option<u8>, synack_win: u16) -> F {
        let mut f = F::default();
        f.syn_ws(C, SYN, 1000, 0, 64240, c_ws);
        f.syn_ws(S, SYN | ACK, 5000, 1001, synack_win, s_ws);
        f.seg_w(C, ACK, 1001, 5001, 502, 0, MS);
        f
    }
}

#[test]
fn metrics_tcp_zero_window_is_counted_and_its_repeats_are_not_dup_acks() {
    let mut f = F::handshake(1000, 5000);
    f.seg_w(C, ACK, 1001, 5001, 1000, 1000, 20 * MS);
    // The server's application stops reading: window 0, then the same ACK
    // again and again (answers to the client's probes).
    for i in 0..4 {
        f.seg_w(S, ACK, 5001, 2001, 0, 0, (21 + i) * MS);
    }
    let s = f.d(S);
    assert_eq!((s.zero_window, s.dup_ack), (4, 0));
    // The window opens; the same ACK with a non-zero window twice more:
    // those are duplicate ACKs again.
    for i in 0..3 {
        f.seg_w(S, ACK, 5001, 2001, 500, 0, (30 + i) * MS);
    }
    assert_eq!(f.d(S).dup_ack, 2);
    assert_eq!(f.d(S).zero_window, 4);
    assert_eq!(f.d(C).zero_window, 0);
}

#[test]
fn metrics_tcp_zero_window_acks_do_not_make_a_fast_retransmission() {
    let mut f = F::handshake(1000, 5000);
    f.seg(C, ACK, 1001, 5001, 100, 20 * MS);
    f.seg(C, ACK, 1101, 5001, 100, 21 * MS);
    f.seg_w(S, ACK, 5001, 1101, 0, 0, 22 * MS);
    f.seg_w(S, ACK, 5001, 1101, 0, 0, 23 * MS);
    f.seg_w(S, ACK, 5001, 1101, 0, 0, 24 * MS);
    // The client sends the segment at the repeated ACK number again.
    f.seg(C, ACK, 1101, 5001, 100, 25 * MS);
    let c = f.d(C);
    assert_eq!((c.retrans_fast, c.retrans), (0, 1), "{c:?}");
}

#[test]
fn metrics_tcp_zero_window_not_on_syn_fin_rst() {
    let mut f = F::default();
    f.seg_w(C, SYN, 1000, 0, 0, 0, 0);
    f.seg_w(S, SYN | ACK, 5000, 1001, 0, 0, MS);
    f.seg_w(C, ACK, 1001, 5001, 0, 0, 2 * MS);
    f.seg_w(C, ACK | FIN, 1001, 5001, 0, 0, 3 * MS);
    f.seg_w(S, RST, 5001, 0, 0, 0, 4 * MS);
    assert_eq!(f.d(C).zero_window, 1, "the plain ACK only");
    assert_eq!(f.d(S).zero_window, 0);
}

#[test]
fn metrics_tcp_zero_window_probe_is_not_a_zero_window() {
    let mut f = F::handshake(1000, 5000);
    f.seg(C, ACK, 1001, 5001, 100, 20 * MS);
    f.seg_w(S, ACK, 5001, 1101, 0, 0, 21 * MS);
    // One byte at expected SEQ into the zero window, itself with window 0.
    f.seg_w(C, ACK, 1101, 5001, 0, 1, 22 * MS);
    assert_eq!(f.d(C).zero_window, 0);
    // The same with the window open is a plain zero-window segment.
    f.seg_w(S, ACK, 5001, 1101, 100, 0, 23 * MS);
    f.seg_w(C, ACK, 1102, 5001, 0, 1, 24 * MS);
    assert_eq!(f.d(C).zero_window, 1);
}

#[test]
fn metrics_tcp_window_full_with_scaling() {
    // Both sides scale by 2^7; the server's last ACK advertises 16 << 7.
    let mut f = F::handshake_ws(Some(7), Some(7), 65000);
    f.seg_w(S, ACK, 5001, 1001, 16, 0, 2 * MS);
    f.seg(C, ACK, 1001, 5001, 1024, 3 * MS);
    assert_eq!(f.d(C).window_full, 0, "1024 of 2048");
    f.seg(C, ACK, 2025, 5001, 1024, 4 * MS);
    assert_eq!(f.d(C).window_full, 1, "ends at 1001 + 2048");
    f.seg(C, ACK, 3049, 5001, 1, 5 * MS);
    assert_eq!(f.d(C).window_full, 1, "past the edge is not 'full'");
}

#[test]
fn metrics_tcp_window_full_against_the_synack_window_is_unscaled() {
    // The SYN+ACK's window is never scaled (RFC 7323 §2.2).
    let mut f = F::handshake_ws(Some(7), Some(7), 2000);
    f.seg(C, ACK, 1001, 5001, 1000, 2 * MS);
    f.seg(C, ACK, 2001, 5001, 1000, 3 * MS);
    assert_eq!(f.d(C).window_full, 1);
}

#[test]
fn metrics_tcp_window_full_needs_the_handshake() {
    // No scaling agreed (the SYN+ACK lacks the option): raw windows.
    let mut f = F::handshake_ws(Some(7), None, 65000);
    f.seg_w(S, ACK, 5001, 1001, 1500, 0, 2 * MS);
    f.seg(C, ACK, 1001, 5001, 1500, 3 * MS);
    assert_eq!(f.d(C).window_full, 1);
    // Mid-stream: the scale is unknown, so never full.
    let mut g = F::default();
    g.seg_w(S, ACK, 5001, 1001, 1500, 0, 2 * MS);
    g.seg(C, ACK, 1001, 5001, 1500, 3 * MS);
    assert_eq!(g.d(C).window_full, 0);
}

#[test]
fn metrics_tcp_window_scale_shift_is_capped_at_14() {
    let mut f = F::handshake_ws(Some(20), Some(20), 65000);
    f.seg_w(S, ACK, 5001, 1001, 1, 0, 2 * MS);
    f.seg(C, ACK, 1001, 5001, 1 << 14, 3 * MS);
    assert_eq!(f.d(C).window_full, 1);
}

#[test]
fn metrics_tcp_window_counts_restart_each_interval() {
    let mut f = F::handshake(1000, 5000);
    f.seg_w(S, ACK, 5001, 1001, 0, 0, 2 * MS);
    assert_eq!(f.d(S).zero_window, 1);
    f.t.reset_interval(None);
    assert_eq!(f.d(S).zero_window, 0);
}
