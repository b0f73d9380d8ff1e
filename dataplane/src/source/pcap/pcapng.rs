//! pcapng (draft-ietf-opsawg-pcapng): a sequence of sections, each a Section
//! Header Block with its own byte order followed by blocks. We read
//! Interface Description Blocks (link type, snaplen, `if_tsresol`,
//! `if_tsoffset`), Enhanced, Simple and obsolete Packet Blocks, and skip every
//! other block by its length.

use super::{Endian, Frame, MAX_CAPLEN, PcapError, Peek, bytes_at, clip};
use crate::parse::LinkType;
use crate::time::Timestamp;

/// Section Header Block type; a palindrome, so it reads the same in both
/// byte orders (which is why it can start a section of unknown order).
pub(super) const SHB_TYPE: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
const SHB: u32 = 0x0a0d_0d0a;
const IDB: u32 = 1;
/// Obsolete Packet Block (spec appendix): still written by old tools.
const PB: u32 = 2;
const SPB: u32 = 3;
const EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
/// Block type + leading length + trailing length.
const BLOCK_OVERHEAD: usize = 12;

const OPT_ENDOFOPT: u16 = 0;
const IF_TSRESOL: u16 = 9;
const IF_TSOFFSET: u16 = 14;

/// Turns an interface's raw 64-bit timestamps into Unix nanoseconds exactly.
#[derive(Clone, Copy, Debug)]
struct Clock {
    units_per_sec: u64,
    /// Set when a unit is a whole number of nanoseconds (every power of 10 up
    /// to 10^9 and 2^0..2^9): one multiplication then.
    ns_per_unit: Option<u64>,
    /// `if_tsoffset`: seconds added to every timestamp (may be negative).
    offset_s: i64,
}

impl Clock {
    const NS_PER_SEC: u64 = 1_000_000_000;

    fn new(units_per_sec: u64, offset_s: i64) -> Self {
        let ns_per_unit =
            (Self::NS_PER_SEC % units_per_sec == 0).then(|| Self::NS_PER_SEC / units_per_sec);
        Clock {
            units_per_sec,
            ns_per_unit,
            offset_s,
        }
    }

    /// Whole seconds plus the fraction rounded down to a nanosecond (as
    /// Wireshark does), plus `if_tsoffset`. A result outside
    /// `[Timestamp::ZERO, Timestamp::MAX]` (before 1970 through a negative
    /// offset, after 2262 through a large raw value: `u64::MAX` units at
    /// any resolution from 10^0 to 10^9 or 2^0 is one) is
    /// [`Timestamp::OUT_OF_RANGE`]: the worker drops it, counted, rather
    /// than a clamp making it look like a real time. Exact in `i128`:
    /// `u64::MAX` seconds are 1.8e28 ns, far inside its 1.7e38.
    #[inline]
    fn to_ts(self, raw: u64) -> Timestamp {
        let ns = match self.ns_per_unit {
            Some(k) => i128::from(raw) * i128::from(k),
            None => {
                let units = i128::from(self.units_per_sec);
                let (secs, frac) = (i128::from(raw) / units, i128::from(raw) % units);
                secs * i128::from(Self::NS_PER_SEC) + frac * i128::from(Self::NS_PER_SEC) / units
            }
        };
        let shifted = ns + i128::from(self.offset_s) * i128::from(Self::NS_PER_SEC);
        match u64::try_from(shifted) {
            Ok(n) if Timestamp(n).in_range() => Timestamp(n),
            _ => Timestamp::OUT_OF_RANGE,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Interface {
    link: Option<LinkType>,
    linktype: u32,
    /// 0 (unlimited) in the file is stored as `u32::MAX`.
    snaplen: u32,
    clock: Clock,
}

/// A block whose lengths have been checked: `body` lies between the leading
/// and the trailing length and entirely inside the file.
struct Block<'a> {
    at: usize,
    ty: u32,
    endian: Endian,
    len: usize,
    body: &'a [u8],
}

/// Reader state across sections.
pub(super) struct PcapNg {
    endian: Endian,
    /// The current section's interfaces; a packet's interface id indexes it.
    ifaces: Vec<Interface>,
    /// For Simple Packet Blocks, which have no timestamp of their own.
    last_ts: Timestamp,
}

impl PcapNg {
    /// Reads the Section Header Block at offset 0; returns the state and the
    /// offset just past it.
    pub(super) fn from_first_section(buf: &[u8]) -> Result<(Self, usize), PcapError> {
        let mut ng = PcapNg {
            endian: Endian::Little,
            ifaces: Vec::new(),
            last_ts: Timestamp::ZERO,
        };
        let shb = block_at(buf, 0, ng.endian)?;
        ng.start_section(&shb)?;
        Ok((ng, shb.len))
    }

    /// The block at the start of `rest` (see [`peek_block`]).
    pub(super) fn peek(&self, rest: &[u8]) -> Peek {
        peek_block(rest, self.endian)
    }

    /// Reads blocks from `*pos` up to and including the next packet; every
    /// block read successfully moves `*pos` past it.
    #[inline]
    pub(super) fn next<'a>(
        &mut self,
        buf: &'a [u8],
        pos: &mut usize,
        clipped: &mut u64,
    ) -> Result<Option<Frame<'a>>, PcapError> {
        // Terminates: every block is at least BLOCK_OVERHEAD bytes long.
        loop {
            let at = *pos;
            if at >= buf.len() {
                return Ok(None);
            }
            let block = block_at(buf, at, self.endian)?;
            let packet = match block.ty {
                EPB => Some(self.enhanced_packet(&block, clipped)?),
                SPB => Some(self.simple_packet(&block, clipped)?),
                PB => Some(self.obsolete_packet(&block, clipped)?),
                IDB => {
                    self.add_interface(&block)?;
                    None
                }
                SHB => {
                    self.start_section(&block)?;
                    None
                }
                // NRB, ISB, DSB, custom, journal...: nothing a flow probe needs.
                _ => None,
            };
            *pos = at + block.len;
            if packet.is_some() {
                return Ok(packet);
            }
        }
    }

    fn start_section(&mut self, b: &Block<'_>) -> Result<(), PcapError> {
        // Byte-order magic (already checked by block_at), version, section length.
        let Some(h) = b.body.first_chunk::<8>() else {
            return Err(too_short(b, "too short for a section header block"));
        };
        let (major, minor) = (b.endian.u16_at(h, 4), b.endian.u16_at(h, 6));
        if major != 1 {
            return Err(PcapError::UnsupportedVersion {
                offset: b.at as u64,
                format: "pcapng",
                major,
                minor,
            });
        }
        if b.body.len() < 16 {
            return Err(too_short(b, "too short for a section header block"));
        }
        tracing::debug!(offset = b.at, endian = ?b.endian, "pcapng section");
        self.endian = b.endian;
        // Interface ids are per section (spec §4.2).
        self.ifaces.clear();
        Ok(())
    }

    fn add_interface(&mut self, b: &Block<'_>) -> Result<(), PcapError> {
        let e = b.endian;
        let Some(h) = b.body.first_chunk::<8>() else {
            return Err(too_short(b, "too short for an interface description block"));
        };
        let linktype = u32::from(e.u16_at(h, 0));
        let snaplen = match e.u32_at(h, 4) {
            0 => u32::MAX,
            n => n,
        };
        let mut tsresol = 6; // default: microseconds
        let mut offset_s = 0;
        let mut opts = b.body.get(8..).unwrap_or_default();
        // Terminates: each option consumes at least its 4-byte header.
        while let Some(o) = opts.first_chunk::<4>() {
            let (code, len) = (e.u16_at(o, 0), e.u16_at(o, 2));
            if code == OPT_ENDOFOPT {
                break;
            }
            let Some(value) = opts.get(4..4 + usize::from(len)) else {
                return Err(PcapError::BadOption {
                    offset: b.at as u64,
                    code,
                    len,
                });
            };
            match code {
                IF_TSRESOL => tsresol = value.first().copied().unwrap_or(tsresol),
                IF_TSOFFSET => {
                    if let Some(&raw) = value.first_chunk::<8>() {
                        offset_s = match e {
                            Endian::Little => i64::from_le_bytes(raw),
                            Endian::Big => i64::from_be_bytes(raw),
                        };
                    }
                }
                _ => {}
            }
            let step = 4 + usize::from(len).next_multiple_of(4);
            opts = opts.get(step..).unwrap_or_default();
        }
        let units_per_sec = units_per_sec(tsresol).ok_or(PcapError::BadTsResol {
            offset: b.at as u64,
            value: tsresol,
        })?;
        tracing::debug!(
            offset = b.at,
            interface = self.ifaces.len(),
            linktype,
            units_per_sec,
            offset_s,
            "pcapng interface"
        );
        self.ifaces.push(Interface {
            link: LinkType::from_pcap(linktype),
            linktype,
            snaplen,
            clock: Clock::new(units_per_sec, offset_s),
        });
        Ok(())
    }

    /// The interface a section-local id names.
    fn interface(
        &self,
        b: &Block<'_>,
        what: &'static str,
        local: u32,
    ) -> Result<Interface, PcapError> {
        match self.ifaces.get(local as usize) {
            Some(iface) => Ok(*iface),
            None => Err(PcapError::UnknownInterface {
                offset: b.at as u64,
                what,
                interface: local,
                count: self.ifaces.len() as u32,
            }),
        }
    }

    fn enhanced_packet<'a>(
        &mut self,
        b: &Block<'a>,
        clipped: &mut u64,
    ) -> Result<Frame<'a>, PcapError> {
        const WHAT: &str = "enhanced packet block";
        let Some(h) = b.body.first_chunk::<20>() else {
            return Err(too_short(b, "too short for an enhanced packet block"));
        };
        let e = b.endian;
        let fields = PacketFields {
            what: WHAT,
            local_iface: e.u32_at(h, 0),
            ts: Some(u64::from(e.u32_at(h, 4)) << 32 | u64::from(e.u32_at(h, 8))),
            caplen: e.u32_at(h, 12),
            wire_len: e.u32_at(h, 16),
            data_off: 20,
        };
        self.packet(b, fields, clipped)
    }

    fn obsolete_packet<'a>(
        &mut self,
        b: &Block<'a>,
        clipped: &mut u64,
    ) -> Result<Frame<'a>, PcapError> {
        const WHAT: &str = "packet block";
        let Some(h) = b.body.first_chunk::<20>() else {
            return Err(too_short(b, "too short for a packet block"));
        };
        // Interface id (16 bits), drops count (16 bits), then as in an EPB.
        let e = b.endian;
        let fields = PacketFields {
            what: WHAT,
            local_iface: u32::from(e.u16_at(h, 0)),
            ts: Some(u64::from(e.u32_at(h, 4)) << 32 | u64::from(e.u32_at(h, 8))),
            caplen: e.u32_at(h, 12),
            wire_len: e.u32_at(h, 16),
            data_off: 20,
        };
        self.packet(b, fields, clipped)
    }

    /// A Simple Packet Block belongs to interface 0 and states only the
    /// original length; the captured length is `min(original, snaplen)`,
    /// bounded by the bytes the block holds (which include padding).
    fn simple_packet<'a>(
        &mut self,
        b: &Block<'a>,
        clipped: &mut u64,
    ) -> Result<Frame<'a>, PcapError> {
        const WHAT: &str = "simple packet block";
        let Some(w) = b.body.first_chunk::<4>() else {
            return Err(too_short(b, "too short for a simple packet block"));
        };
        let wire_len = b.endian.u32(*w);
        let iface = self.interface(b, WHAT, 0)?;
        let room = u32::try_from(b.body.len().saturating_sub(4)).unwrap_or(u32::MAX);
        let fields = PacketFields {
            what: WHAT,
            local_iface: 0,
            ts: None,
            caplen: wire_len.min(iface.snaplen).min(room),
            wire_len,
            data_off: 4,
        };
        self.packet(b, fields, clipped)
    }

    #[inline]
    fn packet<'a>(
        &mut self,
        b: &Block<'a>,
        f: PacketFields,
        clipped: &mut u64,
    ) -> Result<Frame<'a>, PcapError> {
        let iface = self.interface(b, f.what, f.local_iface)?;
        if f.caplen > MAX_CAPLEN {
            return Err(PcapError::CaptureTooLarge {
                offset: b.at as u64,
                caplen: f.caplen,
            });
        }
        let room = b.body.get(f.data_off..).unwrap_or_default();
        let Some(data) = room.get(..f.caplen as usize) else {
            return Err(PcapError::CaptureExceedsBlock {
                offset: b.at as u64,
                what: f.what,
                caplen: f.caplen,
                room: room.len() as u64,
            });
        };
        let ts = match f.ts {
            Some(raw) => iface.clock.to_ts(raw),
            None => self.last_ts,
        };
        self.last_ts = ts;
        Ok(Frame {
            ts,
            link: iface.link,
            linktype: iface.linktype,
            data: clip(data, f.wire_len, iface.snaplen, clipped),
            wire_len: f.wire_len,
            interface: f.local_iface,
        })
    }
}

/// The fields the three packet block types share, decoded.
struct PacketFields {
    what: &'static str,
    local_iface: u32,
    /// `None` for a Simple Packet Block.
    ts: Option<u64>,
    caplen: u32,
    wire_len: u32,
    /// Where the packet data starts within the block body.
    data_off: usize,
}

/// Units per second for an `if_tsresol` byte: 10^v, or 2^(v & 0x7f) when the
/// top bit is set. `None` when that does not fit in a `u64`.
fn units_per_sec(tsresol: u8) -> Option<u64> {
    if tsresol & 0x80 == 0 {
        10u64.checked_pow(u32::from(tsresol))
    } else {
        1u64.checked_shl(u32::from(tsresol & 0x7f))
    }
}

/// The block at the start of `rest`: how many bytes it takes as far as its
/// header tells (the header alone while that is incomplete or its length is
/// impossible: the parser then reports it), its type, and whether it is a
/// packet block. `section` is the current section's byte order; a Section
/// Header Block brings its own.
pub(super) fn peek_block(rest: &[u8], section: Endian) -> Peek {
    let shb = rest.first_chunk::<4>() == Some(&SHB_TYPE);
    let endian = if shb {
        match bytes_at::<4>(rest, 8).map(u32::from_le_bytes) {
            Some(BYTE_ORDER_MAGIC) => Endian::Little,
            Some(_) => Endian::Big,
            None => {
                return Peek {
                    need: 12,
                    packet: false,
                    block_type: SHB,
                };
            }
        }
    } else {
        section
    };
    let Some(h) = rest.first_chunk::<8>() else {
        return Peek {
            need: 8,
            packet: false,
            block_type: 0,
        };
    };
    let (ty, len) = (endian.u32_at(h, 0), endian.u32_at(h, 4) as usize);
    Peek {
        // A section header block's byte-order magic is checked before its
        // length: the parser needs those 12 bytes to report either.
        need: if len >= BLOCK_OVERHEAD && len % 4 == 0 {
            len
        } else if shb {
            12
        } else {
            8
        },
        packet: !shb && matches!(ty, EPB | SPB | PB),
        block_type: ty,
    }
}

/// A block shorter than its type's fixed fields; `reason` names the type.
fn too_short(b: &Block<'_>, reason: &'static str) -> PcapError {
    PcapError::BadBlockLength {
        offset: b.at as u64,
        block_type: b.ty,
        len: b.len as u32,
        reason,
    }
}

/// Checks the block at `at`: type and length readable, length a multiple of
/// 4 and at least 12, inside the file, trailing copy equal. A Section Header
/// Block brings its own byte order (from its byte-order magic); other blocks
/// use the current section's.
fn block_at(buf: &[u8], at: usize, section: Endian) -> Result<Block<'_>, PcapError> {
    let rest = buf.get(at..).unwrap_or_default();
    let offset = at as u64;
    let Some(h) = rest.first_chunk::<8>() else {
        return Err(PcapError::Truncated {
            offset,
            what: "pcapng block header",
            need: 8,
            remain: rest.len() as u64,
        });
    };
    let endian = if h.first_chunk::<4>() == Some(&SHB_TYPE) {
        let Some(bom) = bytes_at::<4>(rest, 8) else {
            return Err(PcapError::Truncated {
                offset,
                what: "section header block",
                need: 12,
                remain: rest.len() as u64,
            });
        };
        match (u32::from_le_bytes(bom), u32::from_be_bytes(bom)) {
            (BYTE_ORDER_MAGIC, _) => Endian::Little,
            (_, BYTE_ORDER_MAGIC) => Endian::Big,
            _ => {
                return Err(PcapError::BadByteOrderMagic {
                    offset,
                    magic: u32::from_be_bytes(bom),
                });
            }
        }
    } else {
        section
    };
    let (ty, len) = (endian.u32_at(h, 0), endian.u32_at(h, 4));
    let bad = |reason| PcapError::BadBlockLength {
        offset,
        block_type: ty,
        len,
        reason,
    };
    if (len as usize) < BLOCK_OVERHEAD {
        return Err(bad("shorter than the 12-byte minimum"));
    }
    if len % 4 != 0 {
        return Err(bad("not a multiple of 4"));
    }
    let Some(block) = rest.get(..len as usize) else {
        return Err(PcapError::TruncatedBlock {
            offset,
            block_type: ty,
            len,
            remain: rest.len() as u64,
        });
    };
    // Cannot be None (len >= 12), but a wrong guess must not panic.
    let (head, trailing) = match block.split_last_chunk::<4>() {
        Some((head, tail)) => (head, endian.u32(*tail)),
        None => (block, 0),
    };
    if trailing != len {
        return Err(PcapError::BlockLengthMismatch {
            offset,
            block_type: ty,
            leading: len,
            trailing,
        });
    }
    Ok(Block {
        at,
        ty,
        endian,
        len: len as usize,
        body: head.get(8..).unwrap_or_default(),
    })
}
