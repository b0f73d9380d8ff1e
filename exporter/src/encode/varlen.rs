//! Variable-length field values (RFC 7011 §7): the template announces
//! length 65535, and each value in a data record carries its own length,
//! one byte if it is below 255, else the byte 255 followed by a 16-bit
//! length. No value can be longer than 65535 bytes; longer input is cut,
//! never a panic.

use crate::ie::VARLEN;

/// The one-byte length form holds 0..=254; 255 announces the 3-byte form.
const SHORT_MAX: usize = 254;
const LONG_MARK: u8 = 255;

/// Longest value the 16-bit length can describe.
pub const MAX_VALUE_LEN: usize = VARLEN as usize;

/// Bytes that a value of `len` bytes takes in a data record, length prefix
/// included (`len` above [`MAX_VALUE_LEN`] counts as cut to it).
pub fn encoded_len(len: usize) -> usize {
    let len = len.min(MAX_VALUE_LEN);
    if len <= SHORT_MAX { 1 + len } else { 3 + len }
}

/// Append `value` with its length prefix; a value over [`MAX_VALUE_LEN`]
/// is cut to it. Returns the value bytes written. Callers holding a UTF-8
/// string cut it first with [`truncate_utf8`] so no character is split.
pub fn write(out: &mut Vec<u8>, value: &[u8]) -> usize {
    let value = value.get(..MAX_VALUE_LEN).unwrap_or(value);
    match u8::try_from(value.len()) {
        Ok(n) if usize::from(n) <= SHORT_MAX => out.push(n),
        _ => {
            out.push(LONG_MARK);
            // Cannot fail: `value` was cut to 65535 bytes above.
            let n = u16::try_from(value.len()).unwrap_or(VARLEN);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
    out.extend_from_slice(value);
    value.len()
}

/// The longest value, at most `len` bytes, whose encoding fits in `room`
/// bytes (0 if not even an empty value fits: the caller checks).
pub fn fit(len: usize, room: usize) -> usize {
    let len = len.min(MAX_VALUE_LEN);
    if encoded_len(len) <= room {
        len
    } else if room > 3 + SHORT_MAX {
        room - 3
    } else {
        room.saturating_sub(1).min(SHORT_MAX).min(len)
    }
}

/// `s` cut to at most `max` bytes on a character boundary: RFC 7011 §6.1.6
/// forbids sending a string truncated in the middle of a UTF-8 sequence.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(n: usize) -> Vec<u8> {
        let v: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let mut out = vec![0xAA];
        let written = write(&mut out, &v);
        assert_eq!(written, n.min(MAX_VALUE_LEN));
        assert_eq!(
            out.len() - 1,
            encoded_len(n),
            "encoded_len agrees with write"
        );
        assert_eq!(out[0], 0xAA, "nothing before the value is touched");
        out.remove(0);
        out
    }

    #[test]
    fn short_form_up_to_254() {
        for n in [0usize, 1, 254] {
            let out = enc(n);
            assert_eq!(out.len(), 1 + n);
            assert_eq!(usize::from(out[0]), n, "one-byte length for {n}");
            assert_eq!(out.get(1).copied(), if n > 0 { Some(0) } else { None });
        }
    }

    #[test]
    fn long_form_from_255() {
        for n in [255usize, 256, 1000, 65535] {
            let out = enc(n);
            assert_eq!(out.len(), 3 + n);
            assert_eq!(out[0], 255, "255 marks the 3-byte form for {n}");
            assert_eq!(usize::from(u16::from_be_bytes([out[1], out[2]])), n);
            assert_eq!(out[3 + n - 1], ((n - 1) % 251) as u8, "last byte kept");
        }
    }

    #[test]
    fn over_65535_is_cut_not_a_panic() {
        let out = enc(70_000);
        assert_eq!(out.len(), 3 + 65_535);
        assert_eq!(&out[..3], &[255, 0xFF, 0xFF]);
        assert_eq!(encoded_len(usize::MAX), 3 + 65_535);
    }

    #[test]
    fn fit_picks_the_longest_value_that_fits() {
        assert_eq!(fit(10, 100), 10);
        assert_eq!(fit(254, 255), 254, "short form: 1 + 254");
        assert_eq!(fit(255, 257), 254, "255 needs 258 bytes, 254 fits in 255");
        assert_eq!(fit(255, 258), 255);
        assert_eq!(fit(1000, 300), 297);
        assert_eq!(fit(1000, 257), 254);
        assert_eq!(fit(1000, 0), 0);
        assert_eq!(fit(100_000, 70_000), 65_535);
        for len in [0, 1, 254, 255, 256, 600] {
            for room in 1..700 {
                let n = fit(len, room);
                assert!(n <= len && encoded_len(n) <= room, "len {len} room {room}");
                assert!(
                    n == len || encoded_len(n + 1) > room,
                    "len {len} room {room}: {n} is not the longest"
                );
            }
        }
    }

    #[test]
    fn truncation_keeps_whole_characters() {
        let s = "xdprobe é€😀";
        // 'é' 2 bytes, '€' 3, '😀' 4.
        assert_eq!(truncate_utf8(s, 100), s);
        assert_eq!(truncate_utf8(s, 9), "xdprobe ");
        assert_eq!(truncate_utf8(s, 10), "xdprobe é");
        assert_eq!(truncate_utf8(s, 12), "xdprobe é");
        assert_eq!(truncate_utf8(s, 13), "xdprobe é€");
        assert_eq!(truncate_utf8(s, 16), "xdprobe é€");
        assert_eq!(truncate_utf8(s, 0), "");
        let long = "é".repeat(40_000);
        let cut = truncate_utf8(&long, MAX_VALUE_LEN);
        assert_eq!(cut.len(), 65_534, "an odd cut point backs off one byte");
    }
}
