//! The L7 parsers (`xdprobe-l7`) on arbitrary input: each message parser
//! on its own (ClientHello and ServerHello with JA3/JA4, a certificate's
//! names, a DNS message, a QUIC long header and its Initial protection),
//! and the per-flow engine fed segment sequences of both transports, both
//! directions, sequence numbers jumping (holes, overlaps, wraps), the
//! on-wire length above the captured one. No input may panic or overflow,
//! and the engine's memory stays within its bound: at most its pools'
//! configured size, all given back when the flows end.
//!
//! Input: a mode byte. Modes 0–4: the rest is one message for one parser.
//! Otherwise: 6-byte segment headers each followed by its bytes: flags
//! (bit 0 direction, bit 1 UDP, bit 2 a second flow, bit 3 the expected
//! sequence number known, bits 4–7 × 100 bytes more on the wire), a
//! signed sequence step (2), a timestamp step in µs (2), the captured
//! length (1).
#![no_main]

use libfuzzer_sys::fuzz_target;
use xdprobe_dataplane::l7::quic::{LongHeader, crypto};
use xdprobe_dataplane::l7::tls::{cert, fingerprint, hello};
use xdprobe_dataplane::l7::{Dir, L7, L7Config, Segment, Slot, Transport, dns, text::Text};

fn messages(mode: u8, data: &[u8]) {
    match mode {
        0 => {
            if let Ok(h) = hello::ClientHello::parse(data) {
                let _ = fingerprint::ja3(&h);
                let fp = fingerprint::ja4(&h, data.len() % 2 == 0, &mut Vec::new());
                assert!(fp.is_ascii());
            }
        }
        1 => {
            if let Ok(h) = hello::ServerHello::parse(data) {
                let _ = h.version();
            }
        }
        2 => {
            let _ = cert::names(data);
        }
        3 => {
            let mut name = Text::<255>::default();
            if let Ok(m) = dns::parse(data, &mut name) {
                assert!(name.len() <= 255);
                let _ = m.first_addr;
            }
            let _ = dns::looks_like_dns(data, true);
        }
        _ => {
            if let Some(h) = LongHeader::parse(data) {
                assert!(h.end <= data.len() && h.pn_at <= h.end);
                if let Some(k) = crypto::client_initial_keys(h.version, h.dcid) {
                    let mut pkt = data[..h.end].to_vec();
                    let _ = crypto::open(&k, &mut pkt, h.pn_at);
                }
            }
        }
    }
}

fn engine(mut data: &[u8]) {
    let cfg = L7Config {
        max_flows: 2,
        buffers: 2,
        packets: 4,
        ..L7Config::default()
    };
    let mut l7 = L7::new(cfg);
    let mut slots = [Slot::default(); 2];
    // A second engine is not shown the segments it says it passes over
    // (as the flow table does): it must end every step where the first
    // one does.
    let mut lean = L7::new(cfg);
    let mut lean_slots = [Slot::default(); 2];
    let (mut seq, mut ts) = ([1000u32; 2], 1_000_000u64);
    while let [flags, s0, s1, t0, t1, n, rest @ ..] = data {
        let n = usize::from(*n).min(rest.len());
        let (payload, more) = rest.split_at(n);
        data = more;
        let dir = if flags & 1 == 0 { Dir::C2S } else { Dir::S2C };
        let f = usize::from(flags >> 2 & 1);
        let step = i16::from_be_bytes([*s0, *s1]);
        seq[f] = seq[f].wrapping_add(step as i32 as u32);
        ts += u64::from(u16::from_be_bytes([*t0, *t1]));
        let transport = if flags & 2 != 0 {
            Transport::Udp
        } else {
            let expected = (flags & 8 != 0).then_some(seq[f].wrapping_sub(u32::from(*t0)));
            Transport::Tcp {
                seq: seq[f],
                expected,
                syn: *t1 & 1 != 0,
            }
        };
        let seg = Segment {
            dir,
            transport,
            payload,
            wire_len: payload.len() as u32 + u32::from(flags >> 4) * 100,
            ts_ns: ts,
            ports: (40000, [443, 53, 80, 8080][usize::from(*s1 & 3)]),
            t_snt_ns: u64::from(*t1) * 1000,
        };
        l7.on_segment(&mut slots[f], &seg);
        let passed = match transport {
            Transport::Tcp { seq, .. } => lean.passes_over(&lean_slots[f], dir, seq, seg.wire_len),
            Transport::Udp => false,
        };
        if !passed {
            lean.on_segment(&mut lean_slots[f], &seg);
        }
        assert!(l7.allocated_bytes() as u64 <= cfg.memory_bytes());
        let fields = l7.fields(&slots[f]);
        assert_eq!(
            fields,
            lean.fields(&lean_slots[f]),
            "a passed-over segment changed the fields"
        );
        assert_eq!(l7.app(&slots[f]), lean.app(&lean_slots[f]));
        if flags & 0xF0 == 0xF0 {
            l7.end_interval(&mut slots[f]);
            lean.end_interval(&mut lean_slots[f]);
        }
    }
    assert_eq!(l7.stats(), lean.stats());
    for (s, t) in slots.iter_mut().zip(lean_slots.iter_mut()) {
        assert_eq!(l7.finish(s), lean.finish(t));
    }
    assert_eq!(l7.states_in_use(), 0, "every state given back");
    assert_eq!(lean.states_in_use(), 0, "every state given back");
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode < 5 {
        messages(mode, rest);
    } else {
        engine(rest);
    }
});
