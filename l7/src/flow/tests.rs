use super::*;
use crate::fields::alpn_names;
use crate::synth;

const PORTS: (u16, u16) = (40000, 443);

fn tcp(dir: Dir, seq: u32, expected: Option<u32>, p: &[u8], ts_ns: u64) -> Segment<'_> {
    Segment {
        dir,
        transport: Transport::Tcp {
            seq,
            expected,
            syn: false,
        },
        payload: p,
        wire_len: p.len() as u32,
        ts_ns,
        ports: PORTS,
        t_snt_ns: 0,
    }
}

fn udp(dir: Dir, p: &[u8], ports: (u16, u16)) -> Segment<'_> {
    Segment {
        dir,
        transport: Transport::Udp,
        payload: p,
        wire_len: p.len() as u32,
        ts_ns: 1,
        ports,
        t_snt_ns: 0,
    }
}

#[test]
fn flow_tls_hello_out_of_order_then_server_flight() {
    let mut l7 = L7::new(L7Config::default());
    let mut slot = Slot::default();
    let hello = synth::record(22, &synth::ja4_example_hello(b"ooo.example"));
    let (a, b) = hello.split_at(100);
    // The second segment first: after a hole (expected 1001, the SYN's).
    let s2 = tcp(Dir::C2S, 1001 + 100, Some(1001), b, 2);
    assert_eq!(l7.on_segment(&mut slot, &s2), Progress::More);
    assert_eq!(slot.k(), K_PENDING);
    // Retransmitted, then the first segment.
    l7.on_segment(&mut slot, &s2);
    l7.on_segment(
        &mut slot,
        &tcp(Dir::C2S, 1001, Some(1001 + 100 + b.len() as u32), a, 3),
    );
    assert_eq!(slot.k(), K_TLS);
    let der = crate::tls::cert::tests::cert(Some("ooo.example"), &[]);
    let flight = [
        synth::server_hello(0x0303, 0xc02b, None, Some(b"h2")),
        synth::certificate(&[&der]),
    ]
    .concat();
    let srv = synth::record(22, &flight);
    let p = l7.on_segment(&mut slot, &tcp(Dir::S2C, 9001, Some(9001), &srv, 4));
    assert_eq!(p, Progress::Done);
    assert_eq!(l7.app(&slot), App::TlsH2);
    let f = l7.fields(&slot).unwrap();
    let t = f.tls().unwrap();
    assert_eq!(t.sni.as_deref(), Some(&b"ooo.example"[..]));
    assert_eq!(t.cert_cn.as_deref(), Some(&b"ooo.example"[..]));
    let offered: Vec<&[u8]> = alpn_names(t.alpn.as_deref().unwrap()).collect();
    assert_eq!(offered, vec![&b"h2"[..], b"http/1.1"]);
    assert_eq!((t.version, t.cipher), (Some(0x0303), Some(0xc02b)));
    assert_eq!(l7.states_in_use(), 0, "frozen: the pool slot is back");
    assert_eq!(l7.bufs.in_use(), 0);
    let (app, fields) = l7.finish(&mut slot);
    assert_eq!(
        (app, fields.is_some(), slot),
        (App::TlsH2, true, Slot::default())
    );
}

#[test]
fn flow_unknown_payloads_take_no_state() {
    let mut l7 = L7::new(L7Config::default());
    let mut slot = Slot::default();
    let zeros = [0u8; 42];
    assert_eq!(
        l7.on_segment(&mut slot, &tcp(Dir::C2S, 1, Some(1), &zeros, 1)),
        Progress::More
    );
    assert_eq!(
        l7.on_segment(&mut slot, &tcp(Dir::S2C, 9, Some(9), &zeros, 2)),
        Progress::Done
    );
    assert_eq!((l7.app(&slot), l7.fields(&slot)), (App::Unknown, None));
    assert_eq!(l7.allocated_bytes(), 0);
    // UDP: zeros on port 53 are not DNS either; given up after the bound.
    let mut slot = Slot::default();
    let mut p = Progress::More;
    for _ in 0..16 {
        p = l7.on_segment(&mut slot, &udp(Dir::C2S, &zeros, (5000, 53)));
    }
    assert_eq!(p, Progress::Done);
    assert_eq!(l7.allocated_bytes(), 0);
}

/// A TCP direction whose first bytes (the SYN seen: `expected` is the
/// stream's first byte) match nothing is decided: `DoneDir`, and the flow
/// is done once the other direction is too. Without the SYN the direction
/// is not decided by one payload.
#[test]
fn flow_a_stream_start_that_matches_nothing_decides_its_direction() {
    let mut l7 = L7::new(L7Config::default());
    let zeros = [0u8; 42];
    let start = |dir, seq| Segment {
        transport: Transport::Tcp {
            seq,
            expected: Some(seq),
            syn: true,
        },
        ..tcp(dir, seq, Some(seq), &zeros, 1)
    };
    let mut slot = Slot::default();
    let p = l7.on_segment(&mut slot, &start(Dir::C2S, 1));
    assert_eq!(p, Progress::DoneDir(Dir::C2S));
    assert!(!slot.wants_server_time());
    assert_eq!(
        l7.on_segment(&mut slot, &start(Dir::S2C, 9)),
        Progress::Done
    );
    assert_eq!((l7.app(&slot), l7.allocated_bytes()), (App::Unknown, 0));
    // No SYN, or not at the expected byte: one payload decides nothing.
    let mut slot = Slot::default();
    let p = l7.on_segment(&mut slot, &tcp(Dir::C2S, 1, Some(1), &zeros, 1));
    assert_eq!(p, Progress::More);
    let after_hole_free = Segment {
        transport: Transport::Tcp {
            seq: 43,
            expected: Some(43),
            syn: true,
        },
        ..tcp(Dir::C2S, 43, Some(43), &zeros, 2)
    };
    assert_eq!(
        l7.on_segment(&mut slot, &after_hole_free),
        Progress::More,
        "the direction's second payload is not its start"
    );
    // Picked up mid-stream, a direction shows `packets` payloads (8).
    let mut slot = Slot::default();
    let seen: Vec<Progress> = (0..8u32)
        .map(|i| l7.on_segment(&mut slot, &tcp(Dir::S2C, 42 * i, None, &zeros, 1)))
        .collect();
    assert_eq!(seen[..7], [Progress::More; 7]);
    assert_eq!(seen[7], Progress::DoneDir(Dir::S2C));
    // The other direction is still looked at, and may match.
    let get: &[u8] = b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
    assert_eq!(
        l7.on_segment(&mut slot, &tcp(Dir::C2S, 7, None, get, 2)),
        Progress::More
    );
    assert!(slot.has_state(), "HTTP follows both directions again");
    assert_eq!(l7.app(&slot), App::Http);
}

/// The handshake's server time is wanted only by flows that are (or may
/// still turn out to be) HTTP.
#[test]
fn flow_server_time_is_wanted_by_http_only() {
    let mut l7 = L7::new(L7Config::default());
    let mut slot = Slot::default();
    assert!(!slot.wants_server_time(), "nothing seen yet");
    let get: &[u8] = b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
    l7.on_segment(&mut slot, &tcp(Dir::C2S, 1, Some(1), get, 1));
    assert!(slot.wants_server_time());
    let mut slot = Slot::default();
    let hello = synth::record(22, &synth::ja4_example_hello(b"t.example"));
    l7.on_segment(&mut slot, &tcp(Dir::C2S, 1, Some(1), &hello, 1));
    assert!(!slot.wants_server_time(), "TLS");
    // Bytes after a hole: held until the start comes, may be HTTP.
    let mut slot = Slot::default();
    l7.on_segment(&mut slot, &tcp(Dir::C2S, 50, Some(1), get, 1));
    assert!(slot.wants_server_time(), "pending");
}

#[test]
fn flow_label_only_protocols() {
    let mut l7 = L7::new(L7Config::default());
    let mut slot = Slot::default();
    let banner = b"SSH-2.0-OpenSSH_9.2p1\r\n";
    assert_eq!(
        l7.on_segment(&mut slot, &tcp(Dir::S2C, 5, None, banner, 1)),
        Progress::Done
    );
    assert_eq!(l7.app(&slot), App::Ssh);
}

#[test]
fn flow_dns_query_response_and_refusals() {
    let mut l7 = L7::new(L7Config::default());
    let mut slot = Slot::default();
    let (q, a) = crate::dns::tests::query_and_answer("www.example.org", 1);
    l7.on_segment(&mut slot, &udp(Dir::C2S, &q, (5353, 53)));
    l7.on_segment(&mut slot, &udp(Dir::S2C, &a, (5353, 53)));
    // A response whose name loops: counted, the flow's fields unchanged.
    let bad = crate::dns::tests::msg(9, 0x8182, [1, 0, 0, 0], &[0xC0, 12, 0, 1, 0, 1]);
    l7.on_segment(&mut slot, &udp(Dir::S2C, &bad, (5353, 53)));
    assert_eq!(l7.app(&slot), App::Dns);
    let f = l7.fields(&slot).unwrap();
    let d = f.dns().unwrap();
    assert_eq!(d.qname.as_deref(), Some(&b"www.example.org"[..]));
    assert_eq!(
        (d.qtype, d.qclass, d.rcode, d.answers),
        (Some(1), Some(1), Some(0), Some(2))
    );
    assert_eq!(d.answer_addr, Some("192.0.2.7".parse().unwrap()));
    assert_eq!(d.rcodes, [1, 0, 1, 0]);
    assert_eq!(
        l7.stats().dns_name_refused,
        0,
        "the loop is in a later response"
    );
    l7.end_interval(&mut slot);
    assert_eq!(l7.fields(&slot).unwrap().dns().unwrap().rcodes, [0; 4]);
}

#[test]
fn flow_dns_over_tcp_split_messages() {
    let mut l7 = L7::new(L7Config::default());
    let mut slot = Slot::default();
    let (q, a) = crate::dns::tests::query_and_answer("tcp.example", 28);
    let mut qs = (q.len() as u16).to_be_bytes().to_vec();
    qs.extend(&q);
    let mut r#as = (a.len() as u16).to_be_bytes().to_vec();
    r#as.extend(&a);
    let ports = (40000, 53);
    let mk = |dir, seq, p| Segment {
        ports,
        ..tcp(dir, seq, None, p, 1)
    };
    l7.on_segment(&mut slot, &mk(Dir::C2S, 1, &qs[..]));
    l7.on_segment(&mut slot, &mk(Dir::S2C, 100, &r#as[..7]));
    l7.on_segment(&mut slot, &mk(Dir::S2C, 107, &r#as[7..]));
    let f = l7.fields(&slot).unwrap();
    let d = f.dns().unwrap();
    assert_eq!(
        (d.qname.as_deref(), d.qtype, d.rcode),
        (Some(&b"tcp.example"[..]), Some(28), Some(0))
    );
}

#[test]
fn flow_http_keep_alive_with_srt() {
    let mut l7 = L7::new(L7Config::default());
    let mut slot = Slot::default();
    let ports = (40000, 80);
    let mk = |dir, seq, p: &'static [u8], ts| Segment {
        ports,
        t_snt_ns: 1_000,
        ..tcp(dir, seq, None, p, ts)
    };
    let r1: &[u8] = b"GET /one HTTP/1.1\r\nHost: web.example\r\n\r\n";
    l7.on_segment(&mut slot, &mk(Dir::C2S, 1, r1, 10_000));
    // The response head in two segments; the first one's time counts.
    let resp: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
    l7.on_segment(&mut slot, &mk(Dir::S2C, 500, &resp[..10], 15_000));
    l7.on_segment(&mut slot, &mk(Dir::S2C, 510, &resp[10..], 16_000));
    let r2: &[u8] = b"GET /two HTTP/1.1\r\nHost: web.example\r\n\r\n";
    l7.on_segment(&mut slot, &mk(Dir::C2S, 1 + r1.len() as u32, r2, 20_000));
    let resp2: &[u8] = b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n";
    l7.on_segment(
        &mut slot,
        &mk(Dir::S2C, 500 + resp.len() as u32, resp2, 30_000),
    );
    let f = l7.fields(&slot).unwrap();
    let h = f.http().unwrap();
    assert_eq!(h.target.as_deref(), Some(&b"/one"[..]));
    assert_eq!(
        (h.requests, h.status, h.status_class),
        (2, Some(503), [0, 1, 0, 0, 1])
    );
    // 15 - 10 - 1 µs and 30 - 20 - 1 µs.
    assert_eq!(
        (h.srt.min_us(), h.srt.max_us(), h.srt.mean_us()),
        (Some(4), Some(9), Some(7))
    );
}

/// The segments `passes_over` answers true for change nothing: an engine
/// shown only the others ends with the same label, fields and counters as
/// one shown everything; and they are the body segments (a request body's
/// last one, which times the request, is shown).
#[test]
fn flow_http_body_segments_are_passed_over_exactly() {
    let ports = (40000, 80);
    let mk = |dir, seq, p: &'static [u8], ts| Segment {
        ports,
        t_snt_ns: 1_000,
        ..tcp(dir, seq, None, p, ts)
    };
    let post: &[u8] = b"POST /up HTTP/1.1\r\nHost: web.example\r\nContent-Length: 3000\r\n\r\n";
    let body: &'static [u8] = &[b'x'; 3000];
    let head: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n\r\n";
    let rbody: &'static [u8] = &[b'y'; 4000];
    let get: &[u8] = b"GET /next HTTP/1.1\r\nHost: web.example\r\n\r\n";
    let head2: &[u8] = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    let (c, s) = (1u32, 900_000u32);
    let pl = post.len() as u32;
    let hl = head.len() as u32;
    let segs = vec![
        mk(Dir::C2S, c, post, 10_000),
        mk(Dir::C2S, c + pl, &body[..1000], 11_000),
        mk(Dir::C2S, c + pl + 1000, &body[1000..2000], 12_000),
        // A retransmission of the head: behind the stream.
        mk(Dir::C2S, c, post, 12_500),
        mk(Dir::C2S, c + pl + 2000, &body[2000..], 13_000),
        mk(Dir::S2C, s, head, 20_000),
        mk(Dir::S2C, s + hl, &rbody[..1500], 21_000),
        mk(Dir::S2C, s + hl + 1500, &rbody[1500..3000], 22_000),
        mk(Dir::S2C, s + hl + 3000, &rbody[3000..], 23_000),
        mk(Dir::C2S, c + pl + 3000, get, 30_000),
        mk(Dir::S2C, s + hl + 4000, head2, 40_000),
    ];
    let (mut all, mut some) = (L7::new(L7Config::default()), L7::new(L7Config::default()));
    let (mut a, mut b) = (Slot::default(), Slot::default());
    let mut passed = Vec::new();
    for (i, g) in segs.iter().enumerate() {
        all.on_segment(&mut a, g);
        let Transport::Tcp { seq, .. } = g.transport else {
            unreachable!()
        };
        if some.passes_over(&b, g.dir, seq, g.wire_len) {
            passed.push(i);
        } else {
            some.on_segment(&mut b, g);
        }
    }
    assert_eq!(
        passed,
        vec![1, 2, 3, 6, 7, 8],
        "the bodies but the request body's last segment, and the retransmitted head"
    );
    assert_eq!(
        (all.app(&a), all.fields(&a)),
        (some.app(&b), some.fields(&b))
    );
    assert_eq!(all.stats(), some.stats());
    let f = some.fields(&b).unwrap();
    let h = f.http().unwrap();
    assert_eq!(
        (h.requests, h.status, h.status_class),
        (2, Some(404), [0, 1, 0, 1, 0])
    );
    // 20 - 13 - 1 µs (timed from the request body's last segment) and 40 - 30 - 1 µs.
    assert_eq!((h.srt.min_us(), h.srt.max_us()), (Some(6), Some(9)));
    assert_eq!(all.finish(&mut a), some.finish(&mut b));
}

#[test]
fn flow_http_huge_header_line_is_refused_within_the_bound() {
    let mut l7 = L7::new(L7Config::default());
    let mut slot = Slot::default();
    let mut req = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
    req.extend(std::iter::repeat_n(b'a', 64 * 1024));
    let mut seq = 1u32;
    for chunk in req.chunks(1448) {
        l7.on_segment(
            &mut slot,
            &Segment {
                ports: (40000, 80),
                ..tcp(Dir::C2S, seq, None, chunk, 1)
            },
        );
        seq += chunk.len() as u32;
    }
    assert_eq!(l7.stats().stream_overflow, 1);
    assert_eq!(l7.bufs.in_use(), 0, "the held bytes were dropped");
    assert!(l7.allocated_bytes() <= size_of::<HttpFlow>() + BUF_BYTES);
    assert_eq!(l7.app(&slot), App::Http);
}

#[test]
fn flow_state_pool_is_bounded() {
    let cfg = L7Config {
        max_flows: 1,
        ..L7Config::default()
    };
    let mut l7 = L7::new(cfg);
    let hello = synth::record(22, &synth::ja4_example_hello(b"a.example"));
    let (mut s1, mut s2) = (Slot::default(), Slot::default());
    l7.on_segment(&mut s1, &tcp(Dir::C2S, 1, None, &hello[..50], 1));
    l7.on_segment(&mut s2, &tcp(Dir::C2S, 1, None, &hello, 1));
    assert_eq!(l7.stats().flows_refused, 1);
    assert_eq!(
        (l7.app(&s2), s2.done()),
        (App::Tls, true),
        "labelled, not parsed"
    );
    l7.release(&mut s1);
    assert_eq!(l7.states_in_use(), 0);
}

#[test]
fn flow_quic_initial_through_the_engine() {
    let mut l7 = L7::new(L7Config::default());
    let mut slot = Slot::default();
    let p = crate::quic::vectors::hex(crate::quic::vectors::CLIENT_INITIAL_V1);
    assert_eq!(
        l7.on_segment(&mut slot, &udp(Dir::C2S, &p, (50000, 443))),
        Progress::Done
    );
    let f = l7.fields(&slot).unwrap();
    let q = f.quic().unwrap();
    assert_eq!(
        (q.version, q.sni.as_deref()),
        (1, Some(&b"example.com"[..]))
    );
    assert_eq!(l7.app(&slot), App::Quic, "ALPN \"alpn\" refines nothing");
    assert_eq!(l7.states_in_use(), 0);
}

/// The per-flow bytes docs/l7.md states (update both together).
#[test]
fn flow_state_sizes() {
    let sizes = [
        ("slot", size_of::<Slot>()),
        ("pending", size_of::<PendingFlow>()),
        ("tls", size_of::<TlsFlow>()),
        ("quic", size_of::<QuicState>()),
        ("http", size_of::<HttpFlow>()),
        ("dns", size_of::<DnsFlow>()),
        ("tls fields", size_of::<crate::fields::TlsInfo>()),
        ("quic fields", size_of::<crate::fields::QuicInfo>()),
        ("http fields", size_of::<crate::fields::HttpInfo>()),
        ("dns fields", size_of::<crate::fields::DnsInfo>()),
    ];
    println!("{sizes:?}");
    assert_eq!(sizes[0].1, 8);
    for (what, n) in &sizes[1..6] {
        assert!(*n <= 2304, "{what}: {n} bytes");
    }
    for (what, n) in &sizes[6..] {
        assert!(*n <= 160, "{what}: {n} bytes");
    }
    // docs/l7.md: every pool full, per flow of max_flows.
    let one = L7Config {
        max_flows: 1,
        buffers: 0,
        ..L7Config::default()
    };
    let all: usize = sizes[1..6].iter().map(|(_, n)| n).sum();
    assert_eq!(one.memory_bytes(), all as u64);
    assert_eq!(all, 3912, "docs/l7.md states 3912 bytes");
}
