//! One worker's flow table: a pre-sized slab of flows, a hashbrown index over
//! it, and time-ordered lists for expiry. No locks, no allocation after
//! construction (the slab, index and free list are sized from the config).
//!
//! Memory per flow: `size_of::<Flow>()` in the slab, 4 bytes of free list,
//! and in the `HashTable` 8 bytes of index (slot + hash tag) and 1 control
//! byte per bucket, sized for twice the capacity at 7/8 load so churn at
//! the limit never makes it grow (`flow::mem::index_capacity`);
//! `FlowConfig::memory_bytes` adds it up for the up-front check and
//! `flow::table::tests::memory_per_flow` prints and bounds it.

use std::hash::BuildHasher;
use std::time::Duration;

use hashbrown::HashTable;

use super::frag::{FragKey, FragTable};
use super::key::{FlowKey, Roles, Side};
use super::lru::{Heads, Linked, Links, ListId};
use super::mem::{AllocError, hash_index_bytes, index_capacity};
use super::record::{Dir, DirStats, EndReason, FlowRecord, Npm};
use crate::metrics::L4Metrics;
use crate::metrics::tcp::TsCtx;
use crate::metrics::tsrtt::{TsRtt, TsRttWorker};
use crate::parse::{Fragment, L4, PacketMeta, TcpFlags};
use crate::time::Timestamp;

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
        }
    }
}

/// Per-direction counters kept in a flow (the rest of `DirStats` comes from
/// the metric trackers at export).
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    packets: u64,
    bytes: u64,
    flags: u8,
}

/// One flow's state. `repr(C)` with the fields every packet reads first
/// (key, liveness, flags, times, counters) in the first cache lines, so
/// confirming a prefetched candidate touches one line and the per-packet
/// update three, before the metric state.
#[derive(Clone, Debug)]
#[repr(C)]
struct Flow {
    key: FlowKey,
    /// False once the flow ended and its slot is free (a stale candidate
    /// from `prepare` must not match it).
    live: bool,
    client: Side,
    guessed: bool,
    closing: bool,
    fin: [bool; 2],
    tos: u8,
    seq_in_flow: u32,
    hash: u64,
    /// First and last packet of the current interval.
    first: Timestamp,
    last: Timestamp,
    /// When the flow was (re)queued at the LRU tail. The LRU list is ordered
    /// by this, not by `last`: packets do not move a flow in the list (that
    /// would write two random neighbours per packet); expiry requeues a flow
    /// that saw packets since, as a CLOCK cache does.
    lru_at: Timestamp,
    /// Start of the current interval for the active timeout.
    anchor: Timestamp,
    close_deadline: Timestamp,
    dirs: [Counters; 2],
    links: Links,
    /// Where this flow's index slot was when it was inserted: only ever
    /// prefetched (a stale address after the index rehashed costs a useless
    /// prefetch, never a wrong read), so evicting the flow does not wait
    /// for the index (see `expiry::warm_next_victims`).
    index_hint: usize,
    metrics: L4Metrics,
}

impl Flow {
    fn dir_of(&self, side: Side) -> Dir {
        if side == self.client {
            Dir::C2S
        } else {
            Dir::S2C
        }
    }

    /// This flow's record; `ts` is its timestamp-RTT column entry.
    fn record(&self, reason: EndReason, ts: Option<&TsRtt>) -> FlowRecord {
        let (client_addr, client_port) = self.key.endpoint(self.client);
        let (server_addr, server_port) = self.key.endpoint(self.client.other());
        let dir = |c: &Counters| DirStats {
            packets: c.packets,
            bytes: c.bytes,
            tcp_flags: c.flags,
            ..DirStats::default()
        };
        let mut rec = FlowRecord {
            client_addr,
            client_port,
            server_addr,
            server_port,
            proto: self.key.proto,
            vlan: self.key.vlan,
            direction_guessed: self.guessed,
            start: self.first,
            end: self.last,
            end_reason: reason,
            tos: self.tos,
            c2s: dir(&self.dirs[0]),
            s2c: dir(&self.dirs[1]),
            npm: Npm::default(),
            seq_in_flow: self.seq_in_flow,
            process: None,
        };
        self.metrics.fill(&mut rec, ts);
        rec
    }

    fn packets(&self) -> u64 {
        self.dirs[0].packets + self.dirs[1].packets
    }
}

/// What the hash index holds per flow: the slab slot and the upper half of
/// the key's hash. The tag lets a lookup pick its candidate without reading
/// the slab (so the slab entry can be prefetched first and the key compared
/// later, see [`FlowTable::prepare`]).
#[derive(Clone, Copy, Debug)]
struct IndexSlot {
    idx: u32,
    tag: u32,
}

#[inline]
fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// A packet's key, hash and candidate flow, computed ahead of
/// [`FlowTable::process_prepared`] so the candidate's cache lines are on
/// their way while earlier packets of a batch are processed.
#[derive(Clone, Copy, Debug)]
pub struct Prepared {
    key: FlowKey,
    side: Side,
    hash: u64,
    /// Slab slot whose tag matched; confirmed (live, same key) before use.
    candidate: Option<u32>,
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

struct Slab(Vec<Flow>);

impl Linked for Slab {
    #[inline]
    fn links(&mut self, idx: u32) -> &mut Links {
        &mut self.0[idx as usize].links
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
    index: HashTable<IndexSlot>,
    hasher: hashbrown::DefaultHashBuilder,
    slab: Slab,
    /// Timestamp-RTT state by slab slot (`ts_col[i]` belongs to the flow in
    /// slot `i` once its tracker says so), kept apart from the flow entry
    /// so packets without the option, and flows without it, never touch
    /// it. Empty when the feature is off; else one entry per slot of the
    /// capacity, zeroed lazily by the kernel (`mem::TsColumn`): only the
    /// pages of flows that carry the option are ever touched.
    ts_col: super::mem::TsColumn,
    ts_stats: TsRttWorker,
    free: Vec<u32>,
    lists: Heads,
    frags: FragTable,
    /// Latest packet time seen: expiry runs on packet time, never the clock,
    /// and never goes backwards when a capture's timestamps do.
    now: Timestamp,
    /// No expiry is due before this: a lower bound of the list heads'
    /// deadlines, so the per-packet check touches no flow entry (a list head
    /// is the coldest flow in the table; reading it per packet costs a cache
    /// miss each).
    next_deadline: Timestamp,
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
    pub fn memory_bytes(&self) -> u64 {
        let capacity = table_capacity(self.capacity);
        (capacity * (size_of::<Flow>() + size_of::<u32>())) as u64
            + hash_index_bytes(index_capacity(capacity), size_of::<IndexSlot>())
            + FragTable::memory_bytes(self.frag_capacity)
    }
}

fn table_capacity(configured: usize) -> usize {
    configured.clamp(1, u32::MAX as usize - 1)
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
        let fail = || AllocError {
            what: "the flow table",
            bytes: cfg.memory_bytes(),
        };
        let mut slab: Vec<Flow> = Vec::new();
        slab.try_reserve_exact(capacity).map_err(|_| fail())?;
        super::mem::advise_huge_pages(slab.as_ptr(), capacity * std::mem::size_of::<Flow>());
        let mut free = Vec::new();
        free.try_reserve_exact(capacity).map_err(|_| fail())?;
        let mut index = HashTable::new();
        let no_entries = |_: &IndexSlot| 0;
        index
            .try_reserve(index_capacity(capacity), no_entries)
            .map_err(|_| fail())?;
        let ts_col = if cfg.npm && cfg.ts_rtt {
            super::mem::TsColumn::new(capacity)
        } else {
            super::mem::TsColumn::empty()
        };
        Ok(FlowTable {
            cfg_idle_ns: dur_ns(cfg.idle_timeout),
            cfg_active_ns: dur_ns(cfg.active_timeout),
            cfg_linger_ns: dur_ns(cfg.tcp_linger),
            npm: cfg.npm,
            capacity,
            index,
            hasher: hashbrown::DefaultHashBuilder::default(),
            slab: Slab(slab),
            ts_col,
            ts_stats: TsRttWorker::default(),
            free,
            lists: Heads::default(),
            frags: FragTable::try_new(cfg.frag_capacity)?,
            now: Timestamp::ZERO,
            next_deadline: Timestamp(u64::MAX),
            stats: TableStats::default(),
        })
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
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

    /// Key and hash of a packet (pure computation, no table access).
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
        Prepared {
            key,
            side,
            hash: self.hasher.hash_one(key),
            candidate: None,
        }
    }

    /// Looks up the candidate flow by hash tag (index only, no slab read)
    /// and prefetches its slab entry. A batch calls this for all its
    /// packets back to back, so the index cache misses of different packets
    /// overlap.
    #[inline]
    pub fn find_candidate(&self, pkt: &PacketMeta<'_>, p: &mut Prepared) {
        if pkt.fragment != Fragment::None {
            return;
        }
        let tag = tag_of(p.hash);
        p.candidate = self.index.find(p.hash, |s| s.tag == tag).map(|s| s.idx);
        if let Some(i) = p.candidate
            && let Some(f) = self.slab.0.get(i as usize)
        {
            prefetch(f, std::mem::size_of::<Flow>());
            if let Some(t) = self.ts_col.get(i as usize)
                && pkt.tcp().is_some_and(|t| t.options.timestamp.is_some())
            {
                prefetch(t, TsRtt::HOT_BYTES);
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

        let (key, side, hash, candidate) = match pkt.fragment {
            Fragment::None => (prep.key, prep.side, prep.hash, prep.candidate),
            Fragment::First { id } => {
                self.frags
                    .first(FragKey::of(pkt, id), (pkt.src_port, pkt.dst_port), now);
                (prep.key, prep.side, prep.hash, None)
            }
            Fragment::Later { id, more, .. } => {
                let (sport, dport) = self.frags.later(FragKey::of(pkt, id), more, now);
                let (key, side) =
                    FlowKey::canonical(pkt.src, sport, pkt.dst, dport, pkt.proto, pkt.vlan);
                (key, side, self.hasher.hash_one(key), None)
            }
        };

        // The candidate is confirmed here: earlier packets of the batch may
        // have ended its flow or reused its slot since it was prepared.
        let confirmed = candidate.filter(|&i| {
            self.slab
                .0
                .get(i as usize)
                .is_some_and(|f| f.live && f.key == key)
        });
        let mut idx = match confirmed {
            Some(i) => Some(i),
            None => self.lookup(&key, hash),
        };
        if let Some(i) = idx {
            let f = &self.slab.0[i as usize];
            if now.nanos_since(f.last) >= self.cfg_idle_ns {
                // Idle for the timeout but not yet swept (expiry is lazy):
                // the flow ended at its last packet; this one starts anew.
                self.end(i, EndReason::Idle, out);
                idx = None;
            } else if f.closing && matches!(pkt.l4, L4::Tcp(t) if t.flags.is_syn_only()) {
                // A new connection on the 5-tuple of one that is closing.
                self.end(i, EndReason::End, out);
                idx = None;
            }
        }
        let i = match idx {
            Some(i) => i,
            None => self.insert(key, hash, side, pkt, ts, out),
        };

        let linger = self.cfg_linger_ns;
        let f = &mut self.slab.0[i as usize];
        let dir = f.dir_of(side);
        if f.packets() == 0 {
            f.first = ts;
            f.last = ts;
        }
        f.first = f.first.min(ts);
        f.last = f.last.max(ts);
        let c = &mut f.dirs[dir.index()];
        c.packets += 1;
        c.bytes += u64::from(pkt.ip_len);
        let mut now_closing = false;
        if let L4::Tcp(t) = pkt.l4 {
            c.flags |= t.flags.bits();
            if t.flags.contains(TcpFlags::FIN) {
                f.fin[dir.index()] = true;
            }
            if !f.closing && (t.flags.contains(TcpFlags::RST) || (f.fin[0] && f.fin[1])) {
                f.closing = true;
                f.close_deadline = now.saturating_add_nanos(linger);
                now_closing = true;
            }
        }
        let tsrtt = self.ts_col.get_mut(i as usize).map(|flow| TsCtx {
            flow,
            worker: &mut self.ts_stats,
        });
        f.metrics.on_packet(dir, pkt, ts, tsrtt);
        if now_closing {
            let due = now.saturating_add_nanos(linger);
            self.next_deadline = self.next_deadline.min(due);
            self.lists.push_back(&mut self.slab, ListId::Closing, i);
        }
    }

    #[inline]
    fn lookup(&self, key: &FlowKey, hash: u64) -> Option<u32> {
        let slab = &self.slab.0;
        let tag = tag_of(hash);
        self.index
            .find(hash, |s| s.tag == tag && slab[s.idx as usize].key == *key)
            .map(|s| s.idx)
    }

    fn insert(
        &mut self,
        key: FlowKey,
        hash: u64,
        side: Side,
        pkt: &PacketMeta<'_>,
        ts: Timestamp,
        out: &mut impl FnMut(FlowRecord),
    ) -> u32 {
        if self.index.len() >= self.capacity {
            self.evict_one(out);
        }
        let roles = Roles::decide(pkt, side);
        let server_port = key.endpoint(roles.client.other()).1;
        let metrics = if self.npm {
            L4Metrics::for_flow(pkt, server_port)
        } else {
            L4Metrics::None
        };
        let flow = Flow {
            key,
            hash,
            live: true,
            links: Links::default(),
            index_hint: 0,
            client: roles.client,
            guessed: roles.guessed,
            tos: pkt.tos,
            fin: [false; 2],
            closing: false,
            seq_in_flow: 0,
            first: ts,
            last: ts,
            anchor: self.now,
            lru_at: self.now,
            close_deadline: Timestamp::ZERO,
            dirs: [Counters::default(); 2],
            metrics,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slab.0[i as usize] = flow;
                i
            }
            None => {
                self.slab.0.push(flow);
                (self.slab.0.len() - 1) as u32
            }
        };
        let slab = &self.slab.0;
        let hasher = |s: &IndexSlot| slab[s.idx as usize].hash;
        let entry = self.index.insert_unique(
            hash,
            IndexSlot {
                idx: i,
                tag: tag_of(hash),
            },
            hasher,
        );
        let hint = std::ptr::from_ref(entry.get()) as usize;
        self.slab.0[i as usize].index_hint = hint;
        self.lists.push_back(&mut self.slab, ListId::Lru, i);
        self.lists.push_back(&mut self.slab, ListId::Active, i);
        let first_due = self
            .now
            .saturating_add_nanos(self.cfg_idle_ns.min(self.cfg_active_ns));
        self.next_deadline = self.next_deadline.min(first_due);
        self.stats.flows_created += 1;
        i
    }

    /// Emits the final record of flow `i` (if it has packets not yet
    /// reported) and frees its slot.
    fn end(&mut self, i: u32, reason: EndReason, out: &mut impl FnMut(FlowRecord)) {
        let f = &self.slab.0[i as usize];
        if f.packets() > 0 {
            self.stats.records += 1;
            out(f.record(reason, self.ts_col.get(i as usize)));
        }
        let hash = f.hash;
        if let Ok(e) = self.index.find_entry(hash, |s| s.idx == i) {
            e.remove();
        }
        self.lists.remove_all(&mut self.slab, i);
        // Drop the metric state now rather than when the slot is reused.
        let f = &mut self.slab.0[i as usize];
        f.metrics = L4Metrics::None;
        f.live = false;
        self.free.push(i);
    }
}

mod expiry;

#[cfg(test)]
mod tests;
