//! The header policy: which link-layer encapsulations xdprobe walks to
//! reach an IP header, and how deep, in one place for the XDP program
//! (`xdp-prog/src/walk.rs`) and the parser (`xdprobe_dataplane::parse`),
//! so a frame taken from a capture file is taken live and the other way
//! round.
//!
//! Every bound is a loop bound in both walks (the verifier needs one in
//! the kernel, a passive probe needs one against arbitrary input). Past a
//! bound the parser counts a named drop (`vlan_too_deep`, `mpls_too_deep`,
//! `ipv6_ext_too_deep`); the XDP program does not drop such a frame itself
//! but hands it to user space, so that the drop is counted there under
//! the same name as for a file (`docs/operations.md`, "Header policy").

/// VLAN tags (802.1Q 0x8100, 802.1ad 0x88a8, pre-standard 0x9100) followed
/// in one frame, those of an Ethernet pseudowire below MPLS included.
pub const MAX_VLAN_DEPTH: usize = 4;
/// MPLS label stack entries followed before bottom of stack.
pub const MAX_MPLS_DEPTH: usize = 8;
/// IPv6 extension headers (hop-by-hop, routing, fragment, destination
/// options, AH) followed before the upper-layer header.
pub const MAX_IPV6_EXT: usize = 8;

/// EtherTypes the walks dispatch on (IEEE "EtherType" registry).
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer tag.
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86DD;
    pub const MPLS_UNICAST: u16 = 0x8847;
    pub const MPLS_MULTICAST: u16 = 0x8848;
    pub const PPPOE_DISCOVERY: u16 = 0x8863;
    pub const PPPOE_SESSION: u16 = 0x8864;
    /// 802.1ad service tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88A8;
    pub const LLDP: u16 = 0x88CC;
    /// Pre-standard QinQ outer tag still emitted by some switches.
    pub const QINQ_9100: u16 = 0x9100;

    /// Whether `t` introduces a 4-byte VLAN tag.
    #[inline(always)]
    pub const fn is_vlan(t: u16) -> bool {
        matches!(t, VLAN | QINQ | QINQ_9100)
    }

    /// Whether `t` introduces an MPLS label stack.
    #[inline(always)]
    pub const fn is_mpls(t: u16) -> bool {
        matches!(t, MPLS_UNICAST | MPLS_MULTICAST)
    }
}

/// PPPoE session stage (RFC 2516): the only version/type and code that
/// carry PPP frames, and the PPP protocols that are IP.
pub mod pppoe {
    /// Version 1, type 1.
    pub const VER_TYPE: u8 = 0x11;
    /// Session data.
    pub const CODE_SESSION: u8 = 0x00;
    /// PPPoE header (6 bytes) plus the PPP protocol field (2).
    pub const HEADER_LEN: usize = 8;
    pub const PPP_IPV4: u16 = 0x0021;
    pub const PPP_IPV6: u16 = 0x0057;
}

const _: () = assert!(MAX_VLAN_DEPTH >= 2, "QinQ must be walked");
const _: () = assert!(MAX_MPLS_DEPTH >= 1 && MAX_IPV6_EXT >= 1);
