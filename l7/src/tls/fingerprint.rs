//! Client fingerprints of a ClientHello: JA3 (the MD5 Wireshark shows as
//! `tls.handshake.ja3`) and JA4 (FoxIO's JA4 TLS client specification,
//! BSD-3-Clause, `technical_details/JA4.md`). Both digests are fed piece by
//! piece: no fingerprint string is ever built.

use md5::{Digest as _, Md5};
use sha2::Sha256;

use super::hello::{ClientHello, EXT_ALPN, EXT_SERVER_NAME, extensions, is_grease, u16s};

/// A JA4 fingerprint: `t13d1516h2_8daaf6152771_e5627efa2ab1`.
pub const JA4_LEN: usize = 36;
pub type Ja4 = [u8; JA4_LEN];

/// Decimal digits of `v` into `buf`, returning them.
fn dec(v: u16, buf: &mut [u8; 5]) -> &[u8] {
    let mut n = v;
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// Feeds `values` to `h` as decimals joined by `-`.
fn dashed(h: &mut Md5, values: impl Iterator<Item = u16>) {
    let mut buf = [0u8; 5];
    for (i, v) in values.enumerate() {
        if i > 0 {
            h.update(b"-");
        }
        h.update(dec(v, &mut buf));
    }
}

/// JA3: MD5 of `version,ciphers,extensions,groups,point formats`, each
/// list in wire order as decimals joined by `-`, GREASE left out — the
/// string Wireshark hashes for `tls.handshake.ja3`.
pub fn ja3(h: &ClientHello<'_>) -> [u8; 16] {
    let mut d = Md5::new();
    let mut buf = [0u8; 5];
    d.update(dec(h.legacy_version, &mut buf));
    d.update(b",");
    dashed(&mut d, u16s(h.ciphers).filter(|v| !is_grease(*v)));
    d.update(b",");
    dashed(
        &mut d,
        extensions(h.extensions)
            .map(|(t, _)| t)
            .filter(|v| !is_grease(*v)),
    );
    d.update(b",");
    dashed(&mut d, u16s(h.groups).filter(|v| !is_grease(*v)));
    d.update(b",");
    dashed(&mut d, h.point_formats.iter().map(|b| u16::from(*b)));
    d.finalize().into()
}

/// JA4's two-character TLS version.
fn version_code(v: u16) -> &'static [u8; 2] {
    match v {
        0x0304 => b"13",
        0x0303 => b"12",
        0x0302 => b"11",
        0x0301 => b"10",
        0x0300 => b"s3",
        0x0002 => b"s2",
        0xFEFF => b"d1",
        0xFEFD => b"d2",
        0xFEFC => b"d3",
        _ => b"00",
    }
}

fn two_digits(n: usize) -> [u8; 2] {
    let n = n.min(99) as u8;
    [b'0' + n / 10, b'0' + n % 10]
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// JA4's ALPN characters: the first and last character of the first
/// protocol offered when both are ASCII alphanumeric, else the first hex
/// digit of its first byte and the last hex digit of its last byte; `00`
/// without ALPN or with an empty first protocol.
fn alpn_code(first: Option<&[u8]>) -> [u8; 2] {
    match first {
        Some([a, .., b]) | Some([a @ b]) => {
            if a.is_ascii_alphanumeric() && b.is_ascii_alphanumeric() {
                [*a, *b]
            } else {
                [HEX[usize::from(a >> 4)], HEX[usize::from(b & 0xF)]]
            }
        }
        _ => *b"00",
    }
}

/// Feeds `values` as 4-digit lower-case hex joined by `,`.
fn hex_list(h: &mut Sha256, values: &[u16]) {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            h.update(b",");
        }
        let b = v.to_be_bytes();
        h.update([
            HEX[usize::from(b[0] >> 4)],
            HEX[usize::from(b[0] & 0xF)],
            HEX[usize::from(b[1] >> 4)],
            HEX[usize::from(b[1] & 0xF)],
        ]);
    }
}

/// The first 12 hex digits of a SHA-256.
fn hash12(d: Sha256, out: &mut [u8]) {
    let sum = d.finalize();
    for (i, b) in sum.iter().take(6).enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 0xF)];
    }
}

/// JA4 of a ClientHello (`quic`: carried in QUIC, prefix `q`, else `t`).
/// `scratch` holds the sorted lists (reused; no allocation once it has
/// grown to the largest hello seen, at most 8 Ki values for a 16 KiB
/// hello).
pub fn ja4(h: &ClientHello<'_>, quic: bool, scratch: &mut Vec<u16>) -> Ja4 {
    let mut out = [b'_'; JA4_LEN];
    out[0] = if quic { b'q' } else { b't' };
    out[1..3].copy_from_slice(version_code(h.max_version()));
    out[3] = if h.sni_present { b'd' } else { b'i' };

    scratch.clear();
    scratch.extend(u16s(h.ciphers).filter(|v| !is_grease(*v)));
    out[4..6].copy_from_slice(&two_digits(scratch.len()));
    scratch.sort_unstable();
    if scratch.is_empty() {
        out[11..23].copy_from_slice(b"000000000000");
    } else {
        let mut d = Sha256::new();
        hex_list(&mut d, scratch);
        hash12(d, &mut out[11..23]);
    }

    scratch.clear();
    let exts = extensions(h.extensions).map(|(t, _)| t);
    scratch.extend(exts.filter(|v| !is_grease(*v)));
    out[6..8].copy_from_slice(&two_digits(scratch.len()));
    out[8..10].copy_from_slice(&alpn_code(h.first_alpn()));
    scratch.retain(|t| *t != EXT_SERVER_NAME && *t != EXT_ALPN);
    scratch.sort_unstable();
    if scratch.is_empty() {
        out[24..36].copy_from_slice(b"000000000000");
    } else {
        let mut d = Sha256::new();
        hex_list(&mut d, scratch);
        let n = scratch.len();
        scratch.extend(u16s(h.sigalgs));
        if scratch.len() > n {
            d.update(b"_");
            hex_list(&mut d, &scratch[n..]);
        }
        hash12(d, &mut out[24..36]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_alpn_code_follows_the_spec_examples() {
        let c = |v: &[u8]| String::from_utf8(alpn_code(Some(v)).to_vec()).unwrap();
        assert_eq!(c(b"h2"), "h2");
        assert_eq!(c(b"http/1.1"), "h1");
        assert_eq!(c(b"h"), "hh");
        assert_eq!(c(&[0xAB]), "ab");
        assert_eq!(c(&[0x20]), "20");
        assert_eq!(c(&[0xAB, 0xCD]), "ad");
        assert_eq!(c(&[0x20, 0x61]), "21");
        assert_eq!(c(&[0x30, 0xAB]), "3b");
        assert_eq!(c(&[0x61, 0x20]), "60");
        assert_eq!(c(&[0x30, 0x31, 0xAB, 0xCD]), "3d");
        assert_eq!(c(&[0x30, 0xAB, 0xCD, 0x31]), "01");
        assert_eq!(alpn_code(Some(b"")), *b"00");
        assert_eq!(alpn_code(None), *b"00");
    }

    #[test]
    fn fingerprint_small_helpers() {
        let mut b = [0u8; 5];
        assert_eq!(dec(0, &mut b), b"0");
        assert_eq!(dec(65535, &mut b), b"65535");
        assert_eq!(two_digits(7), *b"07");
        assert_eq!(two_digits(150), *b"99");
        assert_eq!(version_code(0x7F1C), b"00");
    }
}
