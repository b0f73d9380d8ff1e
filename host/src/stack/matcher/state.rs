//! The matcher's state per flow: tracks of observations per layer, the
//! anchors waiting, the statistics so far; and the edges of the current
//! observation window.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::hooks::Layer;
use crate::stack::matcher::types::RawSample;
use crate::stack::stats::Samples;

#[derive(Clone, Copy, Debug)]
pub(super) struct Obs {
    pub(super) b: u64,
    pub(super) e: u64,
    pub(super) t: u64,
}

#[derive(Debug)]
pub(super) struct Track {
    pub(super) layer: Layer,
    pub(super) netns: u32,
    pub(super) obs: VecDeque<Obs>,
    /// Highest end position seen (0: none yet).
    pub(super) highest: u64,
    /// End of the observations forgotten as older than the hold: a byte
    /// below it that still lacks a later layer's time is a slow one.
    pub(super) aged_to: u64,
    pub(super) tgid: u32,
}

impl Track {
    /// Time of the observation holding byte `pos`; `None` when the track
    /// skipped it.
    pub(super) fn time_of(&self, pos: u64) -> Option<u64> {
        let i = self.obs.partition_point(|o| o.e <= pos);
        self.obs.get(i).filter(|o| o.b <= pos).map(|o| o.t)
    }
}

/// Turns 32-bit sequence numbers into positions that only grow. Positions
/// start at 2^32 so a first event's neighbours below it stay positive.
#[derive(Debug)]
pub(super) struct Unwrap {
    pub(super) seq: u32,
    pub(super) pos: u64,
}

impl Unwrap {
    pub(super) fn new(seq: u32) -> Self {
        Unwrap { seq, pos: 1 << 32 }
    }

    pub(super) fn pos(&mut self, seq: u32) -> u64 {
        let d = seq.wrapping_sub(self.seq) as i32;
        let p = self.pos.saturating_add_signed(i64::from(d));
        if d > 0 {
            self.seq = seq;
            self.pos = p;
        }
        p
    }
}

#[derive(Debug, Default)]
pub(super) struct FlowStats {
    pub(super) segs: BTreeMap<(Layer, Layer), Samples>,
    pub(super) t8: Samples,
    pub(super) complete: u64,
    pub(super) incomplete: u64,
    pub(super) negative: u64,
    /// Timed bytes left out by the time-based sampling.
    pub(super) thinned: u64,
    /// Timed bytes held out: slower than the hold ([`FlowReport::cut`]).
    pub(super) cut: u64,
    /// Timed bytes the observation's edges cut ([`FlowReport::edge`]).
    pub(super) edge: u64,
    /// First layer's time of the last byte counted.
    pub(super) last_counted_ns: Option<u64>,
}

#[derive(Debug)]
pub(super) struct Flow {
    pub(super) unwrap: Unwrap,
    /// A window opened since this flow's last event: the stream moved on
    /// unwatched by an unknown amount (more than 2^31 bytes at 20 Gbit/s
    /// in a second), so the next event starts a new stretch of positions.
    pub(super) resync: bool,
    pub(super) tracks: Vec<Track>,
    /// Position → event time the anchor was created.
    pub(super) anchors: BTreeMap<u64, u64>,
    /// Recent positions given up on (cut, incomplete, edge): a byte is
    /// decided once, so a later layer's event (a read ending on a byte
    /// given up as slow) does not make it anew. Bounded
    /// ([`GAVE_UP_KEPT`], the lowest go first).
    pub(super) gave_up: BTreeSet<u64>,
    pub(super) first_ns: u64,
    pub(super) last_ns: u64,
    /// When the sender's and the receiver's sockets closed (the kernel's
    /// CLOSE state change of each).
    pub(super) closed_tx: Option<u64>,
    pub(super) closed_rx: Option<u64>,
    pub(super) report_start_ns: u64,
    pub(super) record_seq: u32,
    pub(super) skipped: u64,
    pub(super) stats: FlowStats,
}

/// When the current observation window opened and its entry closed
/// (monotonic ns, the events' clock): what tells an anchor cut by the
/// window from one a layer skipped.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Edges {
    pub(super) opened_ns: Option<u64>,
    pub(super) closing_ns: Option<u64>,
    /// The previous window's entry closing: what came up between it and
    /// this window's opening was let in unwatched.
    pub(super) prev_closing_ns: Option<u64>,
    /// Everything detached (the drain ended).
    pub(super) closed: bool,
}

impl Edges {
    /// `missing`: per expected track in stream order, whether it has no
    /// time for the anchor. Cut at the start: only a prefix is missing
    /// (the byte had passed those layers before they were watched) and
    /// the anchor came up within the hold after the opening. Cut at the
    /// end: the anchor came up after the entry closed. (A byte still on
    /// its way when the drain gave up is slow, not cut by the window:
    /// [`held_out`].)
    pub(super) fn cut(&self, created: u64, missing: &[bool], hold_ns: u64) -> bool {
        if self.closing_ns.is_some_and(|c| created >= c) {
            return true;
        }
        if let (Some(c), Some(o)) = (self.prev_closing_ns, self.opened_ns)
            && created >= c
            && created < o
        {
            return true;
        }
        let Some(open) = self.opened_ns else {
            return false;
        };
        let first_seen = missing.iter().position(|m| !m).unwrap_or(missing.len());
        let prefix = first_seen > 0 && missing[first_seen..].iter().all(|m| !m);
        prefix && created >= open && created - open <= hold_ns
    }
}

/// Whether only a suffix of the layers lacks the byte: it passed the
/// first ones and had not reached the rest (still on its way, or lost
/// after them), as opposed to a layer in the middle skipping it.
pub(super) fn suffix_missing(missing: &[bool]) -> bool {
    let last_seen = missing.iter().rposition(|m| !m);
    last_seen.is_some_and(|i| i + 1 < missing.len())
        && missing[..=last_seen.unwrap_or(0)].iter().all(|m| !m)
}

/// A byte given up on because it was slow: it had not reached every
/// layer when the hold ran out (`old`) or when a window's drain, bounded
/// by the hold, ended (`edges.closed`). Counted as `cut`, never silently.
pub(super) fn held_out(edges: &Edges, old: bool, missing: &[bool]) -> bool {
    (old || edges.closed) && suffix_missing(missing)
}

/// How long after a window opens a byte counts as entering "early", for
/// the measurement of whether attaching disturbs what it times.
pub const EARLY_NS: u64 = 5_000_000;

/// What resolving adds up across flows: the raw samples file's lines,
/// bytes held out, and T8 of bytes that entered within [`EARLY_NS`] of a
/// window's opening versus later.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) raw: Vec<RawSample>,
    pub(super) cut: u64,
    pub(super) t8_early: Samples,
    pub(super) t8_rest: Samples,
}

/// Positions given up on that a flow remembers (8 bytes each).
pub(super) const GAVE_UP_KEPT: usize = 1024;

impl Flow {
    /// When this direction's data is all through: the receiving socket
    /// closed (no read can come after), or, when no receiving socket is
    /// seen here (it is on another host), the sending one. The sender's
    /// close alone is not the end when the receiver is here: an orphaned
    /// socket reaches CLOSE as soon as its FIN is acknowledged, while the
    /// reader may still be reading what was sent before.
    pub(super) fn ended_at(&self) -> Option<u64> {
        let reader_here = self.tracks.iter().any(|t| t.layer == Layer::SockRx);
        if reader_here {
            self.closed_rx
        } else {
            self.closed_rx.or(self.closed_tx)
        }
    }

    /// Whether an anchor may be made at `pos`: not one given up on.
    pub(super) fn may_anchor(&self, pos: u64) -> bool {
        !self.gave_up.contains(&pos)
    }

    pub(super) fn give_up(&mut self, pos: u64) {
        self.gave_up.insert(pos);
        if self.gave_up.len() > GAVE_UP_KEPT {
            self.gave_up.pop_first();
        }
    }
}
