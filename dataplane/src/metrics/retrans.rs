//! Retransmission, out-of-order, keep-alive and duplicate-ACK classification
//! (`docs/spec/npm-metrics.md` §3), and the receive-window events zero window and
//! window full, one segment at a time, per direction.
//!
//! Terms, exactly as the spec defines them (sequence arithmetic modulo 2^32
//! through [`SeqNumber`]):
//! - *segment length* (SEG.LEN, RFC 9293 §3.4) = data length + 1 for SYN +
//!   1 for FIN; *data length* = TCP payload length.
//! - *expected SEQ* of a direction = the highest SEQ + segment length seen so
//!   far in it (every segment, pure ACKs included, so a flow picked up
//!   mid-stream has one after its first segment).
//! - *keep-alive*: data length 0 or 1, SEQ = expected − 1, no SYN/FIN/RST.
//! - *duplicate ACK*: data length 0, no SYN/FIN/RST, ACK flag set, ACK number
//!   and window equal to those of the previous segment in this direction
//!   (which also carried ACK), SEQ = expected, and a window other than 0.
//!   The last condition is Wireshark's, not the spec's: a receiver that
//!   repeats its zero-window ACK is waiting for its application, not
//!   signalling a loss, and counting it would turn the next segment into a
//!   "fast retransmission" (`docs/npm-vs-wireshark.md`).
//!
//! Evaluation (only segments with data or SYN/FIN, keep-alives skipped),
//! first match wins:
//! 1. fast retransmission: SEQ < expected, the reverse direction's current
//!    run of duplicate ACKs (reset when its ACK number changes) is ≥ 2, SEQ
//!    = their ACK number, and at most 20 ms (inclusive) since the last one;
//! 2. out of order: SEQ < expected, at most *threshold* (inclusive) since the
//!    segment that set expected, and SEQ + SEG.LEN ≠ expected;
//! 3. spurious: data length > 0 and SEQ + data length ≤ the last ACK number
//!    the reverse direction sent (segments with the ACK flag only);
//! 4. retransmission: SEQ < expected.
//!
//! "Length" in rule 2 is SEG.LEN (a retransmitted FIN ends exactly at
//! expected and is a retransmission of the last segment, not reordering);
//! in rule 3 it is the data length (the spec's "length > 0" would be
//! vacuous for SEG.LEN, since only segments with data or SYN/FIN get here).
//!
//! Window events follow Wireshark 4.0's TCP analysis (`packet-tcp.c`), which
//! Flowmon and nProbe users read in the same sense (checked against tshark's
//! `tcp.analysis.zero_window` / `window_full` by `tests/npm_oracle.rs`):
//! - *zero window*: window 0 and no SYN/FIN/RST; not on a zero-window probe
//!   (1 byte at expected SEQ while the other side's window is 0);
//! - *window full*: data length > 0, no SYN/FIN/RST, and the segment ends
//!   exactly at the other side's right window edge: its last ACK number +
//!   its last window, scaled by its window scale (RFC 7323 §2; unscaled when
//!   that window came on a SYN, shift capped at 14). Only when the scale is
//!   known from the handshake ([`note_window_scale`]): a flow picked up
//!   mid-stream never has a window-full event.

use super::seq::SeqNumber;
use crate::parse::TcpFlags;

/// 20 ms fast-retransmission window after the last duplicate ACK.
pub const FAST_RETRANS_WINDOW_NS: u64 = 20_000_000;
/// Out-of-order threshold when the handshake RTT is not known.
pub const DEFAULT_OOO_THRESHOLD_NS: u64 = 3_000_000;

const SEQ_KNOWN: u8 = 1;
/// `ack` holds the last ACK number this direction sent.
const ACK_KNOWN: u8 = 1 << 1;
/// The previous segment in this direction carried the ACK flag.
const PREV_ACK: u8 = 1 << 2;
/// The previous segment in this direction carried SYN: its window is not
/// scaled (RFC 7323 §2.2).
const PREV_SYN: u8 = 1 << 3;

/// RFC 7323 §2.3: a larger shift count is used as 14.
const MAX_WINDOW_SHIFT: u8 = 14;

/// How this direction's window field scales, as far as the handshake told:
/// `SCALE_UNKNOWN` (no SYN seen), `SCALE_NONE` (a SYN without the option on
/// either side: windows are as written), or the shift count 0..=14.
const SCALE_UNKNOWN: i8 = -1;
const SCALE_NONE: i8 = -2;

/// Sequence state of one direction (24 bytes): what every segment reads or
/// writes. The time of the direction's last duplicate ACK, read only for a
/// segment below expected and written only by a duplicate ACK, is kept
/// apart ([`SeqRare`]), so the per-segment state of both directions fits in
/// the TCP flow's hot cache line (`flow::table`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirSeq {
    /// Time (ns) of the segment that set `next`.
    high_ts: u64,
    /// Expected SEQ: highest SEQ + SEG.LEN seen.
    next: SeqNumber,
    /// Last ACK number sent (ACK-flagged segments only).
    ack: SeqNumber,
    /// Window of the previous segment (raw, unscaled: comparing equal raw
    /// values is what "window equal" needs).
    win: u16,
    /// Duplicate ACKs in the current run (same ACK number), saturating.
    dup_run: u16,
    flags: u8,
    /// Window scale of this direction's window field (`SCALE_*` or shift).
    scale: i8,
}

const _: () = assert!(size_of::<DirSeq>() == 24);

impl Default for DirSeq {
    fn default() -> Self {
        DirSeq {
            high_ts: 0,
            next: SeqNumber(0),
            ack: SeqNumber(0),
            win: 0,
            dup_run: 0,
            flags: 0,
            scale: SCALE_UNKNOWN,
        }
    }
}

/// What classification needs only for rare segments, kept out of
/// [`DirSeq`] by the caller (the TCP tracker keeps it with its other
/// rarely touched state). None of these is called for a segment at or
/// above the expected SEQ that is not a duplicate ACK.
pub trait SeqRare {
    /// The out-of-order threshold (handshake RTT or
    /// [`DEFAULT_OOO_THRESHOLD_NS`]); asked for segments below expected.
    fn threshold_ns(&self) -> u64;
    /// When the reverse direction sent its last duplicate ACK; asked only
    /// when a fast retransmission is otherwise possible.
    fn rev_dupack_ns(&self) -> u64;
    /// This direction sent a duplicate ACK at `ts_ns`.
    fn set_dupack_ns(&mut self, ts_ns: u64);
}

/// [`SeqRare`] over plain values, for code that keeps everything in one
/// place (tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RareValues {
    pub threshold_ns: u64,
    pub rev_dupack_ns: u64,
    pub dupack_ns: u64,
}

impl SeqRare for RareValues {
    fn threshold_ns(&self) -> u64 {
        self.threshold_ns
    }
    fn rev_dupack_ns(&self) -> u64 {
        self.rev_dupack_ns
    }
    fn set_dupack_ns(&mut self, ts_ns: u64) {
        self.dupack_ns = ts_ns;
    }
}

/// What a segment is, by the first matching rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// New data, a pure ACK, or anything not evaluated.
    Normal,
    KeepAlive,
    FastRetrans,
    OutOfOrder,
    SpuriousRetrans,
    Retrans,
}

/// The outcome for one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub class: Class,
    /// Duplicate ACK (independent of `class`: a dup ACK has no data).
    pub dup_ack: bool,
    /// This segment advertises a zero window.
    pub zero_window: bool,
    /// This segment fills the other side's advertised window.
    pub window_full: bool,
}

/// Records the window-scale option of a SYN or SYN+ACK travelling in `fwd`
/// (`rev` is the other direction), as RFC 7323 §2.2 has the two ends
/// decide: scaling is in force only if both SYNs carry the option. A SYN
/// without it means no scaling either way; a SYN+ACK with it answering a
/// SYN without it changes nothing.
pub fn note_window_scale(fwd: &mut DirSeq, rev: &mut DirSeq, synack: bool, opt: Option<u8>) {
    if let Some(shift) = opt {
        fwd.scale = shift.min(MAX_WINDOW_SHIFT) as i8;
    }
    if fwd.scale == SCALE_UNKNOWN {
        fwd.scale = SCALE_NONE;
        rev.scale = SCALE_NONE;
    } else if synack && rev.scale == SCALE_NONE {
        fwd.scale = SCALE_NONE;
    }
}

/// The header fields classification needs.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub seq: SeqNumber,
    pub ack: SeqNumber,
    pub flags: TcpFlags,
    pub window: u16,
    pub data_len: u32,
    pub ts_ns: u64,
}

impl DirSeq {
    /// Expected SEQ, if any segment has been seen in this direction.
    pub fn expected(&self) -> Option<SeqNumber> {
        (self.flags & SEQ_KNOWN != 0).then_some(self.next)
    }

    /// The right edge of the window this direction last advertised (its
    /// ACK number + its window, scaled), when the scale is known.
    fn window_edge(&self) -> Option<SeqNumber> {
        if self.flags & ACK_KNOWN == 0 || self.scale == SCALE_UNKNOWN {
            return None;
        }
        let shift = if self.flags & PREV_SYN != 0 || self.scale == SCALE_NONE {
            0
        } else {
            self.scale.unsigned_abs()
        };
        Some(self.ack.add(u32::from(self.win) << shift))
    }

    /// Classifies `seg` travelling in this direction and updates the state;
    /// `rev` is the opposite direction, `rare` what only rare segments
    /// need (the out-of-order threshold, duplicate-ACK times).
    #[inline]
    pub fn on_segment(&mut self, rev: &DirSeq, seg: &Segment, rare: &mut impl SeqRare) -> Outcome {
        let f = seg.flags;
        let syn = f.contains(TcpFlags::SYN);
        let fin = f.contains(TcpFlags::FIN);
        let sfr = f.intersects(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST);
        let has_ack = f.contains(TcpFlags::ACK);
        let seg_len = seg.data_len.wrapping_add(u32::from(syn) + u32::from(fin));
        let known = self.flags & SEQ_KNOWN != 0;

        let keepalive = known && seg.data_len <= 1 && !sfr && seg.seq == self.next.sub(1);
        let dup_ack = known
            && seg.data_len == 0
            && !sfr
            && has_ack
            && seg.window != 0
            && self.flags & PREV_ACK != 0
            && seg.window == self.win
            && seg.ack == self.ack
            && seg.seq == self.next;
        // A zero-window probe is neither event (Wireshark stops there); a
        // reverse direction not seen yet counts as window 0, as there.
        let probe = known
            && seg.data_len == 1
            && seg.seq == self.next
            && (rev.flags & SEQ_KNOWN == 0 || rev.win == 0);
        let zero_window = !probe && seg.window == 0 && !sfr;
        let window_full = !probe
            && seg.data_len > 0
            && !sfr
            && rev
                .window_edge()
                .is_some_and(|edge| seg.seq.add(seg.data_len) == edge);

        let class = if keepalive {
            Class::KeepAlive
        } else if seg.data_len > 0 || syn || fin {
            if known && seg.seq.before(self.next) {
                self.classify_below(rev, seg, seg_len, rare)
            } else if spurious(rev, seg) {
                Class::SpuriousRetrans
            } else {
                Class::Normal
            }
        } else {
            Class::Normal
        };

        let end = seg.seq.add(seg_len);
        if !known || end.after(self.next) {
            self.next = end;
            self.high_ts = seg.ts_ns;
            self.flags |= SEQ_KNOWN;
        }
        if has_ack {
            if dup_ack {
                self.dup_run = self.dup_run.saturating_add(1);
                rare.set_dupack_ns(seg.ts_ns);
            } else if self.flags & ACK_KNOWN == 0 || seg.ack != self.ack {
                self.dup_run = 0;
            }
            self.ack = seg.ack;
            self.flags |= ACK_KNOWN | PREV_ACK;
        } else {
            self.flags &= !PREV_ACK;
        }
        if syn {
            self.flags |= PREV_SYN;
        } else {
            self.flags &= !PREV_SYN;
        }
        self.win = seg.window;
        Outcome {
            class,
            dup_ack,
            zero_window,
            window_full,
        }
    }

    /// Rules 1–4 for a segment with data or SYN/FIN whose SEQ is below
    /// expected (a retransmission of some kind, or reordering): out of line,
    /// as it is the only place that reads `rare` but for a duplicate ACK's
    /// time.
    #[cold]
    #[inline(never)]
    fn classify_below(
        &self,
        rev: &DirSeq,
        seg: &Segment,
        seg_len: u32,
        rare: &impl SeqRare,
    ) -> Class {
        if rev.dup_run >= 2
            && seg.seq == rev.ack
            && seg.ts_ns.saturating_sub(rare.rev_dupack_ns()) <= FAST_RETRANS_WINDOW_NS
        {
            Class::FastRetrans
        } else if seg.ts_ns.saturating_sub(self.high_ts) <= rare.threshold_ns()
            && seg.seq.add(seg_len) != self.next
        {
            Class::OutOfOrder
        } else if spurious(rev, seg) {
            Class::SpuriousRetrans
        } else {
            Class::Retrans
        }
    }
}

/// Rule 3: data the reverse direction has already acknowledged.
#[inline]
fn spurious(rev: &DirSeq, seg: &Segment) -> bool {
    seg.data_len > 0
        && rev.flags & ACK_KNOWN != 0
        && seg.seq.add(seg.data_len).at_or_before(rev.ack)
}
