//! IPv4 header (RFC 791 §3.1), options included.

use std::net::Ipv4Addr;

use super::{be16, head, tail};
use crate::parse::DropReason;

/// IPv4 header view. `new_checked` guarantees the whole header, options
/// included (`IHL * 4` bytes), was captured.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Header without options.
    pub const MIN_HEADER_LEN: usize = 20;

    /// Checks, in order: version 4 if there is a first byte
    /// (`BadIpVersion`), 20 bytes captured (`TruncatedIpv4`), IHL ≥ 5
    /// (`BadIpv4Header`), `IHL * 4` bytes captured (`TruncatedIpv4`), and a
    /// total length that is either 0 (TSO, see `walk`) or covers the header
    /// (`BadIpv4Header`).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        if b.first().is_some_and(|v| v >> 4 != 4) {
            return Err(DropReason::BadIpVersion);
        }
        let Some(h) = b.first_chunk::<20>() else {
            return Err(DropReason::TruncatedIpv4);
        };
        let hl = usize::from(h[0] & 0x0f) * 4;
        if hl < Self::MIN_HEADER_LEN {
            return Err(DropReason::BadIpv4Header);
        }
        if b.len() < hl {
            return Err(DropReason::TruncatedIpv4);
        }
        let total = usize::from(be16([h[2], h[3]]));
        if total != 0 && total < hl {
            return Err(DropReason::BadIpv4Header);
        }
        Ok(Self { buffer })
    }

    #[inline]
    fn hdr(&self) -> &[u8; 20] {
        head(self.buffer.as_ref())
    }

    #[inline]
    pub fn version(&self) -> u8 {
        self.hdr()[0] >> 4
    }

    /// Header length in bytes (IHL × 4), 20..=60.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.hdr()[0] & 0x0f) * 4
    }

    /// DSCP and ECN together (the old TOS byte).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.hdr()[1]
    }

    /// Total length field; 0 on TSO/GSO super-frames captured before
    /// segmentation.
    #[inline]
    pub fn total_len(&self) -> u16 {
        let h = self.hdr();
        be16([h[2], h[3]])
    }

    #[inline]
    pub fn ident(&self) -> u16 {
        let h = self.hdr();
        be16([h[4], h[5]])
    }

    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.hdr()[6] & 0x40 != 0
    }

    #[inline]
    pub fn more_frags(&self) -> bool {
        self.hdr()[6] & 0x20 != 0
    }

    /// Fragment offset in bytes (the field × 8; at most 65528, fits a u16).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        let h = self.hdr();
        (be16([h[6], h[7]]) & 0x1fff) << 3
    }

    #[inline]
    pub fn ttl(&self) -> u8 {
        self.hdr()[8]
    }

    #[inline]
    pub fn protocol(&self) -> u8 {
        self.hdr()[9]
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        let h = self.hdr();
        be16([h[10], h[11]])
    }

    #[inline]
    pub fn src(&self) -> Ipv4Addr {
        let h = self.hdr();
        Ipv4Addr::new(h[12], h[13], h[14], h[15])
    }

    #[inline]
    pub fn dst(&self) -> Ipv4Addr {
        let h = self.hdr();
        Ipv4Addr::new(h[16], h[17], h[18], h[19])
    }
}

/// Byte-slice accessors for borrowed buffers: they return slices with the
/// buffer's lifetime, so a walk can keep them after the view is gone.
impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// Option bytes (empty when IHL is 5).
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        self.buffer
            .as_ref()
            .get(Self::MIN_HEADER_LEN..self.header_len())
            .unwrap_or(&[])
    }

    /// Everything after the header as captured, link padding included: the
    /// walk clips it to the total length.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buffer.as_ref(), self.header_len())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An IPv4 header with IHL 5 + `opts.len()/4`, followed by `payload`.
    pub(crate) fn ipv4(proto: u8, opts: &[u8], payload: &[u8]) -> Vec<u8> {
        assert!(opts.len().is_multiple_of(4));
        let hl = 20 + opts.len();
        let total = (hl + payload.len()) as u16;
        let mut v = vec![0x40 | (hl / 4) as u8, 0xb8];
        v.extend_from_slice(&total.to_be_bytes());
        v.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, proto, 0, 0]);
        v.extend_from_slice(&[192, 0, 2, 1, 198, 51, 100, 2]);
        v.extend_from_slice(opts);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn fields() {
        let b = ipv4(6, &[1, 1, 1, 0], &[0xde, 0xad]);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.version(), p.header_len(), p.tos()), (4, 24, 0xb8));
        assert_eq!(
            (p.total_len(), p.ident(), p.ttl(), p.protocol()),
            (26, 0x1234, 64, 6)
        );
        assert!(p.dont_frag() && !p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.src(), Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(p.dst(), Ipv4Addr::new(198, 51, 100, 2));
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload(), &[0xde, 0xad]);
        assert_eq!(p.checksum(), 0);
    }

    #[test]
    fn fragment_bits() {
        let mut b = ipv4(17, &[], &[]);
        b[6..8].copy_from_slice(&(0x2000u16 | 185).to_be_bytes()); // MF, 1480 bytes
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.more_frags() && !p.dont_frag());
        assert_eq!(p.frag_offset(), 1480);
        b[6..8].copy_from_slice(&0x1fffu16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap().frag_offset(),
            65528
        );
    }

    #[test]
    fn malformed() {
        let b = ipv4(6, &[1, 1, 1, 1, 1, 1, 1, 0], &[]);
        for n in 0..20 {
            assert_eq!(
                Ipv4Packet::new_checked(&b[..n]).err(),
                Some(DropReason::TruncatedIpv4)
            );
        }
        // Options cut by the capture.
        for n in 20..28 {
            assert_eq!(
                Ipv4Packet::new_checked(&b[..n]).err(),
                Some(DropReason::TruncatedIpv4)
            );
        }
        let mut v6 = b.clone();
        v6[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&v6[..]).err(),
            Some(DropReason::BadIpVersion)
        );
        for ihl in 0..5 {
            let mut bad = b.clone();
            bad[0] = 0x40 | ihl;
            assert_eq!(
                Ipv4Packet::new_checked(&bad[..]).err(),
                Some(DropReason::BadIpv4Header)
            );
        }
        let mut short_total = b.clone();
        short_total[2..4].copy_from_slice(&27u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&short_total[..]).err(),
            Some(DropReason::BadIpv4Header)
        );
        let mut tso = b.clone();
        tso[2..4].copy_from_slice(&0u16.to_be_bytes());
        assert!(Ipv4Packet::new_checked(&tso[..]).is_ok());
    }
}
