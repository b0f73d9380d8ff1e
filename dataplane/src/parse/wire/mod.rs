//! Zero-copy header views, one file per header, in the style of smoltcp's
//! `wire` module: `Xxx<T: AsRef<[u8]>>` wraps a buffer, `new_checked` does the
//! only length check, and every accessor afterwards is panic-free.
//!
//! How accessors stay panic-free without a bounds check each: a view reads its
//! fixed header through `head`, which hands out the first `N` bytes as a
//! `&[u8; N]`, so every field access is a constant index into a fixed-size
//! array (checked by the compiler, not at run time). `head` falls back to a
//! zero array if the buffer is shorter, which cannot happen after
//! `new_checked` for any sane `AsRef` (the buffer does not shrink), and keeps
//! the accessors total even for one that does. After inlining the fallback
//! folds away against the check in `new_checked`.
//!
//! Variable-length parts (options, payloads) come out through `get(..)`, an
//! empty slice when the capture stops short: a snaplen cut is not a bug in
//! the packet, and the walk decides what it means.
//!
//! `new_checked` fails with the [`DropReason`](super::DropReason) the walk
//! reports, so a failed check needs no translation on the hot path.

/// What every fixed-size header view shares: the buffer wrapper, the one
/// length check in `new_checked` (failing with the drop reason the walk
/// reports), `hdr()` (the fixed header as an array: constant indices, no
/// run-time checks; `no_hdr` for views that read their header differently)
/// and, for borrowed buffers, `payload()` with the buffer's lifetime.
macro_rules! header_view {
    (
        $(#[$doc:meta])*
        $name:ident, $len:literal, $err:ident, $hdr:ident;
        $(payload: $(#[$pdoc:meta])*)?
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            pub const HEADER_LEN: usize = $len;

            #[doc = concat!("Fails with `", stringify!($err), "` below ", stringify!($len), " bytes.")]
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self, $crate::parse::DropReason> {
                if buffer.as_ref().len() < Self::HEADER_LEN {
                    return Err($crate::parse::DropReason::$err);
                }
                Ok(Self { buffer })
            }
        }

        header_view!(@$hdr $name, $len);

        /// Byte-slice accessors for borrowed buffers: they return slices
        /// with the buffer's lifetime, so a walk can keep them after the
        /// view is gone.
        impl<'a, T: AsRef<[u8]> + ?Sized> $name<&'a T> {
            $($(#[$pdoc])*)?
            #[inline]
            pub fn payload(&self) -> &'a [u8] {
                $crate::parse::wire::tail(self.buffer.as_ref(), Self::HEADER_LEN)
            }
        }
    };
    (@hdr $name:ident, $len:literal) => {
        impl<T: AsRef<[u8]>> $name<T> {
            #[inline]
            fn hdr(&self) -> &[u8; $len] {
                $crate::parse::wire::head(self.buffer.as_ref())
            }
        }
    };
    (@no_hdr $name:ident, $len:literal) => {};
}

pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod link;
pub mod mpls;
pub mod tcp;
pub mod udp;

pub use ethernet::{EtherType, EthernetFrame, VlanTag};
pub use icmp::IcmpPacket;
pub use ipv4::Ipv4Packet;
pub use ipv6::{Ipv6ExtHeader, Ipv6FragmentHeader, Ipv6Packet};
pub use link::{NullHeader, PppoeSession, Sll2Header, SllHeader};
pub use mpls::MplsLabel;
pub use tcp::TcpPacket;
pub use udp::UdpPacket;

/// IP protocol numbers (IANA "Assigned Internet Protocol Numbers") the walk
/// dispatches on.
pub mod ip_proto {
    pub const HOPOPT: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const IPV6_ROUTE: u8 = 43;
    pub const IPV6_FRAG: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const IPV6_NONXT: u8 = 59;
    pub const IPV6_OPTS: u8 = 60;
}

/// The first `N` bytes of `buf` as an array, or a zero array when `buf` is
/// shorter (see the module doc for why that branch is dead after
/// `new_checked`).
#[inline(always)]
pub(crate) fn head<const N: usize>(buf: &[u8]) -> &[u8; N] {
    match buf.first_chunk::<N>() {
        Some(h) => h,
        None => &[0; N],
    }
}

/// `buf[from..]`, or empty when the capture ends before `from`.
#[inline(always)]
pub(crate) fn tail(buf: &[u8], from: usize) -> &[u8] {
    buf.get(from..).unwrap_or(&[])
}

/// At most the first `len` bytes of `buf`: clips link-layer padding (or a
/// trailer) off a payload whose length the header states.
#[inline(always)]
pub(crate) fn clip(buf: &[u8], len: usize) -> &[u8] {
    buf.get(..len).unwrap_or(buf)
}

#[inline(always)]
pub(crate) fn be16(b: [u8; 2]) -> u16 {
    u16::from_be_bytes(b)
}

#[inline(always)]
pub(crate) fn be32(b: [u8; 4]) -> u32 {
    u32::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_is_total() {
        assert_eq!(head::<2>(&[1, 2, 3]), &[1, 2]);
        assert_eq!(head::<4>(&[1, 2, 3]), &[0, 0, 0, 0]);
        assert_eq!(tail(&[1, 2, 3], 1), &[2, 3]);
        assert_eq!(tail(&[1, 2, 3], 3), &[] as &[u8]);
        assert_eq!(tail(&[1, 2, 3], 9), &[] as &[u8]);
        assert_eq!(clip(&[1, 2, 3], 2), &[1, 2]);
        assert_eq!(clip(&[1, 2, 3], 9), &[1, 2, 3]);
    }
}
