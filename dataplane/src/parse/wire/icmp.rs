//! ICMP (RFC 792) and ICMPv6 (RFC 4443 §2.1) share the first four bytes
//! (type, code, checksum); every message of either has at least four more
//! (identifier/sequence, unused, MTU or pointer), so the view takes 8.

use super::be16;

header_view! {
    IcmpPacket, 8, TruncatedIcmp, hdr;
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.hdr()[0]
    }

    #[inline]
    pub fn code(&self) -> u8 {
        self.hdr()[1]
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        let h = self.hdr();
        be16([h[2], h[3]])
    }

    /// Bytes 4..8: echo identifier/sequence, MTU, pointer or unused.
    #[inline]
    pub fn rest_of_header(&self) -> [u8; 4] {
        let h = self.hdr();
        [h[4], h[5], h[6], h[7]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::DropReason;

    #[test]
    fn echo_request() {
        let b = [8, 0, 0xf7, 0xfe, 0, 1, 0, 2, b'x'];
        let i = IcmpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((i.msg_type(), i.code(), i.checksum()), (8, 0, 0xf7fe));
        assert_eq!(i.rest_of_header(), [0, 1, 0, 2]);
        assert_eq!(i.payload(), b"x");
        for n in 0..8 {
            assert_eq!(
                IcmpPacket::new_checked(&b[..n]).err(),
                Some(DropReason::TruncatedIcmp)
            );
        }
    }
}
