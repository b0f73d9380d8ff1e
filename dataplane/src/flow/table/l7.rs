//! The flow table's link to the L7 parsers (`xdprobe-l7`): the worker's
//! engine, and the packets and records that reach it.
//!
//! A flow's handle into the engine (an 8-byte `xdprobe_l7::Slot`) is in
//! its cold entry (`Cold::l7`), and its head's `L7_INSPECT` bit says
//! whether its payloads still go to the engine. The bit is set when the
//! flow is created (with L7 on) and cleared when the engine has what it
//! needs, so a packet of a flow whose inspection is finished, or that has
//! none, reads one bit of the hot line it already has and touches no L7
//! state. A record asks the engine for the flow's label and fields; the
//! flow's end gives its state back. The engine owns the parser state,
//! bounded per worker (`L7Config::max_flows`, `buffers`).

use xdprobe_l7::{L7, L7Config, L7Fields, L7Stats, Progress, Segment, Slot, Transport};

use super::FlowTable;
use crate::flow::key::Side;
use crate::parse::PacketMeta;
use crate::record::{Dir, EndReason, FlowRecord};
use crate::time::Timestamp;

/// The worker's L7 engine.
pub(super) struct L7Parsers {
    engine: L7,
}

impl L7Parsers {
    /// The engine's settings for a table of `capacity` flows: no more
    /// parser states than flows.
    fn fit(cfg: &L7Config, capacity: usize) -> L7Config {
        L7Config {
            max_flows: cfg.max_flows.min(capacity),
            ..*cfg
        }
    }

    /// Bytes the engine takes at most for a table of `capacity` flows (its
    /// pools full; the flows' handles are counted in the cold entries).
    pub fn memory_bytes(cfg: &L7Config, capacity: usize) -> u64 {
        Self::fit(cfg, capacity).memory_bytes()
    }

    pub fn new(cfg: &L7Config, capacity: usize) -> Self {
        L7Parsers {
            engine: L7::new(Self::fit(cfg, capacity)),
        }
    }
}

impl FlowTable {
    /// The L7 parsers' counters (zero with L7 off), and the bytes their
    /// state holds now (the engine's pools and the handles of the flows
    /// the table can hold).
    pub fn l7_stats(&self) -> (L7Stats, u64) {
        self.l7.as_ref().map_or((L7Stats::default(), 0), |p| {
            let handles = self.capacity * size_of::<Slot>();
            (
                *p.engine.stats(),
                (p.engine.allocated_bytes() + handles) as u64,
            )
        })
    }

    /// Shows flow `id`'s payload to the L7 parsers (out of line: a packet
    /// gets here only while its flow's head says `l7_inspect`).
    #[inline(never)]
    pub(super) fn l7_payload(
        &mut self,
        id: u32,
        dir: Dir,
        transport: Transport,
        pkt: &PacketMeta<'_>,
        ts: Timestamp,
        t_snt: Option<u64>,
    ) {
        let Some(p) = self.l7.as_mut() else {
            return;
        };
        let l7_dir = match dir {
            Dir::C2S => xdprobe_l7::Dir::C2S,
            Dir::S2C => xdprobe_l7::Dir::S2C,
        };
        if let Transport::Tcp { seq, .. } = transport
            && p.engine
                .passes_over(&self.slabs.cold(id).l7, l7_dir, seq, pkt.payload_len)
        {
            return;
        }
        // The ports from the compact key in the hot line the packet already
        // read (an IPv6 flow's addresses, in a column of their own, are not
        // needed).
        let head = self.slabs.head_ref(id);
        let (lo, hi) = head.key.ports();
        let ports = if head.client() == Side::Lo {
            (lo, hi)
        } else {
            (hi, lo)
        };
        let seg = Segment {
            dir: l7_dir,
            transport,
            payload: pkt.payload,
            wire_len: pkt.payload_len,
            ts_ns: ts.as_nanos(),
            ports,
            t_snt_ns: t_snt.unwrap_or(0),
        };
        let slot = &mut self.slabs.cold_mut(id).l7;
        match p.engine.on_segment(slot, &seg) {
            // A direction given up while nothing matched is shown again
            // once the other one matched: the parser follows both.
            Progress::More if slot.has_state() => self.slabs.head_mut(id).set_l7_inspect(),
            Progress::More => {}
            Progress::Done => self.slabs.head_mut(id).clear_l7_inspect(),
            Progress::DoneDir(_) => self.slabs.head_mut(id).clear_l7_inspect_dir(dir),
        }
    }

    /// The record of flow `id`'s current interval with its L7 label and
    /// fields (an interim record: the flow goes on).
    pub(super) fn interim_record(&self, id: u32, reason: EndReason) -> FlowRecord {
        let mut rec = self.record(id, reason);
        if let Some(p) = self.l7.as_ref() {
            let slot = &self.slabs.cold(id).l7;
            (rec.app, rec.l7) = (Some(p.engine.app(slot)), p.engine.fields(slot));
        }
        rec
    }

    /// Flow `id`'s label and fields for its last record (`Some` with L7
    /// on); its L7 state is released.
    pub(super) fn l7_finish(&mut self, id: u32) -> Option<(xdprobe_l7::App, Option<L7Fields>)> {
        let p = self.l7.as_mut()?;
        Some(p.engine.finish(&mut self.slabs.cold_mut(id).l7))
    }

    /// Flow `id` ended without a record: its L7 state is released.
    pub(super) fn l7_release(&mut self, id: u32) {
        if let Some(p) = self.l7.as_mut() {
            p.engine.release(&mut self.slabs.cold_mut(id).l7);
        }
    }

    /// Flow `id` starts a new interval: its per-interval counts restart.
    pub(super) fn l7_end_interval(&mut self, id: u32) {
        if let Some(p) = self.l7.as_mut() {
            p.engine.end_interval(&mut self.slabs.cold_mut(id).l7);
        }
    }
}
