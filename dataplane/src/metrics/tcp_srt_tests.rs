//! `TcpTracker` SRT by hand-built segments: plain request/response turns,
//! the `t_snt` correction, intervals, and TLS application-data records.

use super::*;

// ------------------------------------------------------------------ SRT

#[test]
fn metrics_tcp_srt_subtracts_server_network_time() {
    let mut f = F::handshake(1000, 5000); // t_snt = 10 ms
    f.seg(C, ACK | PSH, 1001, 5001, 50, 20 * MS);
    f.seg(C, ACK | PSH, 1051, 5001, 50, 21 * MS); // request spans 2 packets
    f.seg(S, ACK, 5001, 1101, 0, 25 * MS); // pure ACK: not a response
    f.seg(S, ACK | PSH, 5001, 1101, 500, 55 * MS);
    f.seg(S, ACK | PSH, 5501, 1101, 500, 56 * MS);
    let n = f.npm();
    assert_eq!((n.srt_us, n.srt_count), (Some(24_000), 1)); // 34 ms - 10 ms
    // A fast second turn: Δ < t_snt -> 0.
    f.seg(C, ACK | PSH, 1101, 6001, 10, 100 * MS);
    f.seg(S, ACK | PSH, 6001, 1111, 10, 104 * MS);
    let n = f.npm();
    assert_eq!(n.srt_count, 2);
    assert_eq!(
        (n.srt_us, n.srt_min_us, n.srt_max_us, n.srt_mean_us),
        (Some(24_000), Some(0), Some(24_000), Some(12_000))
    );
    assert!(!n.tls);
}

#[test]
fn metrics_tcp_response_before_request_is_zero() {
    let mut f = F::handshake(1000, 5000);
    f.seg(S, ACK | PSH, 5001, 1001, 100, 20 * MS); // banner / early response
    f.seg(C, ACK | PSH, 1001, 5101, 100, 30 * MS);
    let n = f.npm();
    assert_eq!((n.srt_us, n.srt_count, n.srt_min_us), (Some(0), 0, None));
}

#[test]
fn metrics_tcp_interval_reset_keeps_handshake() {
    let mut f = F::handshake(1000, 5000);
    f.seg(C, ACK | PSH, 1001, 5001, 10, 20 * MS);
    f.seg(S, ACK | PSH, 5001, 1011, 10, 40 * MS);
    f.seg(S, ACK | PSH, 5001, 1011, 10, 900 * MS); // retransmission
    assert_eq!(f.d(S).retrans, 1);
    f.t.reset_interval(None);
    let n = f.npm();
    assert_eq!(n.rtt_us, Some(15_000));
    assert_eq!((n.srt_us, n.srt_count), (Some(0), 0));
    assert_eq!(counts(f.d(S)), [0; 7]);
    // Sequence state carried over: resending old data is still a retransmission.
    f.seg(S, ACK | PSH, 5001, 1011, 10, 2000 * MS);
    assert_eq!(f.d(S).retrans, 1);
    f.seg(C, ACK | PSH, 1011, 5011, 10, 2100 * MS);
    f.seg(S, ACK | PSH, 5011, 1021, 10, 2130 * MS);
    assert_eq!(f.npm().srt_us, Some(20_000));
}

// ------------------------------------------------------------------ TLS

fn tls_rec(t: u8, body: usize) -> Vec<u8> {
    let mut v = vec![t, 3, 3];
    v.extend_from_slice(&(body as u16).to_be_bytes());
    v.extend(std::iter::repeat_n(0x5A, body));
    v
}

#[test]
fn metrics_tcp_tls_counts_only_application_data() {
    let mut f = F::handshake(1000, 5000); // t_snt = 10 ms
    let ch = tls_rec(22, 200);
    f.seg_p(C, ACK | PSH, 1001, 5001, &ch, 20 * MS);
    let c0 = 1001 + ch.len() as u32;
    // ServerHello..Finished: handshake records, not a response.
    let sh = [tls_rec(22, 1000), tls_rec(20, 1), tls_rec(22, 40)].concat();
    f.seg_p(S, ACK | PSH, 5001, c0, &sh, 45 * MS);
    let s0 = 5001 + sh.len() as u32;
    let fin = [tls_rec(20, 1), tls_rec(22, 40)].concat();
    f.seg_p(C, ACK | PSH, c0, s0, &fin, 50 * MS);
    let c1 = c0 + fin.len() as u32;
    assert_eq!(f.npm().srt_count, 0);
    assert!(f.npm().tls);
    // Request: one app-data record split over two segments, header split
    // after 2 bytes.
    let req = tls_rec(23, 300);
    f.seg_p(C, ACK | PSH, c1, s0, &req[..2], 60 * MS);
    f.seg_p(C, ACK | PSH, c1 + 2, s0, &req[2..], 61 * MS);
    let c2 = c1 + req.len() as u32;
    // Response: header split after 3 bytes; the first segment (with the
    // type byte) is the response.
    let resp = tls_rec(23, 2000);
    f.seg_p(S, ACK | PSH, s0, c2, &resp[..3], 90 * MS);
    f.seg_p(S, ACK | PSH, s0 + 3, c2, &resp[3..], 91 * MS);
    let n = f.npm();
    assert_eq!((n.srt_us, n.srt_count), (Some(19_000), 1)); // 90 - 61 - 10
}

#[test]
fn metrics_tcp_tls_alert_is_not_a_request() {
    let mut f = F::handshake(1000, 5000);
    let ch = tls_rec(22, 100);
    f.seg_p(C, ACK | PSH, 1001, 5001, &ch, 20 * MS);
    let c0 = 1001 + ch.len() as u32;
    let alert = tls_rec(21, 2);
    f.seg_p(C, ACK | PSH, c0, 5001, &alert, 30 * MS);
    f.seg_p(S, ACK | PSH, 5001, c0 + 7, &tls_rec(23, 10), 40 * MS);
    assert_eq!(f.npm().srt_count, 0);
}

#[test]
fn metrics_tcp_plain_payload_starting_with_0x16_0x03_only_if_first() {
    // HTTP flow: decided plain on the first client payload; a later
    // payload that happens to start with 22,3 does not switch to TLS.
    let mut f = F::handshake(1000, 5000);
    f.seg_p(C, ACK | PSH, 1001, 5001, b"GET / HTTP/1.1\r\n\r\n", 20 * MS);
    f.seg_p(C, ACK | PSH, 1019, 5001, &tls_rec(22, 10), 21 * MS);
    f.seg(S, ACK | PSH, 5001, 1034, 100, 41 * MS);
    let n = f.npm();
    assert!(!n.tls);
    assert_eq!(n.srt_us, Some(10_000));
}
