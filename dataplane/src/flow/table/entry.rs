//! What the flow table stores per flow, by how often a packet needs it.
//!
//! - **Hot**: everything an ordinary packet of an established flow reads
//!   or writes. Every flow has a [`Head`], one 64-byte line: the compact
//!   key that confirms a candidate, the last packet time, the counters,
//!   the liveness, role and FIN bits, list membership. A TCP flow's hot
//!   entry ([`Hot2`]) is two adjacent lines, 128-byte aligned: the head and
//!   the TCP tracker's per-segment state ([`TcpHot`]: both directions'
//!   sequence state, the pending request, the TCP flags).
//! - **Cold**: what only some packets touch, in arrays beside the hot ones,
//!   at the same index: [`Cold`] (first packet time, the expiry lists'
//!   times and links, the interval number, the L7 handle) for every flow,
//!   and for a TCP flow [`TcpColdEntry`] (that, the close deadline and
//!   link, and the tracker's [`TcpCold`]: handshake, event counters, SRT,
//!   TLS). A DNS flow's tracker and an IPv6 flow's addresses are in
//!   columns of their own (`mem::Column`), reached from the head.

use super::super::key::CompactKey;
use super::super::key::Side;
use super::super::lru::{Link, ListId, bit};
use crate::metrics::tcp::{TcpCold, TcpHot};
use crate::record::Dir;
use crate::time::Timestamp;
use xdprobe_l7::Slot;

/// Per-direction counters kept in a flow (the rest of `DirStats` comes from
/// the metric trackers at export).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counters {
    pub packets: u64,
    pub bytes: u64,
}

/// Where a packet falls in its flow's interval, for the first packet time
/// (kept cold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arrival {
    /// The interval's first packet: it sets the first time.
    First,
    /// At or after the last packet: the first time stays.
    InOrder,
    /// Before the last packet (time going backwards): the first time may
    /// move back.
    Early,
}

/// Which transport state a flow has besides its head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    None,
    /// In the TCP slab ([`Hot2`], [`TcpColdEntry`]).
    Tcp,
    /// A DNS tracker in the DNS column, at `Head::side`.
    Dns,
}

// `Head::bits`.
const LIVE: u8 = 1;
const CLIENT_HI: u8 = 1 << 1;
const GUESSED: u8 = 1 << 2;
const FIN_C2S: u8 = 1 << 3;
/// A TCP flow without metrics: begun by a packet without a TCP header (a
/// non-first fragment), as the tracker is chosen from the first packet.
const NO_NPM: u8 = 1 << 5;
/// The flow's client-to-server payloads still go to the L7 parsers
/// (`table::l7`), << dir: both set when the flow is created with L7 on,
/// one cleared when the parsers need no more of that direction, both when
/// they need no more of the flow. Without it a packet touches no L7 state.
const L7_C2S: u8 = 1 << 6;
const L7_BOTH: u8 = L7_C2S | L7_C2S << 1;

/// The first (for most flows the only) hot line of a flow: 64 bytes,
/// everything a packet reads or writes but a TCP segment's tracker state.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct Head {
    pub key: CompactKey,
    /// Last packet of the current interval.
    pub last: Timestamp,
    pub dirs: [Counters; 2],
    /// `LIVE` (false once the flow ended and its slot is free: a stale
    /// candidate from `prepare` must not match it), `CLIENT_HI`, `GUESSED`,
    /// `FIN_C2S` << dir, `NO_NPM`, `L7_C2S` << dir.
    bits: u8,
    /// Which lists the flow is on (`lru::bit`); on the closing list means
    /// closing (FIN both ways or RST seen).
    pub on: u8,
    pub kind: Kind,
    pub tos: u8,
    /// Slot in the DNS column (`Kind::Dns`).
    pub side: u32,
}

pub(super) const HEAD_BYTES: usize = 64;
const _: () = assert!(size_of::<Head>() == HEAD_BYTES);

/// A flow without TCP state in the hot slab: its head alone, one line.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(super) struct Hot1 {
    pub head: Head,
}

/// A TCP flow's hot entry: two adjacent lines (one 128-byte block, which
/// the CPU's adjacent-line prefetch fetches together).
#[derive(Clone, Debug)]
#[repr(C, align(128))]
pub(super) struct Hot2 {
    pub head: Head,
    pub tcp: TcpHot,
}

const _: () = assert!(size_of::<Hot1>() == 64 && size_of::<Hot2>() == 128);

/// What every flow keeps apart from its hot line (56 bytes): read when the
/// flow is queued, expires or is reported, and by a packet only when it
/// starts an interval or arrives out of time order.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct Cold {
    /// First packet of the current interval.
    pub first: Timestamp,
    /// When the flow was (re)queued at the LRU tail. The LRU list is ordered
    /// by this, not by `last`: packets do not move a flow in the list (that
    /// would write two random neighbours per packet); expiry requeues a flow
    /// that saw packets since, as a CLOCK cache does.
    pub lru_at: Timestamp,
    /// Start of the current interval for the active timeout.
    pub anchor: Timestamp,
    /// On the LRU and active lists (a TCP flow's closing list link is in
    /// [`TcpColdEntry`]).
    pub links: [Link; 2],
    pub seq_in_flow: u32,
    /// The flow's handle into the L7 parsers (TLS, QUIC, HTTP, DNS
    /// fields; all zero until a payload is shown to them). Here, cold,
    /// so that application-layer state costs a packet that is not
    /// inspected nothing: only packets whose head says `l7_inspect`, and
    /// records, reach it (`table::l7`).
    pub l7: Slot,
}

pub(super) const COLD_BYTES: usize = 56;
const _: () = assert!(size_of::<Cold>() == COLD_BYTES);

/// A TCP flow's cold entry: the common part, the closing list's place, and
/// the tracker's cold part.
#[derive(Clone, Debug)]
#[repr(C)]
pub(super) struct TcpColdEntry {
    pub cold: Cold,
    pub close_deadline: Timestamp,
    pub closing: Link,
    pub tcp: TcpCold,
}

pub(super) const TCP_COLD_ENTRY_BYTES: usize = 240;
const _: () = assert!(size_of::<TcpColdEntry>() == TCP_COLD_ENTRY_BYTES);

impl Cold {
    pub fn new(ts: Timestamp, now: Timestamp) -> Cold {
        Cold {
            first: ts,
            lru_at: now,
            anchor: now,
            links: [Link::default(); 2],
            seq_in_flow: 0,
            l7: Slot::default(),
        }
    }
}

impl TcpColdEntry {
    pub fn new(cold: Cold) -> TcpColdEntry {
        TcpColdEntry {
            cold,
            close_deadline: Timestamp::ZERO,
            closing: Link::default(),
            tcp: TcpCold::default(),
        }
    }
}

impl Head {
    pub fn new(key: CompactKey, client: Side, guessed: bool, tos: u8, ts: Timestamp) -> Head {
        let mut bits = LIVE;
        if client == Side::Hi {
            bits |= CLIENT_HI;
        }
        if guessed {
            bits |= GUESSED;
        }
        Head {
            key,
            last: ts,
            dirs: [Counters::default(); 2],
            bits,
            on: 0,
            kind: Kind::None,
            tos,
            side: 0,
        }
    }

    #[inline]
    pub fn live(&self) -> bool {
        self.bits & LIVE != 0
    }

    pub fn set_dead(&mut self) {
        self.bits &= !LIVE;
        self.kind = Kind::None;
    }

    #[inline]
    pub fn client(&self) -> Side {
        if self.bits & CLIENT_HI != 0 {
            Side::Hi
        } else {
            Side::Lo
        }
    }

    /// This TCP flow's tracker runs (NPM on for the table, and the flow's
    /// first packet was a TCP segment).
    #[inline]
    pub fn npm(&self) -> bool {
        self.bits & NO_NPM == 0
    }

    pub fn set_no_npm(&mut self) {
        self.bits |= NO_NPM;
    }

    /// Whether `dir`'s payloads still go to the L7 parsers.
    #[inline]
    pub fn l7_inspect(&self, dir: Dir) -> bool {
        self.bits & L7_C2S << dir.index() != 0
    }

    /// Whether either direction's payloads still go to the L7 parsers.
    #[cfg(test)]
    pub fn l7_inspect_any(&self) -> bool {
        self.bits & L7_BOTH != 0
    }

    pub fn set_l7_inspect(&mut self) {
        self.bits |= L7_BOTH;
    }

    /// The L7 parsers need no more of this flow.
    pub fn clear_l7_inspect(&mut self) {
        self.bits &= !L7_BOTH;
    }

    /// The L7 parsers need no more of `dir`'s payloads.
    pub fn clear_l7_inspect_dir(&mut self, dir: Dir) {
        self.bits &= !(L7_C2S << dir.index());
    }

    pub fn guessed(&self) -> bool {
        self.bits & GUESSED != 0
    }

    #[inline]
    pub fn dir_of(&self, side: Side) -> Dir {
        if side == self.client() {
            Dir::C2S
        } else {
            Dir::S2C
        }
    }

    /// A FIN was seen in `dir`.
    #[inline]
    pub fn set_fin(&mut self, dir: Dir) {
        self.bits |= FIN_C2S << dir.index();
    }

    #[inline]
    pub fn fin_both(&self) -> bool {
        self.bits & (FIN_C2S | FIN_C2S << 1) == (FIN_C2S | FIN_C2S << 1)
    }

    /// FIN both ways or RST seen: lingering on the closing list.
    #[inline]
    pub fn closing(&self) -> bool {
        self.on & bit(ListId::Closing) != 0
    }

    /// Counts a packet of `bytes` sent from `side` at `ts`: its direction,
    /// and whether the first packet time (cold) needs a look.
    #[inline]
    pub fn account(&mut self, side: Side, bytes: u32, ts: Timestamp) -> (Dir, Arrival) {
        let dir = self.dir_of(side);
        let when = if self.packets() == 0 {
            self.last = ts;
            Arrival::First
        } else if ts >= self.last {
            self.last = ts;
            Arrival::InOrder
        } else {
            Arrival::Early
        };
        let c = &mut self.dirs[dir.index()];
        c.packets += 1;
        c.bytes += u64::from(bytes);
        (dir, when)
    }

    #[inline]
    pub fn packets(&self) -> u64 {
        self.dirs[0].packets + self.dirs[1].packets
    }
}
