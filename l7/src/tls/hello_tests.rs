use super::*;
use crate::synth;
use crate::tls::fingerprint::{ja3, ja4};

fn body(msg: &[u8]) -> &[u8] {
    &msg[4..]
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn hello_ja4_spec_example() {
    let m = synth::ja4_example_hello(b"www.example.com");
    let h = ClientHello::parse(body(&m)).unwrap();
    assert_eq!(h.sni, Some(&b"www.example.com"[..]));
    assert_eq!(h.first_alpn(), Some(&b"h2"[..]));
    assert_eq!(h.max_version(), 0x0304, "GREASE 0x0a0a is not a version");
    assert!(h.sni_present && !h.sni_refused);
    let mut sort = Vec::new();
    // FoxIO's JA4.md: the example's fingerprint.
    let fp = ja4(&h, false, &mut sort);
    assert_eq!(
        std::str::from_utf8(&fp).unwrap(),
        "t13d1516h2_8daaf6152771_e5627efa2ab1"
    );
    assert_eq!(&ja4(&h, true, &mut sort)[..1], b"q");
    // JA3 of the same hello: MD5 of
    // 771,4865-…-53,27-0-51-16-17513-23-45-13-5-35-18-43-65281-11-10-21,29-23-24,0
    // (computed independently with Python's hashlib).
    assert_eq!(hex(&ja3(&h)), "c000e2caf3a25423f9de6c8a4b12a975");
}

#[test]
fn hello_without_extensions_or_sni() {
    let m = synth::client_hello(0x0301, &[0x002f], &[]);
    let h = ClientHello::parse(body(&m)).unwrap();
    assert_eq!((h.sni, h.alpn, h.max_version()), (None, None, 0x0301));
    let fp = ja4(&h, false, &mut Vec::new());
    assert_eq!(&fp[..11], b"t10i010000_");
    assert_eq!(&fp[24..], b"000000000000");
    // No extensions block at all (SSL 3.0-style hello).
    let mut b = body(&m).to_vec();
    b.truncate(b.len() - 2);
    let h = ClientHello::parse(&b).unwrap();
    assert!(h.extensions.is_empty());
}

#[test]
fn hello_sni_list_of_many_names_is_refused() {
    let mut list = Vec::new();
    for i in 0..10_000u32 {
        let n = format!("h{i}");
        list.push(0);
        list.extend((n.len() as u16).to_be_bytes());
        list.extend(n.as_bytes());
    }
    let mut d = (list.len() as u16).to_be_bytes().to_vec();
    d.extend(list);
    let m = synth::client_hello(0x0303, &[0x1301], &[(0, d)]);
    let h = ClientHello::parse(body(&m)).unwrap();
    assert!(h.sni_refused && h.sni.is_none() && h.sni_present);
}

#[test]
fn hello_every_truncation_is_an_error_not_a_panic() {
    let m = synth::ja4_example_hello(b"a.example");
    let b = body(&m);
    // Only a cut right after the compression methods parses: a hello
    // without extensions is well-formed.
    let ext_start = 2 + 32 + 1 + 32 + 2 + 2 * 16 + 2;
    for n in 0..b.len() {
        if let Ok(h) = ClientHello::parse(&b[..n]) {
            assert!(n == ext_start && h.extensions.is_empty(), "cut at {n}");
        }
    }
    let s = synth::server_hello(0x0303, 0x1301, Some(0x0304), Some(b"h2"));
    let sb = body(&s);
    let h = ServerHello::parse(sb).unwrap();
    assert_eq!(
        (h.version(), h.cipher, h.alpn, h.hrr),
        (0x0304, 0x1301, Some(&b"h2"[..]), false)
    );
    for n in 0..sb.len() {
        let _ = ServerHello::parse(&sb[..n]);
    }
}

#[test]
fn hello_grease_values() {
    for v in [0x0a0a, 0x1a1a, 0xfafa] {
        assert!(is_grease(v));
    }
    for v in [0x0a1a, 0x0303, 0x1301, 0xaaaa] {
        assert!(!is_grease(v) || v == 0xaaaa);
    }
    assert!(is_grease(0xaaaa));
    assert!(!is_grease(0x0b0b));
}
