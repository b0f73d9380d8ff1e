//! Link layer → L4: one bounded, straight-line walk per packet.
//!
//! [`parse`] peels the framing (Ethernet with VLAN tags, MPLS and PPPoE,
//! Linux cooked, BSD loopback, raw IP), then the IP header and its IPv6
//! extension chain, then the transport header, and fills a [`PacketMeta`]
//! that borrows the payload from the frame. Every loop has a fixed bound
//! (the `MAX_*` of `xdprobe_common::headers`, shared with the XDP program's
//! walk; as in xdp-tools' `parsing_helpers.h`), nothing allocates,
//! and every way out that is not a packet is a named [`DropReason`].
//!
//! # Decisions the flow and NPM code rely on
//!
//! * **VLAN**: `vlan` is the VID of the *first* tag in the frame (the
//!   outermost: the tag a mirror port or provider adds; for 802.1ad frames
//!   tshark calls it `ieee8021ad.id` and shows the inner tag as `vlan.id`). A priority tag (VID 0) is reported as `Some(0)`, as tshark does.
//!   0x8100, 0x88a8 and 0x9100 all count as tags; more than
//!   [`MAX_VLAN_DEPTH`] is `vlan_too_deep`.
//! * **MPLS**: up to [`MAX_MPLS_DEPTH`] label entries until bottom of stack.
//!   Below it, the first nibble decides (RFC 4385 §2): 4 → IPv4, 6 → IPv6,
//!   1 → PW associated channel (control traffic, `unsupported_mpls_payload`).
//!   Anything else is taken as an Ethernet pseudowire (RFC 4448), which may
//!   or may not start with a 4-byte control word whose first nibble is 0.
//!   Since a destination MAC can start with 0 too (00:xx OUIs are common),
//!   the nibble alone does not tell; the walk looks at where the inner
//!   EtherType would be: with a 0 nibble and an IP/VLAN/MPLS/PPPoE EtherType
//!   at offset 16 it skips a control word, else with one at offset 12 it
//!   reads the frame from the first byte, else the payload is
//!   `unsupported_mpls_payload` (non-IP pseudowire traffic lands here too).
//!   The inner frame is walked once (a pseudowire inside a pseudowire is
//!   `unsupported_mpls_payload`); its VLAN tags share the VLAN bound and
//!   `vlan` stays the outermost tag of the whole frame. Two cases cannot be
//!   told apart by anyone and are read as IP: a pseudowire without control
//!   word whose inner destination MAC starts with 4 or 6. (tshark's
//!   heuristic looks at MAC vendor prefixes instead and takes an all-zero
//!   control word for a Xerox MAC; its reading differs there.)
//! * **PPPoE session** (0x8864, RFC 2516) with PPP protocol IPv4 (0x21) or
//!   IPv6 (0x57) is walked; other PPP protocols and PPPoE discovery are
//!   `not_ip`.
//! * **Lengths**: `ip_len` comes from the IP header (IPv4 total length,
//!   IPv6 payload length + 40), not from the capture, so snaplen-cut
//!   packets count their true bytes. A total length of 0 (IPv4), or a
//!   payload length of 0 with something after the header (IPv6), is a
//!   TSO/GSO or BIG TCP super-frame captured before segmentation: the
//!   length is then what the frame's wire length leaves after the link
//!   header (such frames are large, so there is no Ethernet padding to
//!   mistake for data). An IPv6 jumbogram (payload length 0 and a Jumbo
//!   Payload hop-by-hop option, RFC 2675) uses the option's length + 40.
//! * **Malformed lengths**: an IP length larger than what the frame held on
//!   the wire after its link header (`wire_len` minus the link header) is
//!   a lie a frame cannot tell: a 54-byte frame whose IPv4 total length says
//!   65535, or an 82-byte one with a jumbo option of 2^32 − 1. `ip_len` is
//!   then what the frame held, `length_clamped` is set and the worker counts
//!   it (`ip_length_clamped`), so one packet can never inflate a flow's
//!   bytes beyond its frame.
//! * **Payload**: `payload_len` is the on-wire L4 payload: IP length minus IP,
//!   extension and L4 headers (saturating). For UDP the UDP length field is
//!   used when it fits inside the IP payload (it excludes trailing junk);
//!   otherwise, e.g. in a first fragment or a jumbogram, the IP length is.
//!   `payload` is the captured part of it, clipped to `payload_len`, so the
//!   padding of a short Ethernet frame is never payload.
//! * **Fragments**: offset 0 with more-fragments set is
//!   `Fragment::First { id }`: the L4 header is parsed and `payload_len`
//!   counts the L4 payload bytes *in this fragment*. Offset > 0 is
//!   `Fragment::Later { id, offset, more }` with `offset` in bytes,
//!   `l4 = L4::Fragment`, ports 0, `payload` empty, and `payload_len` the
//!   fragment's data bytes, so `payload_len` summed over a whole series is
//!   the datagram's L4 payload (+ its L4 header, which only the first
//!   fragment subtracts). IPv6 fragment headers give the 32-bit
//!   identification; an IPv6 *atomic* fragment (offset 0, M = 0, RFC 6946)
//!   is reported as `Fragment::None`, which it is.
//! * **IPv6 extension headers**: hop-by-hop, routing, destination options,
//!   AH and fragment are stepped over, at most [`MAX_IPV6_EXT`] of them.
//!   ESP (50), no-next-header (59) and anything else end the chain; `proto`
//!   is the last next-header value and non-TCP/UDP/ICMPv6 ones are
//!   `L4::Other` (ports 0, the rest of the packet as payload).
//! * **TCP options** cut by a snaplen are read as far as captured; the
//!   segment is kept. Only fewer than 20 TCP bytes is `truncated_tcp`.
//!   ICMP in IPv6 or ICMPv6 in IPv4 is `L4::Other`.
//! * `wire_len` smaller than the captured length is taken as the captured
//!   length.

use std::net::IpAddr;

use super::wire::ipv6::is_generic_ext;
use super::wire::tcp::parse_options;
use super::wire::{
    self, EtherType, EthernetFrame, IcmpPacket, Ipv4Packet, Ipv6ExtHeader, Ipv6FragmentHeader,
    Ipv6Packet, MplsLabel, NullHeader, PppoeSession, Sll2Header, SllHeader, TcpPacket, UdpPacket,
    VlanTag, clip, ip_proto,
};
use super::{DropReason, Fragment, L4, LinkType, PacketMeta, TcpMeta};

#[cfg(test)]
mod tests;

// The limits are the XDP program's too: one policy for files and live
// capture (`xdprobe_common::headers`).
use xdprobe_common::headers::pppoe;
pub use xdprobe_common::headers::{MAX_IPV6_EXT, MAX_MPLS_DEPTH, MAX_VLAN_DEPTH};

/// Length of an MPLS pseudowire control word (RFC 4385 §3).
const PW_CONTROL_WORD_LEN: usize = 4;

#[derive(Clone, Copy)]
enum Net {
    V4,
    V6,
}

/// Where the IP header starts (a suffix of the frame) and what the link
/// layer said on the way.
struct L3<'a> {
    net: Net,
    ip: &'a [u8],
    vlan: Option<u16>,
}

impl<'a> L3<'a> {
    #[inline]
    fn new(net: Net, ip: &'a [u8], vlan: Option<u16>) -> Self {
        Self { net, ip, vlan }
    }
}

/// Parses one frame of `link` framing. `wire_len` is the frame's length on
/// the wire (pcap `orig_len`; the frame length for live capture); it only
/// matters for TSO/GSO frames whose IP length field is 0.
#[inline]
pub fn parse(link: LinkType, frame: &[u8], wire_len: u32) -> Result<PacketMeta<'_>, DropReason> {
    let mut out = None;
    match parse_into(link, frame, wire_len, &mut out) {
        // `parse_into` fills `out` whenever it returns `Ok`.
        Ok(()) => out.ok_or(DropReason::NotIp),
        Err(e) => Err(e),
    }
}

/// [`parse`], written into `out` where the caller keeps it: `Some` on
/// success, `None` on an error. The worker's batch parses into its array
/// this way. Returned by value, a packet was built on the stack (the
/// transport parser writes into it), then copied out twice, the copies'
/// 16-byte loads reading stores of other sizes and offsets that had not
/// yet landed: a failed store forward at each, 15 % of the batch loop's
/// samples on the bench file (`benches/LOG.md`).
#[inline(always)]
pub fn parse_into<'a>(
    link: LinkType,
    frame: &'a [u8],
    wire_len: u32,
    out: &mut Option<PacketMeta<'a>>,
) -> Result<(), DropReason> {
    let done = ip_layer(link, frame, wire_len, out);
    if done.is_err() {
        *out = None;
    }
    done
}

/// [`parse_into`] before an error clears `out`.
#[inline(always)]
fn ip_layer<'a>(
    link: LinkType,
    frame: &'a [u8],
    wire_len: u32,
    out: &mut Option<PacketMeta<'a>>,
) -> Result<(), DropReason> {
    let l3 = link_layer(link, frame)?;
    // `l3.ip` is a suffix of `frame`, so this is the link header's length.
    let link_hdr = frame.len().saturating_sub(l3.ip.len());
    let wire = (wire_len as usize).max(frame.len());
    let l3_wire = u32::try_from(wire.saturating_sub(link_hdr)).unwrap_or(u32::MAX);
    match l3.net {
        Net::V4 => ipv4(l3.ip, l3_wire, l3.vlan, out),
        Net::V6 => ipv6(l3.ip, l3_wire, l3.vlan, out),
    }
}

/// The source and destination address bytes of an IP frame of `link`
/// framing (4 or 16 bytes each), found by the same link-layer walk as
/// [`parse`] (VLAN, MPLS, PPPoE, cooked and loopback headers alike), without
/// parsing the rest. `None` where `parse` would find no IP header, or the
/// frame ends before the addresses.
///
/// The workers' symmetric steering hash uses this, so every frame that
/// `parse` can place in a flow is steered by the addresses it will be
/// keyed by, whatever its encapsulation.
#[inline]
pub fn ip_addrs(link: LinkType, frame: &[u8]) -> Option<(&[u8], &[u8])> {
    let l3 = link_layer(link, frame).ok()?;
    match l3.net {
        Net::V4 => Some((l3.ip.get(12..16)?, l3.ip.get(16..20)?)),
        Net::V6 => Some((l3.ip.get(8..24)?, l3.ip.get(24..40)?)),
    }
}

#[inline(always)]
fn link_layer(link: LinkType, frame: &[u8]) -> Result<L3<'_>, DropReason> {
    match link {
        LinkType::Ethernet => {
            let eth = EthernetFrame::new_checked(frame)?;
            ethertype_chain(eth.ethertype(), eth.payload())
        }
        LinkType::RawIp => match frame.first().map(|b| b >> 4) {
            Some(4) => Ok(L3::new(Net::V4, frame, None)),
            Some(6) => Ok(L3::new(Net::V6, frame, None)),
            _ => Err(DropReason::BadIpVersion),
        },
        LinkType::Ipv4 => Ok(L3::new(Net::V4, frame, None)),
        LinkType::Ipv6 => Ok(L3::new(Net::V6, frame, None)),
        LinkType::LinuxSll => {
            let sll = SllHeader::new_checked(frame)?;
            ethertype_chain(sll.protocol(), sll.payload())
        }
        LinkType::LinuxSll2 => {
            let sll = Sll2Header::new_checked(frame)?;
            ethertype_chain(sll.protocol(), sll.payload())
        }
        LinkType::Null => {
            let null = NullHeader::new_checked(frame)?;
            if null.is_ipv4() {
                Ok(L3::new(Net::V4, null.payload(), None))
            } else if null.is_ipv6() {
                Ok(L3::new(Net::V6, null.payload(), None))
            } else {
                Err(DropReason::NotIp)
            }
        }
    }
}

/// Follows VLAN tags, MPLS (with at most one Ethernet pseudowire) and PPPoE
/// from `ethertype` to an IP header.
///
/// Terminates: every pass either returns, consumes one of the
/// [`MAX_VLAN_DEPTH`] tags, or enters the single allowed pseudowire.
#[inline]
fn ethertype_chain(mut ethertype: u16, mut rest: &[u8]) -> Result<L3<'_>, DropReason> {
    let mut vlan = None;
    let mut tags = 0;
    let mut in_pseudowire = false;
    loop {
        match ethertype {
            EtherType::IPV4 => return Ok(L3::new(Net::V4, rest, vlan)),
            EtherType::IPV6 => return Ok(L3::new(Net::V6, rest, vlan)),
            t if EtherType::is_vlan(t) => {
                if tags == MAX_VLAN_DEPTH {
                    return Err(DropReason::VlanTooDeep);
                }
                tags += 1;
                let tag = VlanTag::new_checked(rest)?;
                vlan.get_or_insert(tag.vid());
                ethertype = tag.ethertype();
                rest = tag.payload();
            }
            EtherType::MPLS_UNICAST | EtherType::MPLS_MULTICAST => {
                let below = mpls_stack(rest)?;
                match below.first().map(|b| b >> 4) {
                    Some(4) => return Ok(L3::new(Net::V4, below, vlan)),
                    Some(6) => return Ok(L3::new(Net::V6, below, vlan)),
                    // PW associated channel (RFC 4385 §5): control traffic.
                    Some(1) => return Err(DropReason::UnsupportedMplsPayload),
                    Some(nibble) if !in_pseudowire => {
                        in_pseudowire = true;
                        let eth = EthernetFrame::new_checked(ethernet_pseudowire(below, nibble)?)?;
                        ethertype = eth.ethertype();
                        rest = eth.payload();
                    }
                    Some(_) => return Err(DropReason::UnsupportedMplsPayload),
                    None => return Err(DropReason::TruncatedMpls),
                }
            }
            EtherType::PPPOE_SESSION => {
                let ppp = PppoeSession::new_checked(rest)?;
                if ppp.ver_type() != pppoe::VER_TYPE || ppp.code() != pppoe::CODE_SESSION {
                    return Err(DropReason::NotIp);
                }
                return match ppp.ppp_protocol() {
                    PppoeSession::<&[u8]>::PPP_IPV4 => Ok(L3::new(Net::V4, ppp.payload(), vlan)),
                    PppoeSession::<&[u8]>::PPP_IPV6 => Ok(L3::new(Net::V6, ppp.payload(), vlan)),
                    _ => Err(DropReason::NotIp),
                };
            }
            _ => return Err(DropReason::NotIp),
        }
    }
}

/// The inner Ethernet frame of an Ethernet pseudowire (RFC 4448) below the
/// label stack, with or without the control word: see the module doc.
#[inline]
fn ethernet_pseudowire(below: &[u8], first_nibble: u8) -> Result<&[u8], DropReason> {
    let type_at = |off: usize| {
        wire::tail(below, off)
            .first_chunk::<2>()
            .map(|t| u16::from_be_bytes(*t))
    };
    let cw_type = type_at(PW_CONTROL_WORD_LEN + 12);
    if first_nibble == 0 && cw_type.is_some_and(pseudowire_carries) {
        return Ok(wire::tail(below, PW_CONTROL_WORD_LEN));
    }
    match type_at(12) {
        Some(t) if pseudowire_carries(t) => Ok(below),
        Some(_) => Err(DropReason::UnsupportedMplsPayload),
        None => Err(DropReason::TruncatedMpls),
    }
}

/// EtherTypes that make a guessed pseudowire frame believable and that the
/// walk can carry on with.
#[inline]
const fn pseudowire_carries(t: u16) -> bool {
    matches!(
        t,
        EtherType::IPV4
            | EtherType::IPV6
            | EtherType::MPLS_UNICAST
            | EtherType::MPLS_MULTICAST
            | EtherType::PPPOE_SESSION
    ) || EtherType::is_vlan(t)
}

/// Skips the label stack; returns what follows bottom of stack.
#[inline]
fn mpls_stack(mut rest: &[u8]) -> Result<&[u8], DropReason> {
    for _ in 0..MAX_MPLS_DEPTH {
        let entry = MplsLabel::new_checked(rest)?;
        rest = entry.payload();
        if entry.bottom_of_stack() {
            return Ok(rest);
        }
    }
    Err(DropReason::MplsTooDeep)
}

#[inline]
fn ipv4<'a>(
    buf: &'a [u8],
    l3_wire: u32,
    vlan: Option<u16>,
    out: &mut Option<PacketMeta<'a>>,
) -> Result<(), DropReason> {
    let ip = Ipv4Packet::new_checked(buf)?;
    let hl = ip.header_len() as u32;
    let claimed = match ip.total_len() {
        0 => l3_wire, // TSO super-frame: see the module doc.
        n => u32::from(n),
    };
    let ip_len = claimed.min(l3_wire);
    let seg_wire = ip_len.saturating_sub(hl);
    let seg = clip(ip.payload(), seg_wire as usize);
    let proto = ip.protocol();
    let id = u32::from(ip.ident());
    let offset = ip.frag_offset();
    let more = ip.more_frags();
    let fragment = match (offset, more) {
        (0, false) => Fragment::None,
        (0, true) => Fragment::First { id },
        _ => Fragment::Later { id, offset, more },
    };
    let m = out.insert(PacketMeta {
        vlan,
        src: IpAddr::V4(ip.src()),
        dst: IpAddr::V4(ip.dst()),
        proto,
        ip_len,
        length_clamped: claimed > ip_len,
        tos: ip.tos(),
        ttl: ip.ttl(),
        fragment,
        src_port: 0,
        dst_port: 0,
        // As a later fragment leaves it: see the module doc.
        l4: L4::Fragment,
        payload_len: seg_wire,
        payload: &[],
    });
    if offset == 0 {
        transport(m, seg, seg_wire, Net::V4)?;
    }
    Ok(())
}

#[inline]
fn ipv6<'a>(
    buf: &'a [u8],
    l3_wire: u32,
    vlan: Option<u16>,
    out: &mut Option<PacketMeta<'a>>,
) -> Result<(), DropReason> {
    let ip = Ipv6Packet::new_checked(buf)?;
    let plen = ip.payload_len();
    let mut next = ip.next_header();
    // With a payload length, the chain must fit in it (padding is not an
    // extension header). Without one (jumbogram, GSO) the length is only
    // known after the hop-by-hop header: walk the capture, clip afterwards.
    let mut rest = match plen {
        0 => ip.payload(),
        n => clip(ip.payload(), usize::from(n)),
    };
    let mut ext_len: u32 = 0;
    let mut fragment = Fragment::None;
    let mut jumbo = None;
    let mut hops = 0;
    while is_generic_ext(next) || next == ip_proto::IPV6_FRAG {
        if hops == MAX_IPV6_EXT {
            return Err(DropReason::Ipv6ExtTooDeep);
        }
        hops += 1;
        if next == ip_proto::IPV6_FRAG {
            let frag = Ipv6FragmentHeader::new_checked(rest)?;
            next = frag.next_header();
            rest = frag.payload();
            ext_len += Ipv6FragmentHeader::<&[u8]>::HEADER_LEN as u32;
            let (id, offset, more) = (frag.ident(), frag.frag_offset(), frag.more_frags());
            if offset > 0 {
                fragment = Fragment::Later { id, offset, more };
                break;
            }
            if more {
                fragment = Fragment::First { id };
            }
        } else {
            let ext = Ipv6ExtHeader::new_checked(rest, next)?;
            if hops == 1 && next == ip_proto::HOPOPT && plen == 0 {
                jumbo = ext.jumbo_payload_len();
            }
            next = ext.next_header();
            rest = ext.payload();
            // At most 2048 bytes per header, 8 headers: no overflow.
            ext_len += ext.header_len() as u32;
        }
    }
    let claimed = match (plen, jumbo) {
        (0, Some(j)) => j.saturating_add(40),
        // Nothing after the header: a genuinely empty packet.
        (0, None) if next == ip_proto::IPV6_NONXT && hops == 0 => 40,
        (0, None) => l3_wire, // GSO / BIG TCP super-frame: see the module doc.
        (n, _) => u32::from(n) + 40,
    };
    let ip_len = claimed.min(l3_wire);
    let seg_wire = ip_len.saturating_sub(40 + ext_len);
    let seg = clip(rest, seg_wire as usize);
    let m = out.insert(PacketMeta {
        vlan,
        src: IpAddr::V6(ip.src()),
        dst: IpAddr::V6(ip.dst()),
        proto: next,
        ip_len,
        length_clamped: claimed > ip_len,
        tos: ip.traffic_class(),
        ttl: ip.hop_limit(),
        fragment,
        src_port: 0,
        dst_port: 0,
        l4: L4::Fragment,
        payload_len: seg_wire,
        payload: &[],
    });
    if !matches!(fragment, Fragment::Later { .. }) {
        transport(m, seg, seg_wire, Net::V6)?;
    }
    Ok(())
}

/// Parses the transport header in `seg` (captured bytes, already clipped to
/// the IP length; `seg_wire` is its on-wire length) into the L4 fields of
/// `m`, which arrive as for a later fragment. Writing into the packet being
/// returned, rather than building a part and moving it, keeps the hot path
/// free of store-to-load stalls on the copies.
#[inline]
fn transport<'a>(
    m: &mut PacketMeta<'a>,
    seg: &'a [u8],
    seg_wire: u32,
    net: Net,
) -> Result<(), DropReason> {
    match (m.proto, net) {
        (ip_proto::TCP, _) => {
            let tcp = TcpPacket::new_checked(seg)?;
            let hl = tcp.header_len() as u32;
            if hl > seg_wire {
                return Err(DropReason::BadTcpHeader);
            }
            m.l4 = L4::Tcp(TcpMeta {
                seq: tcp.seq(),
                ack: tcp.ack(),
                flags: tcp.flags(),
                window: tcp.window(),
                options: parse_options(tcp.options()),
            });
            m.src_port = tcp.src_port();
            m.dst_port = tcp.dst_port();
            m.payload_len = seg_wire - hl;
            m.payload = tcp.payload();
        }
        (ip_proto::UDP, _) => {
            let udp = UdpPacket::new_checked(seg)?;
            let ulen = u32::from(udp.length());
            let payload_len = if (8..=seg_wire).contains(&ulen) {
                ulen - 8
            } else {
                seg_wire.saturating_sub(8)
            };
            m.l4 = L4::Udp;
            m.src_port = udp.src_port();
            m.dst_port = udp.dst_port();
            m.payload_len = payload_len;
            m.payload = clip(udp.payload(), payload_len as usize);
        }
        (ip_proto::ICMP, Net::V4) | (ip_proto::ICMPV6, Net::V6) => {
            let icmp = IcmpPacket::new_checked(seg)?;
            let (icmp_type, code) = (icmp.msg_type(), icmp.code());
            m.l4 = match net {
                Net::V4 => L4::Icmp { icmp_type, code },
                Net::V6 => L4::Icmpv6 { icmp_type, code },
            };
            m.payload_len = seg_wire.saturating_sub(IcmpPacket::<&[u8]>::HEADER_LEN as u32);
            m.payload = icmp.payload();
        }
        _ => {
            m.l4 = L4::Other;
            m.payload = seg;
        }
    }
    Ok(())
}
