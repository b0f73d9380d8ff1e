//! Bidirectional flow keys and who is the client.
//!
//! Both directions of a connection map to one canonical key: the two
//! (address, port) endpoints are stored in sorted order, so a packet and its
//! reply hash and compare equal without knowing roles. The roles (client =
//! SYN sender) are decided separately, once, by [`Roles::decide`].

use std::net::IpAddr;

use crate::parse::{L4, PacketMeta, TcpFlags};

/// Canonical 5-tuple + VLAN. `lo` is the smaller (address, port) endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub lo_addr: IpAddr,
    pub hi_addr: IpAddr,
    pub lo_port: u16,
    pub hi_port: u16,
    pub proto: u8,
    /// Outermost VLAN ID; QinQ inner tags do not split flows.
    pub vlan: Option<u16>,
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
    pub fn canonical(
        src: IpAddr,
        src_port: u16,
        dst: IpAddr,
        dst_port: u16,
        proto: u8,
        vlan: Option<u16>,
    ) -> (FlowKey, Side) {
        if (src, src_port) <= (dst, dst_port) {
            let k = FlowKey {
                lo_addr: src,
                hi_addr: dst,
                lo_port: src_port,
                hi_port: dst_port,
                proto,
                vlan,
            };
            (k, Side::Lo)
        } else {
            let k = FlowKey {
                lo_addr: dst,
                hi_addr: src,
                lo_port: dst_port,
                hi_port: src_port,
                proto,
                vlan,
            };
            (k, Side::Hi)
        }
    }

    pub fn endpoint(&self, side: Side) -> (IpAddr, u16) {
        match side {
            Side::Lo => (self.lo_addr, self.lo_port),
            Side::Hi => (self.hi_addr, self.hi_port),
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
        let certain = |client| Roles { client, guessed: false };
        match pkt.l4 {
            L4::Tcp(t) if t.flags.is_syn_only() => return certain(sender),
            L4::Tcp(t) if t.flags.contains(TcpFlags::SYN | TcpFlags::ACK) => {
                return certain(sender.other());
            }
            L4::Udp if (pkt.dst_port == 53) != (pkt.src_port == 53) => {
                return certain(if pkt.dst_port == 53 { sender } else { sender.other() });
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
            if dp < EPHEMERAL_START { sender } else { sender.other() }
        } else if dp < sp {
            sender
        } else {
            sender.other()
        };
        Roles { client, guessed: true }
    }
}

fn is_group(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_multicast() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.is_multicast(),
    }
}
