//! Non-Ethernet framings: Linux cooked capture (SLL, SLL2), BSD loopback
//! (Null/Loop) and the PPPoE session header that rides inside Ethernet.

use xdprobe_common::headers::pppoe;

use super::{be16, head, tail};
use crate::parse::DropReason;

header_view! {
    /// Linux cooked capture v1 (LINKTYPE_LINUX_SLL): 16 bytes, the EtherType of
    /// the payload at bytes 14..16.
    /// <https://www.tcpdump.org/linktypes/LINKTYPE_LINUX_SLL.html>
    SllHeader, 16, TruncatedSll, hdr;
}

impl<T: AsRef<[u8]>> SllHeader<T> {
    /// 0 to us, 1 broadcast, 2 multicast, 3 to another host, 4 sent by us.
    #[inline]
    pub fn packet_type(&self) -> u16 {
        let h = self.hdr();
        be16([h[0], h[1]])
    }

    /// ARPHRD_ type of the interface.
    #[inline]
    pub fn hatype(&self) -> u16 {
        let h = self.hdr();
        be16([h[2], h[3]])
    }

    /// EtherType of the payload (or a Linux `ETH_P_` value < 0x600 for
    /// 802.3/802.2 frames).
    #[inline]
    pub fn protocol(&self) -> u16 {
        let h = self.hdr();
        be16([h[14], h[15]])
    }
}

header_view! {
    /// Linux cooked capture v2 (LINKTYPE_LINUX_SLL2): 20 bytes, the EtherType
    /// first. <https://www.tcpdump.org/linktypes/LINKTYPE_LINUX_SLL2.html>
    Sll2Header, 20, TruncatedSll, hdr;
}

impl<T: AsRef<[u8]>> Sll2Header<T> {
    #[inline]
    pub fn protocol(&self) -> u16 {
        let h = self.hdr();
        be16([h[0], h[1]])
    }

    #[inline]
    pub fn interface_index(&self) -> u32 {
        let h = self.hdr();
        u32::from_be_bytes([h[4], h[5], h[6], h[7]])
    }

    #[inline]
    pub fn packet_type(&self) -> u8 {
        self.hdr()[10]
    }
}

header_view! {
    /// BSD loopback (LINKTYPE_NULL / LINKTYPE_LOOP): a 4-byte address family,
    /// in the capturing host's byte order for NULL and big-endian for LOOP.
    NullHeader, 4, TruncatedNull, no_hdr;
}

impl<T: AsRef<[u8]>> NullHeader<T> {
    pub const AF_INET: u32 = 2;
    /// AF_INET6 differs per BSD: NetBSD/OpenBSD 24, FreeBSD 28, Darwin 30.
    pub const AF_INET6: [u32; 3] = [24, 28, 30];

    /// The family, whichever byte order the writer used: every real family
    /// fits in 16 bits, so a value above that was written the other way
    /// round.
    #[inline]
    pub fn family(&self) -> u32 {
        let le = u32::from_le_bytes(*head::<4>(self.buffer.as_ref()));
        if le > 0xffff { le.swap_bytes() } else { le }
    }

    #[inline]
    pub fn is_ipv4(&self) -> bool {
        self.family() == Self::AF_INET
    }

    #[inline]
    pub fn is_ipv6(&self) -> bool {
        Self::AF_INET6.contains(&self.family())
    }
}

/// PPPoE session stage header (RFC 2516 §4) followed by the 2-byte PPP
/// protocol field (RFC 1661 §2), read together because the walk only ever
/// needs both.
#[derive(Clone, Copy, Debug)]
pub struct PppoeSession<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> PppoeSession<T> {
    /// 6 bytes of PPPoE header + 2 bytes of PPP protocol.
    pub const HEADER_LEN: usize = pppoe::HEADER_LEN;
    pub const PPP_IPV4: u16 = pppoe::PPP_IPV4;
    pub const PPP_IPV6: u16 = pppoe::PPP_IPV6;

    /// Fails with `TruncatedPppoe` below 8 bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        if buffer.as_ref().len() < Self::HEADER_LEN {
            return Err(DropReason::TruncatedPppoe);
        }
        Ok(Self { buffer })
    }

    #[inline]
    fn hdr(&self) -> &[u8; 8] {
        head(self.buffer.as_ref())
    }

    /// Version and type nibbles; 0x11 for every RFC 2516 frame.
    #[inline]
    pub fn ver_type(&self) -> u8 {
        self.hdr()[0]
    }

    /// 0 in the session stage.
    #[inline]
    pub fn code(&self) -> u8 {
        self.hdr()[1]
    }

    #[inline]
    pub fn session_id(&self) -> u16 {
        let h = self.hdr();
        be16([h[2], h[3]])
    }

    /// PPPoE payload length: PPP protocol field plus PPP payload.
    #[inline]
    pub fn length(&self) -> u16 {
        let h = self.hdr();
        be16([h[4], h[5]])
    }

    #[inline]
    pub fn ppp_protocol(&self) -> u16 {
        let h = self.hdr();
        be16([h[6], h[7]])
    }
}

/// Byte-slice accessors for borrowed buffers: they return slices with the
/// buffer's lifetime, so a walk can keep them after the view is gone.
impl<'a, T: AsRef<[u8]> + ?Sized> PppoeSession<&'a T> {
    /// The PPP payload (the IP packet for protocols 0x21/0x57).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buffer.as_ref(), Self::HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sll_fields() {
        let mut h = [0u8; 17];
        h[1] = 4; // outgoing
        h[3] = 1; // ARPHRD_ETHER
        h[14..16].copy_from_slice(&[0x86, 0xdd]);
        h[16] = 0x60;
        let s = SllHeader::new_checked(&h[..]).unwrap();
        assert_eq!((s.packet_type(), s.hatype(), s.protocol()), (4, 1, 0x86dd));
        assert_eq!(s.payload(), &[0x60]);
        assert_eq!(
            SllHeader::new_checked(&h[..15]).err(),
            Some(DropReason::TruncatedSll)
        );
    }

    #[test]
    fn sll2_fields() {
        let mut h = [0u8; 21];
        h[..2].copy_from_slice(&[0x08, 0x00]);
        h[4..8].copy_from_slice(&[0, 0, 0, 7]);
        h[10] = 3;
        h[20] = 0x45;
        let s = Sll2Header::new_checked(&h[..]).unwrap();
        assert_eq!(
            (s.protocol(), s.interface_index(), s.packet_type()),
            (0x0800, 7, 3)
        );
        assert_eq!(s.payload(), &[0x45]);
        assert_eq!(
            Sll2Header::new_checked(&h[..19]).err(),
            Some(DropReason::TruncatedSll)
        );
    }

    #[test]
    fn null_family_either_byte_order() {
        let le = NullHeader::new_checked(&[2, 0, 0, 0][..]).unwrap();
        let be = NullHeader::new_checked(&[0, 0, 0, 2][..]).unwrap();
        assert!(le.is_ipv4() && be.is_ipv4());
        for af in [24u32, 28, 30] {
            assert!(
                NullHeader::new_checked(&af.to_le_bytes()[..])
                    .unwrap()
                    .is_ipv6()
            );
            assert!(
                NullHeader::new_checked(&af.to_be_bytes()[..])
                    .unwrap()
                    .is_ipv6()
            );
        }
        let other = NullHeader::new_checked(&[7, 0, 0, 0][..]).unwrap();
        assert!(!other.is_ipv4() && !other.is_ipv6());
        assert_eq!(
            NullHeader::new_checked(&[2, 0, 0][..]).err(),
            Some(DropReason::TruncatedNull)
        );
    }

    #[test]
    fn pppoe_fields() {
        let h = [0x11, 0x00, 0x12, 0x34, 0x00, 0x2a, 0x00, 0x21, 0x45];
        let p = PppoeSession::new_checked(&h[..]).unwrap();
        assert_eq!((p.ver_type(), p.code(), p.session_id()), (0x11, 0, 0x1234));
        assert_eq!(
            (p.length(), p.ppp_protocol()),
            (42, PppoeSession::<&[u8]>::PPP_IPV4)
        );
        assert_eq!(p.payload(), &[0x45]);
        assert_eq!(
            PppoeSession::new_checked(&h[..7]).err(),
            Some(DropReason::TruncatedPppoe)
        );
    }
}
