//! TCP metrics for one flow (`shared/spec/npm-metrics.md` §1–§3): handshake
//! RTT, server response time (plain or TLS), retransmissions by kind,
//! out-of-order segments, keep-alives and duplicate ACKs, and the
//! receive-window events zero window and window full (Wireshark's
//! definitions, `retrans.rs`).
//!
//! The tracker is stored inline in every flow-table entry, so it holds no
//! heap data and stays at most [`TCP_TRACKER_MAX_BYTES`] (checked at compile
//! time); it never allocates and is branch-light per packet. Times are kept
//! in ns and rounded to µs once, at export.

use super::handshake::Handshake;
use super::retrans::{Class, DEFAULT_OOO_THRESHOLD_NS, DirSeq, Segment, note_window_scale};
use super::seq::SeqNumber;
use super::srt::{SrtStats, Turn};
use super::tls::{TlsDir, looks_like_client_hello};
use crate::flow::record::{Dir, DirStats, FlowRecord};
use crate::parse::{TcpFlags, TcpMeta};
use crate::time::{Timestamp, ns_to_us};

/// Upper bound on `size_of::<TcpTracker>()`, enforced below: 240 bytes on
/// 64-bit targets (handshake 40, sequence state 2 × 32, counters 2 × 32,
/// TLS record state 2 × 12, request/response turn 16, SRT statistics 24,
/// TLS decision 1, padded to 8).
pub const TCP_TRACKER_MAX_BYTES: usize = 240;
const _: () = assert!(size_of::<TcpTracker>() <= TCP_TRACKER_MAX_BYTES);

/// Per-interval counters of one direction (32 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    fast: u32,
    spurious: u32,
    other: u32,
    ooo: u32,
    keepalive: u32,
    dup_ack: u32,
    zero_window: u32,
    window_full: u32,
}

impl Counts {
    fn fill(&self, d: &mut DirStats) {
        d.retrans_fast = self.fast;
        d.retrans_spurious = self.spurious;
        d.retrans_other = self.other;
        d.retrans = self
            .fast
            .saturating_add(self.spurious)
            .saturating_add(self.other);
        d.ooo = self.ooo;
        d.keepalive = self.keepalive;
        d.dup_ack = self.dup_ack;
        d.zero_window = self.zero_window;
        d.window_full = self.window_full;
    }
}

/// TLS decision, made on the first client payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Proto {
    #[default]
    Undecided,
    Plain,
    Tls,
}

/// NPM state of one TCP flow. `Dir` is relative to the flow's client (the
/// SYN sender, or the flow table's guess for a flow picked up mid-stream).
#[derive(Clone, Debug, Default)]
pub struct TcpTracker {
    hs: Handshake,
    seq: [DirSeq; 2],
    counts: [Counts; 2],
    tls: [TlsDir; 2],
    turn: Turn,
    srt: SrtStats,
    proto: Proto,
}

#[inline]
fn u32_us(ns: u64) -> u32 {
    u32::try_from(ns_to_us(ns)).unwrap_or(u32::MAX)
}

impl TcpTracker {
    /// Feeds one segment. `payload_len` is the on-wire TCP payload length;
    /// `payload` the captured bytes (possibly fewer, snaplen), used only to
    /// recognise TLS records.
    #[inline]
    pub fn on_segment(
        &mut self,
        dir: Dir,
        tcp: &TcpMeta,
        payload_len: u32,
        payload: &[u8],
        ts: Timestamp,
    ) {
        let f = tcp.flags;
        match dir {
            Dir::C2S if f.is_syn_only() => self.hs.on_syn(ts),
            Dir::S2C if f.is_syn_ack() => self.hs.on_synack(ts),
            Dir::C2S
                if f.contains(TcpFlags::ACK) && !f.intersects(TcpFlags::SYN | TcpFlags::RST) =>
            {
                self.hs.on_client_ack(ts)
            }
            _ => {}
        }

        let seg = Segment {
            seq: SeqNumber(tcp.seq),
            ack: SeqNumber(tcp.ack),
            flags: f,
            window: tcp.window,
            data_len: payload_len,
            ts_ns: ts.as_nanos(),
        };
        let threshold = self.hs.rtt_ns().unwrap_or(DEFAULT_OOO_THRESHOLD_NS);
        let [c2s, s2c] = &mut self.seq;
        let (fwd, rev) = match dir {
            Dir::C2S => (c2s, s2c),
            Dir::S2C => (s2c, c2s),
        };
        if f.contains(TcpFlags::SYN) {
            note_window_scale(
                fwd,
                rev,
                f.contains(TcpFlags::ACK),
                tcp.options.window_scale,
            );
        }
        let out = fwd.on_segment(rev, &seg, threshold);

        let c = &mut self.counts[dir.index()];
        let slot = match out.class {
            Class::Normal => None,
            Class::KeepAlive => Some(&mut c.keepalive),
            Class::FastRetrans => Some(&mut c.fast),
            Class::OutOfOrder => Some(&mut c.ooo),
            Class::SpuriousRetrans => Some(&mut c.spurious),
            Class::Retrans => Some(&mut c.other),
        };
        if let Some(n) = slot {
            *n = n.saturating_add(1);
        }
        c.dup_ack = c.dup_ack.saturating_add(u32::from(out.dup_ack));
        c.zero_window = c.zero_window.saturating_add(u32::from(out.zero_window));
        c.window_full = c.window_full.saturating_add(u32::from(out.window_full));

        // A keep-alive's 0/1 byte is not application data.
        if payload_len > 0 && out.class != Class::KeepAlive {
            self.on_data(dir, seg.seq, payload_len, payload, seg.ts_ns);
        }
    }

    /// SRT turn-taking (§2) on a segment with application data.
    fn on_data(&mut self, dir: Dir, seq: SeqNumber, len: u32, payload: &[u8], ts_ns: u64) {
        if self.proto == Proto::Undecided && dir == Dir::C2S {
            if looks_like_client_hello(payload) {
                self.proto = Proto::Tls;
                self.tls[Dir::C2S.index()].start(Some(seq));
                self.tls[Dir::S2C.index()].start(None);
            } else {
                self.proto = Proto::Plain;
            }
        }
        if self.proto == Proto::Tls && !self.tls[dir.index()].on_segment(seq, len, payload) {
            return;
        }
        match dir {
            Dir::C2S => self.turn.request(ts_ns),
            Dir::S2C => {
                if let Some(rr) = self.turn.response(ts_ns) {
                    // t_snt = 0 when it was not measured (§2 step 1).
                    let snt = self.hs.server_net_ns().unwrap_or(0);
                    self.srt.add(rr.saturating_sub(snt));
                }
            }
        }
    }

    /// Writes this interval's NPM fields and per-direction counters.
    pub fn fill(&self, rec: &mut FlowRecord) {
        let npm = &mut rec.npm;
        npm.server_net_us = self.hs.server_net_ns().map(u32_us);
        npm.client_net_us = self.hs.client_net_ns().map(u32_us);
        npm.rtt_us = self.hs.rtt_ns().map(u32_us);
        npm.tls = self.proto == Proto::Tls;
        self.srt.fill(npm);
        self.counts[Dir::C2S.index()].fill(&mut rec.c2s);
        self.counts[Dir::S2C.index()].fill(&mut rec.s2c);
    }

    /// New interval after an active-timeout record: counts and SRT
    /// statistics restart; handshake times, sequence state, the pending
    /// request and TLS record position carry over.
    pub fn reset_interval(&mut self) {
        self.counts = Default::default();
        self.srt.reset();
    }
}

#[cfg(test)]
#[path = "tcp_tests.rs"]
mod tests;
