//! One worker's flow table: a pre-sized slab of flows, a hashbrown index over
//! it, and time-ordered lists for expiry. No locks, no allocation after
//! construction (the slab, index and free list are sized from the config).
//!
//! Memory per flow: a 136-byte entry in the slab (`entry::Flow`), 4 bytes
//! of free list, and in the `HashTable` 8 bytes of index (slot + hash tag)
//! and 1 control byte per bucket, sized for twice the capacity at 7/8 load
//! so churn at the limit never makes it grow (`flow::mem::index_capacity`);
//! a TCP flow adds its `entry::TcpState` from the TCP column (and its
//! timestamp-RTT entry from that column's twin when it uses the option), a
//! DNS flow its tracker from the DNS column. `FlowConfig::memory_bytes`
//! adds it up for the up-front check and
//! `flow::table::tests::memory_per_flow` prints and bounds it.

use std::hash::BuildHasher;
use std::time::Duration;

use hashbrown::HashTable;

use super::frag::{FragKey, FragTable};
use super::key::{FlowKey, Roles, Side};
use super::l7col::L7Column;
use super::lru::{Heads, ListId};
use super::mem::{AllocError, Column, TsColumn, hash_index_bytes, index_capacity};
use super::record::{Dir, DirStats, EndReason, FlowRecord, Npm};
use crate::metrics::dns::DnsTracker;
use crate::metrics::tcp::TsCtx;
use crate::metrics::tsrtt::{TsRtt, TsRttWorker};
use crate::parse::{Fragment, L4, PacketMeta, TcpFlags};
use crate::time::Timestamp;
use entry::{Counters, Flow, Kind, NO_HINT, Slab, TcpState};
use index::IndexLayout;
use xdprobe_l7::{L7Config, L7Stats, Segment, Transport};

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

impl Prepared {
    /// A placeholder for a batch's slots whose frame did not parse (never
    /// looked up or processed).
    pub const NONE: Prepared = Prepared {
        key: FlowKey::ZERO,
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
    index: HashTable<IndexSlot>,
    hasher: hashbrown::DefaultHashBuilder,
    /// Flow entries, and the TCP and DNS columns they point into.
    slab: Slab,
    /// Timestamp-RTT state by TCP column slot (`ts_col[s]` belongs to the
    /// TCP flow in slot `s` once its tracker says so), kept apart from the
    /// TCP state so packets without the option, and flows without it, never
    /// touch it. Empty when the feature is off; else one entry per slot,
    /// zeroed lazily by the kernel (`mem::TsColumn`): only the pages of
    /// flows that carry the option are ever touched.
    ts_col: TsColumn,
    ts_stats: TsRttWorker,
    free: Vec<u32>,
    /// The address `Flow::index_hint` counts from (the first index slot
    /// ever filled; the index never moves, being sized up front).
    hint_base: usize,
    /// Where the index's control bytes are, for prefetching only.
    layout: IndexLayout,
    lists: Heads,
    frags: FragTable,
    /// The L7 parsers' slots and engine (`None` with L7 off).
    l7: Option<L7Column>,
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
    ///
    /// The TCP and DNS columns are reserved for the whole capacity, so they
    /// never run out (and the estimate is the worst case: every flow TCP,
    /// or a table that was once all DNS and then all TCP); so is the
    /// timestamp-RTT column when that feature is on.
    pub fn memory_bytes(&self) -> u64 {
        let capacity = table_capacity(self.capacity);
        let npm = |n: usize| if self.npm { n } else { 0 };
        let ts = if self.npm && self.ts_rtt { capacity } else { 0 };
        (capacity * (size_of::<Flow>() + size_of::<u32>())) as u64
            + Column::<TcpState>::memory_bytes(capacity)
            + Column::<DnsTracker>::memory_bytes(npm(capacity))
            + TsColumn::memory_bytes(ts)
            + hash_index_bytes(index_capacity(capacity), size_of::<IndexSlot>())
            + FragTable::memory_bytes(self.frag_capacity)
            + self
                .l7
                .as_ref()
                .map_or(0, |c| L7Column::memory_bytes(c, capacity))
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
        let mut flows: Vec<Flow> = Vec::new();
        flows.try_reserve_exact(capacity).map_err(|_| fail())?;
        super::mem::advise_huge_pages(flows.as_ptr(), capacity * std::mem::size_of::<Flow>());
        let tcp = Column::try_new(capacity, "the flow table's TCP state")?;
        let dns = Column::try_new(
            if cfg.npm { capacity } else { 0 },
            "the flow table's DNS state",
        )?;
        let mut free = Vec::new();
        free.try_reserve_exact(capacity).map_err(|_| fail())?;
        let mut index = HashTable::new();
        let no_entries = |_: &IndexSlot| 0;
        index
            .try_reserve(index_capacity(capacity), no_entries)
            .map_err(|_| fail())?;
        let layout = IndexLayout::learn(&mut index);
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
            index,
            hasher: hashbrown::DefaultHashBuilder::default(),
            slab: Slab { flows, tcp, dns },
            ts_col,
            ts_stats: TsRttWorker::default(),
            free,
            hint_base: 0,
            layout,
            lists: Heads::default(),
            frags: FragTable::try_new(cfg.frag_capacity)?,
            l7: cfg
                .l7
                .as_ref()
                .map(|c| L7Column::try_new(c, capacity))
                .transpose()?,
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

    /// The L7 parsers' counters (zero with L7 off), and the bytes their
    /// state holds now.
    pub fn l7_stats(&self) -> (L7Stats, u64) {
        self.l7.as_ref().map_or((L7Stats::default(), 0), |c| {
            (*c.stats(), c.allocated_bytes() as u64)
        })
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
        match p.candidate.and_then(|i| self.slab.flows.get(i as usize)) {
            Some(f) => prefetch(f, std::mem::size_of::<Flow>()),
            // Most likely a new flow: the index slot its insert will write
            // (under a SYN flood, one cache miss per packet otherwise).
            None => self.layout.prefetch_insert_slot(p.hash),
        }
    }

    /// Prefetches the candidate's side state (TCP or DNS, and the
    /// timestamp-RTT entry for a segment with the option), found through
    /// its entry. A batch calls this for all its packets after
    /// [`find_candidate`](Self::find_candidate), so the entries are on
    /// their way or in cache, and the side states' misses overlap too.
    #[inline]
    pub fn prefetch_side(&self, pkt: &PacketMeta<'_>, p: &Prepared) {
        let Some(f) = p.candidate.and_then(|i| self.slab.flows.get(i as usize)) else {
            return;
        };
        match f.kind {
            Kind::Tcp => {
                if let Some(t) = self.slab.tcp.get(f.side) {
                    prefetch(t, std::mem::size_of::<TcpState>());
                }
                if let Some(t) = self.ts_col.get(f.side)
                    && pkt.tcp().is_some_and(|t| t.options.timestamp.is_some())
                {
                    prefetch(t, TsRtt::HOT_BYTES);
                }
            }
            Kind::Dns => {
                if let Some(d) = self.slab.dns.get(f.side) {
                    prefetch(d, std::mem::size_of::<DnsTracker>());
                }
            }
            Kind::None => {}
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

        // The key is borrowed from `prep` where it can be: copying its
        // 40 bytes and the rest out of it cost ~16 instructions a packet.
        let later;
        let (key, side, hash, candidate) = match pkt.fragment {
            Fragment::None => (&prep.key, prep.side, prep.hash, prep.candidate),
            Fragment::First { id } => {
                self.frags
                    .first(FragKey::of(pkt, id), (pkt.src_port, pkt.dst_port), now);
                (&prep.key, prep.side, prep.hash, None)
            }
            Fragment::Later { id, more, .. } => {
                let (sport, dport) = self.frags.later(FragKey::of(pkt, id), more, now);
                let side;
                (later, side) =
                    FlowKey::canonical(pkt.src, sport, pkt.dst, dport, pkt.proto, pkt.vlan);
                (&later, side, self.hasher.hash_one(later), None)
            }
        };

        // The candidate is confirmed here: earlier packets of the batch may
        // have ended its flow or reused its slot since it was prepared.
        let confirmed = candidate.filter(|&i| {
            self.slab
                .flows
                .get(i as usize)
                .is_some_and(|f| f.live() && f.key == *key)
        });
        let mut idx = match confirmed {
            Some(i) => Some(i),
            None => self.lookup(key, hash),
        };
        if let Some(i) = idx {
            let f = &self.slab.flows[i as usize];
            if now.nanos_since(f.last) >= self.cfg_idle_ns {
                // Idle for the timeout but not yet swept (expiry is lazy):
                // the flow ended at its last packet; this one starts anew.
                self.end(i, EndReason::Idle, out);
                idx = None;
            } else if f.closing() && matches!(pkt.l4, L4::Tcp(t) if t.flags.is_syn_only()) {
                // A new connection on the 5-tuple of one that is closing.
                self.end(i, EndReason::End, out);
                idx = None;
            }
        }
        let i = match idx {
            Some(i) => i,
            None => self.insert(*key, hash, side, pkt, ts, out),
        };

        let f = &mut self.slab.flows[i as usize];
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
        match pkt.l4 {
            L4::Tcp(t) => {
                if f.kind != Kind::Tcp {
                    // A TCP flow begun by a packet without a TCP header
                    // (a non-first fragment): flags and closing, no metrics.
                    f.side = self.slab.tcp.alloc(TcpState::default());
                    f.kind = Kind::Tcp;
                    f.set_no_npm();
                }
                if t.flags.contains(TcpFlags::FIN) {
                    f.set_fin(dir);
                }
                let closes = !f.closing() && (t.flags.contains(TcpFlags::RST) || f.fin_both());
                let (slot, npm) = (f.side, self.npm && f.npm());
                let l7 = self.l7.is_some() && pkt.payload_len > 0 && !f.l7_done();
                let Some(st) = self.slab.tcp.get_mut(slot) else {
                    return;
                };
                st.tracker.note_flags(dir, t.flags);
                // The L7 parsers need the expected sequence number from
                // before this segment moves it.
                let l7 = l7.then(|| (st.tracker.expected(dir), st.tracker.server_net_ns()));
                if closes {
                    st.close_deadline = now.saturating_add_nanos(self.cfg_linger_ns);
                }
                if npm {
                    let tsrtt = self.ts_col.get_mut(slot).map(|flow| TsCtx {
                        flow,
                        worker: &mut self.ts_stats,
                    });
                    st.tracker
                        .on_segment(dir, &t, pkt.payload_len, pkt.payload, ts, tsrtt);
                }
                if closes {
                    let due = now.saturating_add_nanos(self.cfg_linger_ns);
                    self.next_deadline = self.next_deadline.min(due);
                    self.lists.push_back(&mut self.slab, ListId::Closing, i);
                }
                if let Some((expected, t_snt)) = l7 {
                    let seq = t.seq;
                    self.l7_payload(i, dir, Transport::Tcp { seq, expected }, pkt, ts, t_snt);
                }
            }
            _ => {
                let l7 = self.l7.is_some() && pkt.payload_len > 0 && !f.l7_done();
                if f.kind == Kind::Dns
                    && let Some(d) = self.slab.dns.get_mut(f.side)
                {
                    d.on_datagram(dir, pkt.payload, ts);
                }
                if l7 && pkt.l4 == L4::Udp {
                    self.l7_payload(i, dir, Transport::Udp, pkt, ts, None);
                }
            }
        }
    }

    /// Shows flow `i`'s payload to the L7 parsers (out of line: most
    /// packets of a flow never get here, see `Flow::l7_done`).
    #[inline(never)]
    fn l7_payload(
        &mut self,
        i: u32,
        dir: Dir,
        transport: Transport,
        pkt: &PacketMeta<'_>,
        ts: Timestamp,
        t_snt: Option<u64>,
    ) {
        let Some(col) = self.l7.as_mut() else {
            return;
        };
        let f = &mut self.slab.flows[i as usize];
        let client = f.client();
        let ports = (f.key.endpoint(client).1, f.key.endpoint(client.other()).1);
        let seg = Segment {
            dir: match dir {
                Dir::C2S => xdprobe_l7::Dir::C2S,
                Dir::S2C => xdprobe_l7::Dir::S2C,
            },
            transport,
            payload: pkt.payload,
            wire_len: pkt.payload_len,
            ts_ns: ts.as_nanos(),
            ports,
            t_snt_ns: t_snt.unwrap_or(0),
        };
        if col.on_payload(i, &seg) {
            f.set_l7_done();
        }
    }

    #[inline]
    fn lookup(&self, key: &FlowKey, hash: u64) -> Option<u32> {
        let slab = &self.slab.flows;
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
        let mut flow = Flow::new(key, roles.client, roles.guessed, pkt.tos, ts);
        flow.anchor = self.now;
        flow.lru_at = self.now;
        match pkt.l4 {
            L4::Tcp(_) => {
                flow.kind = Kind::Tcp;
                flow.side = self.slab.tcp.alloc(TcpState::default());
            }
            L4::Udp if self.npm && server_port == 53 => {
                flow.kind = Kind::Dns;
                flow.side = self.slab.dns.alloc(DnsTracker::default());
            }
            _ => {}
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.slab.flows[i as usize] = flow;
                i
            }
            None => {
                self.slab.flows.push(flow);
                (self.slab.flows.len() - 1) as u32
            }
        };
        let flows = &self.slab.flows;
        let hasher = &self.hasher;
        let rehash = |s: &IndexSlot| hasher.hash_one(flows[s.idx as usize].key);
        let entry = self.index.insert_unique(
            hash,
            IndexSlot {
                idx: i,
                tag: tag_of(hash),
            },
            rehash,
        );
        let at = std::ptr::from_ref(entry.get()) as usize;
        if self.hint_base == 0 {
            self.hint_base = at;
        }
        let hint = (at.wrapping_sub(self.hint_base) as isize) / size_of::<IndexSlot>() as isize;
        self.slab.flows[i as usize].index_hint = i32::try_from(hint).unwrap_or(NO_HINT);
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
    /// reported) and frees its slot and side state.
    fn end(&mut self, i: u32, reason: EndReason, out: &mut impl FnMut(FlowRecord)) {
        let f = &self.slab.flows[i as usize];
        if f.packets() > 0 {
            self.stats.records += 1;
            let mut rec = self.record(i, reason);
            if let Some(col) = self.l7.as_mut() {
                (rec.app, rec.l7) = col.finish(i);
            }
            out(rec);
        } else if let Some(col) = self.l7.as_mut() {
            col.release(i);
        }
        let f = &self.slab.flows[i as usize];
        let hash = self.hasher.hash_one(f.key);
        if let Ok(e) = self.index.find_entry(hash, |s| s.idx == i) {
            e.remove();
        }
        self.lists.remove_all(&mut self.slab, i);
        let f = &mut self.slab.flows[i as usize];
        match f.kind {
            Kind::Tcp => self.slab.tcp.release(f.side),
            Kind::Dns => self.slab.dns.release(f.side),
            Kind::None => {}
        }
        f.set_dead();
        self.free.push(i);
    }

    /// The record of flow `i`'s current interval.
    fn record(&self, i: u32, reason: EndReason) -> FlowRecord {
        let f = &self.slab.flows[i as usize];
        let client = f.client();
        let (client_addr, client_port) = f.key.endpoint(client);
        let (server_addr, server_port) = f.key.endpoint(client.other());
        let tcp = match f.kind {
            Kind::Tcp => self.slab.tcp.get(f.side),
            _ => None,
        };
        let flags = tcp.map_or([0; 2], |t| t.tracker.flags());
        let dir = |c: &Counters, tcp_flags: u8| DirStats {
            packets: c.packets,
            bytes: c.bytes,
            tcp_flags,
            ..DirStats::default()
        };
        let mut rec = FlowRecord {
            client_addr,
            client_port,
            server_addr,
            server_port,
            proto: f.key.proto,
            vlan: f.key.vlan(),
            direction_guessed: f.guessed(),
            start: f.first,
            end: f.last,
            end_reason: reason,
            tos: f.tos,
            c2s: dir(&f.dirs[0], flags[0]),
            s2c: dir(&f.dirs[1], flags[1]),
            npm: Npm::default(),
            seq_in_flow: f.seq_in_flow,
            process: None,
            app: None,
            l7: None,
        };
        match (f.kind, tcp) {
            (Kind::Tcp, Some(t)) if self.npm && f.npm() => {
                t.tracker.fill(&mut rec, self.ts_col.get(f.side))
            }
            (Kind::Dns, _) => {
                if let Some(d) = self.slab.dns.get(f.side) {
                    d.fill(&mut rec);
                }
            }
            _ => {}
        }
        rec
    }

    /// The record of flow `i`'s current interval, with its L7 fields
    /// (an interim record: the flow goes on).
    fn interim_record(&self, i: u32, reason: EndReason) -> FlowRecord {
        let mut rec = self.record(i, reason);
        if let Some(col) = self.l7.as_ref() {
            (rec.app, rec.l7) = col.record(i);
        }
        rec
    }

    /// Starts flow `i`'s next interval after an active-timeout record:
    /// counters restart, the trackers keep what carries over.
    fn reset_interval(&mut self, i: u32) {
        if let Some(col) = self.l7.as_mut() {
            col.end_interval(i);
        }
        let f = &mut self.slab.flows[i as usize];
        f.dirs = [Counters::default(); 2];
        f.seq_in_flow = f.seq_in_flow.wrapping_add(1);
        let npm = self.npm && f.npm();
        match f.kind {
            Kind::Tcp => {
                if let Some(t) = self.slab.tcp.get_mut(f.side) {
                    t.tracker.reset_flags();
                    if npm {
                        t.tracker.reset_interval(self.ts_col.get_mut(f.side));
                    }
                }
            }
            Kind::Dns => {
                if let Some(d) = self.slab.dns.get_mut(f.side) {
                    d.reset_interval();
                }
            }
            Kind::None => {}
        }
    }
}

mod entry;
mod expiry;
mod index;

#[cfg(test)]
mod tests;
