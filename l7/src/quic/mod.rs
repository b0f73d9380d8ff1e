//! QUIC (RFC 9000, RFC 9001, RFC 9369): the version of the long header,
//! and SNI, ALPN and JA4 of the ClientHello the client's Initial packets
//! carry.
//!
//! Initial packets are protected with keys anyone can derive from the
//! Destination Connection ID of the client's first Initial (`crypto`). The
//! client direction's Initials — the direction of the flow's first Initial
//! — are copied to the worker's scratch buffer, decrypted there, and their
//! CRYPTO frames written at their offsets into one reassembly buffer, in
//! whatever order and packets they come (Chrome splits and shuffles its
//! ClientHello over several frames and packets), until the ClientHello is
//! whole. A packet whose tag does not verify — also with the keys of its
//! own Destination Connection ID, after a Retry — is counted and skipped.

pub mod crypto;
#[cfg(test)]
pub(crate) mod vectors;

use crate::Dir;
use crate::fields::{Alpn, Name, QuicInfo, str_of};
use crate::pool::{BUF_BYTES, BufPool};
use crate::stats::L7Stats;
use crate::text::Text;
use crate::tls::hello::ClientHello;
use crate::tls::{HelloFields, Scratch};
use crypto::InitialKeys;

/// Out-of-order CRYPTO ranges remembered at once.
const RANGES: usize = 8;
const NO_BUF: u32 = u32::MAX;

/// A QUIC variable-length integer (RFC 9000 §16) at `at`: its value and
/// the offset after it.
pub(crate) fn varint(p: &[u8], at: usize) -> Option<(u64, usize)> {
    let &b0 = p.get(at)?;
    let n = 1usize << (b0 >> 6);
    let bytes = p.get(at..at + n)?;
    let mut v = u64::from(b0 & 0x3F);
    for b in &bytes[1..] {
        v = v << 8 | u64::from(*b);
    }
    Some((v, at + n))
}

/// A long-header packet (RFC 9000 §17.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongHeader<'a> {
    pub version: u32,
    pub dcid: &'a [u8],
    /// Packet type bits (after the version's mapping: 0 Initial, 1 0-RTT,
    /// 2 Handshake, 3 Retry).
    pub kind: u8,
    /// Offset of the (protected) packet number.
    pub pn_at: usize,
    /// Offset just past the packet (`pn_at` + Length); the datagram's end
    /// for a Retry.
    pub end: usize,
}

impl<'a> LongHeader<'a> {
    pub fn parse(p: &'a [u8]) -> Option<Self> {
        let &first = p.first()?;
        if first & 0xC0 != 0xC0 {
            return None;
        }
        let version = u32::from_be_bytes(p.get(1..5)?.try_into().ok()?);
        let raw = (first >> 4) & 3;
        // RFC 9369 §3.2: v2 rotates the type codes by one.
        let kind = if version == crypto::VERSION_2 {
            raw.wrapping_sub(1) & 3
        } else {
            raw
        };
        let dlen = usize::from(*p.get(5)?);
        if dlen > 20 {
            return None;
        }
        let dcid = p.get(6..6 + dlen)?;
        let slen = usize::from(*p.get(6 + dlen)?);
        if slen > 20 {
            return None;
        }
        let mut at = 7 + dlen + slen;
        if kind == 3 {
            return Some(LongHeader {
                version,
                dcid,
                kind,
                pn_at: at,
                end: p.len(),
            });
        }
        if kind == 0 {
            let (tlen, a) = varint(p, at)?;
            at = a.checked_add(usize::try_from(tlen).ok()?)?;
        }
        let (len, pn_at) = varint(p, at)?;
        let end = pn_at.checked_add(usize::try_from(len).ok()?)?;
        (end <= p.len()).then_some(LongHeader {
            version,
            dcid,
            kind,
            pn_at,
            end,
        })
    }
}

/// Whether a UDP payload starts with a QUIC Initial of a version whose
/// Initials can be read.
pub fn looks_like_long_header(p: &[u8]) -> bool {
    LongHeader::parse(p).is_some_and(|h| h.kind == 0 && crypto::readable(h.version))
}

/// Per-flow QUIC state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QuicState {
    pub version: u32,
    pub sni: Option<Name>,
    pub alpn: Option<Alpn>,
    pub ja4: Option<crate::tls::fingerprint::Ja4>,
    client: Option<Dir>,
    dcid: Text<20>,
    keys: Option<InitialKeys>,
    /// Reassembly buffer of the CRYPTO stream, and its filled ranges.
    buf: u32,
    ranges: [(u32, u32); RANGES],
    nranges: u8,
    pub done: bool,
}

impl Default for QuicState {
    fn default() -> Self {
        QuicState {
            version: 0,
            sni: None,
            alpn: None,
            ja4: None,
            client: None,
            dcid: Text::default(),
            keys: None,
            buf: NO_BUF,
            ranges: [(0, 0); RANGES],
            nranges: 0,
            done: false,
        }
    }
}

/// What one datagram needs besides the state.
pub(crate) struct QuicCtx<'a> {
    pub pool: &'a mut BufPool,
    pub scratch: &'a mut Scratch,
    pub quic: &'a mut Vec<u8>,
    pub stats: &'a mut L7Stats,
    pub bound: usize,
}

impl QuicState {
    /// One datagram of the flow.
    pub fn on_datagram(&mut self, dir: Dir, p: &[u8], cx: &mut QuicCtx<'_>) {
        if self.done {
            return;
        }
        let mut at = 0;
        while at < p.len() && !self.done {
            let Some(h) = LongHeader::parse(&p[at..]) else {
                break;
            };
            if self.version == 0 {
                self.version = h.version;
            }
            if h.kind == 0 && *self.client.get_or_insert(dir) == dir && crypto::readable(h.version)
            {
                self.initial(&p[at..at + h.end], &h, cx);
            }
            if h.kind == 3 {
                break;
            }
            at += h.end;
        }
        if !self.done {
            self.try_hello(cx);
        }
    }

    /// Decrypts one client Initial and files its CRYPTO frames.
    fn initial(&mut self, pkt: &[u8], h: &LongHeader<'_>, cx: &mut QuicCtx<'_>) {
        let keys = match self.keys {
            Some(k) => k,
            None => {
                let Some(k) = crypto::client_initial_keys(h.version, h.dcid) else {
                    return;
                };
                self.dcid.set(h.dcid, 20);
                self.keys = Some(k);
                k
            }
        };
        let mut opened = open_copy(&keys, pkt, h.pn_at, cx.quic);
        if opened.is_none() && h.dcid != self.dcid.as_bytes() {
            // After a Retry the client derives new keys from the new DCID.
            if let Some(k) = crypto::client_initial_keys(h.version, h.dcid) {
                opened = open_copy(&k, pkt, h.pn_at, cx.quic);
                if opened.is_some() {
                    self.keys = Some(k);
                    self.dcid.set(h.dcid, 20);
                }
            }
        }
        let Some(range) = opened else {
            cx.stats.quic_bad_tag += 1;
            return;
        };
        cx.stats.quic_initials += 1;
        if self.frames(range, cx).is_none() {
            cx.stats.quic_malformed += 1;
        }
    }

    /// Walks the frames of a decrypted payload (`cx.quic[range]`).
    fn frames(&mut self, range: std::ops::Range<usize>, cx: &mut QuicCtx<'_>) -> Option<()> {
        let mut at = range.start;
        let end = range.end;
        while at < end && !self.done {
            let pl = &cx.quic[..end];
            let (t, a) = varint(pl, at)?;
            at = a;
            match t {
                0x00 | 0x01 => {}
                0x02 | 0x03 => at = skip_ack(pl, at, t == 0x03)?,
                0x06 => {
                    let (off, a) = varint(pl, at)?;
                    let (len, a) = varint(pl, a)?;
                    let len = usize::try_from(len).ok()?;
                    let data = pl.get(a..a.checked_add(len)?)?;
                    at = a + len;
                    self.file(off, data, cx.pool, cx.stats, cx.bound);
                }
                0x1C | 0x1D => {
                    let (_, a) = varint(pl, at)?;
                    let a = if t == 0x1C { varint(pl, a)?.1 } else { a };
                    let (n, a) = varint(pl, a)?;
                    at = a.checked_add(usize::try_from(n).ok()?)?;
                }
                _ => return None,
            }
        }
        (at == end || self.done).then_some(())
    }

    /// Writes CRYPTO data at its offset (within the bound).
    fn file(
        &mut self,
        off: u64,
        data: &[u8],
        pool: &mut BufPool,
        stats: &mut L7Stats,
        bound: usize,
    ) {
        let bound = bound.min(BUF_BYTES) as u64;
        let Some(end) = off.checked_add(data.len() as u64) else {
            return;
        };
        if end > bound || data.is_empty() {
            if end > bound {
                stats.lost(crate::stream::Loss::Overflow);
                self.finish(pool);
            }
            return;
        }
        if self.buf == NO_BUF {
            match pool.take_buf() {
                Some(b) => self.buf = b,
                None => {
                    stats.lost(crate::stream::Loss::NoBuffer);
                    self.finish(pool);
                    return;
                }
            }
        }
        if let Some(b) = pool.get_mut(self.buf) {
            b[off as usize..end as usize].copy_from_slice(data);
        }
        self.add_range(off as u32, end as u32);
    }

    fn add_range(&mut self, s: u32, e: u32) {
        let n = usize::from(self.nranges);
        let mut v = [(0u32, 0u32); RANGES + 1];
        v[..n].copy_from_slice(&self.ranges[..n]);
        v[n] = (s, e);
        v[..=n].sort_unstable();
        let mut out = 0;
        for i in 0..=n {
            if out > 0 && v[i].0 <= v[out - 1].1 {
                v[out - 1].1 = v[out - 1].1.max(v[i].1);
            } else {
                v[out] = v[i];
                out += 1;
            }
        }
        // Beyond the ranges kept: drop the last (it can come again).
        let keep = out.min(RANGES);
        self.ranges[..keep].copy_from_slice(&v[..keep]);
        self.nranges = keep as u8;
    }

    /// Parses the ClientHello once the CRYPTO stream holds it whole.
    fn try_hello(&mut self, cx: &mut QuicCtx<'_>) {
        if self.nranges == 0 || self.ranges[0].0 != 0 {
            return;
        }
        let have = self.ranges[0].1 as usize;
        let Some(buf) = cx.pool.get(self.buf) else {
            return;
        };
        let s = &buf[..have];
        let Some(h) = s.get(..4) else {
            return;
        };
        let len = usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3]);
        if h[0] != 1 || len + 4 > cx.bound.min(BUF_BYTES) {
            cx.stats.quic_malformed += 1;
            self.finish(cx.pool);
            return;
        }
        let Some(body) = s.get(4..4 + len) else {
            return;
        };
        match ClientHello::parse(body) {
            Ok(ch) => {
                let f = HelloFields::of(&ch, true, &mut cx.scratch.sort, cx.stats);
                self.sni = f.sni;
                self.alpn = f.alpn;
                self.ja4 = Some(f.ja4);
                cx.stats.quic_client_hellos += 1;
            }
            Err(_) => cx.stats.quic_malformed += 1,
        }
        self.finish(cx.pool);
    }

    /// The record's fields.
    pub fn info(&self) -> QuicInfo {
        QuicInfo {
            version: self.version,
            sni: self.sni.as_ref().map(str_of),
            alpn: self.alpn.map(|a| a.wire().into()),
            ja4: self.ja4,
        }
    }

    pub fn finish(&mut self, pool: &mut BufPool) {
        if self.buf != NO_BUF {
            pool.give(self.buf);
            self.buf = NO_BUF;
        }
        self.done = true;
    }
}

/// Copies `pkt` to `scratch` and opens it there.
fn open_copy(
    keys: &InitialKeys,
    pkt: &[u8],
    pn_at: usize,
    scratch: &mut Vec<u8>,
) -> Option<std::ops::Range<usize>> {
    scratch.clear();
    scratch.extend_from_slice(pkt);
    crypto::open(keys, scratch, pn_at).ok().map(|(_, r)| r)
}

/// Skips an ACK frame's fields after its type.
fn skip_ack(p: &[u8], at: usize, ecn: bool) -> Option<usize> {
    let (_, a) = varint(p, at)?; // largest acknowledged
    let (_, a) = varint(p, a)?; // delay
    let (n, a) = varint(p, a)?; // range count
    let (_, mut a) = varint(p, a)?; // first range
    for _ in 0..n {
        a = varint(p, a)?.1;
        a = varint(p, a)?.1;
    }
    if ecn {
        for _ in 0..3 {
            a = varint(p, a)?.1;
        }
    }
    Some(a)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
