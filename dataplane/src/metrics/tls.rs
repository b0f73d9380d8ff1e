//! TLS record-header tracking for the TLS variant of SRT (`docs/spec/npm-metrics.md`
//! §2 "TCP carrying TLS"): only application-data records (content type 23)
//! are requests and responses; handshake, alert and change-cipher-spec
//! records are not.
//!
//! Records are followed through the TCP byte stream of one direction
//! without reassembly or copies: the state is the stream position of the
//! next unparsed byte, how much of the current record body is left, and
//! how many header bytes (of 5, RFC 8446 §5.1) have been read, so a header
//! split over two segments still parses.
//!
//! **Gaps.** When a segment starts beyond the next expected byte (the
//! probe missed a segment, or segments arrive out of order), or a header
//! byte lies past the captured bytes (snaplen), the direction is *lost*. It
//! resynchronises at the first later segment whose first five captured
//! bytes form a plausible record header (type 20–23, version 3.1–3.4,
//! length ≤ 2^14 + 2048). Records between the gap and the resync are not
//! seen: a request or response hidden there is missed, never invented.
//! Retransmitted bytes already parsed are skipped.

use super::seq::SeqNumber;

/// Largest legal TLSCiphertext length (RFC 8446 §5.2: 2^14 + 256; TLS 1.2
/// allows 2^14 + 2048).
const MAX_RECORD_LEN: u16 = 16384 + 2048;
const CONTENT_APPLICATION_DATA: u8 = 23;
const CONTENT_HANDSHAKE: u8 = 22;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    /// Not a TLS flow (or not decided yet).
    #[default]
    Off,
    /// Following records; `next` is the stream position of the next byte.
    Synced,
    /// Lost track; waiting for a segment that starts with a record header.
    Lost,
}

/// Record tracking for one direction (10 bytes: packed to 2-byte
/// alignment, as the TCP tracker holds two and a 4-byte alignment would
/// pad each to 12; the fields are only ever copied, never borrowed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, packed(2))]
pub struct TlsDir {
    next: SeqNumber,
    /// Body bytes left in the current record (valid when `hdr_len == 5`).
    remaining: u16,
    state: State,
    /// Header bytes of the current record read so far (0 = at a boundary).
    hdr_len: u8,
    /// Content type of the current record.
    ctype: u8,
    /// High byte of the record length while the header is incomplete.
    len_hi: u8,
}

/// Whether the first client payload starts a TLS handshake record: type 22,
/// protocol version major 3 (0x03xx).
pub fn looks_like_client_hello(payload: &[u8]) -> bool {
    matches!(payload, [CONTENT_HANDSHAKE, 3, ..])
}

fn plausible_header(p: &[u8]) -> bool {
    match p {
        [t, 3, minor, hi, lo, ..] => {
            (20..=23).contains(t)
                && (1..=4).contains(minor)
                && u16::from_be_bytes([*hi, *lo]) <= MAX_RECORD_LEN
        }
        _ => false,
    }
}

impl TlsDir {
    /// Starts tracking at a segment whose first byte is a record boundary
    /// (the client's first payload), or, if `seq` is `None`, waits for the
    /// first segment that starts with a header (the server side).
    pub fn start(&mut self, seq: Option<SeqNumber>) {
        *self = TlsDir::default();
        match seq {
            Some(s) => {
                self.state = State::Synced;
                self.next = s;
            }
            None => self.state = State::Lost,
        }
    }

    pub fn is_on(&self) -> bool {
        self.state != State::Off
    }

    /// Feeds one segment's payload (`payload_len` on the wire, `payload` the
    /// captured part). Returns true if the segment carried at least one byte
    /// of an application-data record.
    pub fn on_segment(&mut self, seq: SeqNumber, payload_len: u32, payload: &[u8]) -> bool {
        let skip = match self.state {
            State::Off => return false,
            State::Lost => {
                if !plausible_header(payload) {
                    return false;
                }
                self.state = State::Synced;
                self.hdr_len = 0;
                self.next = seq;
                0
            }
            State::Synced => {
                let d = seq.distance(self.next);
                if d > 0 {
                    // Gap: try to resync right here.
                    self.state = State::Lost;
                    return self.on_segment(seq, payload_len, payload);
                }
                // d <= 0: skip bytes already parsed (retransmission overlap).
                let skip = d.unsigned_abs();
                if skip >= payload_len {
                    return false;
                }
                skip
            }
        };
        self.next = seq.add(payload_len);
        self.parse(skip, payload_len, payload)
    }

    /// Walks record boundaries in `[pos, len)`. Bounded: each iteration
    /// consumes at least one byte.
    fn parse(&mut self, mut pos: u32, len: u32, payload: &[u8]) -> bool {
        let mut app = false;
        while pos < len {
            if self.hdr_len < 5 {
                let Some(&b) = payload.get(pos as usize) else {
                    // Header byte not captured (snaplen): cannot follow.
                    self.state = State::Lost;
                    return app;
                };
                pos += 1;
                let ok = match self.hdr_len {
                    0 => {
                        self.ctype = b;
                        (20..=24).contains(&b)
                    }
                    1 => b == 3,
                    2 => b <= 4,
                    3 => {
                        self.len_hi = b;
                        true
                    }
                    _ => {
                        let l = u16::from_be_bytes([self.len_hi, b]);
                        self.remaining = l;
                        l <= MAX_RECORD_LEN
                    }
                };
                if !ok {
                    self.state = State::Lost;
                    return app;
                }
                if self.ctype == CONTENT_APPLICATION_DATA {
                    app = true;
                }
                self.hdr_len += 1;
                if self.hdr_len == 5 && self.remaining == 0 {
                    self.hdr_len = 0;
                }
            } else {
                let take = (len - pos).min(u32::from(self.remaining));
                pos += take;
                if self.ctype == CONTENT_APPLICATION_DATA {
                    app = true;
                }
                // take <= remaining, which is a u16.
                self.remaining -= take as u16;
                if self.remaining == 0 {
                    self.hdr_len = 0;
                }
            }
        }
        app
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t: u8, body: usize) -> Vec<u8> {
        let mut v = vec![t, 3, 3];
        v.extend_from_slice(&(body as u16).to_be_bytes());
        v.extend(std::iter::repeat_n(0xAB, body));
        v
    }

    fn feed(d: &mut TlsDir, seq: u32, bytes: &[u8]) -> bool {
        d.on_segment(SeqNumber(seq), bytes.len() as u32, bytes)
    }

    #[test]
    fn metrics_tls_handshake_records_are_not_app_data() {
        let mut d = TlsDir::default();
        d.start(Some(SeqNumber(100)));
        let hs = [rec(22, 200), rec(20, 1)].concat();
        assert!(!feed(&mut d, 100, &hs));
        assert!(feed(&mut d, 100 + hs.len() as u32, &rec(23, 50)));
    }

    #[test]
    fn metrics_tls_header_split_across_segments() {
        let mut d = TlsDir::default();
        d.start(Some(SeqNumber(0)));
        // A handshake record followed by the first 2 header bytes of an
        // application-data record; the other 3 header bytes and the body
        // come in the next segment.
        let mut stream = rec(22, 10);
        let split = stream.len() + 2;
        stream.extend(rec(23, 300));
        stream.extend(rec(22, 4));
        let (a, b) = stream.split_at(split);
        assert!(feed(&mut d, 0, a), "the type byte is in the first segment");
        assert!(feed(&mut d, a.len() as u32, b));
        assert_eq!(d.hdr_len, 0, "ended exactly at a record boundary");
        assert_eq!(d.state, State::Synced);
        // Split inside the length field this time, type 22: not app data.
        let next = SeqNumber(stream.len() as u32);
        let r = rec(22, 20);
        assert!(!d.on_segment(next, 4, &r[..4]));
        assert!(!d.on_segment(next.add(4), (r.len() - 4) as u32, &r[4..]));
        assert_eq!((d.hdr_len, d.state), (0, State::Synced));
    }

    #[test]
    fn metrics_tls_body_spanning_segments_and_retransmission() {
        let mut d = TlsDir::default();
        d.start(Some(SeqNumber(u32::MAX - 3))); // crosses 2^32 on the way
        let r = rec(23, 3000);
        let (a, b) = r.split_at(1000);
        let s0 = SeqNumber(u32::MAX - 3);
        assert!(d.on_segment(s0, a.len() as u32, a));
        // Retransmission of the first segment: nothing new.
        assert!(!d.on_segment(s0, a.len() as u32, a));
        // Body continuation: still application data.
        assert!(d.on_segment(s0.add(1000), b.len() as u32, b));
        assert_eq!(d.hdr_len, 0);
        assert_eq!({ d.next }, s0.add(r.len() as u32));
    }

    #[test]
    fn metrics_tls_gap_resyncs_on_plausible_header_only() {
        let mut d = TlsDir::default();
        d.start(Some(SeqNumber(0)));
        let r1 = rec(23, 1000);
        assert!(d.on_segment(SeqNumber(0), 500, &r1[..500]));
        // Segment [500, 1005) lost; the next one starts mid-body: ignored.
        assert!(!d.on_segment(SeqNumber(2000), 100, &[0x55; 100]));
        assert_eq!(d.state, State::Lost);
        // A segment starting with a record header resyncs.
        let r2 = rec(23, 10);
        assert!(d.on_segment(SeqNumber(3000), r2.len() as u32, &r2));
        assert_eq!(d.state, State::Synced);
        assert_eq!({ d.next }, SeqNumber(3000 + r2.len() as u32));
    }

    #[test]
    fn metrics_tls_uncaptured_header_loses_sync() {
        let mut d = TlsDir::default();
        d.start(Some(SeqNumber(0)));
        // 100 bytes on the wire, only 2 captured: the header is cut.
        let r = rec(22, 95);
        assert!(!d.on_segment(SeqNumber(0), 100, &r[..2]));
        assert_eq!(d.state, State::Lost);
    }

    #[test]
    fn metrics_tls_detection() {
        assert!(looks_like_client_hello(&rec(22, 4)));
        assert!(!looks_like_client_hello(&rec(23, 4)));
        assert!(!looks_like_client_hello(b"GET / HTTP/1.1\r\n"));
        assert!(!looks_like_client_hello(&[22]));
    }
}
