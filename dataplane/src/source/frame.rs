//! The frame every source hands the flow code: capture files and AF_XDP
//! sockets alike, so the worker is one piece of code whatever reads the
//! packets.

use crate::parse::LinkType;
use crate::time::Timestamp;

/// One captured frame, borrowed from its source's buffer (the file's
/// mapping or read buffer, an AF_XDP UMEM frame, a hand-off ring slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Frame<'a> {
    /// Capture time, Unix nanoseconds: the file's record time, or the
    /// time the XDP program stamped.
    pub ts: Timestamp,
    /// `None`: a link type we do not parse (the caller counts a drop).
    pub link: Option<LinkType>,
    /// The raw link-type number (LINKTYPE_*, FCS bits masked off): what a
    /// capture filter is compiled for and messages name. 1 (Ethernet) live.
    pub linktype: u32,
    /// Captured bytes, at most `min(wire_len, snaplen)` of them (see
    /// `source::pcap` on clipping).
    pub data: &'a [u8],
    /// Original length on the wire.
    pub wire_len: u32,
    /// Where the frame came from within its source: a pcapng interface id
    /// as the block states it (tshark's `frame.interface_id`; 0 for classic
    /// pcap), or the RX queue live.
    pub interface: u32,
}

/// A frame by its place in a buffer rather than a borrow of it: what a
/// file's parser produces and the time-order stage holds (it cannot keep
/// borrows of the reader it goes on reading), turned into a [`Frame`] as
/// it goes out. 32 bytes, so a held packet is half a cache line: every
/// packet of a file is written into the stage's ring and read back out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Placed {
    pub ts: Timestamp,
    /// Offset of the captured bytes in the buffer.
    pub start: usize,
    /// Captured bytes (at most [`MAX_CAPLEN`](super::pcap::MAX_CAPLEN)).
    pub len: u32,
    pub wire_len: u32,
    pub interface: u32,
    /// Both formats store the link type in 16 bits (classic pcap's upper
    /// bits are masked off).
    pub linktype: u16,
    pub link: Option<LinkType>,
}

const _: () = assert!(size_of::<Placed>() <= 32);

impl Placed {
    /// The frame `f`, a view into `buf`, by its place in it (empty bytes
    /// if it is not a part of `buf`: never the case for the parsers).
    pub fn of(f: &Frame<'_>, buf: &[u8]) -> Self {
        let start = (f.data.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
        let inside = start
            .checked_add(f.data.len())
            .is_some_and(|end| end <= buf.len());
        Placed {
            ts: f.ts,
            start: if inside { start } else { 0 },
            len: if inside { f.data.len() as u32 } else { 0 },
            wire_len: f.wire_len,
            interface: f.interface,
            linktype: f.linktype as u16,
            link: f.link,
        }
    }

    /// The frame itself, borrowed from `buf` (the buffer it was placed in).
    #[inline(always)]
    pub fn frame<'a>(&self, buf: &'a [u8]) -> Frame<'a> {
        Frame {
            ts: self.ts,
            link: self.link,
            linktype: u32::from(self.linktype),
            data: buf
                .get(self.start..self.start.wrapping_add(self.len as usize))
                .unwrap_or_default(),
            wire_len: self.wire_len,
            interface: self.interface,
        }
    }
}
