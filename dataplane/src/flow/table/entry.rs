//! What the flow table stores per flow: a compact entry every flow has
//! (key, times, counters, list links), and the state only TCP flows need
//! in a column beside it (`mem::Column`), found through the entry. A UDP or
//! ICMP flow costs the entry alone; a DNS flow adds its 40-byte tracker
//! from a column of its own.

use super::super::key::{FlowKey, Side};
use super::super::lru::{LISTS, Link, Linked, ListId, ON_MASK};
use super::super::mem::Column;
use super::super::record::Dir;
use crate::metrics::dns::DnsTracker;
use crate::metrics::tcp::TcpTracker;
use crate::time::Timestamp;

/// Per-direction counters kept in a flow (the rest of `DirStats` comes from
/// the metric trackers and the TCP state at export).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counters {
    pub packets: u64,
    pub bytes: u64,
}

/// Which side column, if any, holds a flow's transport state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    None,
    Tcp,
    Dns,
}

// `Flow::bits`.
const LIVE: u8 = 1;
const CLIENT_HI: u8 = 1 << 1;
const GUESSED: u8 = 1 << 2;
const FIN_C2S: u8 = 1 << 3;
/// A TCP flow without metrics: begun by a packet without a TCP header (a
/// non-first fragment), as the tracker is chosen from the first packet.
const NO_NPM: u8 = 1 << 5;
/// The L7 parsers need no more of this flow's payloads (`flow::l7col`):
/// later packets leave the L7 column alone.
const L7_DONE: u8 = 1 << 6;

/// One flow's entry in the slab: 136 bytes, `repr(C)` with what every
/// packet reads first (the key to confirm a candidate, the liveness and
/// role bits, where the side state is) and the first packet time in the
/// first 64 bytes, the rest of the per-packet times and counters in the
/// next 56, and the list links (touched when a flow is queued or ends)
/// last.
#[derive(Clone, Debug)]
#[repr(C)]
pub(super) struct Flow {
    pub key: FlowKey,
    /// `LIVE` (false once the flow ended and its slot is free: a stale
    /// candidate from `prepare` must not match it), `CLIENT_HI`, `GUESSED`,
    /// `FIN_C2S` << dir, `NO_NPM`, `L7_DONE`.
    bits: u8,
    /// Which lists the flow is on (`lru::bit`); on the closing list means
    /// closing (FIN both ways or RST seen).
    pub on: u8,
    pub tos: u8,
    pub kind: Kind,
    pub seq_in_flow: u32,
    /// Slot in the TCP or DNS column, by `kind`.
    pub side: u32,
    /// Where this flow's index slot was when it was inserted, in index
    /// slots from the table's `hint_base` (`NO_HINT` if too far): only
    /// ever prefetched (a stale address after the index rehashed costs a
    /// useless prefetch, never a wrong read), so evicting the flow does
    /// not wait for the index (see `expiry::warm_next_victims`).
    pub index_hint: i32,
    /// First and last packet of the current interval.
    pub first: Timestamp,
    pub last: Timestamp,
    pub dirs: [Counters; 2],
    /// When the flow was (re)queued at the LRU tail. The LRU list is ordered
    /// by this, not by `last`: packets do not move a flow in the list (that
    /// would write two random neighbours per packet); expiry requeues a flow
    /// that saw packets since, as a CLOCK cache does.
    pub lru_at: Timestamp,
    /// Start of the current interval for the active timeout.
    pub anchor: Timestamp,
    /// On the LRU and active lists (the closing list's links are in
    /// [`TcpState`]).
    pub links: [Link; 2],
}

/// The entry's size, which `memory_per_flow` reports and the docs state.
pub(super) const FLOW_BYTES: usize = 136;
const _: () = assert!(size_of::<Flow>() == FLOW_BYTES);

pub(super) const NO_HINT: i32 = i32::MIN;

impl Flow {
    pub fn new(key: FlowKey, client: Side, guessed: bool, tos: u8, ts: Timestamp) -> Flow {
        let mut bits = LIVE;
        if client == Side::Hi {
            bits |= CLIENT_HI;
        }
        if guessed {
            bits |= GUESSED;
        }
        Flow {
            key,
            bits,
            on: 0,
            tos,
            kind: Kind::None,
            seq_in_flow: 0,
            side: 0,
            index_hint: NO_HINT,
            first: ts,
            last: ts,
            dirs: [Counters::default(); 2],
            lru_at: ts,
            anchor: ts,
            links: [Link::default(); 2],
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

    /// No more payload for the L7 parsers.
    #[inline]
    pub fn l7_done(&self) -> bool {
        self.bits & L7_DONE != 0
    }

    pub fn set_l7_done(&mut self) {
        self.bits |= L7_DONE;
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
        self.on & super::super::lru::bit(ListId::Closing) != 0
    }

    pub fn packets(&self) -> u64 {
        self.dirs[0].packets + self.dirs[1].packets
    }
}

/// What only TCP flows need: the tracker (which also keeps the
/// per-direction TCP flags) and the closing list's place, 240 bytes.
/// Reached from the entry's `side` slot.
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub(super) struct TcpState {
    pub tracker: TcpTracker,
    pub close_deadline: Timestamp,
    pub closing: Link,
}

pub(super) const TCP_STATE_BYTES: usize = 240;
const _: () = assert!(size_of::<TcpState>() == TCP_STATE_BYTES);

/// The flow entries with the side columns they index.
pub(super) struct Slab {
    pub flows: Vec<Flow>,
    pub tcp: Column<TcpState>,
    pub dns: Column<DnsTracker>,
}

impl Slab {
    /// When closing flow `i` ends (only TCP flows close; a flow without
    /// TCP state, which cannot be on the closing list, would end at once).
    #[inline]
    pub fn close_deadline(&self, i: u32) -> Timestamp {
        let f = &self.flows[i as usize];
        debug_assert_eq!(f.kind, Kind::Tcp);
        match f.kind {
            Kind::Tcp => self
                .tcp
                .get(f.side)
                .map_or(Timestamp::ZERO, |t| t.close_deadline),
            _ => Timestamp::ZERO,
        }
    }
}

const _: () = assert!(LISTS <= 8 && ON_MASK == 0b111);

impl Linked for Slab {
    #[inline]
    fn link(&mut self, l: ListId, idx: u32) -> &mut Link {
        if l == ListId::Closing {
            // Only TCP flows close (`FlowTable::process_prepared`).
            let side = self.flows[idx as usize].side;
            return &mut self
                .tcp
                .get_mut(side)
                .expect("a closing flow has TCP state")
                .closing;
        }
        &mut self.flows[idx as usize].links[l as usize]
    }

    #[inline]
    fn on(&mut self, idx: u32) -> &mut u8 {
        &mut self.flows[idx as usize].on
    }
}
