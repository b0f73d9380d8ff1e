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
