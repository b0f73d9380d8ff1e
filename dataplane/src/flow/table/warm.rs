//! Prefetches for flows about to end. A flow ends at a list head (its
//! linger over, idle, evicted, or the input's end), and ending it reads
//! its hot and cold lines (the record), its index bucket (the removal)
//! and the links of its neighbours on every list (the unlinking): lines
//! that nothing else touched for seconds, ten or more cache misses one
//! after the other. These steps get them on their way ahead of time, in
//! two stages, as each stage needs what the one before fetched:
//!
//! 1. when expiry has read the next heads' deadlines (so their cold
//!    lines are in cache): their hot lines, the rest of their cold
//!    entries, and their neighbours' links;
//! 2. [`WARM_AFTER`] packets later (their hot lines in by then): their
//!    index buckets, a DNS flow's tracker, a timestamp-RTT entry.
//!
//! Only prefetches: a head that changes in between costs a few useless
//! fetches, never a wrong read. A flush (every flow ending at once) and a
//! flood of evictions run the same stages a flow or two ahead.

use super::entry::{Kind, TcpColdEntry};
use super::slab::TCP;
use super::{FlowTable, prefetch};
use crate::flow::lru::{Link, ListId, NIL};
use crate::metrics::tsrtt::TsRtt;

/// Packets between the two stages: enough for a memory round trip.
pub(super) const WARM_AFTER: u64 = 4;

impl FlowTable {
    /// Stage 1 for flow `id`, whose cold line is in cache: its hot lines,
    /// its whole cold entry, and its list neighbours' links.
    pub(super) fn warm_lines(&self, id: u32) {
        let Some((at, bytes)) = self.slabs.hot_lines(id) else {
            return;
        };
        prefetch(at, bytes);
        let cold = self.slabs.cold(id);
        if id & TCP != 0 {
            prefetch(cold, size_of::<TcpColdEntry>());
        }
        let near = |l: &Link| {
            for n in [l.prev, l.next] {
                if n != NIL {
                    prefetch(self.slabs.cold(n), 1);
                }
            }
        };
        for l in &cold.links {
            near(l);
        }
        if id & TCP != 0
            && let Some(c) = self.slabs.tcp.cold.get((id & !TCP) as usize)
        {
            near(&c.closing);
        }
    }

    /// Stage 2 for flow `id`, whose hot lines are in cache: its index
    /// bucket and side state.
    pub(super) fn warm_key(&self, id: u32) {
        let Some(h) = self.slabs.head(id) else {
            return;
        };
        let key = self.slabs.key(id);
        self.index.prefetch(self.hash_key(&key, &key.compact()));
        match h.kind {
            Kind::Dns => {
                if let Some(d) = self.slabs.dns.get(h.side) {
                    prefetch(d, 1);
                }
            }
            Kind::Tcp => {
                let i = id & !TCP;
                if self
                    .slabs
                    .tcp
                    .hot
                    .get(i as usize)
                    .is_some_and(|t| t.tcp.ts_live())
                    && let Some(ts) = self.ts_col.get(i)
                {
                    prefetch(ts, size_of::<TsRtt>());
                }
            }
            Kind::None => {}
        }
    }

    /// After expiry: stage 1 for the flows that end next (the closing and
    /// LRU heads, whose deadlines expiry has just read), stage 2 due
    /// [`WARM_AFTER`] packets on.
    pub(super) fn warm_heads(&mut self) {
        for l in [ListId::Closing, ListId::Lru] {
            if let Some(h) = self.lists.head(l) {
                self.warm_lines(h);
            }
        }
        self.warm_at = self.stats.packets + WARM_AFTER;
    }

    /// Stage 2 for the heads stage 1 warmed.
    #[cold]
    pub(super) fn warm_heads_keys(&self) {
        for l in [ListId::Closing, ListId::Lru] {
            if let Some(h) = self.lists.head(l) {
                self.warm_key(h);
            }
        }
    }

    /// The flow after `id` on list `l` (`id`'s links in cache).
    pub(super) fn next_on(&self, l: ListId, id: u32) -> Option<u32> {
        let next = if l == ListId::Closing {
            self.slabs
                .tcp
                .cold
                .get((id & !TCP) as usize)
                .map_or(NIL, |c| c.closing.next)
        } else {
            self.slabs.cold(id).links[l as usize].next
        };
        (next != NIL).then_some(next)
    }

    /// Ends of the LRU list's flows one after the other (a flush, a flood
    /// of evictions): the second flow after `head` gets its cold line, the
    /// first its lines (stage 1; its cold line came a step before) and its
    /// key's (stage 2 for `head`, whose hot lines came a step before).
    pub(super) fn warm_lru_run(&self, head: u32) {
        self.warm_key(head);
        if let Some(n1) = self.next_on(ListId::Lru, head) {
            self.warm_lines(n1);
            if let Some(n2) = self.next_on(ListId::Lru, n1) {
                prefetch(self.slabs.cold(n2), 1);
            }
        }
    }
}
