//! Bidirectional flow keys and who is the client.
//!
//! Both directions of a connection map to one canonical key: the two
//! (address, port) endpoints are stored in sorted order, so a packet and its
//! reply hash and compare equal without knowing roles. The roles (client =
//! SYN sender) are decided separately, once, by [`Roles::decide`].

use std::net::IpAddr;

use crate::parse::{L4, PacketMeta, TcpFlags};

/// An address as one 128-bit integer: IPv6 as is, IPv4 in the IPv4-mapped
/// range (`::ffff:a.b.c.d`), so comparing and hashing a key is a few word
/// operations instead of matching `IpAddr` variants and hashing byte slices.
/// Kept as two 64-bit halves (high first, so the derived order is the
/// integer's): a `u128` would align the key, and so the flow entry, to 16
/// bytes, which costs the entry 8 bytes of padding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    hi: u64,
    lo: u64,
}

const V4_MAPPED: u64 = 0xffff << 32;

impl Addr {
    #[inline]
    pub fn new(a: IpAddr) -> Addr {
        match a {
            IpAddr::V4(v4) => Addr {
                hi: 0,
                lo: V4_MAPPED | u64::from(v4.to_bits()),
            },
            IpAddr::V6(v6) => {
                let b = v6.to_bits();
                Addr {
                    hi: (b >> 64) as u64,
                    lo: b as u64,
                }
            }
        }
    }

    /// Back to `IpAddr`. `is_v6` keeps a real IPv6 `::ffff:a.b.c.d` apart
    /// from an IPv4 address.
    pub fn to_ip(self, is_v6: bool) -> IpAddr {
        if !is_v6 && self.hi == 0 && self.lo >> 32 == 0xffff {
            IpAddr::V4(std::net::Ipv4Addr::from_bits(self.lo as u32))
        } else {
            IpAddr::V6(std::net::Ipv6Addr::from_bits(
                u128::from(self.hi) << 64 | u128::from(self.lo),
            ))
        }
    }
}

// `FlowKey::bits`.
const KEY_V6: u8 = 1;
const KEY_VLAN: u8 = 1 << 1;

/// Canonical 5-tuple + VLAN, 40 bytes. `lo` is the smaller (address, port)
/// endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub lo_addr: Addr,
    pub hi_addr: Addr,
    pub lo_port: u16,
    pub hi_port: u16,
    pub proto: u8,
    /// `KEY_V6`, `KEY_VLAN` (an `Option<u16>` would take 4 bytes).
    bits: u8,
    /// Outermost VLAN ID (with `KEY_VLAN`, else 0); QinQ inner tags do not
    /// split flows.
    vlan_id: u16,
}

const _: () = assert!(size_of::<FlowKey>() == 40);

impl FlowKey {
    /// A placeholder (the all-zero key) for arrays filled as they are used.
    pub(crate) const ZERO: FlowKey = FlowKey {
        lo_addr: Addr { hi: 0, lo: 0 },
        hi_addr: Addr { hi: 0, lo: 0 },
        lo_port: 0,
        hi_port: 0,
        proto: 0,
        bits: 0,
        vlan_id: 0,
    };
}

/// A key as the flow table's hot entry keeps it, 16 bytes: for IPv4 the
/// whole key (two 32-bit addresses, then ports, protocol, flags and VLAN
/// ID in one word), for IPv6 the second word and, in place of the
/// addresses, the slot of a side column where the table keeps them
/// ([`with_v6_slot`](Self::with_v6_slot)). So an IPv4 key is confirmed from
/// the one cache line that holds the flow's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct CompactKey {
    addrs: u64,
    rest: u64,
}

impl CompactKey {
    /// A placeholder (never a stored key's: its protocol word is 0).
    pub(crate) const ZERO: CompactKey = CompactKey { addrs: 0, rest: 0 };

    /// An IPv6 key (its addresses live elsewhere).
    #[inline]
    pub fn is_v6(&self) -> bool {
        (self.rest >> 40) as u8 & KEY_V6 != 0
    }

    /// The same IPv6 key, its addresses kept in side-column slot `slot`.
    pub fn with_v6_slot(self, slot: u32) -> CompactKey {
        CompactKey {
            addrs: u64::from(slot),
            ..self
        }
    }

    /// Both words (the address word holds an IPv6 key's slot).
    #[inline]
    pub fn words(&self) -> (u64, u64) {
        (self.addrs, self.rest)
    }

    /// The ports, lower endpoint first.
    #[inline]
    pub fn ports(&self) -> (u16, u16) {
        (self.rest as u16, (self.rest >> 16) as u16)
    }

    /// The side-column slot of an IPv6 key's addresses.
    #[inline]
    pub fn v6_slot(&self) -> u32 {
        self.addrs as u32
    }

    /// Whether `self` (a stored key) is the key `probe` was made from: for
    /// IPv4 exactly; for IPv6 the addresses are still to be compared (the
    /// caller reads them from the slot).
    #[inline]
    pub fn matches(&self, probe: &CompactKey) -> bool {
        self.rest == probe.rest && (self.addrs == probe.addrs || probe.is_v6())
    }
}

/// Which endpoint of a [`FlowKey`] a packet came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Lo,
    Hi,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::Lo => Side::Hi,
            Side::Hi => Side::Lo,
        }
    }
}

impl FlowKey {
    /// The canonical key of a packet with explicit ports (fragments carry the
    /// ports of their first fragment), and the side the packet was sent from.
    #[inline]
    pub fn canonical(
        src: IpAddr,
        src_port: u16,
        dst: IpAddr,
        dst_port: u16,
        proto: u8,
        vlan: Option<u16>,
    ) -> (FlowKey, Side) {
        let (s, d) = (Addr::new(src), Addr::new(dst));
        let mut bits = if src.is_ipv6() { KEY_V6 } else { 0 };
        if vlan.is_some() {
            bits |= KEY_VLAN;
        }
        let vlan_id = vlan.unwrap_or(0);
        if (s, src_port) <= (d, dst_port) {
            let k = FlowKey {
                lo_addr: s,
                hi_addr: d,
                lo_port: src_port,
                hi_port: dst_port,
                proto,
                bits,
                vlan_id,
            };
            (k, Side::Lo)
        } else {
            let k = FlowKey {
                lo_addr: d,
                hi_addr: s,
                lo_port: dst_port,
                hi_port: src_port,
                proto,
                bits,
                vlan_id,
            };
            (k, Side::Hi)
        }
    }

    pub fn is_v6(&self) -> bool {
        self.bits & KEY_V6 != 0
    }

    /// The compact form ([`CompactKey`]); an IPv6 key's address word is 0
    /// until [`CompactKey::with_v6_slot`].
    #[inline]
    pub fn compact(&self) -> CompactKey {
        let addrs = if self.is_v6() {
            0
        } else {
            // IPv4 addresses are IPv4-mapped: the low 32 bits are the address.
            u64::from(self.lo_addr.lo as u32) << 32 | u64::from(self.hi_addr.lo as u32)
        };
        CompactKey {
            addrs,
            rest: u64::from(self.lo_port)
                | u64::from(self.hi_port) << 16
                | u64::from(self.proto) << 32
                | u64::from(self.bits) << 40
                | u64::from(self.vlan_id) << 48,
        }
    }

    /// The addresses, lower endpoint first (what an IPv6 key keeps apart).
    pub fn addrs(&self) -> [Addr; 2] {
        [self.lo_addr, self.hi_addr]
    }

    /// The key back from its compact form; `v6` holds the addresses of an
    /// IPv6 key (ignored for IPv4).
    pub fn expand(c: &CompactKey, v6: [Addr; 2]) -> FlowKey {
        let v4 = |a: u64| Addr {
            hi: 0,
            lo: V4_MAPPED | (a & 0xffff_ffff),
        };
        let [lo_addr, hi_addr] = if c.is_v6() {
            v6
        } else {
            [v4(c.addrs >> 32), v4(c.addrs)]
        };
        FlowKey {
            lo_addr,
            hi_addr,
            lo_port: c.rest as u16,
            hi_port: (c.rest >> 16) as u16,
            proto: (c.rest >> 32) as u8,
            bits: (c.rest >> 40) as u8,
            vlan_id: (c.rest >> 48) as u16,
        }
    }

    /// Outermost VLAN ID.
    pub fn vlan(&self) -> Option<u16> {
        (self.bits & KEY_VLAN != 0).then_some(self.vlan_id)
    }

    pub fn endpoint(&self, side: Side) -> (IpAddr, u16) {
        match side {
            Side::Lo => (self.lo_addr.to_ip(self.is_v6()), self.lo_port),
            Side::Hi => (self.hi_addr.to_ip(self.is_v6()), self.hi_port),
        }
    }
}

/// The client side of a flow and whether it was inferred.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles {
    pub client: Side,
    pub guessed: bool,
}

/// IANA "dynamic/private" ports start here (RFC 6335 §6).
const EPHEMERAL_START: u16 = 49152;

impl Roles {
    /// Decides roles from the first packet of a flow, sent from `sender`.
    ///
    /// Certain (not guessed): a TCP SYN (sender is client) or SYN+ACK
    /// (receiver is client); UDP with exactly one side on port 53 (that side
    /// is the DNS server, spec §2); ICMP/ICMPv6 echo request (client) or
    /// reply (server).
    ///
    /// Guessed (`direction_guessed: true`), for flows first seen mid-stream:
    /// a packet to a multicast or broadcast address comes from the client;
    /// else the side using a port below the dynamic range (49152) while the other
    /// is in it is the server; otherwise the lower port is the server (services
    /// listen on low, well-known or registered ports; clients use ephemeral
    /// ones); with equal or no ports the first packet's sender is the client.
    pub fn decide(pkt: &PacketMeta<'_>, sender: Side) -> Roles {
        let certain = |client| Roles {
            client,
            guessed: false,
        };
        match pkt.l4 {
            L4::Tcp(t) if t.flags.is_syn_only() => return certain(sender),
            L4::Tcp(t) if t.flags.contains(TcpFlags::SYN | TcpFlags::ACK) => {
                return certain(sender.other());
            }
            L4::Udp if (pkt.dst_port == 53) != (pkt.src_port == 53) => {
                return certain(if pkt.dst_port == 53 {
                    sender
                } else {
                    sender.other()
                });
            }
            L4::Icmp { icmp_type: 8, .. } | L4::Icmpv6 { icmp_type: 128, .. } => {
                return certain(sender);
            }
            L4::Icmp { icmp_type: 0, .. } | L4::Icmpv6 { icmp_type: 129, .. } => {
                return certain(sender.other());
            }
            _ => {}
        }
        let (sp, dp) = (pkt.src_port, pkt.dst_port);
        let client = if is_group(pkt.dst) {
            // Nobody answers from a multicast or broadcast address.
            sender
        } else if sp == dp {
            sender
        } else if (sp >= EPHEMERAL_START) != (dp >= EPHEMERAL_START) {
            if dp < EPHEMERAL_START {
                sender
            } else {
                sender.other()
            }
        } else if dp < sp {
            sender
        } else {
            sender.other()
        };
        Roles {
            client,
            guessed: true,
        }
    }
}

fn is_group(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_multicast() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.is_multicast(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn addresses_round_trip_and_families_stay_apart() {
        let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
        let (k4, _) = FlowKey::canonical(v4, 1, v4, 2, 17, None);
        let (km, _) = FlowKey::canonical(mapped, 1, mapped, 2, 17, None);
        assert_ne!(k4, km);
        assert_eq!(k4.endpoint(Side::Lo).0, v4);
        assert_eq!(km.endpoint(Side::Lo).0, mapped);
        let (k6, _) = FlowKey::canonical(v6, 1, v6, 2, 17, None);
        assert_eq!(k6.endpoint(Side::Hi), (v6, 2));
    }

    #[test]
    fn both_directions_give_one_key() {
        let a = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let b = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
        let (k1, s1) = FlowKey::canonical(a, 40000, b, 443, 6, Some(7));
        let (k2, s2) = FlowKey::canonical(b, 443, a, 40000, 6, Some(7));
        assert_eq!(k1, k2);
        assert_eq!(s1, s2.other());
        assert_eq!(k1.endpoint(s1), (a, 40000));
        assert_eq!(k1.vlan(), Some(7));
        // VLAN 0 is a tag, not its absence.
        let (k0, _) = FlowKey::canonical(a, 40000, b, 443, 6, Some(0));
        let (kn, _) = FlowKey::canonical(a, 40000, b, 443, 6, None);
        assert_ne!(k0, kn);
        assert_eq!((k0.vlan(), kn.vlan()), (Some(0), None));
    }

    #[test]
    fn compact_keys_round_trip_and_tell_families_apart() {
        let a = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let b = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 250));
        let (k, _) = FlowKey::canonical(a, 40000, b, 443, 6, Some(4095));
        let c = k.compact();
        assert!(!c.is_v6() && c.matches(&k.compact()));
        assert_eq!(FlowKey::expand(&c, k.addrs()), k);
        let (k2, _) = FlowKey::canonical(a, 40001, b, 443, 6, Some(4095));
        assert!(!c.matches(&k2.compact()));
        // An IPv6 key keeps its addresses apart; an IPv4-mapped IPv6
        // address never meets its IPv4 twin.
        let m = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        let n = IpAddr::V6(Ipv4Addr::new(203, 0, 113, 250).to_ipv6_mapped());
        let (k6, _) = FlowKey::canonical(m, 40000, n, 443, 6, Some(4095));
        let c6 = k6.compact().with_v6_slot(7);
        assert!(c6.is_v6() && c6.v6_slot() == 7);
        assert!(c6.matches(&k6.compact()) && !c.matches(&k6.compact()));
        assert!(!c6.matches(&c));
        assert_eq!(FlowKey::expand(&c6, k6.addrs()), k6);
    }

    #[test]
    fn address_order_is_the_integer_order() {
        let lo = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0xffff, 0, 0, 1));
        let hi = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 0));
        assert!(Addr::new(lo) < Addr::new(hi));
        let v4 = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));
        assert!(Addr::new(v4) < Addr::new(lo));
        assert_eq!(Addr::new(hi).to_ip(true), hi);
    }
}
