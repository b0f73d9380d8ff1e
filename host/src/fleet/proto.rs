//! The agent → manager stream: length-prefixed frames over one TCP
//! connection, sent by the agent only (the manager never answers, so an
//! agent never waits on it). No I/O here: frames to bytes and back.
//!
//! ```text
//! frame  = length:u32 (big-endian; bytes after it, at most MAX_FRAME)
//!          kind:u8  body
//! HELLO  (1) = JSON Hello          first frame of every connection
//! EVENTS (2) = count:u32 (LE), count × 72-byte StackEvent (LE fields)
//! STATS  (3) = JSON AgentStats     about once a second
//! ```
//!
//! Events travel as the kernel wrote them (after in-kernel sampling), one
//! field at a time in little-endian order, so the format does not depend
//! on either end's struct layout or byte order.

use serde::{Deserialize, Serialize};
use xdprobe_common::host::StackEvent;

/// Version the agent announces; the manager refuses others.
pub const VERSION: u32 = 1;
/// Largest frame body accepted (a bigger length is a broken stream).
pub const MAX_FRAME: usize = 1 << 20;
/// Bytes of one event on the wire.
pub const EVENT_LEN: usize = 72;
/// Events per EVENTS frame the agent sends at most.
pub const MAX_EVENTS_PER_FRAME: usize = 4096;

const KIND_HELLO: u8 = 1;
const KIND_EVENTS: u8 = 2;
const KIND_STATS: u8 = 3;

/// Who is speaking: the first frame of each connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    /// The agent's name, unique among the manager's agents (default: the
    /// host name). A new connection under a known name is that agent again.
    pub agent: String,
    /// Random per agent process: a new value is a restarted agent.
    pub instance: u64,
    /// The sampling grid the agent's programs use (0: none).
    pub sample_bytes: u32,
    /// Layer keys the agent observes (`sock_tx` …).
    pub layers: Vec<String>,
    /// Where its clock-sync responder answers (`IP:PORT`), if it runs one.
    pub sync: Option<String>,
}

/// The agent's own counters, sent periodically.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentStats {
    /// Events handed to the forwarder.
    pub events: u64,
    /// Events the manager's connection took.
    pub sent: u64,
    /// Dropped because the forwarder's buffer was full (oldest first).
    pub dropped_buffer: u64,
    /// Dropped because the hand-off from the probe loop was full.
    pub dropped_channel: u64,
    /// Lost in a frame the connection broke under.
    pub dropped_connection: u64,
    /// Events waiting in the buffer now.
    pub buffered: u64,
    /// Connections made.
    pub connects: u64,
    /// Events the kernel could not write (its ring buffer was full).
    pub kernel_ringbuf_full: u64,
}

impl AgentStats {
    /// Everything dropped, for whatever reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_buffer + self.dropped_channel + self.dropped_connection
    }
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    Hello(Hello),
    Events(Vec<StackEvent>),
    Stats(AgentStats),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    #[error("frame of {0} bytes (over the limit)")]
    TooLong(usize),
    #[error("empty frame")]
    Empty,
    #[error("unknown frame kind {0}")]
    Kind(u8),
    #[error("events frame: {0}")]
    Events(&'static str),
    #[error("bad JSON in a {kind} frame: {msg}")]
    Json { kind: &'static str, msg: String },
}

fn frame(kind: u8, body_len: usize, out: &mut Vec<u8>) -> usize {
    let len = u32::try_from(body_len + 1).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.push(kind);
    out.len()
}

fn json_frame<T: Serialize>(kind: u8, v: &T, out: &mut Vec<u8>) {
    let body = serde_json::to_vec(v).unwrap_or_default();
    frame(kind, body.len(), out);
    out.extend_from_slice(&body);
}

pub fn encode_hello(h: &Hello, out: &mut Vec<u8>) {
    json_frame(KIND_HELLO, h, out);
}

pub fn encode_stats(s: &AgentStats, out: &mut Vec<u8>) {
    json_frame(KIND_STATS, s, out);
}

/// Appends one EVENTS frame holding `evs` (at most
/// [`MAX_EVENTS_PER_FRAME`] of them are taken; returns how many).
pub fn encode_events<'a>(
    evs: impl IntoIterator<Item = &'a StackEvent>,
    out: &mut Vec<u8>,
) -> usize {
    let start = out.len();
    frame(KIND_EVENTS, 0, out);
    out.extend_from_slice(&[0; 4]);
    let mut n = 0usize;
    for ev in evs.into_iter().take(MAX_EVENTS_PER_FRAME) {
        put_event(ev, out);
        n += 1;
    }
    let body = out.len() - start - 4;
    out[start..start + 4].copy_from_slice(&u32::try_from(body).unwrap_or(0).to_be_bytes());
    out[start + 5..start + 9].copy_from_slice(&u32::try_from(n).unwrap_or(0).to_le_bytes());
    n
}

fn put_event(e: &StackEvent, out: &mut Vec<u8>) {
    out.extend_from_slice(&e.ts_ns.to_le_bytes());
    out.extend_from_slice(&e.seq.to_le_bytes());
    out.extend_from_slice(&e.end.to_le_bytes());
    out.extend_from_slice(&e.netns.to_le_bytes());
    out.extend_from_slice(&e.tgid.to_le_bytes());
    out.push(e.layer);
    out.push(e.family);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&e.sport.to_le_bytes());
    out.extend_from_slice(&e.dport.to_le_bytes());
    out.extend_from_slice(&e.saddr);
    out.extend_from_slice(&e.daddr);
    out.extend_from_slice(&e.ifindex.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
}

/// Little-endian reads from a slice whose length the caller checked.
struct Rd<'a>(&'a [u8]);

impl Rd<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.0[..N]);
        self.0 = &self.0[N..];
        a
    }
}

fn get_event(b: &[u8]) -> StackEvent {
    let mut r = Rd(b);
    let ts_ns = u64::from_le_bytes(r.take());
    let seq = u32::from_le_bytes(r.take());
    let end = u32::from_le_bytes(r.take());
    let netns = u32::from_le_bytes(r.take());
    let tgid = u32::from_le_bytes(r.take());
    let [layer, family, _, _] = r.take::<4>();
    let sport = u16::from_le_bytes(r.take());
    let dport = u16::from_le_bytes(r.take());
    let saddr = r.take::<16>();
    let daddr = r.take::<16>();
    let ifindex = u32::from_le_bytes(r.take());
    StackEvent {
        ts_ns,
        seq,
        end,
        netns,
        tgid,
        layer,
        family,
        _pad: 0,
        sport,
        dport,
        saddr,
        daddr,
        ifindex,
        _pad2: 0,
    }
}

fn decode_body(kind: u8, body: &[u8]) -> Result<Frame, ProtoError> {
    let json = |kind: &'static str| {
        move |e: serde_json::Error| ProtoError::Json {
            kind,
            msg: e.to_string(),
        }
    };
    match kind {
        KIND_HELLO => serde_json::from_slice(body)
            .map(Frame::Hello)
            .map_err(json("hello")),
        KIND_STATS => serde_json::from_slice(body)
            .map(Frame::Stats)
            .map_err(json("stats")),
        KIND_EVENTS => {
            let Some((n, rest)) = body.split_first_chunk::<4>() else {
                return Err(ProtoError::Events("no count"));
            };
            let n = u32::from_le_bytes(*n) as usize;
            if rest.len() != n * EVENT_LEN {
                return Err(ProtoError::Events("count and length disagree"));
            }
            Ok(Frame::Events(
                rest.chunks_exact(EVENT_LEN).map(get_event).collect(),
            ))
        }
        k => Err(ProtoError::Kind(k)),
    }
}

/// Largest HELLO accepted (the frame limit until one has come).
pub const MAX_HELLO: usize = 16 << 10;
/// A reader holding more than this once its frames are taken gives the
/// rest of its buffer back.
const KEEP_CAPACITY: usize = 64 << 10;

/// Reassembles frames from a byte stream read in arbitrary pieces. Holds
/// at most one frame's bytes plus what the last read brought, and a frame
/// longer than its limit is an error as soon as its length is read.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    pos: usize,
    limit: usize,
}

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader::with_limit(MAX_FRAME)
    }
}

impl FrameReader {
    /// A reader refusing frames over `limit` bytes (at most [`MAX_FRAME`]).
    pub fn with_limit(limit: usize) -> Self {
        FrameReader {
            buf: Vec::new(),
            pos: 0,
            limit: limit.min(MAX_FRAME),
        }
    }

    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(MAX_FRAME);
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 1 << 16 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes the reader would hold after [`push`](Self::push)ing `n` more
    /// (its allocation grows at most to that, exactly).
    pub fn would_hold(&self, n: usize) -> usize {
        self.held() + n
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed. An
    /// error means the stream is broken: drop the connection.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtoError> {
        let avail = &self.buf[self.pos..];
        let Some((len, rest)) = avail.split_first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len == 0 {
            return Err(ProtoError::Empty);
        }
        if len > self.limit + 1 {
            return Err(ProtoError::TooLong(len));
        }
        if rest.len() < len {
            // Room for exactly this frame, not a doubling past it.
            let want = 4 + len;
            if self.buf.capacity() - self.pos < want {
                self.buf.drain(..self.pos);
                self.pos = 0;
                self.buf.reserve_exact(want - self.buf.len());
            }
            return Ok(None);
        }
        let (kind, body) = (rest[0], &rest[1..len]);
        let f = decode_body(kind, body);
        self.pos += 4 + len;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            if self.buf.capacity() > KEEP_CAPACITY {
                self.buf.shrink_to(KEEP_CAPACITY);
            }
        }
        f.map(Some)
    }

    /// Bytes held (for a bound check by the caller).
    pub fn held(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Bytes allocated: what the reader costs.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(i: u32) -> StackEvent {
        StackEvent {
            ts_ns: 1_000_000_000 + u64::from(i),
            seq: 0xffff_fff0u32.wrapping_add(i * 100),
            end: 0xffff_fff0u32.wrapping_add(i * 100 + 100),
            netns: 4026531840,
            tgid: 77,
            layer: (i % 8 + 1) as u8,
            family: 10,
            sport: 40000,
            dport: 5201,
            saddr: [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            daddr: [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            ifindex: 3,
            ..StackEvent::default()
        }
    }

    #[test]
    fn frames_survive_any_split() {
        let hello = Hello {
            version: VERSION,
            agent: "web-1".into(),
            instance: 42,
            sample_bytes: 72_400,
            layers: vec!["sock_tx".into(), "dev_tx".into()],
            sync: Some("203.0.113.1:3190".into()),
        };
        let evs: Vec<StackEvent> = (0..300).map(ev).collect();
        let stats = AgentStats {
            events: 300,
            dropped_buffer: 5,
            ..AgentStats::default()
        };
        let mut bytes = Vec::new();
        encode_hello(&hello, &mut bytes);
        assert_eq!(encode_events(&evs, &mut bytes), 300);
        encode_stats(&stats, &mut bytes);
        for piece in [1usize, 3, 71, 1000, bytes.len()] {
            let mut r = FrameReader::default();
            let mut got = Vec::new();
            for chunk in bytes.chunks(piece) {
                r.push(chunk);
                while let Some(f) = r.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(
                got,
                vec![
                    Frame::Hello(hello.clone()),
                    Frame::Events(evs.clone()),
                    Frame::Stats(stats)
                ],
                "pieces of {piece}"
            );
            assert_eq!(r.held(), 0);
        }
    }

    #[test]
    fn one_frame_takes_a_bounded_number_of_events() {
        let evs: Vec<StackEvent> = (0..5000).map(ev).collect();
        let mut b = Vec::new();
        assert_eq!(encode_events(&evs, &mut b), MAX_EVENTS_PER_FRAME);
        assert!(b.len() <= MAX_FRAME);
    }

    #[test]
    fn broken_streams_are_errors_not_panics() {
        let mut r = FrameReader::default();
        r.push(&[0, 0, 0, 0]);
        assert_eq!(r.next_frame(), Err(ProtoError::Empty));
        let mut r = FrameReader::default();
        r.push(&[0x7f, 0, 0, 0]);
        assert!(matches!(r.next_frame(), Err(ProtoError::TooLong(_))));
        // A lower limit refuses at the length, before the body comes.
        let mut r = FrameReader::with_limit(MAX_HELLO);
        r.push(&[0, 0, 0x40, 2, 1]);
        assert!(matches!(r.next_frame(), Err(ProtoError::TooLong(_))));
        let mut r = FrameReader::default();
        r.push(&[0, 0, 0, 2, 9, 0]);
        assert_eq!(r.next_frame(), Err(ProtoError::Kind(9)));
        let mut r = FrameReader::default();
        r.push(&[0, 0, 0, 6, 2, 5, 0, 0, 0, 1]);
        assert!(matches!(r.next_frame(), Err(ProtoError::Events(_))));
        let mut r = FrameReader::default();
        r.push(&[0, 0, 0, 3, 1, b'{', b'x']);
        assert!(matches!(r.next_frame(), Err(ProtoError::Json { .. })));
        // Truncated: waits for more, does not fail.
        let mut r = FrameReader::default();
        r.push(&[0, 0, 0, 9, 2, 0]);
        assert_eq!(r.next_frame(), Ok(None));
    }
}
