//! Why a packet was not used, and per-worker counts of it.
//!
//! Every early exit of the parser is one named [`DropReason`], so an operator
//! can tell "this link carries ARP" from "the snaplen cuts the TCP header"
//! from "someone stacks nine VLAN tags". [`DropCounters`] is a fixed array
//! indexed by the reason (no map, no allocation): each worker owns one and
//! they are summed with [`DropCounters::merge`] when read, as retina's
//! per-core stats are.

use thiserror::Error;

/// The reason a packet yields no flow update. `as_str()` is the stable,
/// snake_case name used in stats output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Error)]
#[repr(u8)]
pub enum DropReason {
    /// The capture's link type has no parser (pcap link types that
    /// `LinkType::from_pcap` maps to `None`; counted by the source).
    #[error("unsupported link type")]
    UnsupportedLinkType,
    /// Fewer than 14 bytes: no complete Ethernet header.
    #[error("truncated Ethernet header")]
    TruncatedEthernet,
    /// An 802.1Q/802.1ad tag cut short.
    #[error("truncated VLAN tag")]
    TruncatedVlan,
    /// More VLAN tags than the walk follows
    /// ([`MAX_VLAN_DEPTH`](super::MAX_VLAN_DEPTH)).
    #[error("VLAN tags nested too deep")]
    VlanTooDeep,
    /// An MPLS label stack entry or pseudowire control word cut short.
    #[error("truncated MPLS label stack")]
    TruncatedMpls,
    /// No bottom-of-stack label within
    /// [`MAX_MPLS_DEPTH`](super::MAX_MPLS_DEPTH) entries.
    #[error("MPLS label stack too deep")]
    MplsTooDeep,
    /// Below the label stack is neither IPv4, IPv6 nor one Ethernet
    /// pseudowire (first nibble not 4, 6 or 0), or a pseudowire nests
    /// another one.
    #[error("unsupported MPLS payload")]
    UnsupportedMplsPayload,
    /// A PPPoE session header cut short.
    #[error("truncated PPPoE header")]
    TruncatedPppoe,
    /// A Linux cooked (SLL/SLL2) header cut short.
    #[error("truncated Linux cooked header")]
    TruncatedSll,
    /// A BSD loopback (Null/Loop) family word cut short.
    #[error("truncated loopback header")]
    TruncatedNull,
    /// A well-formed frame that does not carry IP: ARP, LLDP, STP/802.3
    /// LLC, PPPoE discovery, PPP control, a non-IP loopback family …
    #[error("not an IP packet")]
    NotIp,
    /// The IP version nibble disagrees with the framing (or is neither 4
    /// nor 6 on a raw-IP link).
    #[error("bad IP version")]
    BadIpVersion,
    /// Fewer bytes captured than the IPv4 header (including options).
    #[error("truncated IPv4 header")]
    TruncatedIpv4,
    /// IHL below 5, or a non-zero total length shorter than the header.
    #[error("bad IPv4 header")]
    BadIpv4Header,
    /// Fewer than 40 bytes captured for the IPv6 header.
    #[error("truncated IPv6 header")]
    TruncatedIpv6,
    /// More IPv6 extension headers than the walk follows
    /// ([`MAX_IPV6_EXT`](super::MAX_IPV6_EXT)).
    #[error("IPv6 extension header chain too long")]
    Ipv6ExtTooDeep,
    /// An IPv6 extension header cut short by the capture.
    #[error("truncated IPv6 extension header")]
    TruncatedIpv6Ext,
    /// Fewer than 20 bytes of TCP header captured.
    #[error("truncated TCP header")]
    TruncatedTcp,
    /// TCP data offset below 5, or beyond the segment length the IP header
    /// gives.
    #[error("bad TCP header")]
    BadTcpHeader,
    /// Fewer than 8 bytes of UDP header captured.
    #[error("truncated UDP header")]
    TruncatedUdp,
    /// Fewer than 8 bytes of ICMP/ICMPv6 header captured.
    #[error("truncated ICMP header")]
    TruncatedIcmp,
    /// The capture time cannot be placed between 1970 and 2262 (see
    /// `time.rs`): a pcapng timestamp beyond that range or moved before 1970
    /// by `if_tsoffset`, or a classic pcap fraction of a second or more.
    /// The frame is not parsed.
    #[error("capture timestamp out of range")]
    TimestampOutOfRange,
}

impl DropReason {
    /// Number of reasons; the size of [`DropCounters`].
    pub const COUNT: usize = Self::ALL.len();

    /// Every reason, in discriminant order (`ALL[r as usize] == r`).
    pub const ALL: [DropReason; 22] = [
        DropReason::UnsupportedLinkType,
        DropReason::TruncatedEthernet,
        DropReason::TruncatedVlan,
        DropReason::VlanTooDeep,
        DropReason::TruncatedMpls,
        DropReason::MplsTooDeep,
        DropReason::UnsupportedMplsPayload,
        DropReason::TruncatedPppoe,
        DropReason::TruncatedSll,
        DropReason::TruncatedNull,
        DropReason::NotIp,
        DropReason::BadIpVersion,
        DropReason::TruncatedIpv4,
        DropReason::BadIpv4Header,
        DropReason::TruncatedIpv6,
        DropReason::Ipv6ExtTooDeep,
        DropReason::TruncatedIpv6Ext,
        DropReason::TruncatedTcp,
        DropReason::BadTcpHeader,
        DropReason::TruncatedUdp,
        DropReason::TruncatedIcmp,
        DropReason::TimestampOutOfRange,
    ];

    /// Stable snake_case name for counters and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::UnsupportedLinkType => "unsupported_link_type",
            DropReason::TruncatedEthernet => "truncated_ethernet",
            DropReason::TruncatedVlan => "truncated_vlan",
            DropReason::VlanTooDeep => "vlan_too_deep",
            DropReason::TruncatedMpls => "truncated_mpls",
            DropReason::MplsTooDeep => "mpls_too_deep",
            DropReason::UnsupportedMplsPayload => "unsupported_mpls_payload",
            DropReason::TruncatedPppoe => "truncated_pppoe",
            DropReason::TruncatedSll => "truncated_sll",
            DropReason::TruncatedNull => "truncated_null",
            DropReason::NotIp => "not_ip",
            DropReason::BadIpVersion => "bad_ip_version",
            DropReason::TruncatedIpv4 => "truncated_ipv4",
            DropReason::BadIpv4Header => "bad_ipv4_header",
            DropReason::TruncatedIpv6 => "truncated_ipv6",
            DropReason::Ipv6ExtTooDeep => "ipv6_ext_too_deep",
            DropReason::TruncatedIpv6Ext => "truncated_ipv6_ext",
            DropReason::TruncatedTcp => "truncated_tcp",
            DropReason::BadTcpHeader => "bad_tcp_header",
            DropReason::TruncatedUdp => "truncated_udp",
            DropReason::TruncatedIcmp => "truncated_icmp",
            DropReason::TimestampOutOfRange => "timestamp_out_of_range",
        }
    }

    /// Position in [`DropReason::ALL`] and in the counter array.
    #[inline]
    const fn index(self) -> usize {
        self as usize
    }
}

/// Per-worker drop counts: one `u64` per [`DropReason`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropCounters {
    counts: [u64; DropReason::COUNT],
}

impl Default for DropCounters {
    fn default() -> Self {
        Self {
            counts: [0; DropReason::COUNT],
        }
    }
}

impl DropCounters {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn inc(&mut self, reason: DropReason) {
        // The discriminant is < COUNT by construction (tested below), so this
        // index cannot fail and compiles without a bounds check.
        let c = &mut self.counts[reason.index()];
        *c = c.saturating_add(1);
    }

    #[inline]
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason.index()]
    }

    /// All drops together.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// `(as_str() name, count)` for every reason, zeros included, in
    /// [`DropReason::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DropReason::ALL
            .iter()
            .zip(self.counts.iter())
            .map(|(r, &c)| (r.as_str(), c))
    }

    /// Adds another worker's counts into this one.
    pub fn merge(&mut self, other: &DropCounters) {
        for (a, &b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_discriminant_order_and_names_are_unique_snake_case() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
            let name = r.as_str();
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
        }
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
    }

    #[test]
    fn display_and_error() {
        let e: &dyn std::error::Error = &DropReason::VlanTooDeep;
        assert_eq!(e.to_string(), "VLAN tags nested too deep");
        assert_eq!(DropReason::TruncatedTcp.as_str(), "truncated_tcp");
    }

    #[test]
    fn counters_inc_get_total_iter_merge() {
        let mut a = DropCounters::new();
        a.inc(DropReason::NotIp);
        a.inc(DropReason::NotIp);
        a.inc(DropReason::TruncatedIcmp);
        assert_eq!(a.get(DropReason::NotIp), 2);
        assert_eq!(a.get(DropReason::TruncatedIcmp), 1);
        assert_eq!(a.get(DropReason::UnsupportedLinkType), 0);
        assert_eq!(a.total(), 3);

        let mut b = DropCounters::new();
        b.inc(DropReason::NotIp);
        b.inc(DropReason::UnsupportedLinkType);
        a.merge(&b);
        assert_eq!(a.get(DropReason::NotIp), 3);
        assert_eq!(a.total(), 5);

        let v: Vec<_> = a.iter().collect();
        assert_eq!(v.len(), DropReason::COUNT);
        assert_eq!(v[0], ("unsupported_link_type", 1));
        assert!(v.contains(&("not_ip", 3)));
        assert_eq!(v.iter().map(|(_, c)| c).sum::<u64>(), 5);
    }
}
