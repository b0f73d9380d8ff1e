//! Ethernet II header and 802.1Q/802.1ad VLAN tags.

use xdprobe_common::headers::ethertype;

use super::be16;

/// EtherType values the walk dispatches on (IEEE "EtherType" registry).
pub struct EtherType;

impl EtherType {
    pub const IPV4: u16 = ethertype::IPV4;
    pub const ARP: u16 = ethertype::ARP;
    /// 802.1Q customer tag.
    pub const VLAN: u16 = ethertype::VLAN;
    pub const IPV6: u16 = ethertype::IPV6;
    pub const MPLS_UNICAST: u16 = ethertype::MPLS_UNICAST;
    pub const MPLS_MULTICAST: u16 = ethertype::MPLS_MULTICAST;
    pub const PPPOE_DISCOVERY: u16 = ethertype::PPPOE_DISCOVERY;
    pub const PPPOE_SESSION: u16 = ethertype::PPPOE_SESSION;
    /// 802.1ad service tag (QinQ outer tag).
    pub const QINQ: u16 = ethertype::QINQ;
    pub const LLDP: u16 = ethertype::LLDP;
    /// Pre-standard QinQ outer tag still emitted by some switches.
    pub const QINQ_9100: u16 = ethertype::QINQ_9100;

    /// Whether `t` introduces a 4-byte VLAN tag (the XDP program's walk
    /// asks the same function).
    #[inline]
    pub const fn is_vlan(t: u16) -> bool {
        ethertype::is_vlan(t)
    }
}

header_view! {
    /// Ethernet II header view: destination, source, EtherType.
    EthernetFrame, 14, TruncatedEthernet, hdr;
    payload:
    /// Everything after the header, as captured (padding included).
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    #[inline]
    pub fn dst(&self) -> [u8; 6] {
        let h = self.hdr();
        [h[0], h[1], h[2], h[3], h[4], h[5]]
    }

    #[inline]
    pub fn src(&self) -> [u8; 6] {
        let h = self.hdr();
        [h[6], h[7], h[8], h[9], h[10], h[11]]
    }

    /// EtherType, or an 802.3 length when ≤ 1500.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        let h = self.hdr();
        be16([h[12], h[13]])
    }
}

header_view! {
    /// One 802.1Q/802.1ad tag *after* its TPID: TCI (PCP, DEI, VID) and the
    /// EtherType of what follows.
    VlanTag, 4, TruncatedVlan, hdr;
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// VLAN identifier, 12 bits.
    #[inline]
    pub fn vid(&self) -> u16 {
        let h = self.hdr();
        be16([h[0], h[1]]) & 0x0fff
    }

    /// Priority code point, 3 bits.
    #[inline]
    pub fn pcp(&self) -> u8 {
        self.hdr()[0] >> 5
    }

    #[inline]
    pub fn ethertype(&self) -> u16 {
        let h = self.hdr();
        be16([h[2], h[3]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::DropReason;

    #[test]
    fn ethernet_fields() {
        let mut f = [0u8; 16];
        f[..6].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        f[6..12].copy_from_slice(&[7, 8, 9, 10, 11, 12]);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14..].copy_from_slice(&[0xaa, 0xbb]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.dst(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(e.src(), [7, 8, 9, 10, 11, 12]);
        assert_eq!(e.ethertype(), EtherType::IPV6);
        assert_eq!(e.payload(), &[0xaa, 0xbb]);
        let bare = EthernetFrame::new_checked(&f[..14]).unwrap();
        assert!(bare.payload().is_empty());
    }

    #[test]
    fn ethernet_truncated() {
        for n in 0..14 {
            assert_eq!(
                EthernetFrame::new_checked(&[0u8; 14][..n]).err(),
                Some(DropReason::TruncatedEthernet)
            );
        }
    }

    #[test]
    fn vlan_fields() {
        // PCP 5, DEI 1, VID 0xabc; inner IPv4.
        let t = [0xba, 0xbc, 0x08, 0x00, 0x45];
        let v = VlanTag::new_checked(&t[..]).unwrap();
        assert_eq!(v.vid(), 0xabc);
        assert_eq!(v.pcp(), 5);
        assert_eq!(v.ethertype(), EtherType::IPV4);
        assert_eq!(v.payload(), &[0x45]);
        assert_eq!(
            VlanTag::new_checked(&t[..3]).err(),
            Some(DropReason::TruncatedVlan)
        );
        assert!(EtherType::is_vlan(0x8100) && EtherType::is_vlan(0x88a8));
        assert!(EtherType::is_vlan(0x9100) && !EtherType::is_vlan(0x0800));
    }
}
