//! Packet parsing: zero-copy header views (`wire`) and one bounded walk from
//! the link layer to L4 (`walk`) that yields a [`PacketMeta`] or a named
//! [`DropReason`].
//!
//! Nothing here allocates or panics, whatever the bytes: every view checks
//! its length once when it is made and its accessors cannot index out of
//! bounds afterwards.

use std::net::IpAddr;

pub mod drop;
mod walk;
pub mod wire;

pub use drop::{DropCounters, DropReason};
pub use walk::{MAX_IPV6_EXT, MAX_MPLS_DEPTH, MAX_VLAN_DEPTH, ip_addrs, parse, parse_into};

/// Link-layer framing of a capture (pcap `LINKTYPE_*`) or of a live frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// LINKTYPE_ETHERNET (1).
    Ethernet,
    /// LINKTYPE_RAW (101) and DLT_RAW (12/14): the frame starts with an IPv4
    /// or IPv6 header, told apart by the version nibble.
    RawIp,
    /// LINKTYPE_IPV4 (228).
    Ipv4,
    /// LINKTYPE_IPV6 (229).
    Ipv6,
    /// LINKTYPE_LINUX_SLL (113), Linux "cooked" capture v1.
    LinuxSll,
    /// LINKTYPE_LINUX_SLL2 (276).
    LinuxSll2,
    /// LINKTYPE_NULL (0) / LOOP (108): BSD loopback, 4-byte family header.
    Null,
}

impl LinkType {
    /// Maps a pcap/pcapng link-type number; `None` for ones we do not parse.
    pub fn from_pcap(linktype: u32) -> Option<Self> {
        Some(match linktype {
            0 | 108 => LinkType::Null,
            1 => LinkType::Ethernet,
            12 | 14 | 101 => LinkType::RawIp,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            276 => LinkType::LinuxSll2,
            _ => return None,
        })
    }
}

/// Where a packet sits in an IP fragment series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fragment {
    /// Not fragmented.
    #[default]
    None,
    /// Offset 0 with more-fragments set: carries the L4 header.
    First { id: u32 },
    /// Offset > 0: no L4 header; `ports` are 0 and `l4` is `L4::Fragment`.
    /// `offset` is in bytes (the header's 13-bit field × 8, at most 65528;
    /// tshark's `ip.frag_offset` shows the field itself).
    Later { id: u32, offset: u16, more: bool },
}

bitflags::bitflags! {
    /// TCP header flags (RFC 9293 §3.1, plus ECE/CWR from RFC 3168).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct TcpFlags: u8 {
        const FIN = 0x01;
        const SYN = 0x02;
        const RST = 0x04;
        const PSH = 0x08;
        const ACK = 0x10;
        const URG = 0x20;
        const ECE = 0x40;
        const CWR = 0x80;
    }
}

impl TcpFlags {
    /// SYN without ACK: a connection request.
    pub fn is_syn_only(self) -> bool {
        self.contains(TcpFlags::SYN) && !self.contains(TcpFlags::ACK)
    }

    /// Exactly SYN and ACK both set (other flags such as ECE allowed, RST/FIN not).
    pub fn is_syn_ack(self) -> bool {
        self.contains(TcpFlags::SYN | TcpFlags::ACK)
            && !self.intersects(TcpFlags::RST | TcpFlags::FIN)
    }
}

/// TCP options the probe reads (RFC 9293, RFC 7323, RFC 2018).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpOptions {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    /// (TSval, TSecr).
    pub timestamp: Option<(u32, u32)>,
}

/// The TCP header fields the flow and NPM code use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpMeta {
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    /// Raw (unscaled) window field.
    pub window: u16,
    pub options: TcpOptions,
}

/// Transport layer summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    Tcp(TcpMeta),
    Udp,
    Icmp {
        icmp_type: u8,
        code: u8,
    },
    Icmpv6 {
        icmp_type: u8,
        code: u8,
    },
    /// A non-first fragment: no transport header in this packet.
    Fragment,
    /// Another IP protocol (GRE, ESP, SCTP …): counted by address pair only.
    Other,
}

/// One packet, parsed. Borrowed from the frame: no copy of the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketMeta<'a> {
    /// Outermost VLAN ID (802.1Q, or the 802.1ad service tag of QinQ: the
    /// tag a mirror port or provider adds), `None` when untagged. For
    /// 802.1ad frames Wireshark shows this tag as `ieee8021ad.id` and the
    /// inner customer tag as `vlan.id`.
    pub vlan: Option<u16>,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IP protocol / final IPv6 next header after the extension chain.
    pub proto: u8,
    /// IP bytes on the wire: IPv4 total length, IPv6 payload length + 40.
    /// Taken from the header, not the captured length, so a snaplen-truncated
    /// capture still counts true bytes; but never more than the frame held
    /// on the wire after its link header (see `length_clamped`).
    pub ip_len: u32,
    /// The IP header claimed more bytes than the frame held on the wire
    /// (a malformed length, which tshark marks as such): `ip_len` and
    /// `payload_len` were cut to what the frame can hold. Counted by the
    /// worker as `ip_length_clamped`.
    pub length_clamped: bool,
    /// IPv4 TOS / IPv6 traffic class.
    pub tos: u8,
    pub ttl: u8,
    pub fragment: Fragment,
    /// 0 when the protocol has no ports or this is a later fragment.
    pub src_port: u16,
    pub dst_port: u16,
    pub l4: L4,
    /// L4 payload length per the IP/L4 headers (on the wire).
    pub payload_len: u32,
    /// The captured L4 payload bytes (may be shorter than `payload_len` when
    /// the capture was truncated by a snaplen).
    pub payload: &'a [u8],
}

impl PacketMeta<'_> {
    pub fn tcp(&self) -> Option<&TcpMeta> {
        match &self.l4 {
            L4::Tcp(t) => Some(t),
            _ => None,
        }
    }
}
