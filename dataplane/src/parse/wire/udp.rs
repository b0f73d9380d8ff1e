//! UDP header (RFC 768).

use super::be16;

header_view! {
    UdpPacket, 8, TruncatedUdp, hdr;
    payload:
    /// Everything after the header as captured.
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    #[inline]
    pub fn src_port(&self) -> u16 {
        let h = self.hdr();
        be16([h[0], h[1]])
    }

    #[inline]
    pub fn dst_port(&self) -> u16 {
        let h = self.hdr();
        be16([h[2], h[3]])
    }

    /// Header plus data, as the sender stated it (0 in IPv6 jumbograms).
    #[inline]
    pub fn length(&self) -> u16 {
        let h = self.hdr();
        be16([h[4], h[5]])
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        let h = self.hdr();
        be16([h[6], h[7]])
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::parse::DropReason;

    /// UDP 5353 → 53 whose length field covers `payload`.
    pub(crate) fn udp(payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0x14, 0xe9, 0, 53];
        v.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        v.extend_from_slice(&[0xab, 0xcd]);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn fields_and_truncation() {
        let b = udp(b"abc");
        let u = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            (u.src_port(), u.dst_port(), u.length(), u.checksum()),
            (5353, 53, 11, 0xabcd)
        );
        assert_eq!(u.payload(), b"abc");
        for n in 0..8 {
            assert_eq!(
                UdpPacket::new_checked(&b[..n]).err(),
                Some(DropReason::TruncatedUdp)
            );
        }
    }
}
