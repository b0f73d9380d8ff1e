//! The flow table's link to the L7 parsers (`xdprobe-l7`): one 8-byte
//! [`Slot`] per flow slot, in a column of its own beside the flow entries
//! (so the entry keeps its size and layout), and the worker's L7 engine.
//!
//! The table shows the engine a flow's payloads until the engine says it
//! has what it needs; the entry's `L7_DONE` bit then keeps later packets
//! from touching this column at all. A record asks for the flow's label
//! and fields; the flow's end gives its state back. This is the whole
//! integration: the engine owns the parser state, bounded per worker
//! (`L7Config::max_flows`, `buffers`).

use xdprobe_l7::{App, L7, L7Config, L7Fields, L7Stats, Progress, Segment, Slot};

use super::mem::AllocError;

pub(crate) struct L7Column {
    engine: L7,
    slots: Vec<Slot>,
}

impl L7Column {
    /// The engine's settings for a table of `capacity` flows: no more
    /// parser states than flows.
    fn fit(cfg: &L7Config, capacity: usize) -> L7Config {
        L7Config {
            max_flows: cfg.max_flows.min(capacity),
            ..*cfg
        }
    }

    /// Bytes a column for `capacity` flows takes at most: its slots, and
    /// the engine's pools full.
    pub fn memory_bytes(cfg: &L7Config, capacity: usize) -> u64 {
        (capacity * size_of::<Slot>()) as u64 + Self::fit(cfg, capacity).memory_bytes()
    }

    pub fn try_new(cfg: &L7Config, capacity: usize) -> Result<Self, AllocError> {
        let mut slots = Vec::new();
        slots.try_reserve_exact(capacity).map_err(|_| AllocError {
            what: "the flow table's L7 slots",
            bytes: (capacity * size_of::<Slot>()) as u64,
        })?;
        slots.resize(capacity, Slot::default());
        Ok(L7Column {
            engine: L7::new(Self::fit(cfg, capacity)),
            slots,
        })
    }

    /// One payload of flow `i`; true when the flow needs no more.
    #[inline]
    pub fn on_payload(&mut self, i: u32, seg: &Segment<'_>) -> bool {
        match self.slots.get_mut(i as usize) {
            Some(slot) => self.engine.on_segment(slot, seg) == Progress::Done,
            None => true,
        }
    }

    /// Flow `i`'s label and fields for an interim record.
    pub fn record(&self, i: u32) -> (Option<App>, Option<L7Fields>) {
        match self.slots.get(i as usize) {
            Some(s) => (Some(self.engine.app(s)), self.engine.fields(s)),
            None => (None, None),
        }
    }

    /// Flow `i`'s label and fields for its last record; its state is
    /// released.
    pub fn finish(&mut self, i: u32) -> (Option<App>, Option<L7Fields>) {
        match self.slots.get_mut(i as usize) {
            Some(s) => {
                let (app, f) = self.engine.finish(s);
                (Some(app), f)
            }
            None => (None, None),
        }
    }

    /// Flow `i` ended without a record: release its state.
    pub fn release(&mut self, i: u32) {
        if let Some(s) = self.slots.get_mut(i as usize) {
            self.engine.release(s);
        }
    }

    pub fn end_interval(&mut self, i: u32) {
        if let Some(s) = self.slots.get_mut(i as usize) {
            self.engine.end_interval(s);
        }
    }

    pub fn stats(&self) -> &L7Stats {
        self.engine.stats()
    }

    /// Bytes the engine holds now (pool high-water marks) plus the slots.
    pub fn allocated_bytes(&self) -> usize {
        self.engine.allocated_bytes() + self.slots.len() * size_of::<Slot>()
    }
}
