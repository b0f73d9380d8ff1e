//! TCP header (RFC 9293 §3.1) and the options the probe reads: MSS (kind 2),
//! window scale (3, RFC 7323 §2), SACK-permitted (4, RFC 2018) and
//! timestamps (8, RFC 7323 §3).

use super::{be16, be32, head, tail};
use crate::parse::{DropReason, TcpFlags, TcpOptions};

/// TCP header view. `new_checked` guarantees the fixed 20 bytes and a sane
/// data offset; the options may still be cut by a snaplen, in which case
/// [`options`](Self::options) is whatever was captured.
#[derive(Clone, Copy, Debug)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    pub const MIN_HEADER_LEN: usize = 20;

    /// Fails with `TruncatedTcp` below 20 bytes and `BadTcpHeader` when the
    /// data offset is below 5 words.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let Some(h) = buffer.as_ref().first_chunk::<20>() else {
            return Err(DropReason::TruncatedTcp);
        };
        if h[12] >> 4 < 5 {
            return Err(DropReason::BadTcpHeader);
        }
        Ok(Self { buffer })
    }

    #[inline]
    fn hdr(&self) -> &[u8; 20] {
        head(self.buffer.as_ref())
    }

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

    #[inline]
    pub fn seq(&self) -> u32 {
        let h = self.hdr();
        be32([h[4], h[5], h[6], h[7]])
    }

    #[inline]
    pub fn ack(&self) -> u32 {
        let h = self.hdr();
        be32([h[8], h[9], h[10], h[11]])
    }

    /// Header length in bytes (data offset × 4), 20..=60.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.hdr()[12] >> 4) * 4
    }

    /// The eight classic flag bits (the AccECN/NS bit in byte 12 is not
    /// reported).
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags::from_bits_retain(self.hdr()[13])
    }

    #[inline]
    pub fn window(&self) -> u16 {
        let h = self.hdr();
        be16([h[14], h[15]])
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        let h = self.hdr();
        be16([h[16], h[17]])
    }

    #[inline]
    pub fn urgent(&self) -> u16 {
        let h = self.hdr();
        be16([h[18], h[19]])
    }
}

/// Byte-slice accessors for borrowed buffers: they return slices with the
/// buffer's lifetime, so a walk can keep them after the view is gone.
impl<'a, T: AsRef<[u8]> + ?Sized> TcpPacket<&'a T> {
    /// The captured option bytes (at most `header_len() - 20`).
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let end = self.header_len().min(b.len());
        b.get(Self::MIN_HEADER_LEN..end).unwrap_or(&[])
    }

    /// Everything after the header as captured.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buffer.as_ref(), self.header_len())
    }
}

/// Reads MSS, window scale, SACK-permitted and timestamps from raw option
/// bytes. Unknown kinds are skipped by their length. A known kind with the
/// wrong length is ignored. A length below 2 or running past the end stops
/// the scan, keeping what was read so far: the segment itself is still good
/// for flow accounting.
///
/// Inlined into its one caller so the result stays in registers: returned
/// through memory, its byte-sized fields cost a store-forwarding stall.
#[inline]
pub fn parse_options(mut opts: &[u8]) -> TcpOptions {
    let mut out = TcpOptions::default();
    // Each step consumes at least one byte, and there are at most 40.
    while let Some((&kind, rest)) = opts.split_first() {
        match kind {
            0 => break, // End of option list.
            1 => {
                opts = rest; // No-operation.
                continue;
            }
            _ => {}
        }
        let Some(&len) = rest.first() else { break };
        let len = usize::from(len);
        if len < 2 {
            break;
        }
        let Some(body) = opts.get(2..len) else { break };
        match (kind, body) {
            (2, &[a, b]) => out.mss = Some(be16([a, b])),
            (3, &[s]) => out.window_scale = Some(s),
            (4, []) => out.sack_permitted = true,
            (8, &[a0, a1, a2, a3, e0, e1, e2, e3]) => {
                out.timestamp = Some((be32([a0, a1, a2, a3]), be32([e0, e1, e2, e3])));
            }
            _ => {}
        }
        opts = tail(opts, len);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A TCP header 192.0.2.1:40000 → :443 with `opts` (padded to 4 bytes
    /// with EOL) and `payload`.
    pub(crate) fn tcp(flags: u8, opts: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut o = opts.to_vec();
        while !o.len().is_multiple_of(4) {
            o.push(0);
        }
        let hl = 20 + o.len();
        let mut v = Vec::new();
        v.extend_from_slice(&40000u16.to_be_bytes());
        v.extend_from_slice(&443u16.to_be_bytes());
        v.extend_from_slice(&0x0102_0304u32.to_be_bytes());
        v.extend_from_slice(&0xa0b0_c0d0u32.to_be_bytes());
        v.extend_from_slice(&[((hl / 4) as u8) << 4, flags, 0xff, 0xf0, 0, 0, 0, 0]);
        v.extend_from_slice(&o);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn fixed_fields() {
        let b = tcp(0x12, &[], b"hi");
        let t = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (40000, 443));
        assert_eq!((t.seq(), t.ack()), (0x0102_0304, 0xa0b0_c0d0));
        assert_eq!(t.header_len(), 20);
        assert!(t.flags().is_syn_ack());
        assert_eq!((t.window(), t.checksum(), t.urgent()), (0xfff0, 0, 0));
        assert!(t.options().is_empty());
        assert_eq!(t.payload(), b"hi");
    }

    #[test]
    fn malformed_headers() {
        let b = tcp(0x02, &[], &[]);
        for n in 0..20 {
            assert_eq!(
                TcpPacket::new_checked(&b[..n]).err(),
                Some(DropReason::TruncatedTcp)
            );
        }
        for off in 0..5u8 {
            let mut bad = b.clone();
            bad[12] = off << 4;
            assert_eq!(
                TcpPacket::new_checked(&bad[..]).err(),
                Some(DropReason::BadTcpHeader)
            );
        }
        // Data offset 15 with only 20 bytes captured: the view is made, options
        // and payload are empty.
        let mut big = b.clone();
        big[12] = 0xf0;
        let t = TcpPacket::new_checked(&big[..]).unwrap();
        assert_eq!(t.header_len(), 60);
        assert!(t.options().is_empty() && t.payload().is_empty());
    }

    #[test]
    fn syn_options_linux() {
        // A Linux SYN: MSS 1460, SACK-perm, TS 1/0, NOP, WS 7.
        let opts = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        let b = tcp(0x02, &opts, &[]);
        let t = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(t.options(), &opts);
        let o = parse_options(t.options());
        assert_eq!(o.mss, Some(1460));
        assert!(o.sack_permitted);
        assert_eq!(o.timestamp, Some((1, 0)));
        assert_eq!(o.window_scale, Some(7));
    }

    #[test]
    fn options_skip_unknown_and_sack_blocks() {
        // NOP NOP TS, then a SACK block (kind 5, len 10), then MSS.
        let mut opts = vec![1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8];
        opts.extend_from_slice(&[5, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        opts.extend_from_slice(&[2, 4, 0x23, 0x28]);
        let o = parse_options(&opts);
        assert_eq!(o.timestamp, Some((9, 8)));
        assert_eq!(o.mss, Some(9000));
        assert!(!o.sack_permitted && o.window_scale.is_none());
    }

    #[test]
    fn malformed_option_lengths_stop_the_scan() {
        // Length 0 and 1 would loop or go backwards: stop, keep what was read.
        for bad_len in [0u8, 1] {
            let o = parse_options(&[3, 3, 5, 8, bad_len, 2, 4, 5, 0xb4]);
            assert_eq!(o.window_scale, Some(5));
            assert_eq!(o.mss, None);
        }
        // Length past the end.
        let o = parse_options(&[2, 4, 0x05, 0xb4, 8, 10, 0, 0]);
        assert_eq!(o.mss, Some(1460));
        assert_eq!(o.timestamp, None);
        // Kind with no length byte.
        assert_eq!(parse_options(&[1, 1, 2]), TcpOptions::default());
        // Known kinds with wrong lengths are skipped, scan goes on.
        let o = parse_options(&[2, 3, 5, 3, 4, 1, 1, 4, 2, 8, 6, 0, 0, 0, 0, 3, 3, 2]);
        assert_eq!(o.mss, None);
        assert_eq!(o.window_scale, Some(2));
        assert!(o.sack_permitted);
        assert_eq!(o.timestamp, None);
        // Options after EOL are not read.
        assert_eq!(parse_options(&[0, 2, 4, 5, 0xb4]), TcpOptions::default());
        assert_eq!(parse_options(&[]), TcpOptions::default());
    }

    #[test]
    fn options_cut_by_snaplen_keep_what_was_captured() {
        let opts = [
            2, 4, 0x05, 0xb4, 1, 3, 3, 7, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1,
        ];
        let b = tcp(0x10, &opts, &[]);
        let t = TcpPacket::new_checked(&b[..30]).unwrap();
        assert_eq!(t.options().len(), 10);
        let o = parse_options(t.options());
        assert_eq!(
            (o.mss, o.window_scale, o.timestamp),
            (Some(1460), Some(7), None)
        );
    }
}
