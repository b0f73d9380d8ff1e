//! Bounded header walk: Ethernet, up to two VLAN tags, IPv4/IPv6 with up to
//! `MAX_V6_EXT` extension headers, then the L4 ports. Each step checks its
//! bytes against `data_end` before reading them (the verifier demands it,
//! and a probe sees arbitrary frames); the caps keep the loops bounded, as
//! xdp-tools' `parsing_helpers.h` does.

use aya_ebpf::programs::XdpContext;

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
/// QinQ at most: deeper stacks are not IP as far as the probe is concerned.
const MAX_VLAN: usize = 2;
/// Extension headers skipped before giving up on finding the ports.
const MAX_V6_EXT: usize = 4;

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

/// `None` when the frame is not IPv4/IPv6 (or too short to tell).
#[inline(always)]
pub fn walk(ctx: &XdpContext, need_l3: bool, need_l4: bool) -> Option<Headers> {
    let mut c = Cursor::new(ctx);
    let mut ethertype = c.be16(12)?;
    c.advance(ETH_HLEN)?;
    let mut vlan = 0u16;
    for depth in 0..MAX_VLAN {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        let tci = c.be16(0)?;
        if depth == 0 {
            vlan = tci & 0x0fff;
        }
        ethertype = c.be16(2)?;
        c.advance(4)?;
    }
    if ethertype != ETH_P_IP && ethertype != ETH_P_IPV6 {
        return None;
    }
    let mut h = Headers {
        vlan,
        addrs: Addrs::None,
        ports: None,
    };
    if !need_l3 {
        return Some(h);
    }
    let l4 = if ethertype == ETH_P_IP {
        ipv4(&mut c, &mut h)
    } else {
        ipv6(&mut c, &mut h)
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
    Some(h)
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
    for _ in 0..MAX_V6_EXT {
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
