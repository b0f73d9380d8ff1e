//! Expiry of the flow table: the time-ordered lists' heads, the cached next
//! deadline, eviction when full, timeouts changed at run time, flush.
//! Everything runs on packet time (`FlowTable::now`), never the clock.

use super::{FlowConfig, FlowTable, dur_ns};
use crate::flow::lru::ListId;
use crate::record::{EndReason, FlowRecord};
use crate::time::Timestamp;

impl FlowTable {
    /// Runs every expiry whose time has come at `self.now`.
    pub(super) fn expire(&mut self, out: &mut impl FnMut(FlowRecord)) {
        let now = self.now;
        while let Some(i) = self.lists.head(ListId::Closing) {
            if self.slabs.close_deadline(i) > now {
                break;
            }
            self.end(i, EndReason::End, out);
        }
        while let Some(i) = self.lists.head(ListId::Lru) {
            if now.nanos_since(self.slabs.cold(i).lru_at) < self.cfg_idle_ns {
                break;
            }
            if now.nanos_since(self.slabs.head_ref(i).last) >= self.cfg_idle_ns {
                self.end(i, EndReason::Idle, out);
            } else {
                // Seen since it was queued: check again an idle period on.
                // So a record leaves between 1× and 2× the idle timeout
                // after its last packet; where a flow ends is exact (see
                // `process`).
                self.slabs.cold_mut(i).lru_at = now;
                self.lists.move_to_back(&mut self.slabs, ListId::Lru, i);
            }
        }
        while let Some(i) = self.lists.head(ListId::Active) {
            if now.nanos_since(self.slabs.cold(i).anchor) < self.cfg_active_ns {
                break;
            }
            if self.slabs.head_ref(i).packets() > 0 {
                self.stats.records += 1;
                out(self.interim_record(i, EndReason::Active));
            }
            self.reset_interval(i);
            self.slabs.cold_mut(i).anchor = now;
            self.lists.move_to_back(&mut self.slabs, ListId::Active, i);
        }
        self.next_deadline = self.earliest_deadline();
        self.warm_heads();
    }

    /// The earliest time any list head is due (exact after `expire`).
    pub(super) fn earliest_deadline(&self) -> Timestamp {
        let never = Timestamp(u64::MAX);
        let (idle, active) = (self.cfg_idle_ns, self.cfg_active_ns);
        let closing = self
            .lists
            .head(ListId::Closing)
            .map_or(never, |i| self.slabs.close_deadline(i));
        let lru = self.lists.head(ListId::Lru).map_or(never, |i| {
            self.slabs.cold(i).lru_at.saturating_add_nanos(idle)
        });
        let act = self.lists.head(ListId::Active).map_or(never, |i| {
            self.slabs.cold(i).anchor.saturating_add_nanos(active)
        });
        closing.min(lru).min(act)
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
            if self.slabs.head_ref(i).last <= self.slabs.cold(i).lru_at {
                break;
            }
            self.slabs.cold_mut(i).lru_at = now;
            self.lists.move_to_back(&mut self.slabs, ListId::Lru, i);
        }
        if let Some(i) = self.lists.head(ListId::Lru) {
            self.stats.evicted += 1;
            self.end(i, EndReason::Evicted, out);
        }
        // A full table under a stream of new flows (a SYN flood) evicts
        // once per packet, always at the LRU head, the coldest flow in the
        // table: the next victims' lines are fetched a flow or two ahead.
        if let Some(h) = self.lists.head(ListId::Lru) {
            self.warm_lru_run(h);
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
            self.warm_lru_run(i);
            self.end(i, EndReason::Forced, out);
        }
    }
}
