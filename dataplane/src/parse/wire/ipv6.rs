//! IPv6 header (RFC 8200 §3) and the extension headers the walk steps over:
//! hop-by-hop / routing / destination options (RFC 8200 §4.3–4.6), AH
//! (RFC 4302 §2) and fragment (RFC 8200 §4.5).

use std::net::Ipv6Addr;

use super::{be16, be32, head, ip_proto, tail};
use crate::parse::DropReason;

/// Fixed 40-byte IPv6 header view.
#[derive(Clone, Copy, Debug)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub const HEADER_LEN: usize = 40;

    /// Fails with `BadIpVersion` when the version nibble is not 6 (checked
    /// first: IPv4 under an IPv6 EtherType is a mismatch, not a short IPv6
    /// header), then with `TruncatedIpv6` below 40 bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        if b.first().is_some_and(|v| v >> 4 != 6) {
            return Err(DropReason::BadIpVersion);
        }
        if b.len() < Self::HEADER_LEN {
            return Err(DropReason::TruncatedIpv6);
        }
        Ok(Self { buffer })
    }

    #[inline]
    fn hdr(&self) -> &[u8; 40] {
        head(self.buffer.as_ref())
    }

    #[inline]
    pub fn version(&self) -> u8 {
        self.hdr()[0] >> 4
    }

    #[inline]
    pub fn traffic_class(&self) -> u8 {
        let h = self.hdr();
        (h[0] << 4) | (h[1] >> 4)
    }

    #[inline]
    pub fn flow_label(&self) -> u32 {
        let h = self.hdr();
        be32([0, h[1] & 0x0f, h[2], h[3]])
    }

    /// Payload length; 0 for a jumbogram (RFC 2675) or a GSO/BIG TCP
    /// super-frame captured before segmentation.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        let h = self.hdr();
        be16([h[4], h[5]])
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.hdr()[6]
    }

    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.hdr()[7]
    }

    #[inline]
    pub fn src(&self) -> Ipv6Addr {
        Ipv6Addr::from(*head::<16>(tail(self.hdr(), 8)))
    }

    #[inline]
    pub fn dst(&self) -> Ipv6Addr {
        Ipv6Addr::from(*head::<16>(tail(self.hdr(), 24)))
    }
}

/// Byte-slice accessors for borrowed buffers: they return slices with the
/// buffer's lifetime, so a walk can keep them after the view is gone.
impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// Everything after the fixed header as captured (link padding
    /// included; the walk clips it).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buffer.as_ref(), Self::HEADER_LEN)
    }
}

/// Whether `next_header` names an extension header with the generic
/// `next header, length` layout that the walk steps over (AH included,
/// whose length unit differs). Fragment (44) has its own view; ESP (50) and
/// no-next-header (59) end the chain.
#[inline]
pub const fn is_generic_ext(next_header: u8) -> bool {
    matches!(
        next_header,
        ip_proto::HOPOPT | ip_proto::IPV6_ROUTE | ip_proto::IPV6_OPTS | ip_proto::AH
    )
}

/// Hop-by-hop, routing, destination options or AH header view. The length
/// byte counts 8-octet units beyond the first for the first three and
/// 4-octet units minus 2 for AH.
#[derive(Clone, Copy, Debug)]
pub struct Ipv6ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
    len: usize,
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    /// Option type of the Jumbo Payload hop-by-hop option (RFC 2675 §2).
    pub const JUMBO_OPTION: u8 = 0xC2;

    /// `kind` is the next-header value that announced this header (it
    /// decides the length unit). Fails with `TruncatedIpv6Ext` when the
    /// header is not wholly captured.
    #[inline]
    pub fn new_checked(buffer: T, kind: u8) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        let Some(&[_, units]) = b.first_chunk::<2>() else {
            return Err(DropReason::TruncatedIpv6Ext);
        };
        let units = usize::from(units);
        let len = if kind == ip_proto::AH {
            (units + 2) * 4
        } else {
            (units + 1) * 8
        };
        if b.len() < len {
            return Err(DropReason::TruncatedIpv6Ext);
        }
        Ok(Self { buffer, len })
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        head::<2>(self.buffer.as_ref())[0]
    }

    /// Whole header length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.len
    }
}

/// Byte-slice accessors for borrowed buffers: they return slices with the
/// buffer's lifetime, so a walk can keep them after the view is gone.
impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6ExtHeader<&'a T> {
    /// The header's body after the two fixed bytes (TLV options for
    /// hop-by-hop and destination options).
    #[inline]
    pub fn data(&self) -> &'a [u8] {
        self.buffer.as_ref().get(2..self.len).unwrap_or(&[])
    }

    /// The Jumbo Payload length if this hop-by-hop header carries one. Scans
    /// the TLVs; a malformed TLV ends the scan.
    pub fn jumbo_payload_len(&self) -> Option<u32> {
        let mut opts = self.data();
        // Each step consumes at least one byte: bounded by the header length.
        while let Some((&kind, rest)) = opts.split_first() {
            if kind == 0 {
                // Pad1.
                opts = rest;
                continue;
            }
            let (&len, rest) = rest.split_first()?;
            let body = rest.get(..usize::from(len))?;
            if kind == Self::JUMBO_OPTION {
                return body.first_chunk::<4>().map(|b| be32(*b));
            }
            opts = tail(rest, usize::from(len));
        }
        None
    }

    /// What follows this header, as captured.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buffer.as_ref(), self.len)
    }
}

header_view! {
    /// IPv6 fragment header: 8 bytes, 32-bit identification.
    Ipv6FragmentHeader, 8, TruncatedIpv6Ext, hdr;
}

impl<T: AsRef<[u8]>> Ipv6FragmentHeader<T> {
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.hdr()[0]
    }

    /// Fragment offset in bytes (the 13-bit field × 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        let h = self.hdr();
        be16([h[2], h[3]]) & 0xfff8
    }

    #[inline]
    pub fn more_frags(&self) -> bool {
        self.hdr()[3] & 1 != 0
    }

    #[inline]
    pub fn ident(&self) -> u32 {
        let h = self.hdr();
        be32([h[4], h[5], h[6], h[7]])
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A 40-byte IPv6 header (2001:db8::1 → 2001:db8::2) whose payload
    /// length covers `payload`, followed by it.
    pub(crate) fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0x6a, 0xb1, 0x23, 0x45];
        v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        v.extend_from_slice(&[next, 57]);
        v.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).octets());
        v.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).octets());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn fixed_header() {
        let b = ipv6(17, &[1, 2, 3]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.version(), p.traffic_class(), p.flow_label()),
            (6, 0xab, 0x12345)
        );
        assert_eq!(
            (p.payload_len(), p.next_header(), p.hop_limit()),
            (3, 17, 57)
        );
        assert_eq!(p.src(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[1, 2, 3]);
        for n in 0..40 {
            assert_eq!(
                Ipv6Packet::new_checked(&b[..n]).err(),
                Some(DropReason::TruncatedIpv6)
            );
        }
        let mut v4 = b.clone();
        v4[0] = 0x45;
        assert_eq!(
            Ipv6Packet::new_checked(&v4[..]).err(),
            Some(DropReason::BadIpVersion)
        );
    }

    #[test]
    fn generic_ext_lengths() {
        // Routing header, length 1 → 16 bytes.
        let mut r = vec![6, 1];
        r.resize(16, 0);
        r.push(0xee);
        let h = Ipv6ExtHeader::new_checked(&r[..], ip_proto::IPV6_ROUTE).unwrap();
        assert_eq!((h.next_header(), h.header_len()), (6, 16));
        assert_eq!(h.payload(), &[0xee]);
        assert_eq!(
            Ipv6ExtHeader::new_checked(&r[..15], ip_proto::IPV6_ROUTE).err(),
            Some(DropReason::TruncatedIpv6Ext)
        );
        // AH, length 4 → (4 + 2) * 4 = 24 bytes.
        let mut ah = vec![17, 4];
        ah.resize(24, 0);
        let h = Ipv6ExtHeader::new_checked(&ah[..], ip_proto::AH).unwrap();
        assert_eq!(h.header_len(), 24);
        assert!(h.payload().is_empty());
        assert_eq!(
            Ipv6ExtHeader::new_checked(&ah[..23], ip_proto::AH).err(),
            Some(DropReason::TruncatedIpv6Ext)
        );
        assert_eq!(
            Ipv6ExtHeader::new_checked(&ah[..1], ip_proto::AH).err(),
            Some(DropReason::TruncatedIpv6Ext)
        );
        assert!(
            is_generic_ext(0) && is_generic_ext(43) && is_generic_ext(60) && is_generic_ext(51)
        );
        assert!(!is_generic_ext(44) && !is_generic_ext(50) && !is_generic_ext(59));
    }

    #[test]
    fn jumbo_option() {
        // Hop-by-hop: next 6, len 0 (8 bytes): Jumbo option C2 04 + 4 bytes.
        let hbh = [6, 0, 0xc2, 4, 0x00, 0x01, 0x86, 0xa0];
        let h = Ipv6ExtHeader::new_checked(&hbh[..], 0).unwrap();
        assert_eq!(h.jumbo_payload_len(), Some(100_000));
        // Pad1, PadN then jumbo, in a 16-byte header.
        let hbh = [6, 1, 0, 1, 2, 0, 0, 0xc2, 4, 0, 2, 0, 0, 1, 0, 0];
        let h = Ipv6ExtHeader::new_checked(&hbh[..], 0).unwrap();
        assert_eq!(h.jumbo_payload_len(), Some(0x20000));
        // Router alert only.
        let ra = [6, 0, 5, 2, 0, 0, 1, 0];
        assert_eq!(
            Ipv6ExtHeader::new_checked(&ra[..], 0)
                .unwrap()
                .jumbo_payload_len(),
            None
        );
        // TLV length running past the header ends the scan.
        let bad = [6, 0, 0xc2, 9, 0, 0, 0, 0];
        assert_eq!(
            Ipv6ExtHeader::new_checked(&bad[..], 0)
                .unwrap()
                .jumbo_payload_len(),
            None
        );
        let lone_type = [6, 0, 1, 0, 0, 0, 0, 0x7];
        assert_eq!(
            Ipv6ExtHeader::new_checked(&lone_type[..], 0)
                .unwrap()
                .jumbo_payload_len(),
            None
        );
    }

    #[test]
    fn fragment_header() {
        // next UDP, offset 1448 bytes (181 units), M=1, id 0xdeadbeef.
        let off = (181u16 << 3) | 1;
        let mut f = vec![17, 0];
        f.extend_from_slice(&off.to_be_bytes());
        f.extend_from_slice(&0xdead_beefu32.to_be_bytes());
        f.push(9);
        let h = Ipv6FragmentHeader::new_checked(&f[..]).unwrap();
        assert_eq!(
            (h.next_header(), h.frag_offset(), h.more_frags()),
            (17, 1448, true)
        );
        assert_eq!(h.ident(), 0xdead_beef);
        assert_eq!(h.payload(), &[9]);
        assert_eq!(
            Ipv6FragmentHeader::new_checked(&f[..7]).err(),
            Some(DropReason::TruncatedIpv6Ext)
        );
    }
}
