//! Expiry of the flow table: the time-ordered lists' heads, the cached next
//! deadline, eviction when full, timeouts changed at run time, flush.
//! Everything runs on packet time (`FlowTable::now`), never the clock.

use super::entry::{Kind, NO_HINT, TcpState};
use super::{Flow, FlowConfig, FlowTable, IndexSlot, dur_ns};
use crate::flow::lru::ListId;
use crate::flow::record::{EndReason, FlowRecord};
use crate::time::Timestamp;
use std::hash::BuildHasher;

impl FlowTable {
    /// Runs every expiry whose time has come at `self.now`.
    pub(super) fn expire(&mut self, out: &mut impl FnMut(FlowRecord)) {
        let now = self.now;
        while let Some(i) = self.lists.head(ListId::Closing) {
            if self.slab.close_deadline(i) > now {
                break;
            }
            self.end(i, EndReason::End, out);
        }
        while let Some(i) = self.lists.head(ListId::Lru) {
            let f = &mut self.slab.flows[i as usize];
            if now.nanos_since(f.lru_at) < self.cfg_idle_ns {
                break;
            }
            if now.nanos_since(f.last) >= self.cfg_idle_ns {
                self.end(i, EndReason::Idle, out);
            } else {
                // Seen since it was queued: check again an idle period on.
                // So a record leaves between 1× and 2× the idle timeout
                // after its last packet; where a flow ends is exact (see
                // `process`).
                f.lru_at = now;
                self.lists.move_to_back(&mut self.slab, ListId::Lru, i);
            }
        }
        while let Some(i) = self.lists.head(ListId::Active) {
            let f = &self.slab.flows[i as usize];
            if now.nanos_since(f.anchor) < self.cfg_active_ns {
                break;
            }
            if f.packets() > 0 {
                self.stats.records += 1;
                out(self.interim_record(i, EndReason::Active));
            }
            self.reset_interval(i);
            self.slab.flows[i as usize].anchor = now;
            self.lists.move_to_back(&mut self.slab, ListId::Active, i);
        }
        self.next_deadline = self.earliest_deadline();
    }

    /// The earliest time any list head is due (exact after `expire`).
    pub(super) fn earliest_deadline(&self) -> Timestamp {
        let slab = &self.slab.flows;
        let at = |l: ListId, due: &dyn Fn(&Flow) -> Timestamp| {
            self.lists
                .head(l)
                .map_or(Timestamp(u64::MAX), |i| due(&slab[i as usize]))
        };
        let idle = self.cfg_idle_ns;
        let active = self.cfg_active_ns;
        let closing = self
            .lists
            .head(ListId::Closing)
            .map_or(Timestamp(u64::MAX), |i| self.slab.close_deadline(i));
        closing
            .min(at(ListId::Lru, &|f| f.lru_at.saturating_add_nanos(idle)))
            .min(at(ListId::Active, &|f| {
                f.anchor.saturating_add_nanos(active)
            }))
    }

    /// Makes room for one flow: ends the least recently seen one, as far as
    /// a bounded CLOCK sweep can tell (flows at the LRU head that saw packets
    /// since they were queued get a second chance).
    pub(super) fn evict_one(&mut self, out: &mut impl FnMut(FlowRecord)) {
        const SECOND_CHANCES: usize = 32;
        let now = self.now;
        for _ in 0..SECOND_CHANCES {
            let Some(i) = self.lists.head(ListId::Lru) else {
                return;
            };
            let f = &mut self.slab.flows[i as usize];
            if f.last <= f.lru_at {
                break;
            }
            f.lru_at = now;
            self.lists.move_to_back(&mut self.slab, ListId::Lru, i);
        }
        if let Some(i) = self.lists.head(ListId::Lru) {
            self.stats.evicted += 1;
            self.end(i, EndReason::Evicted, out);
        }
        self.warm_next_victims();
    }

    /// A full table under a stream of new flows (a SYN flood) evicts once
    /// per packet, always at the LRU head: the coldest entry in the table,
    /// whose slab entry and index slot would each cost a memory round trip
    /// on the critical path. So each eviction prepares the next ones: the
    /// entry after the new head is prefetched (the head itself was, by the
    /// eviction before), and so are the head's TCP state, its index slot
    /// (from the address it was inserted at) and the index control bytes
    /// its removal will probe (from its hash, `index::IndexLayout`).
    fn warm_next_victims(&self) {
        let Some(head) = self.lists.head(ListId::Lru) else {
            return;
        };
        let Some(f) = self.slab.flows.get(head as usize) else {
            return;
        };
        let next = f.links[ListId::Lru as usize].next;
        if let Some(n) = self.slab.flows.get(next as usize) {
            super::prefetch(n, std::mem::size_of::<Flow>());
        }
        // The head's entry is in cache by now: its TCP state, which its
        // record reads, can be on its way too.
        if f.kind == Kind::Tcp
            && let Some(t) = self.slab.tcp.get(f.side)
        {
            super::prefetch(t, std::mem::size_of::<TcpState>());
        }
        // Its removal probes the index from the group its hash points at:
        // control bytes of the coldest flow, never in cache either.
        self.layout.prefetch_group(self.hasher.hash_one(f.key));
        if f.index_hint != NO_HINT {
            let off = f.index_hint as isize * size_of::<IndexSlot>() as isize;
            super::prefetch(self.hint_base.wrapping_add_signed(off) as *const u8, 1);
        }
    }

    /// Applies new idle/active/linger timeouts to the running table (config
    /// reload). Flows keep their state; every deadline is re-evaluated at
    /// the next packet or tick. Capacity and NPM need a new table.
    pub fn set_timeouts(&mut self, cfg: &FlowConfig) {
        self.cfg_idle_ns = dur_ns(cfg.idle_timeout);
        self.cfg_active_ns = dur_ns(cfg.active_timeout);
        self.cfg_linger_ns = dur_ns(cfg.tcp_linger);
        self.next_deadline = Timestamp::ZERO;
    }

    /// Advances packet time without a packet (a live worker calls this when
    /// its queue is quiet, with the current capture-clock time).
    pub fn tick(&mut self, now: Timestamp, out: &mut impl FnMut(FlowRecord)) {
        self.ts_stats.tick(now);
        if now > self.now {
            self.now = now;
            if now >= self.next_deadline {
                self.expire(out);
            }
        }
    }

    /// Ends every flow (end of input, shutdown), oldest first.
    pub fn flush(&mut self, out: &mut impl FnMut(FlowRecord)) {
        while let Some(i) = self.lists.head(ListId::Lru) {
            self.end(i, EndReason::Forced, out);
        }
    }
}
