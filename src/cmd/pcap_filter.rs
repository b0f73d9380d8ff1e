//! `xdprobe pcap --filter EXPR` (or trailing expression words, as with
//! tcpdump): frames the expression rejects never reach the worker.
//!
//! libpcap compiles the expression (`xdprobe-filter`), so it means what it
//! means to tcpdump; the classic BPF it makes runs here in user space. Byte
//! offsets depend on the link layer, so there is one program per link type
//! the capture uses (a pcapng file may mix interfaces of several), compiled
//! when a frame of that type first arrives.

use xdprobe_dataplane::source::pcap::RawPacket;
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
    pub fn retain(&mut self, batch: &mut [RawPacket<'_>]) -> Result<usize, FilterError> {
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
