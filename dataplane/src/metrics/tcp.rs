//! TCP metrics for one flow (`docs/spec/npm-metrics.md` §1–§3): handshake
//! RTT, server response time (plain or TLS), retransmissions by kind,
//! out-of-order segments, keep-alives and duplicate ACKs, and the
//! receive-window events zero window and window full (Wireshark's
//! definitions, `retrans.rs`); the TCP flags seen per direction; and it
//! drives the flow's timestamp RTT (`tsrtt`), whose state lives in a
//! column of its own and is handed in per segment.
//!
//! The tracker is stored in the flow table's TCP column, one per TCP flow,
//! so it holds no heap data and stays at most [`TCP_TRACKER_MAX_BYTES`]
//! (checked at compile time); it never allocates and is branch-light per
//! packet. Times are kept
//! in ns and rounded to µs once, at export.

use super::handshake::Handshake;
use super::retrans::{Class, DEFAULT_OOO_THRESHOLD_NS, DirSeq, Segment, note_window_scale};
use super::seq::SeqNumber;
use super::srt::{SrtStats, Turn};
use super::tls::{TlsDir, looks_like_client_hello};
use super::tsrtt::{TsRtt, TsRttWorker};
use crate::flow::record::{Dir, DirStats, FlowRecord};
use crate::parse::{TcpFlags, TcpMeta};
use crate::time::{Timestamp, ns_to_us};

/// Upper bound on `size_of::<TcpTracker>()`, enforced below: 224 bytes on
/// 64-bit targets (handshake 40, sequence state 2 × 32, counters 2 × 32,
/// TLS record state 2 × 10, request/response turn 8, SRT statistics 24,
/// TLS decision 1, timestamp-option flags 1, TCP flags 2 × 1). With the
/// flow table's closing-list place it fills the table's 240-byte TCP
/// state exactly; a field more is 8 bytes more for every TCP flow.
pub const TCP_TRACKER_MAX_BYTES: usize = 224;
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

/// Which directions carried the timestamp option (`TS_*`) or segments
/// without it (`PLAIN_*`, RSTs aside: RFC 7323 §3.2 lets them go without),
/// whether the flow's [`TsRtt`] column entry is live, and whether the flow
/// was counted as one-sided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TsUse(u8);

impl TsUse {
    const LIVE: u8 = 1 << 4;
    const ONE_SIDED: u8 = 1 << 5;

    fn ts(d: Dir) -> u8 {
        1 << d.index()
    }

    fn plain(d: Dir) -> u8 {
        1 << (2 + d.index())
    }

    fn has(self, f: u8) -> bool {
        self.0 & f != 0
    }

    /// One side carries the option and the other sent segments without it
    /// and never with it.
    fn one_sided(self) -> bool {
        [Dir::C2S, Dir::S2C].into_iter().any(|d| {
            self.has(Self::ts(d))
                && self.has(Self::plain(d.reverse()))
                && !self.has(Self::ts(d.reverse()))
        })
    }
}

/// What a segment needs for timestamp RTT: the flow's state and the
/// worker's statistics. `None` when the feature is off.
pub struct TsCtx<'a> {
    pub flow: &'a mut TsRtt,
    pub worker: &'a mut TsRttWorker,
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
    ts: TsUse,
    /// TCP flags seen per direction this interval (kept with NPM off too:
    /// the flow table notes them for every segment).
    flags: [u8; 2],
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
        tsrtt: Option<TsCtx<'_>>,
    ) {
        if let Some(ctx) = tsrtt {
            self.on_timestamp(dir, tcp, ts, ctx);
        }
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

    /// Timestamp RTT: the option's values to the flow's [`TsRtt`], and the
    /// one-sided check (only when a direction's use of the option is new:
    /// after a flow's first few segments, never).
    #[inline(always)]
    fn on_timestamp(&mut self, dir: Dir, tcp: &TcpMeta, ts: Timestamp, ctx: TsCtx<'_>) {
        match tcp.options.timestamp {
            Some((tsval, tsecr)) => {
                let want = TsUse::ts(dir) | TsUse::LIVE;
                if self.ts.0 & want != want {
                    self.ts_first(dir, ts, ctx.flow, ctx.worker);
                }
                // TSecr is meaningful with ACK only (RFC 7323 §3.2), and
                // only echoes something if the other side uses the option.
                let rev_plain = self.ts.0
                    & (TsUse::plain(dir.reverse()) | TsUse::ts(dir.reverse()))
                    == TsUse::plain(dir.reverse());
                let echo = (tcp.flags.contains(TcpFlags::ACK) && !rev_plain).then_some(tsecr);
                ctx.flow.on_segment(dir, tsval, echo, ts, ctx.worker);
            }
            None if !tcp.flags.contains(TcpFlags::RST) && !self.ts.has(TsUse::plain(dir)) => {
                self.ts.0 |= TsUse::plain(dir);
                self.check_one_sided(ctx.worker);
            }
            None => {}
        }
    }

    /// The first segment with the option in `dir` (and, for the flow's
    /// first, the start of its [`TsRtt`] entry).
    #[cold]
    #[inline(never)]
    fn ts_first(&mut self, dir: Dir, ts: Timestamp, flow: &mut TsRtt, w: &mut TsRttWorker) {
        self.ts.0 |= TsUse::ts(dir);
        if !self.ts.has(TsUse::LIVE) {
            self.ts.0 |= TsUse::LIVE;
            flow.start(ts);
        }
        self.check_one_sided(w);
    }

    fn check_one_sided(&mut self, w: &mut TsRttWorker) {
        if !self.ts.has(TsUse::ONE_SIDED) && self.ts.one_sided() {
            self.ts.0 |= TsUse::ONE_SIDED;
            w.counters.one_sided_flows += 1;
        }
    }

    /// Notes a segment's TCP flags in `dir` (with or without NPM).
    #[inline]
    pub fn note_flags(&mut self, dir: Dir, flags: TcpFlags) {
        self.flags[dir.index()] |= flags.bits();
    }

    /// TCP flags seen this interval, client to server and back.
    pub fn flags(&self) -> [u8; 2] {
        self.flags
    }

    /// A new interval for the flags (with or without NPM).
    pub fn reset_flags(&mut self) {
        self.flags = [0; 2];
    }

    /// True once a segment of the flow carried the timestamp option: its
    /// [`TsRtt`] column entry is in use.
    pub fn ts_live(&self) -> bool {
        self.ts.has(TsUse::LIVE)
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

    /// Writes this interval's NPM fields and per-direction counters; `ts`
    /// is the flow's timestamp-RTT entry when the feature is on.
    pub fn fill(&self, rec: &mut FlowRecord, ts: Option<&TsRtt>) {
        let npm = &mut rec.npm;
        npm.server_net_us = self.hs.server_net_ns().map(u32_us);
        npm.client_net_us = self.hs.client_net_ns().map(u32_us);
        npm.rtt_us = self.hs.rtt_ns().map(u32_us);
        npm.tls = self.proto == Proto::Tls;
        self.srt.fill(npm);
        self.counts[Dir::C2S.index()].fill(&mut rec.c2s);
        self.counts[Dir::S2C.index()].fill(&mut rec.s2c);
        npm.ts_rtt = ts.filter(|_| self.ts_live()).map(TsRtt::record);
    }

    /// New interval after an active-timeout record: counts and SRT
    /// statistics restart; handshake times, sequence state, the pending
    /// request and TLS record position carry over.
    pub fn reset_interval(&mut self, ts: Option<&mut TsRtt>) {
        self.counts = Default::default();
        self.srt.reset();
        if let Some(t) = ts.filter(|_| self.ts_live()) {
            t.reset_interval();
        }
    }
}

#[cfg(test)]
#[path = "tcp_tests.rs"]
mod tests;
