//! TCP metrics for one flow (`docs/spec/npm-metrics.md` §1–§3): handshake
//! RTT, server response time (plain or TLS), retransmissions by kind,
//! out-of-order segments, keep-alives and duplicate ACKs, and the
//! receive-window events zero window and window full (Wireshark's
//! definitions, `retrans.rs`); the TCP flags seen per direction; and it
//! drives the flow's timestamp RTT (`tsrtt`), whose state lives in a
//! column of its own and is handed in per segment.
//!
//! The state is split by how often it is touched: [`TcpHot`] (64 bytes:
//! both directions' sequence state, the pending request, flags, the TLS
//! and timestamp decisions) is what every segment of an established flow
//! reads or writes, and the flow table keeps it in the flow's hot cache
//! line; [`TcpCold`] (handshake, event counters, SRT statistics, TLS
//! record state, duplicate-ACK times) is touched only by the segments that
//! need it (handshake segments, a retransmission or other event, the first
//! response of a turn, TLS data) and lives in the flow table's cold slab.
//! Every access to the cold part goes through an out-of-line function, so
//! the compiler cannot hoist a load of it into the common path. Neither
//! holds heap data; nothing allocates; times are kept in ns and rounded to
//! µs once, at export.

use super::handshake::Handshake;
use super::retrans::{
    Class, DEFAULT_OOO_THRESHOLD_NS, DirSeq, Outcome, Segment, SeqRare, note_window_scale,
};
use super::seq::SeqNumber;
use super::srt::{SrtStats, Turn};
use super::tls::{TlsDir, looks_like_client_hello};
use super::tsrtt::{TsRtt, TsRttWorker};
use crate::parse::{TcpFlags, TcpMeta};
use crate::record::{Dir, DirStats, FlowRecord};
use crate::time::{Timestamp, ns_to_us};

/// The hot part's size: one cache line, with the flow entry's first line
/// the whole of what an ordinary segment touches.
pub const TCP_HOT_BYTES: usize = 64;
const _: () = assert!(size_of::<TcpHot>() == TCP_HOT_BYTES);
/// The cold part's size (handshake 40, duplicate-ACK times 16, counters
/// 2 × 32, TLS record state 2 × 10, SRT statistics 24): a field more is
/// that much more for every TCP flow.
pub const TCP_COLD_BYTES: usize = 168;
const _: () = assert!(size_of::<TcpCold>() == TCP_COLD_BYTES);

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

/// What every segment of a TCP flow reads or writes (64 bytes). `Dir` is
/// relative to the flow's client (the SYN sender, or the flow table's
/// guess for a flow picked up mid-stream).
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct TcpHot {
    /// Sequence state by direction.
    seq: [DirSeq; 2],
    /// The pending request of the current turn (SRT).
    turn: Turn,
    /// TCP flags seen per direction this interval (kept with NPM off too:
    /// the flow table notes them for every segment).
    flags: [u8; 2],
    ts: TsUse,
    proto: Proto,
    /// The handshake ACK was seen: no later ACK changes the handshake, so
    /// ordinary segments leave [`TcpCold`] alone.
    hs_done: bool,
}

/// What only some segments of a TCP flow touch (168 bytes): the
/// handshake (SYN, SYN+ACK, the handshake ACK), the event counters and
/// duplicate-ACK times (retransmissions and the other classified events),
/// the SRT statistics (the first response of a turn) and the TLS record
/// state (segments with data of a TLS flow).
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct TcpCold {
    hs: Handshake,
    srt: SrtStats,
    /// When each direction sent its last duplicate ACK (ns).
    dupack_ns: [u64; 2],
    counts: [Counts; 2],
    tls: [TlsDir; 2],
}

/// A TCP flow's whole NPM state in one place, for code that owns both
/// parts (the tests); the flow table keeps the two apart.
#[derive(Clone, Debug, Default)]
pub struct TcpTracker {
    pub hot: TcpHot,
    pub cold: TcpCold,
}

impl TcpTracker {
    /// [`TcpHot::on_segment`] on both parts.
    pub fn on_segment(
        &mut self,
        dir: Dir,
        tcp: &TcpMeta,
        payload_len: u32,
        payload: &[u8],
        ts: Timestamp,
        tsrtt: Option<TsCtx<'_>>,
    ) {
        self.hot
            .on_segment(&mut self.cold, dir, tcp, payload_len, payload, ts, tsrtt);
    }

    /// [`TcpHot::fill`] from both parts.
    pub fn fill(&self, rec: &mut FlowRecord, ts: Option<&TsRtt>) {
        self.hot.fill(&self.cold, rec, ts);
    }

    /// [`TcpHot::reset_interval`] on both parts.
    pub fn reset_interval(&mut self, ts: Option<&mut TsRtt>) {
        self.hot.reset_interval(&mut self.cold, ts);
    }
}

impl TcpCold {
    /// The handshake's server network time (`t_snt`), ns (for the L7
    /// parsers' HTTP response times; out of line like every other read of
    /// the cold part).
    #[inline(never)]
    pub fn server_net_ns(&self) -> Option<u64> {
        self.hs.server_net_ns()
    }
}

/// The rarely needed inputs of sequence classification, from the cold
/// part, for segments travelling in `dir`.
struct Rare<'a> {
    cold: &'a mut TcpCold,
    dir: Dir,
}

impl SeqRare for Rare<'_> {
    fn threshold_ns(&self) -> u64 {
        self.cold.hs.rtt_ns().unwrap_or(DEFAULT_OOO_THRESHOLD_NS)
    }

    fn rev_dupack_ns(&self) -> u64 {
        self.cold.dupack_ns[self.dir.reverse().index()]
    }

    fn set_dupack_ns(&mut self, ts_ns: u64) {
        set_dupack(self.cold, self.dir, ts_ns);
    }
}

#[cold]
#[inline(never)]
fn set_dupack(cold: &mut TcpCold, dir: Dir, ts_ns: u64) {
    cold.dupack_ns[dir.index()] = ts_ns;
}

/// The handshake's part of a segment: a SYN or SYN+ACK, or a client ACK
/// before the handshake is done.
#[cold]
#[inline(never)]
fn handshake(cold: &mut TcpCold, dir: Dir, f: TcpFlags, ts: Timestamp) -> bool {
    match dir {
        Dir::C2S if f.is_syn_only() => cold.hs.on_syn(ts),
        Dir::S2C if f.is_syn_ack() => cold.hs.on_synack(ts),
        Dir::C2S if f.contains(TcpFlags::ACK) && !f.intersects(TcpFlags::SYN | TcpFlags::RST) => {
            cold.hs.on_client_ack(ts)
        }
        _ => {}
    }
    cold.hs.done()
}

/// Counts a segment's events in `dir` (only called when there is one).
#[cold]
#[inline(never)]
fn count(cold: &mut TcpCold, dir: Dir, out: &Outcome) {
    let c = &mut cold.counts[dir.index()];
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
}

/// Starts TLS record tracking on the client's first payload.
#[cold]
#[inline(never)]
fn tls_start(cold: &mut TcpCold, seq: SeqNumber) {
    cold.tls[Dir::C2S.index()].start(Some(seq));
    cold.tls[Dir::S2C.index()].start(None);
}

/// A TLS flow's data segment through its direction's record tracker:
/// whether it carried application data.
#[inline(never)]
fn tls_segment(cold: &mut TcpCold, dir: Dir, seq: SeqNumber, len: u32, payload: &[u8]) -> bool {
    cold.tls[dir.index()].on_segment(seq, len, payload)
}

/// One measured turn: `Δt_rr` less the server network time (§2).
#[inline(never)]
fn srt_sample(cold: &mut TcpCold, rr_ns: u64) {
    // t_snt = 0 when it was not measured (§2 step 1).
    let snt = cold.hs.server_net_ns().unwrap_or(0);
    cold.srt.add(rr_ns.saturating_sub(snt));
}

#[inline]
fn u32_us(ns: u64) -> u32 {
    u32::try_from(ns_to_us(ns)).unwrap_or(u32::MAX)
}

impl TcpHot {
    /// Feeds one segment; `cold` is touched only when the segment needs
    /// it. `payload_len` is the on-wire TCP payload length; `payload` the
    /// captured bytes (possibly fewer, snaplen), used only to recognise TLS
    /// records.
    #[inline]
    #[expect(
        clippy::too_many_arguments,
        reason = "the segment's fields, its time and the flow's two parts"
    )]
    pub fn on_segment(
        &mut self,
        cold: &mut TcpCold,
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
        // Only SYNs, SYN+ACKs and the client's ACKs until the handshake
        // ACK change the handshake (`Handshake`): after it, a client ACK
        // is ignored there, so it need not be looked at.
        if f.contains(TcpFlags::SYN) || (dir == Dir::C2S && !self.hs_done) {
            self.hs_done = handshake(cold, dir, f, ts);
        }

        let seg = Segment {
            seq: SeqNumber(tcp.seq),
            ack: SeqNumber(tcp.ack),
            flags: f,
            window: tcp.window,
            data_len: payload_len,
            ts_ns: ts.as_nanos(),
        };
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
        let out = fwd.on_segment(rev, &seg, &mut Rare { cold, dir });
        if out.class != Class::Normal || out.dup_ack || out.zero_window || out.window_full {
            count(cold, dir, &out);
        }

        // A keep-alive's 0/1 byte is not application data.
        if payload_len > 0 && out.class != Class::KeepAlive {
            self.on_data(cold, dir, seg.seq, payload_len, payload, seg.ts_ns);
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

    /// Whether a segment in `dir` with these flags and `payload_len` bytes
    /// of data will reach the cold part, as far as the hot part tells
    /// before the segment is classified: a SYN, FIN or RST (handshake,
    /// closing), a client segment before the handshake ACK, and data that
    /// may be a response, a TLS record or the client's first payload. For
    /// a prefetch: events (a retransmission, a duplicate ACK) reach it too,
    /// unannounced.
    #[inline]
    pub fn wants_cold(&self, dir: Dir, tcp: &TcpMeta, payload_len: u32) -> bool {
        let f = tcp.flags;
        f.intersects(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST)
            || (dir == Dir::C2S && !self.hs_done)
            || (payload_len > 0
                && match self.proto {
                    Proto::Tls => true,
                    Proto::Undecided => dir == Dir::C2S,
                    Proto::Plain => dir == Dir::S2C && self.turn.pending(),
                })
    }

    /// Notes a segment's TCP flags in `dir` (with or without NPM).
    #[inline]
    pub fn note_flags(&mut self, dir: Dir, flags: TcpFlags) {
        self.flags[dir.index()] |= flags.bits();
    }

    /// The sequence number `dir`'s next byte is expected at (from its SYN
    /// or earlier segments), before the segment now being accounted: the
    /// L7 parsers tell a segment that came after a hole by it.
    #[inline]
    pub fn expected(&self, dir: Dir) -> Option<u32> {
        self.seq[dir.index()].expected().map(|s| s.0)
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
    fn on_data(
        &mut self,
        cold: &mut TcpCold,
        dir: Dir,
        seq: SeqNumber,
        len: u32,
        payload: &[u8],
        ts_ns: u64,
    ) {
        if self.proto == Proto::Undecided && dir == Dir::C2S {
            if looks_like_client_hello(payload) {
                self.proto = Proto::Tls;
                tls_start(cold, seq);
            } else {
                self.proto = Proto::Plain;
            }
        }
        if self.proto == Proto::Tls && !tls_segment(cold, dir, seq, len, payload) {
            return;
        }
        match dir {
            Dir::C2S => self.turn.request(ts_ns),
            Dir::S2C => {
                if let Some(rr) = self.turn.response(ts_ns) {
                    srt_sample(cold, rr);
                }
            }
        }
    }

    /// Writes this interval's NPM fields and per-direction counters; `ts`
    /// is the flow's timestamp-RTT entry when the feature is on.
    pub fn fill(&self, cold: &TcpCold, rec: &mut FlowRecord, ts: Option<&TsRtt>) {
        let npm = &mut rec.npm;
        npm.server_net_us = cold.hs.server_net_ns().map(u32_us);
        npm.client_net_us = cold.hs.client_net_ns().map(u32_us);
        npm.rtt_us = cold.hs.rtt_ns().map(u32_us);
        npm.tls = self.proto == Proto::Tls;
        cold.srt.fill(npm);
        cold.counts[Dir::C2S.index()].fill(&mut rec.c2s);
        cold.counts[Dir::S2C.index()].fill(&mut rec.s2c);
        npm.ts_rtt = ts.filter(|_| self.ts_live()).map(TsRtt::record);
    }

    /// New interval after an active-timeout record: counts and SRT
    /// statistics restart; handshake times, sequence state, the pending
    /// request and TLS record position carry over.
    pub fn reset_interval(&mut self, cold: &mut TcpCold, ts: Option<&mut TsRtt>) {
        cold.counts = Default::default();
        cold.srt.reset();
        if let Some(t) = ts.filter(|_| self.ts_live()) {
            t.reset_interval();
        }
    }
}

#[cfg(test)]
#[path = "tcp_tests.rs"]
mod tests;
