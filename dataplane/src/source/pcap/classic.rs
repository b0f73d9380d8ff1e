//! Classic pcap (draft-ietf-opsawg-pcap): a 24-byte file header, then
//! records of a 16-byte header plus the captured bytes.

use super::{Endian, Frame, MAX_CAPLEN, PcapError, Peek, bytes_at};
use crate::parse::LinkType;
use crate::source::Placed;
use crate::time::Timestamp;

const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
const FILE_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;
/// The link type proper is the low 16 bits; the upper bits carry the FCS
/// length and its presence flag (draft-ietf-opsawg-pcap §4, "LinkType and
/// additional information"), which we do not need: parsers bound the frame by
/// the IP length, so a trailing FCS is never read as payload.
const LINKTYPE_MASK: u32 = 0x0000_ffff;

/// How far ahead of the record being read the file's bytes are asked
/// for: the record headers are a chain (each one's length says where the
/// next is), so the CPU cannot fetch them ahead by itself across pages.
const FETCH_AHEAD: usize = 2048;

/// Hints the CPU to fetch the line at `p` into cache. Never faults: a
/// prefetch of any address is architecturally a no-op if it is invalid.
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: prefetch has no memory-safety preconditions: it never
        // dereferences architecturally and ignores invalid addresses;
        // the caller's `wrapping_add` keeps the pointer arithmetic defined.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = p;
    }
}

/// Decoding state from the file header.
pub(super) struct Classic {
    endian: Endian,
    /// Nanoseconds per unit of the record's fractional timestamp: 1000 for
    /// the microsecond magic, 1 for the nanosecond one.
    frac_ns: u32,
    /// Snapshot length; 0 in the header (unlimited) is stored as `u32::MAX`.
    snaplen: u32,
    link: Option<LinkType>,
    /// Masked to 16 bits ([`LINKTYPE_MASK`]).
    linktype: u16,
}

impl Classic {
    /// Parses the file header; returns the state and the first record's offset.
    pub(super) fn from_header(buf: &[u8], magic: [u8; 4]) -> Result<(Self, usize), PcapError> {
        let (endian, frac_ns) = match (u32::from_le_bytes(magic), u32::from_be_bytes(magic)) {
            (MAGIC_MICROS, _) => (Endian::Little, 1_000),
            (MAGIC_NANOS, _) => (Endian::Little, 1),
            (_, MAGIC_MICROS) => (Endian::Big, 1_000),
            (_, MAGIC_NANOS) => (Endian::Big, 1),
            _ => {
                return Err(PcapError::UnknownMagic {
                    magic: u32::from_be_bytes(magic),
                });
            }
        };
        let Some(h) = bytes_at::<FILE_HEADER_LEN>(buf, 0) else {
            return Err(PcapError::Truncated {
                offset: 0,
                what: "pcap file header",
                need: FILE_HEADER_LEN as u64,
                remain: buf.len() as u64,
            });
        };
        let (major, minor) = (endian.u16_at(&h, 4), endian.u16_at(&h, 6));
        if major != 2 {
            return Err(PcapError::UnsupportedVersion {
                offset: 4,
                format: "pcap",
                major,
                minor,
            });
        }
        let snaplen = match endian.u32_at(&h, 16) {
            0 => u32::MAX,
            n => n,
        };
        let linktype = endian.u32_at(&h, 20) & LINKTYPE_MASK;
        let state = Classic {
            endian,
            frac_ns,
            snaplen,
            link: LinkType::from_pcap(linktype),
            linktype: linktype as u16,
        };
        Ok((state, FILE_HEADER_LEN))
    }

    pub(super) fn nanos(&self) -> bool {
        self.frac_ns == 1
    }

    /// The record at the start of `rest`: its length as far as its header
    /// tells, or the header alone while that is incomplete or its captured
    /// length is refused (the parser then reports it).
    pub(super) fn peek(&self, rest: &[u8]) -> Peek {
        let need = match bytes_at::<4>(rest, 8).map(|b| self.endian.u32(b)) {
            Some(caplen) if caplen <= MAX_CAPLEN => RECORD_HEADER_LEN + caplen as usize,
            _ => RECORD_HEADER_LEN,
        };
        Peek {
            need,
            packet: true,
            block_type: 0,
        }
    }

    /// Reads the record at `*pos` and advances past it on success.
    #[inline]
    pub(super) fn next<'a>(
        &self,
        buf: &'a [u8],
        pos: &mut usize,
        clipped: &mut u64,
    ) -> Result<Option<Frame<'a>>, PcapError> {
        let mut p = Placed::default();
        Ok(self
            .next_placed(buf, pos, clipped, &mut p)?
            .then(|| p.frame(buf)))
    }

    /// As [`next`](Self::next), the packet by its place in `buf`, written
    /// into `into` (true; false at the end, `into` untouched). Every
    /// packet of a mapped file goes through here: the header's four words
    /// are read at once, swapped in one branch for a big-endian file, and
    /// the packet is written where the caller keeps it (returned, it went
    /// through the stack: a 32-byte copy read back before its stores had
    /// landed, the stage's costliest instruction after the file's own
    /// cache misses).
    #[inline(always)]
    pub(super) fn next_placed(
        &self,
        buf: &[u8],
        pos: &mut usize,
        clipped: &mut u64,
        into: &mut Placed,
    ) -> Result<bool, PcapError> {
        let at = *pos;
        prefetch(buf.as_ptr().wrapping_add(at.wrapping_add(FETCH_AHEAD)));
        let rest = buf.get(at..).unwrap_or_default();
        let Some(h) = rest.first_chunk::<RECORD_HEADER_LEN>() else {
            if rest.is_empty() {
                return Ok(false);
            }
            return Err(PcapError::Truncated {
                offset: at as u64,
                what: "packet record header",
                need: RECORD_HEADER_LEN as u64,
                remain: rest.len() as u64,
            });
        };
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let mut w = [word(0), word(4), word(8), word(12)];
        if self.endian == Endian::Big {
            w = w.map(u32::swap_bytes);
        }
        let [secs, frac, caplen, wire_len] = w;
        if caplen > MAX_CAPLEN {
            return Err(PcapError::CaptureTooLarge {
                offset: at as u64,
                caplen,
            });
        }
        let remain = rest.len() - RECORD_HEADER_LEN;
        if caplen as usize > remain {
            return Err(PcapError::TruncatedPacket {
                offset: at as u64,
                caplen,
                remain: remain as u64,
            });
        }
        // A fraction of a second or more is not a time (tshark flags it as
        // invalid): the packet is handed out as out of range and the worker
        // drops it, counted. Cannot overflow otherwise: seconds < 2^32 give
        // < 4.3e18 ns (year 2106, inside `Timestamp::MAX`), the fraction < 1 s.
        let frac_ns = u64::from(frac) * u64::from(self.frac_ns);
        let ts = if frac_ns >= 1_000_000_000 {
            Timestamp::OUT_OF_RANGE
        } else {
            Timestamp::from_nanos(u64::from(secs) * 1_000_000_000 + frac_ns)
        };
        // Clipping as `clip` does it (the module doc of `pcap` says why).
        let limit = wire_len.min(self.snaplen);
        let len = if caplen > limit {
            *clipped += 1;
            limit
        } else {
            caplen
        };
        *pos = at + RECORD_HEADER_LEN + caplen as usize;
        *into = Placed {
            ts,
            start: at + RECORD_HEADER_LEN,
            len,
            wire_len,
            interface: 0,
            linktype: self.linktype,
            link: self.link,
        };
        Ok(true)
    }
}
