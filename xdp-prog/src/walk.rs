//! Bounded header walk, by the header policy the parser in user space
//! follows too (`xdprobe_common::headers`, documented for operators in
//! `docs/operations.md`, "Header policy"):
//!
//! * Ethernet, then up to [`MAX_VLAN_DEPTH`] VLAN tags (0x8100, 0x88a8,
//!   0x9100; the outermost VID is the one filters and flows use);
//! * then IPv4 or IPv6; or an MPLS label stack (0x8847/0x8848) of up to
//!   [`MAX_MPLS_DEPTH`] entries, below which the first nibble says IPv4 (4)
//!   or IPv6 (6); or a PPPoE session header (0x8864, version/type 0x11,
//!   code 0) with PPP protocol 0x0021 (IPv4) or 0x0057 (IPv6);
//! * for the address and port filters, the IP header and up to
//!   [`MAX_IPV6_EXT`] IPv6 extension headers, then the L4 ports.
//!
//! A frame comes out in one of three ways. **IP**: filtered, then
//! redirected. **Not IP** by the parser's rules too (any other EtherType,
//! PPPoE discovery, PPP control protocols): dropped here (passed in host
//! mode) and counted `non_ip`; the parser would count it `not_ip` and
//! make nothing of it. **Unclassified**: everything this walk does not
//! finish but the parser might still place in a flow or would count under
//! a named reason: a limit above exceeded, a header cut short, an MPLS
//! payload that is not IP directly (an Ethernet pseudowire, RFC 4448, which
//! the parser walks; a PW associated channel): redirected like IP and
//! counted `unclassified`, so that user space decides exactly as it does
//! for a file. With an address or port filter on, an unclassified frame is
//! `filtered`, since the filter cannot be evaluated on it.
//!
//! Each step checks its bytes against `data_end` before reading them (the
//! verifier demands it, and a probe sees arbitrary frames); the limits keep
//! every loop bounded, as xdp-tools' `parsing_helpers.h` does.

use aya_ebpf::programs::XdpContext;
use xdprobe_common::headers::{
    MAX_IPV6_EXT, MAX_MPLS_DEPTH, MAX_VLAN_DEPTH,
    ethertype::{self, IPV4, IPV6, PPPOE_SESSION},
    pppoe,
};

const ETH_HLEN: usize = 14;
/// One MPLS label stack entry.
const MPLS_ENTRY_LEN: usize = 4;
/// Bottom-of-stack bit, in the third byte of a label stack entry.
const MPLS_BOS: u8 = 0x01;

pub enum Addrs {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
    },
    V6 {
        src: [u8; 16],
        dst: [u8; 16],
    },
    /// L3 was not walked (no filter needs it).
    None,
}

pub struct Headers {
    /// Outermost VLAN ID, 0 when untagged.
    pub vlan: u16,
    pub addrs: Addrs,
    /// (source, destination) port of TCP/UDP/SCTP; `None` for other
    /// protocols, non-first fragments, or when not walked.
    pub ports: Option<(u16, u16)>,
}

/// What the walk made of a frame: see the module doc.
pub enum Walk {
    Ip(Headers),
    NotIp,
    /// Left to user space's parser; `vlan` is the outermost VLAN ID read
    /// (0 when none), for the VLAN filter.
    Unclassified {
        vlan: u16,
    },
}

/// Why a step of the link-layer walk did not reach an IP header.
enum Stop {
    NotIp,
    Undecided,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Net {
    V4,
    V6,
}

/// A read position in the frame. Every read checks its own bytes against
/// the end through the same pointer it reads from: the verifier tracks
/// packet ranges per pointer, and a check made on an offset recomputed from
/// `data` would not cover the access.
#[derive(Clone, Copy)]
struct Cursor {
    pos: usize,
    end: usize,
}

impl Cursor {
    #[inline(always)]
    fn new(ctx: &XdpContext) -> Self {
        Cursor {
            pos: ctx.data(),
            end: ctx.data_end(),
        }
    }

    #[inline(always)]
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        let p = self.pos + off;
        if p + N > self.end {
            return None;
        }
        // SAFETY: the check above proves `N` bytes at `p` lie inside the
        // frame; frame bytes have no alignment, hence the unaligned read.
        Some(unsafe { core::ptr::read_unaligned(p as *const [u8; N]) })
    }

    #[inline(always)]
    fn be16(&self, off: usize) -> Option<u16> {
        self.read::<2>(off).map(u16::from_be_bytes)
    }

    #[inline(always)]
    fn byte(&self, off: usize) -> Option<u8> {
        self.read::<1>(off).map(|b| b[0])
    }

    /// Moves forward by `n` bytes, bounded so that the verifier knows the
    /// new position's range.
    #[inline(always)]
    fn advance(&mut self, n: usize) -> Option<()> {
        if n > MAX_STEP {
            return None;
        }
        self.pos += n;
        if self.pos > self.end {
            return None;
        }
        Some(())
    }
}

/// Largest single header step (an IPv6 extension header: (255 + 1) × 8).
const MAX_STEP: usize = 2048;

#[inline(always)]
pub fn walk(ctx: &XdpContext, need_l3: bool, need_l4: bool) -> Walk {
    let mut c = Cursor::new(ctx);
    let mut vlan = 0u16;
    let net = match link_layer(&mut c, &mut vlan) {
        Ok(net) => net,
        Err(Stop::NotIp) => return Walk::NotIp,
        Err(Stop::Undecided) => return Walk::Unclassified { vlan },
    };
    let mut h = Headers {
        vlan,
        addrs: Addrs::None,
        ports: None,
    };
    if !need_l3 {
        return Walk::Ip(h);
    }
    let l4 = match net {
        Net::V4 => ipv4(&mut c, &mut h),
        Net::V6 => ipv6(&mut c, &mut h),
    };
    // TCP, UDP and SCTP all start with the two ports.
    if need_l4
        && let Some(proto) = l4
        && (proto == 6 || proto == 17 || proto == 132)
        && let Some(ports) = c.read::<4>(0)
    {
        h.ports = Some((
            u16::from_be_bytes([ports[0], ports[1]]),
            u16::from_be_bytes([ports[2], ports[3]]),
        ));
    }
    Walk::Ip(h)
}

/// Ethernet, VLAN tags, then MPLS or PPPoE: leaves the cursor on the IP
/// header. The parser's `ethertype_chain` makes the same decisions, except
/// that what it reads below MPLS other than IP directly is left to it.
#[inline(always)]
fn link_layer(c: &mut Cursor, vlan: &mut u16) -> Result<Net, Stop> {
    let mut et = c.be16(12).ok_or(Stop::Undecided)?;
    c.advance(ETH_HLEN).ok_or(Stop::Undecided)?;
    for depth in 0..MAX_VLAN_DEPTH {
        if !ethertype::is_vlan(et) {
            break;
        }
        let tag = c.read::<4>(0).ok_or(Stop::Undecided)?;
        if depth == 0 {
            *vlan = u16::from_be_bytes([tag[0], tag[1]]) & 0x0fff;
        }
        et = u16::from_be_bytes([tag[2], tag[3]]);
        c.advance(4).ok_or(Stop::Undecided)?;
    }
    match et {
        IPV4 => Ok(Net::V4),
        IPV6 => Ok(Net::V6),
        // More tags than the limit: the parser's `vlan_too_deep`.
        t if ethertype::is_vlan(t) => Err(Stop::Undecided),
        t if ethertype::is_mpls(t) => mpls(c),
        PPPOE_SESSION => pppoe_session(c),
        _ => Err(Stop::NotIp),
    }
}

/// Skips the label stack; IPv4/IPv6 below it by the first nibble
/// (RFC 4385 §2). Anything else below it, a stack deeper than the limit
/// or one cut short is for the parser to judge.
#[inline(always)]
fn mpls(c: &mut Cursor) -> Result<Net, Stop> {
    for _ in 0..MAX_MPLS_DEPTH {
        let entry = c.read::<MPLS_ENTRY_LEN>(0).ok_or(Stop::Undecided)?;
        c.advance(MPLS_ENTRY_LEN).ok_or(Stop::Undecided)?;
        if entry[2] & MPLS_BOS != 0 {
            return match c.byte(0).ok_or(Stop::Undecided)? >> 4 {
                4 => Ok(Net::V4),
                6 => Ok(Net::V6),
                _ => Err(Stop::Undecided),
            };
        }
    }
    Err(Stop::Undecided)
}

/// PPPoE session header and PPP protocol (RFC 2516, RFC 1661): IP, or
/// not IP (discovery-stage codes, LCP/IPCP and other PPP protocols).
#[inline(always)]
fn pppoe_session(c: &mut Cursor) -> Result<Net, Stop> {
    let h = c.read::<{ pppoe::HEADER_LEN }>(0).ok_or(Stop::Undecided)?;
    if h[0] != pppoe::VER_TYPE || h[1] != pppoe::CODE_SESSION {
        return Err(Stop::NotIp);
    }
    let net = match u16::from_be_bytes([h[6], h[7]]) {
        pppoe::PPP_IPV4 => Net::V4,
        pppoe::PPP_IPV6 => Net::V6,
        _ => return Err(Stop::NotIp),
    };
    c.advance(pppoe::HEADER_LEN).ok_or(Stop::Undecided)?;
    Ok(net)
}

/// Fills the addresses and leaves the cursor on the L4 header; returns the
/// protocol unless the packet is a non-first fragment (no L4 header in it).
#[inline(always)]
fn ipv4(c: &mut Cursor, h: &mut Headers) -> Option<u8> {
    let hdr = c.read::<20>(0)?;
    let ihl = usize::from(hdr[0] & 0x0f) * 4;
    if hdr[0] >> 4 != 4 || ihl < 20 {
        return None;
    }
    h.addrs = Addrs::V4 {
        src: [hdr[12], hdr[13], hdr[14], hdr[15]],
        dst: [hdr[16], hdr[17], hdr[18], hdr[19]],
    };
    let frag = u16::from_be_bytes([hdr[6], hdr[7]]);
    if frag & 0x1fff != 0 {
        return None;
    }
    c.advance(ihl)?;
    Some(hdr[9])
}

#[inline(always)]
fn ipv6(c: &mut Cursor, h: &mut Headers) -> Option<u8> {
    let mut next = c.byte(6)?;
    let src = c.read::<16>(8)?;
    let dst = c.read::<16>(24)?;
    h.addrs = Addrs::V6 { src, dst };
    c.advance(40)?;
    for _ in 0..MAX_IPV6_EXT {
        let step = match next {
            // Hop-by-hop, routing, destination options: (len + 1) × 8 bytes.
            0 | 43 | 60 => (usize::from(c.byte(1)?) + 1) * 8,
            // Fragment: 8 bytes; only the first fragment carries L4.
            44 => {
                if c.be16(2)? & 0xfff8 != 0 {
                    return None;
                }
                8
            }
            // Authentication header: (len + 2) × 4 bytes.
            51 => (usize::from(c.byte(1)?) + 2) * 4,
            _ => return Some(next),
        };
        next = c.byte(0)?;
        c.advance(step)?;
    }
    match next {
        0 | 43 | 44 | 51 | 60 => None,
        _ => Some(next),
    }
}
