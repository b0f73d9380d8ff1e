//! Bounded inline strings: what a flow keeps of a name or a URL is at most
//! `N` bytes, stored in the flow's state without a heap allocation, and cut
//! (never rejected) beyond. The bytes are kept as they were on the wire;
//! [`Shown`] turns them into text for the outputs.

use std::fmt;

/// At most `N` bytes (`N` ≤ 65535), inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Text<const N: usize> {
    len: u16,
    buf: [u8; N],
}

impl<const N: usize> Default for Text<N> {
    fn default() -> Self {
        Text {
            len: 0,
            buf: [0; N],
        }
    }
}

impl<const N: usize> Text<N> {
    /// The first `max.min(N)` bytes of `v`; the second value says whether
    /// bytes were cut.
    pub fn cut(v: &[u8], max: usize) -> (Self, bool) {
        let mut t = Text::default();
        let cut = t.set(v, max);
        (t, cut)
    }

    /// Replaces the content with the first `max.min(N)` bytes of `v`;
    /// true if bytes were cut.
    pub fn set(&mut self, v: &[u8], max: usize) -> bool {
        let n = v.len().min(max).min(N).min(usize::from(u16::MAX));
        self.buf[..n].copy_from_slice(&v[..n]);
        self.len = n as u16;
        n < v.len()
    }

    /// Appends as much of `v` as fits in `max.min(N)`; true if bytes were
    /// cut.
    pub fn push(&mut self, v: &[u8], max: usize) -> bool {
        let cap = max.min(N).min(usize::from(u16::MAX));
        let at = usize::from(self.len).min(cap);
        let n = v.len().min(cap - at);
        self.buf[at..at + n].copy_from_slice(&v[..n]);
        self.len = (at + n) as u16;
        n < v.len()
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes as text (see [`Shown`]).
    pub fn shown(&self) -> Shown<'_> {
        Shown(self.as_bytes())
    }
}

impl<const N: usize> fmt::Debug for Text<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.shown().to_string())
    }
}

/// Wire bytes as text: valid UTF-8 is kept as is except control
/// characters; a control character (below 0x20, or 0x7F) and every byte
/// that is not part of valid UTF-8 become `\xNN` (lower-case hex), as
/// Wireshark shows them. The result is always valid UTF-8, so the JSON and
/// CSV writers and the IPFIX string elements (RFC 7011 §6.1.6) can carry it.
#[derive(Clone, Copy)]
pub struct Shown<'a>(pub &'a [u8]);

impl Shown<'_> {
    /// True when the text is the bytes unchanged (no escape needed).
    pub fn is_verbatim(&self) -> bool {
        std::str::from_utf8(self.0).is_ok_and(|s| !s.chars().any(char::is_control))
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while !rest.is_empty() {
            let (good, bad) = match std::str::from_utf8(rest) {
                Ok(s) => (s, &[][..]),
                Err(e) => {
                    let (g, b) = rest.split_at(e.valid_up_to());
                    // The prefix is valid by construction.
                    let g = std::str::from_utf8(g).unwrap_or("");
                    let n = e.error_len().unwrap_or(b.len());
                    (g, &b[..n])
                }
            };
            for c in good.chars() {
                if c.is_control() {
                    let mut b = [0u8; 4];
                    for x in c.encode_utf8(&mut b).bytes() {
                        write!(f, "\\x{x:02x}")?;
                    }
                } else {
                    fmt::Write::write_char(f, c)?;
                }
            }
            for x in bad {
                write!(f, "\\x{x:02x}")?;
            }
            rest = &rest[good.len() + bad.len()..];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_cuts_at_the_bound() {
        let (t, cut) = Text::<8>::cut(b"example.com", 255);
        assert_eq!((t.as_bytes(), cut), (&b"example."[..], true));
        let (t, cut) = Text::<8>::cut(b"abc", 2);
        assert_eq!((t.as_bytes(), cut), (&b"ab"[..], true));
        let mut t = Text::<6>::default();
        assert!(!t.push(b"abc", 6));
        assert!(t.push(b"defg", 6));
        assert_eq!(t.as_bytes(), b"abcdef");
        assert!(t.push(b"x", 6));
    }

    #[test]
    fn text_shown_escapes_controls_and_bad_utf8() {
        let s = |b: &[u8]| Shown(b).to_string();
        assert_eq!(s(b"www.example.com"), "www.example.com");
        assert_eq!(s("bücher.de".as_bytes()), "bücher.de");
        assert_eq!(s(b"a\x00b\x7f"), "a\\x00b\\x7f");
        assert_eq!(s(b"x\xffy\xc3"), "x\\xffy\\xc3");
        assert!(Shown(b"ok").is_verbatim());
        assert!(!Shown(b"\x01").is_verbatim());
    }
}
