//! One worker: parse → flow table, with its own counters. The pcap reader and
//! each live AF_XDP queue drive the same `Worker`, so a packet is accounted
//! the same way whatever its source.

use crate::flow::record::FlowRecord;
use crate::flow::{FlowConfig, FlowTable, TableStats};
use crate::parse::{self, DropCounters, DropReason, LinkType};
use crate::time::Timestamp;

/// Counters of one worker, summed across workers when read.
#[derive(Clone, Debug, Default)]
pub struct WorkerStats {
    /// Frames handed to the worker (used or not).
    pub frames: u64,
    pub table: TableStats,
    pub active_flows: u64,
    pub drops: DropCounters,
    pub frag_unattributed: u64,
}

pub struct Worker {
    table: FlowTable,
    drops: DropCounters,
    frames: u64,
}

impl Worker {
    pub fn new(cfg: &FlowConfig) -> Self {
        Worker {
            table: FlowTable::new(cfg),
            drops: DropCounters::default(),
            frames: 0,
        }
    }

    /// Accounts one captured frame. `link` is `None` for a link type the
    /// parser does not handle (counted, not parsed).
    #[inline]
    pub fn on_frame(
        &mut self,
        link: Option<LinkType>,
        frame: &[u8],
        wire_len: u32,
        ts: Timestamp,
        out: &mut impl FnMut(FlowRecord),
    ) {
        self.frames += 1;
        let Some(link) = link else {
            self.drops.inc(DropReason::UnsupportedLinkType);
            return;
        };
        match parse::parse(link, frame, wire_len) {
            Ok(meta) => self.table.process(&meta, ts, out),
            Err(reason) => self.drops.inc(reason),
        }
    }

    /// New timeouts from a config reload (see `FlowTable::set_timeouts`).
    pub fn set_timeouts(&mut self, cfg: &FlowConfig) {
        self.table.set_timeouts(cfg);
    }

    /// Lets time pass without packets (live capture on a quiet queue).
    pub fn on_tick(&mut self, now: Timestamp, out: &mut impl FnMut(FlowRecord)) {
        self.table.tick(now, out);
    }

    /// Ends every active flow (end of input, shutdown).
    pub fn flush(&mut self, out: &mut impl FnMut(FlowRecord)) {
        self.table.flush(out);
    }

    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            frames: self.frames,
            table: self.table.stats(),
            active_flows: self.table.len() as u64,
            drops: self.drops.clone(),
            frag_unattributed: self.table.frag_stats().unattributed,
        }
    }
}
