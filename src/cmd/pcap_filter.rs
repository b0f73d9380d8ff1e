//! `xdprobe pcap --filter EXPR` (or trailing expression words, as with
//! tcpdump): frames the expression rejects never reach the worker.
//!
//! libpcap compiles the expression (`xdprobe-filter`), so it means what it
//! means to tcpdump; the classic BPF it makes runs here in user space. Byte
//! offsets depend on the link layer, so there is one program per link type
//! the capture uses (a pcapng file may mix interfaces of several), compiled
//! when a frame of that type first arrives.

use xdprobe_dataplane::source::Frame;
use xdprobe_filter::{FilterError, LinkType, Program};

/// Snap length the programs are compiled for: the reader's own limit, so
/// no captured byte is out of the filter's reach.
const SNAPLEN: u32 = xdprobe_dataplane::source::pcap::MAX_CAPLEN;

/// The compiled filter and what it did.
pub struct FrameFilter {
    expr: String,
    /// (file link type, its program); a capture has one or a few.
    programs: Vec<(u32, Program)>,
    /// Frames the expression rejected.
    pub rejected: u64,
}

impl FrameFilter {
    /// Checks the expression up front (for Ethernet, where every pcap-filter
    /// primitive is defined), so a typo fails before the file is read.
    pub fn new(expr: String) -> Result<FrameFilter, FilterError> {
        xdprobe_filter::compile(&expr, LinkType::Ethernet, SNAPLEN)?;
        Ok(FrameFilter {
            expr,
            programs: Vec::new(),
            rejected: 0,
        })
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// Keeps the frames of `batch` the expression accepts at its front, in
    /// order, and returns how many. An error: the expression means nothing
    /// for a link type the capture uses (`ether host` on raw IP).
    pub fn retain(&mut self, batch: &mut [Frame<'_>]) -> Result<usize, FilterError> {
        let mut kept = 0;
        for i in 0..batch.len() {
            let p = batch[i];
            if self.program(p.linktype)?.matches(p.data, p.wire_len) {
                batch[kept] = p;
                kept += 1;
            }
        }
        self.rejected += (batch.len() - kept) as u64;
        Ok(kept)
    }

    fn program(&mut self, linktype: u32) -> Result<&Program, FilterError> {
        let at = match self.programs.iter().position(|(t, _)| *t == linktype) {
            Some(at) => at,
            None => {
                let p = xdprobe_filter::compile(&self.expr, LinkType::File(linktype), SNAPLEN)
                    .map_err(|e| match e {
                        FilterError::Syntax { expr, msg } => FilterError::Syntax {
                            expr,
                            msg: format!("for link type {linktype} of this capture: {msg}"),
                        },
                        e => e,
                    })?;
                self.programs.push((linktype, p));
                self.programs.len() - 1
            }
        };
        Ok(&self.programs[at].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal IPv4 header (20 bytes) with protocol `proto` and 8 bytes
    /// of L4 header after it.
    fn ipv4(proto: u8) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, proto, 0, 0];
        p.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
        p.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 8, 0, 0]);
        p
    }

    fn ethernet(ip: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(ip);
        f
    }

    fn frame(linktype: u32, data: &[u8]) -> Frame<'_> {
        Frame {
            linktype,
            data,
            wire_len: data.len() as u32,
            ..Frame::default()
        }
    }

    /// pcapng interfaces of different link types in one batch: each frame
    /// is judged by the program for its own link layer.
    #[test]
    fn mixed_link_types_each_get_their_program() {
        if xdprobe_filter::libpcap::version().is_err() {
            // The filter crate's own tests fail loudly without libpcap.
            eprintln!("\n!!!! SKIPPED: libpcap not loadable !!!!\n");
            assert!(std::env::var_os("CI").is_none(), "CI needs libpcap");
            return;
        }
        let (eth_udp, eth_tcp) = (ethernet(&ipv4(17)), ethernet(&ipv4(6)));
        let (raw_udp, raw_tcp) = (ipv4(17), ipv4(6));
        let mut batch = [
            frame(1, &eth_tcp),
            frame(101, &raw_udp),
            frame(1, &eth_udp),
            frame(101, &raw_tcp),
            frame(228, &raw_udp),
        ];
        let mut f = FrameFilter::new("udp port 53".into()).unwrap();
        let kept = f.retain(&mut batch).unwrap();
        assert_eq!(kept, 3);
        assert_eq!(
            batch[..kept].iter().map(|p| p.linktype).collect::<Vec<_>>(),
            [101, 1, 228]
        );
        assert_eq!(f.rejected, 2);
        assert_eq!(f.programs.len(), 3, "one program per link type");
        assert!(FrameFilter::new("udp prot 53".into()).is_err());
    }
}
