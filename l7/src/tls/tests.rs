use super::*;
use crate::synth;

fn client(stream: &[u8]) -> (TlsState, Eat, L7Stats) {
    let mut st = TlsState::default();
    let mut sc = Scratch::default();
    let mut stats = L7Stats::default();
    let e = st.client_eat(stream, &mut sc, 16384, &mut stats);
    (st, e, stats)
}

#[test]
fn tls_client_hello_split_over_records() {
    let hs = synth::ja4_example_hello(b"split.example");
    // Record fragmentation: the message over three records.
    let (a, rest) = hs.split_at(10);
    let (b, c) = rest.split_at(100);
    let stream = [
        synth::record(22, a),
        synth::record(22, b),
        synth::record(22, c),
    ]
    .concat();
    // Every prefix asks for more; the whole reads.
    for n in 0..stream.len() {
        let (st, e, _) = client(&stream[..n]);
        assert_eq!(e, Eat::MORE, "prefix {n}");
        assert!(!st.client_done);
    }
    let (st, e, stats) = client(&stream);
    assert_eq!(e, Eat::DONE);
    assert_eq!(st.sni.unwrap().as_bytes(), b"split.example");
    assert_eq!(stats.tls_client_hellos, 1);
    assert_eq!(
        &st.ja4.unwrap()[..],
        b"t13d1516h2_8daaf6152771_e5627efa2ab1"
    );
}

#[test]
fn tls_oversized_declared_length_is_refused_at_once() {
    // A handshake header declaring 2^24 - 1 bytes.
    let stream = synth::record(22, &[2, 0xFF, 0xFF, 0xFF, 3, 3]);
    let mut st = TlsState::default();
    let (mut sc, mut stats) = (Scratch::default(), L7Stats::default());
    assert_eq!(
        st.server_eat(&stream, &mut sc, 16384, &mut stats),
        Eat::DONE
    );
    assert_eq!(stats.tls_too_long, 1);
    let stream = synth::record(22, &[1, 0x01, 0, 0, 3, 3]);
    let (_, e, stats) = client(&stream);
    assert_eq!((e, stats.tls_too_long), (Eat::DONE, 1));
}

#[test]
fn tls_server_flight_with_certificate() {
    let der = crate::tls::cert::tests::cert(Some("srv.example"), &["alt.example"]);
    let sh = synth::server_hello(0x0303, 0xc02f, None, Some(b"http/1.1"));
    let flight = [
        sh.clone(),
        synth::certificate(&[&der, &der]),
        synth::handshake(14, &[]),
    ]
    .concat();
    let stream = synth::record(22, &flight);
    let mut st = TlsState::default();
    let (mut sc, mut stats) = (Scratch::default(), L7Stats::default());
    // Cut inside the first certificate: more wanted, ServerHello read.
    let cut = 5 + sh.len() + 10 + 20;
    assert_eq!(
        st.server_eat(&stream[..cut], &mut sc, 16384, &mut stats),
        Eat::MORE
    );
    assert_eq!((st.version, st.cipher), (Some(0x0303), Some(0xc02f)));
    // The first certificate whole (the second cut): done.
    let cut = 5 + sh.len() + 10 + der.len() + 5;
    assert_eq!(
        st.server_eat(&stream[..cut], &mut sc, 16384, &mut stats),
        Eat::DONE
    );
    assert_eq!(st.cert_cn.unwrap().as_bytes(), b"srv.example");
    assert_eq!(st.label_alpn(), Some(&b"http/1.1"[..]));
}

#[test]
fn tls13_server_hello_ends_the_server_side() {
    let stream = [
        synth::record(22, &synth::server_hello(0x0303, 0x1302, Some(0x0304), None)),
        synth::record(20, &[1]),
        synth::record(23, &[0; 40]),
    ]
    .concat();
    let mut st = TlsState::default();
    let (mut sc, mut stats) = (Scratch::default(), L7Stats::default());
    assert_eq!(
        st.server_eat(&stream, &mut sc, 16384, &mut stats),
        Eat::DONE
    );
    assert_eq!(
        (st.version, st.cipher, st.cert_cn),
        (Some(0x0304), Some(0x1302), None)
    );
}

#[test]
fn tls_not_a_hello_is_unexpected() {
    let (st, e, stats) = client(&synth::record(23, &[0; 10]));
    assert_eq!((e, stats.tls_unexpected), (Eat::DONE, 1));
    assert!(st.sni.is_none());
    let (_, e, stats) = client(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!((e, stats.tls_unexpected), (Eat::DONE, 1));
}
