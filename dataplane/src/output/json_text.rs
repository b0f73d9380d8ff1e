//! JSON text primitives both record writers share (`json` for the flow
//! keys, `json_l7` for the application-layer ones): strings with
//! serde_json's escapes and addresses in serde's text, written straight
//! into the line buffer.

use std::io::Write;
use std::net::IpAddr;

/// An address as serde writes it (dotted quad, RFC 5952 text), unquoted.
pub(super) fn addr(buf: &mut Vec<u8>, a: IpAddr) {
    match a {
        // Dotted quad by hand: `Display` goes through the formatter's
        // padding logic, four small integers do not need it.
        IpAddr::V4(v4) => {
            let mut n = itoa::Buffer::new();
            let [a, b, c, d] = v4.octets();
            buf.extend_from_slice(n.format(a).as_bytes());
            for o in [b, c, d] {
                buf.push(b'.');
                buf.extend_from_slice(n.format(o).as_bytes());
            }
        }
        // RFC 5952 text (zero-run compression, embedded IPv4 forms) is
        // std's, exactly what serde's `Serialize` for `Ipv6Addr` writes.
        IpAddr::V6(v6) => {
            let _ = write!(buf, "{v6}");
        }
    }
}

/// A JSON string with serde_json's escapes: `\"`, `\\`, the short forms
/// `\b \f \n \r \t`, `\u00xx` (lower-case hex) for other control bytes;
/// everything else, non-ASCII included, as its UTF-8 bytes.
pub(super) fn string(buf: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => buf.extend_from_slice(b"\\\""),
            b'\\' => buf.extend_from_slice(b"\\\\"),
            0x08 => buf.extend_from_slice(b"\\b"),
            0x0c => buf.extend_from_slice(b"\\f"),
            b'\n' => buf.extend_from_slice(b"\\n"),
            b'\r' => buf.extend_from_slice(b"\\r"),
            b'\t' => buf.extend_from_slice(b"\\t"),
            0..0x20 => buf.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
            _ => buf.push(b),
        }
    }
    buf.push(b'"');
}
