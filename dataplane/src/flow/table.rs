//! One worker's flow table: two pre-sized slabs of flows (one hot line for
//! a flow without TCP state, two adjacent ones for a TCP flow, each with a
//! cold entry at the same index), an index of 64-byte buckets over them,
//! and time-ordered lists for expiry. No locks, no allocation after
//! construction (slabs, index, columns and free lists are sized from the
//! config).
//!
//! What an ordinary packet of an established flow touches is its index
//! bucket and its hot line(s) (`entry`); everything else (the handshake,
//! counters of rare events, SRT, TLS and timestamp-RTT state, expiry
//! times and list links, the L7 handle) is cold, reached only by the
//! packets that need it. A batch (`crate::worker`) prefetches exactly
//! those lines: every packet's bucket while the batch is parsed, then
//! each candidate's hot line(s), then what the packet will need of the
//! cold side. `FlowConfig::memory_bytes` adds the memory up for the
//! up-front check and `flow::table::tests::memory_per_flow` prints and
//! bounds it per flow.

use std::hash::BuildHasher;
use std::time::Duration;

use super::frag::{FragKey, FragTable};
use super::key::{Addr, CompactKey, FlowKey, Side};
use super::lru::Heads;
use super::mem::{AllocError, Column, TsColumn};
use crate::metrics::dns::DnsTracker;
use crate::metrics::tsrtt::{TsRtt, TsRttWorker};
use crate::parse::{Fragment, L4, PacketMeta};
use crate::record::{EndReason, FlowRecord};
use crate::time::Timestamp;
use entry::{Cold, Hot1, Hot2, Kind, TcpColdEntry};
use index::Index;
use l7::L7Parsers;
use slab::{Slab, Slabs, TCP};
use xdprobe_l7::L7Config;

/// Flow table settings (validated by the config crate; these are the
/// defaults an operator gets without a config file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowConfig {
    /// Flows this worker holds at once; the oldest is evicted beyond it.
    pub capacity: usize,
    /// No packet for this long ends a flow (`EndReason::Idle`).
    pub idle_timeout: Duration,
    /// A flow older than this is reported and goes on (`EndReason::Active`).
    pub active_timeout: Duration,
    /// After FIN both ways or RST, late packets (last ACK, retransmitted FIN)
    /// still count in the flow for this long.
    pub tcp_linger: Duration,
    /// Compute NPM metrics (RTT, SRT, retransmissions). Off only to measure
    /// their cost.
    pub npm: bool,
    /// With `npm`: continuous RTT from the TCP timestamp option
    /// (`metrics::tsrtt`), at `size_of::<TsRtt>()` more bytes per flow slot.
    pub ts_rtt: bool,
    /// Datagrams whose first fragment is remembered at once.
    pub frag_capacity: usize,
    /// What each flow is (`xdprobe-l7`): the application label and the
    /// TLS/QUIC/HTTP/DNS fields; `None` turns it off (`--no-l7`).
    pub l7: Option<L7Config>,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            capacity: 262_144,
            idle_timeout: Duration::from_secs(30),
            active_timeout: Duration::from_secs(300),
            tcp_linger: Duration::from_secs(2),
            npm: true,
            ts_rtt: true,
            frag_capacity: 4096,
            l7: Some(L7Config::default()),
        }
    }
}

/// A packet's key, hash and candidate flow, computed ahead of
/// [`FlowTable::process_prepared`] so the candidate's cache lines are on
/// their way while earlier packets of a batch are processed.
#[derive(Clone, Copy, Debug)]
pub struct Prepared {
    key: FlowKey,
    compact: CompactKey,
    side: Side,
    hash: u64,
    /// Flow whose tag matched; confirmed (live, same key) before use.
    candidate: Option<u32>,
}

impl Prepared {
    /// A placeholder for a batch's slots whose frame did not parse (never
    /// looked up or processed).
    pub const NONE: Prepared = Prepared {
        key: FlowKey::ZERO,
        compact: CompactKey::ZERO,
        side: Side::Lo,
        hash: 0,
        candidate: None,
    };
}

/// Hints the CPU to fetch `bytes` from `p` into cache. Never faults: a
/// prefetch of any address is architecturally a no-op if it is invalid.
#[inline(always)]
fn prefetch<T>(p: *const T, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let base = p.cast::<i8>();
        let mut off = 0;
        while off < bytes {
            // SAFETY: prefetch has no memory-safety preconditions: it never
            // dereferences architecturally and ignores invalid addresses;
            // `wrapping_add` keeps the pointer arithmetic defined.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(off)) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (p, bytes);
    }
}

/// Counters of the table itself (summed across workers when read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    pub packets: u64,
    pub bytes: u64,
    pub flows_created: u64,
    pub records: u64,
    /// Flows ended early because the table was full.
    pub evicted: u64,
}

pub struct FlowTable {
    cfg_idle_ns: u64,
    cfg_active_ns: u64,
    cfg_linger_ns: u64,
    npm: bool,
    capacity: usize,
    index: Index,
    hasher: hashbrown::DefaultHashBuilder,
    /// The flows, hot and cold, and the columns they point into.
    slabs: Slabs,
    /// Timestamp-RTT state by TCP slot (`ts_col[s]` belongs to the TCP
    /// flow in slot `s` once its tracker says so), kept apart from the
    /// TCP state so packets without the option, and flows without it, never
    /// touch it. Empty when the feature is off; else one entry per slot,
    /// zeroed lazily by the kernel (`mem::Zeroed`): only the pages of
    /// flows that carry the option are ever touched.
    ts_col: TsColumn,
    ts_stats: TsRttWorker,
    lists: Heads,
    frags: FragTable,
    /// The L7 parsers (`None` with L7 off); each flow's handle into them
    /// is in its cold entry (`Cold::l7`).
    l7: Option<L7Parsers>,
    /// Latest packet time seen: expiry runs on packet time, never the clock,
    /// and never goes backwards when a capture's timestamps do.
    now: Timestamp,
    /// No expiry is due before this: a lower bound of the list heads'
    /// deadlines, so the per-packet check touches no flow entry (a list head
    /// is the coldest flow in the table; reading it per packet costs a cache
    /// miss each).
    next_deadline: Timestamp,
    /// When (in packets, `stats.packets`) the flows that end next get
    /// their second stage of prefetches (`warm`).
    warm_at: u64,
    stats: TableStats,
}

fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl FlowConfig {
    /// Bytes a table with these settings allocates up front (slab, index,
    /// free list, fragment table): what `FlowTable::try_new` asks for, to
    /// check against the machine before starting. The slab's pages are only
    /// touched as flows arrive, so the resident size reaches this once the
    /// table has been full.
    ///
    /// Both slabs and the DNS and IPv6 columns are reserved for the whole
    /// capacity, so they never run out, and the estimate is the worst case
    /// (a table that was once all DNS over IPv6 and then all TCP); so is
    /// the timestamp-RTT column when that feature is on.
    pub fn memory_bytes(&self) -> u64 {
        let capacity = table_capacity(self.capacity);
        let npm = |n: usize| if self.npm { n } else { 0 };
        let ts = if self.npm && self.ts_rtt { capacity } else { 0 };
        Slab::<Hot1, Cold>::memory_bytes(capacity)
            + Slab::<Hot2, TcpColdEntry>::memory_bytes(capacity)
            + Column::<DnsTracker>::memory_bytes(npm(capacity))
            + Column::<[Addr; 2]>::memory_bytes(capacity)
            + TsColumn::memory_bytes(ts)
            + Index::memory_bytes(capacity)
            + FragTable::memory_bytes(self.frag_capacity)
            + self
                .l7
                .as_ref()
                .map_or(0, |c| L7Parsers::memory_bytes(c, capacity))
    }
}

/// Flows a table holds: at least one, and few enough for a slot and the
/// [`TCP`] bit to make an id (the config allows at most 2^26).
fn table_capacity(configured: usize) -> usize {
    configured.clamp(1, TCP as usize - 1)
}

impl FlowTable {
    /// A table for `cfg`, for tests and benchmarks: panics if its memory
    /// cannot be had. Everything that serves an operator uses
    /// [`try_new`](Self::try_new) after checking
    /// [`FlowConfig::memory_bytes`] against the machine.
    pub fn new(cfg: &FlowConfig) -> Self {
        Self::try_new(cfg).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A table for `cfg`, or an error when its memory cannot be allocated.
    pub fn try_new(cfg: &FlowConfig) -> Result<Self, AllocError> {
        let capacity = table_capacity(cfg.capacity);
        let slabs = Slabs {
            one: Slab::try_new(capacity, "the flow table")?,
            tcp: Slab::try_new(capacity, "the flow table's TCP slab")?,
            dns: Column::try_new(
                if cfg.npm { capacity } else { 0 },
                "the flow table's DNS state",
            )?,
            v6: Column::try_new(capacity, "the flow table's IPv6 addresses")?,
        };
        let ts_col = if cfg.npm && cfg.ts_rtt {
            TsColumn::new(capacity)
        } else {
            TsColumn::empty()
        };
        Ok(FlowTable {
            cfg_idle_ns: dur_ns(cfg.idle_timeout),
            cfg_active_ns: dur_ns(cfg.active_timeout),
            cfg_linger_ns: dur_ns(cfg.tcp_linger),
            npm: cfg.npm,
            capacity,
            index: Index::try_new(capacity)?,
            hasher: hashbrown::DefaultHashBuilder::default(),
            slabs,
            ts_col,
            ts_stats: TsRttWorker::default(),
            lists: Heads::default(),
            frags: FragTable::try_new(cfg.frag_capacity)?,
            l7: cfg.l7.as_ref().map(|c| L7Parsers::new(c, capacity)),
            now: Timestamp::ZERO,
            next_deadline: Timestamp(u64::MAX),
            warm_at: u64::MAX,
            stats: TableStats::default(),
        })
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.len() == 0
    }

    pub fn stats(&self) -> TableStats {
        self.stats
    }

    pub fn frag_stats(&self) -> super::frag::FragStats {
        self.frags.stats
    }

    /// Timestamp-RTT counters and per-leg summaries of this table's flows.
    pub fn ts_rtt_stats(&self) -> &TsRttWorker {
        &self.ts_stats
    }

    /// Accounts one parsed packet captured at `ts`; finished records go to
    /// `out` (expiry runs first, on packet time).
    #[inline]
    pub fn process(
        &mut self,
        pkt: &PacketMeta<'_>,
        ts: Timestamp,
        out: &mut impl FnMut(FlowRecord),
    ) {
        let prep = self.prepare(pkt);
        self.process_prepared(pkt, &prep, ts, out);
    }

    /// First half of [`process`](Self::process), with no side effects: the
    /// key, its hash and the candidate flow by hash tag, whose slab entry is
    /// prefetched. Fragments are keyed in `process_prepared` (the fragment
    /// table is stateful).
    #[inline]
    pub fn prepare(&self, pkt: &PacketMeta<'_>) -> Prepared {
        let mut p = self.key_of(pkt);
        self.find_candidate(pkt, &mut p);
        p
    }

    /// Key and hash of a packet, and a prefetch of the index bucket its
    /// lookup reads (no other table access).
    #[inline]
    pub fn key_of(&self, pkt: &PacketMeta<'_>) -> Prepared {
        let (key, side) = FlowKey::canonical(
            pkt.src,
            pkt.src_port,
            pkt.dst,
            pkt.dst_port,
            pkt.proto,
            pkt.vlan,
        );
        let compact = key.compact();
        let hash = self.hash_key(&key, &compact);
        if pkt.fragment == Fragment::None {
            self.index.prefetch(hash);
        }
        Prepared {
            key,
            compact,
            side,
            hash,
            candidate: None,
        }
    }

    /// The hash a flow is indexed by: of its compact key's words, and an
    /// IPv6 flow's addresses (what the table can give back for any flow,
    /// to find its index entry again when it ends).
    #[inline]
    fn hash_key(&self, key: &FlowKey, compact: &CompactKey) -> u64 {
        let (addrs, rest) = compact.words();
        if compact.is_v6() {
            self.hasher.hash_one((key.lo_addr, key.hi_addr, rest))
        } else {
            self.hasher.hash_one((addrs, rest))
        }
    }

    /// Looks up the candidate flow by hash tag (the index bucket only, no
    /// flow read) and prefetches its hot line(s). A batch calls this for
    /// all its packets back to back, after [`key_of`](Self::key_of) for
    /// all, so the buckets are in cache and the hot lines' misses of
    /// different packets overlap.
    #[inline]
    pub fn find_candidate(&self, pkt: &PacketMeta<'_>, p: &mut Prepared) {
        if pkt.fragment != Fragment::None {
            return;
        }
        p.candidate = self.index.candidate(p.hash);
        match p.candidate.and_then(|id| self.slabs.hot_lines(id)) {
            Some((at, bytes)) => prefetch(at, bytes),
            None => self.prefetch_new(pkt),
        }
    }

    /// Most likely a new flow: the slots its insert will write (under a
    /// SYN flood, several cache misses per packet otherwise).
    #[inline]
    fn prefetch_new(&self, pkt: &PacketMeta<'_>) {
        fn slot<H, C>(s: &Slab<H, C>) {
            let i = s.next_free();
            prefetch(s.hot.as_ptr().wrapping_add(i), size_of::<H>());
            prefetch(s.cold.as_ptr().wrapping_add(i), size_of::<C>());
        }
        match pkt.l4 {
            L4::Tcp(_) => slot(&self.slabs.tcp),
            _ => slot(&self.slabs.one),
        }
    }

    /// Prefetches what the packet will need beyond the candidate's hot
    /// lines, read from them (in cache by now, or on their way): a DNS
    /// flow's tracker, a TCP flow's timestamp-RTT entry for a segment with
    /// the option, the cold lines of a TCP segment that will need them
    /// (`TcpHot::wants_cold`), and the cold entry of a payload the L7
    /// parsers still inspect (`Head::l7_inspect`). A batch calls this for all its packets
    /// after [`find_candidate`](Self::find_candidate).
    #[inline]
    pub fn prefetch_side(&self, pkt: &PacketMeta<'_>, p: &Prepared) {
        let Some(id) = p.candidate else {
            return;
        };
        if id & TCP != 0 {
            let L4::Tcp(t) = &pkt.l4 else {
                return;
            };
            let i = id & !TCP;
            if t.options.timestamp.is_some()
                && let Some(ts) = self.ts_col.get(i)
            {
                prefetch(ts, TsRtt::HOT_BYTES);
            }
            if let Some(h) = self.slabs.tcp.hot.get(i as usize)
                && ((self.npm && h.tcp.wants_cold(h.head.dir_of(p.side), t, pkt.payload_len))
                    || (pkt.payload_len > 0 && h.head.l7_inspect(h.head.dir_of(p.side))))
            {
                prefetch(&self.slabs.tcp.cold[i as usize], size_of::<TcpColdEntry>());
            }
        } else if let Some(h) = self.slabs.head(id) {
            if h.kind == Kind::Dns
                && let Some(d) = self.slabs.dns.get(h.side)
            {
                prefetch(d, size_of::<DnsTracker>());
            }
            if pkt.payload_len > 0 && h.l7_inspect(h.dir_of(p.side)) {
                prefetch(self.slabs.cold(id), size_of::<Cold>());
            }
        }
    }

    /// Second half of [`process`](Self::process): everything with effects,
    /// in packet order.
    #[inline]
    pub fn process_prepared(
        &mut self,
        pkt: &PacketMeta<'_>,
        prep: &Prepared,
        ts: Timestamp,
        out: &mut impl FnMut(FlowRecord),
    ) {
        if ts > self.now {
            self.now = ts;
            if ts >= self.next_deadline {
                self.expire(out);
            }
        }
        let now = self.now;
        self.stats.packets += 1;
        self.stats.bytes += u64::from(pkt.ip_len);
        if self.stats.packets == self.warm_at {
            self.warm_heads_keys();
        }

        // The key is borrowed from `prep` where it can be: copying its
        // 40 bytes and the rest out of it cost ~16 instructions a packet.
        let later;
        let (key, compact, side, hash, candidate) = match pkt.fragment {
            Fragment::None => (
                &prep.key,
                prep.compact,
                prep.side,
                prep.hash,
                prep.candidate,
            ),
            Fragment::First { id } => {
                self.frags
                    .first(FragKey::of(pkt, id), (pkt.src_port, pkt.dst_port), now);
                (&prep.key, prep.compact, prep.side, prep.hash, None)
            }
            Fragment::Later { id, more, .. } => {
                let (sport, dport) = self.frags.later(FragKey::of(pkt, id), more, now);
                let side;
                (later, side) =
                    FlowKey::canonical(pkt.src, sport, pkt.dst, dport, pkt.proto, pkt.vlan);
                let compact = later.compact();
                let hash = self.hash_key(&later, &compact);
                (&later, compact, side, hash, None)
            }
        };

        // The candidate is confirmed here: earlier packets of the batch may
        // have ended its flow or reused its slot since it was prepared.
        let mut id = match candidate.filter(|&c| self.slabs.matches(c, key, &compact)) {
            Some(c) => Some(c),
            None => self
                .index
                .find(hash, |c| self.slabs.matches(c, key, &compact)),
        };
        if let Some(i) = id {
            let h = self.slabs.head_mut(i);
            if now.nanos_since(h.last) >= self.cfg_idle_ns {
                // Idle for the timeout but not yet swept (expiry is lazy):
                // the flow ended at its last packet; this one starts anew.
                self.end(i, EndReason::Idle, out);
                id = None;
            } else if h.closing() && matches!(pkt.l4, L4::Tcp(t) if t.flags.is_syn_only()) {
                // A new connection on the 5-tuple of one that is closing.
                self.end(i, EndReason::End, out);
                id = None;
            }
        }
        let mut id = match id {
            Some(i) => i,
            None => self.insert(key, compact, hash, side, pkt, ts, out),
        };
        match pkt.l4 {
            L4::Tcp(t) => {
                if id & TCP == 0 {
                    // A TCP flow begun by a packet without a TCP header
                    // (a non-first fragment): flags and closing, no metrics.
                    id = self.promote(id, hash);
                }
                self.on_tcp(id, side, &t, pkt, ts);
            }
            _ => self.on_other(id, side, pkt, ts),
        }
    }
}

mod entry;
mod expiry;
mod index;
mod l7;
mod life;
mod packet;
mod slab;
mod warm;

#[cfg(test)]
mod tests;
