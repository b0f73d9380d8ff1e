//! Following one direction of a TCP stream for a parser, with as little
//! copying as the parser allows.
//!
//! The parser (the *consumer*) is shown the contiguous bytes from the
//! first one it has not consumed and answers with an [`Eat`]: how many it
//! used, how many following bytes it does not need to see at all (an HTTP
//! body, a TLS record it skips), and whether it is done with the
//! direction. A segment that arrives in order with nothing held is shown
//! straight from the packet; only bytes the consumer left unused (a head
//! or a hello split across segments) are copied into a reassembly buffer
//! from the worker's pool, bounded by the caller's `bound` (at most
//! [`BUF_BYTES`]).
//!
//! Retransmitted bytes are trimmed. A segment that starts beyond the next
//! expected byte is held as one out-of-order run until the hole before it
//! fills (one run: a second hole loses the stream). Bytes the consumer
//! skips need never arrive, so a lost or uncaptured body segment costs
//! nothing. Anything else that cannot be followed — a hole that will not
//! fill, more held bytes than the bound, a needed byte past the snap
//! length, no free buffer — loses the stream, with the reason returned for
//! the caller to count; the consumer may later restart it at a segment
//! that starts a message ([`Stream::resync`]).

use crate::pool::{BUF_BYTES, BufPool};

const NO_BUF: u32 = u32::MAX;

/// Largest skip followed: beyond it the 32-bit sequence space would make a
/// later segment ambiguous (the stream ends instead).
pub(crate) const MAX_SKIP: u64 = 1 << 30;

/// The consumer's answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Eat {
    /// Bytes used from the start of what it was shown; 0 with no skip
    /// means "show me these again with more".
    pub used: usize,
    /// Bytes after those it does not need to see.
    pub skip: u64,
    /// It needs nothing more from this direction.
    pub done: bool,
    /// The bytes are not what it parses: the stream is lost (the caller
    /// may resync it later).
    pub lost: bool,
}

impl Eat {
    pub const MORE: Eat = Eat {
        used: 0,
        skip: 0,
        done: false,
        lost: false,
    };
    pub const DONE: Eat = Eat {
        done: true,
        ..Eat::MORE
    };
    pub const LOST: Eat = Eat {
        lost: true,
        ..Eat::MORE
    };

    pub fn used(n: usize) -> Eat {
        Eat {
            used: n,
            ..Eat::MORE
        }
    }
}

/// Where a stream stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Follow {
    /// No segment yet: the first one fed sets the position.
    #[default]
    Fresh,
    On,
    Lost,
    Done,
}

/// Why a stream was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    /// A hole before a segment that could not be held.
    Gap,
    /// The consumer needed more than the bound held at once.
    Overflow,
    /// A needed byte was not captured (snap length).
    Snap,
    /// No free reassembly buffer.
    NoBuffer,
    /// A skip beyond [`MAX_SKIP`].
    BigSkip,
    /// The consumer could not parse the bytes.
    Parse,
}

/// One segment as the stream sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg<'a> {
    pub seq: u32,
    /// The captured bytes.
    pub data: &'a [u8],
    /// The payload length on the wire (≥ `data.len()`).
    pub wire: u32,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Stream {
    /// Sequence number of the first byte the consumer has not used.
    pos: u32,
    /// Bytes held from `pos` on, contiguous, in the buffer.
    held: u16,
    /// An out-of-order run in the buffer at offset `ooo_at` from `pos`
    /// (`ooo_len` 0: none); always beyond `held`.
    ooo_at: u16,
    ooo_len: u16,
    buf: u32,
    pub state: Follow,
}

impl Default for Stream {
    fn default() -> Self {
        Stream {
            pos: 0,
            held: 0,
            ooo_at: 0,
            ooo_len: 0,
            buf: NO_BUF,
            state: Follow::Fresh,
        }
    }
}

impl Stream {
    /// Starts (or restarts, dropping what is held) at `seq`.
    pub fn resync(&mut self, pool: &mut BufPool, seq: u32) {
        self.release(pool);
        self.pos = seq;
        self.state = Follow::On;
    }

    /// Starts at `seq` if no segment was fed yet.
    pub fn start_at(&mut self, seq: u32) {
        if self.state == Follow::Fresh {
            self.pos = seq;
            self.state = Follow::On;
        }
    }

    /// Gives the buffer back and ends the stream.
    pub fn finish(&mut self, pool: &mut BufPool) {
        self.release(pool);
        self.state = Follow::Done;
    }

    fn release(&mut self, pool: &mut BufPool) {
        if self.buf != NO_BUF {
            pool.give(self.buf);
            self.buf = NO_BUF;
        }
        self.held = 0;
        self.ooo_len = 0;
    }

    fn lose(&mut self, pool: &mut BufPool, why: Loss) -> Result<(), Loss> {
        self.release(pool);
        self.state = Follow::Lost;
        Err(why)
    }

    /// True while bytes are held (a buffer is in use).
    #[cfg(test)]
    pub fn holding(&self) -> bool {
        self.buf != NO_BUF
    }

    /// Whether feeding a segment at `seq` of `wire` bytes would do nothing:
    /// the stream is followed and every byte of the segment was already
    /// used, skipped or held (the test [`Stream::feed`] makes first, the
    /// same arithmetic).
    #[inline]
    pub fn behind(&self, seq: u32, wire: u32) -> bool {
        let held = i64::from(self.held);
        let off = i64::from(seq.wrapping_sub(self.pos) as i32);
        self.state == Follow::On && off < held && held - off >= i64::from(wire)
    }

    /// Feeds one segment and runs the consumer over whatever became
    /// contiguous.
    pub fn feed(
        &mut self,
        pool: &mut BufPool,
        seg: Seg<'_>,
        bound: usize,
        eat: &mut impl FnMut(u32, &[u8]) -> Eat,
    ) -> Result<(), Loss> {
        match self.state {
            Follow::Fresh => self.start_at(seg.seq),
            Follow::On => {}
            Follow::Lost | Follow::Done => return Ok(()),
        }
        let bound = bound.min(BUF_BYTES);
        let held = i64::from(self.held);
        let mut off = i64::from(seg.seq.wrapping_sub(self.pos) as i32);
        let (mut data, mut wire) = (seg.data, i64::from(seg.wire));
        if off < held {
            // Bytes already held or used: a retransmission or overlap.
            let drop = held - off;
            if drop >= wire {
                return Ok(());
            }
            data = data.get(drop as usize..).unwrap_or(&[]);
            wire -= drop;
            off = held;
        }
        if off > held {
            return self.hold_ooo(pool, off as usize, data, wire as usize, bound);
        }
        let end = self.pos.wrapping_add((off + wire) as u32);
        if self.buf == NO_BUF {
            self.direct(pool, data, bound, eat)?;
        } else {
            self.buffered(pool, data, bound, eat)?;
        }
        // Bytes of this segment that were not captured, not skipped and
        // not the end of the stream's interest: a hole nobody can fill.
        if self.state == Follow::On && (end.wrapping_sub(self.pos) as i32) > i32::from(self.held) {
            return self.lose(pool, Loss::Snap);
        }
        Ok(())
    }

    /// Feeds `seg`, or without one runs the consumer over what is held.
    pub fn drive(
        &mut self,
        pool: &mut BufPool,
        seg: Option<Seg<'_>>,
        bound: usize,
        eat: &mut impl FnMut(u32, &[u8]) -> Eat,
    ) -> Result<(), Loss> {
        match seg {
            Some(s) => self.feed(pool, s, bound, eat),
            None => self.pump(pool, bound, eat),
        }
    }

    /// Runs the consumer over held bytes again (after it changed its mind
    /// about what it parses).
    pub fn pump(
        &mut self,
        pool: &mut BufPool,
        bound: usize,
        eat: &mut impl FnMut(u32, &[u8]) -> Eat,
    ) -> Result<(), Loss> {
        if self.state != Follow::On {
            return Ok(());
        }
        let seq = self.pos.wrapping_add(u32::from(self.held));
        self.feed(
            pool,
            Seg {
                seq,
                data: &[],
                wire: 0,
            },
            bound,
            eat,
        )
    }

    /// In order, nothing held: the consumer reads the packet itself.
    fn direct(
        &mut self,
        pool: &mut BufPool,
        data: &[u8],
        bound: usize,
        eat: &mut impl FnMut(u32, &[u8]) -> Eat,
    ) -> Result<(), Loss> {
        let (i, done) = match run(&mut self.pos, data, eat) {
            Ok(r) => r,
            Err(why) => return self.lose(pool, why),
        };
        if done {
            self.finish(pool);
            return Ok(());
        }
        let rest = &data[i..];
        if rest.is_empty() {
            return Ok(());
        }
        if rest.len() > bound {
            return self.lose(pool, Loss::Overflow);
        }
        let Some(b) = pool.take_buf() else {
            return self.lose(pool, Loss::NoBuffer);
        };
        self.buf = b;
        if let Some(buf) = pool.get_mut(b) {
            buf[..rest.len()].copy_from_slice(rest);
        }
        self.held = rest.len() as u16;
        Ok(())
    }

    /// In order behind held bytes: append, merge the out-of-order run if
    /// the hole closed, run the consumer over the buffer, compact.
    fn buffered(
        &mut self,
        pool: &mut BufPool,
        data: &[u8],
        bound: usize,
        eat: &mut impl FnMut(u32, &[u8]) -> Eat,
    ) -> Result<(), Loss> {
        let at = usize::from(self.held);
        if at + data.len() > bound {
            return self.lose(pool, Loss::Overflow);
        }
        let Some(buf) = pool.get_mut(self.buf) else {
            return self.lose(pool, Loss::NoBuffer);
        };
        buf[at..at + data.len()].copy_from_slice(data);
        let mut held = at + data.len();
        let (oat, olen) = (usize::from(self.ooo_at), usize::from(self.ooo_len));
        if olen > 0 && held >= oat {
            held = held.max(oat + olen);
            self.ooo_len = 0;
        }
        let before = self.pos;
        let buf = pool.get(self.buf).map_or(&[][..], |b| &b[..held]);
        let done = match run(&mut self.pos, buf, eat) {
            Ok((_, done)) => done,
            Err(why) => return self.lose(pool, why),
        };
        if done {
            self.finish(pool);
            return Ok(());
        }
        let moved = self.pos.wrapping_sub(before) as usize;
        if self.compact(pool, held, moved) {
            // A skip reached the out-of-order run: show it.
            return self.buffered(pool, &[], bound, eat);
        }
        Ok(())
    }

    /// After the consumer moved `moved` bytes past the old position, with
    /// `held` bytes in the buffer: shift what is left to the front. True
    /// when the out-of-order run became contiguous (and was not shown).
    fn compact(&mut self, pool: &mut BufPool, held: usize, moved: usize) -> bool {
        let keep = held.saturating_sub(moved);
        if let Some(buf) = pool.get_mut(self.buf) {
            if keep > 0 {
                buf.copy_within(moved..held, 0);
            }
            let (oat, olen) = (usize::from(self.ooo_at), usize::from(self.ooo_len));
            if olen > 0 {
                if oat >= moved {
                    buf.copy_within(oat..oat + olen, oat - moved);
                    self.ooo_at = (oat - moved) as u16;
                } else if oat + olen > moved {
                    let cut = moved - oat;
                    buf.copy_within(oat + cut..oat + olen, 0);
                    self.ooo_at = 0;
                    self.ooo_len = (olen - cut) as u16;
                } else {
                    self.ooo_len = 0;
                }
            }
        }
        self.held = keep as u16;
        if self.held == 0 && self.ooo_len == 0 {
            self.release(pool);
        } else if self.held == 0 && self.ooo_at == 0 {
            // A skip landed on the run's start: it is contiguous now.
            self.held = self.ooo_len;
            self.ooo_len = 0;
            return true;
        }
        false
    }

    /// A segment `off` bytes beyond the position, after a hole.
    fn hold_ooo(
        &mut self,
        pool: &mut BufPool,
        off: usize,
        data: &[u8],
        wire: usize,
        bound: usize,
    ) -> Result<(), Loss> {
        if data.len() < wire || off + data.len() > bound || data.is_empty() {
            return self.lose(pool, Loss::Gap);
        }
        let (oat, olen) = (usize::from(self.ooo_at), usize::from(self.ooo_len));
        let (start, end) = if olen == 0 {
            (off, off + data.len())
        } else if off <= oat + olen && off + data.len() >= oat {
            (off.min(oat), (off + data.len()).max(oat + olen))
        } else {
            return self.lose(pool, Loss::Gap);
        };
        if self.buf == NO_BUF {
            match pool.take_buf() {
                Some(b) => self.buf = b,
                None => return self.lose(pool, Loss::NoBuffer),
            }
        }
        if let Some(buf) = pool.get_mut(self.buf) {
            buf[off..off + data.len()].copy_from_slice(data);
        }
        self.ooo_at = start as u16;
        self.ooo_len = (end - start) as u16;
        Ok(())
    }
}

/// Shows the consumer `bytes` until it uses nothing more; returns the
/// index of the first byte it left and whether it is done, and moves `pos`
/// by what it used and skipped.
fn run(
    pos: &mut u32,
    bytes: &[u8],
    eat: &mut impl FnMut(u32, &[u8]) -> Eat,
) -> Result<(usize, bool), Loss> {
    let mut i = 0usize;
    while i < bytes.len() {
        let e = eat(*pos, &bytes[i..]);
        if e.lost {
            return Err(Loss::Parse);
        }
        let used = e.used.min(bytes.len() - i);
        if e.skip > MAX_SKIP {
            return Err(Loss::BigSkip);
        }
        i += used;
        *pos = pos.wrapping_add(used as u32).wrapping_add(e.skip as u32);
        i = i
            .saturating_add(usize::try_from(e.skip).unwrap_or(usize::MAX))
            .min(bytes.len());
        if e.done {
            return Ok((i, true));
        }
        if used == 0 && e.skip == 0 {
            break;
        }
    }
    Ok((i, false))
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
