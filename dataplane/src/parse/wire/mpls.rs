//! MPLS label stack entry (RFC 3032 §2.1).

use super::{be32, head};

header_view! {
    /// One 4-byte label stack entry: label (20 bits), traffic class (3),
    /// bottom-of-stack (1), TTL (8).
    MplsLabel, 4, TruncatedMpls, no_hdr;
    payload:
    /// What follows this entry (the next entry or, after bottom of stack,
    /// the payload).
}

impl<T: AsRef<[u8]>> MplsLabel<T> {
    #[inline]
    fn word(&self) -> u32 {
        be32(*head::<4>(self.buffer.as_ref()))
    }

    #[inline]
    pub fn label(&self) -> u32 {
        self.word() >> 12
    }

    #[inline]
    pub fn traffic_class(&self) -> u8 {
        ((self.word() >> 9) & 0x7) as u8
    }

    #[inline]
    pub fn bottom_of_stack(&self) -> bool {
        self.word() & 0x100 != 0
    }

    #[inline]
    pub fn ttl(&self) -> u8 {
        (self.word() & 0xff) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::DropReason;

    #[test]
    fn fields() {
        // Label 29 (0x0001d), TC 7, S=1, TTL 255: the entry in zeek's
        // mixed-vlan-mpls.pcap is 00 01 dd ff.
        let e = [0x00, 0x01, 0xdf, 0xff, 0x45];
        let m = MplsLabel::new_checked(&e[..]).unwrap();
        assert_eq!(m.label(), 29);
        assert_eq!(m.traffic_class(), 7);
        assert!(m.bottom_of_stack());
        assert_eq!(m.ttl(), 255);
        assert_eq!(m.payload(), &[0x45]);
        let zeek = MplsLabel::new_checked(&[0x00, 0x01, 0xdd, 0xff][..]).unwrap();
        assert_eq!(
            (zeek.label(), zeek.traffic_class(), zeek.bottom_of_stack()),
            (29, 6, true)
        );
        let not_bos = MplsLabel::new_checked(&[0x12, 0x34, 0x50, 0x40][..]).unwrap();
        assert_eq!(not_bos.label(), 0x12345);
        assert!(!not_bos.bottom_of_stack());
        assert_eq!(not_bos.ttl(), 64);
        assert_eq!(
            MplsLabel::new_checked(&e[..3]).err(),
            Some(DropReason::TruncatedMpls)
        );
    }
}
