//! Opening a capture by path: a regular file is mapped, anything else that
//! can be read (stdin as `-`, a pipe, a FIFO, a character device such as
//! `/dev/stdin` or `/dev/null`) is streamed, a directory is refused.
//! `mmap` works only on regular files; on the others it fails with
//! `ENODEV`, which said nothing useful to an operator.
//!
//! A mapped file comes out in timestamp order within 2 ms
//! ([`TimeOrdered`]: a split TAP's or a merged capture's small inversions),
//! holding places in the mapping, never copies. A stream cannot be held
//! that way and is read in its own order.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::Frame;
use super::pcap::{CaptureFormat, PcapError, PcapReader, SharedMap, StreamReader};
use super::reorder::{ReorderStats, TimeOrdered};

/// An open capture of either kind, read the same way.
pub enum Capture {
    Mapped(TimeOrdered<SharedMap>),
    Stream(StreamReader<Box<dyn Read + Send>>),
}

impl Capture {
    /// Opens `path` (`-`: standard input) and reads its header.
    pub fn open(path: &Path) -> Result<Self, PcapError> {
        if path.as_os_str() == "-" {
            let stdin: Box<dyn Read + Send> = Box::new(std::io::stdin());
            return Ok(Capture::Stream(StreamReader::new(stdin)?));
        }
        let open_err = |source| PcapError::Open {
            path: path.to_owned(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(open_err)?;
        if meta.is_dir() {
            return Err(PcapError::Directory {
                path: path.to_owned(),
            });
        }
        if meta.is_file() {
            return Ok(Capture::Mapped(TimeOrdered::new(PcapReader::open_shared(
                path,
            )?)));
        }
        let file: Box<dyn Read + Send> = Box::new(File::open(path).map_err(open_err)?);
        Ok(Capture::Stream(StreamReader::new(file)?))
    }

    /// As [`PcapReader::next_batch`].
    #[inline]
    pub fn next_batch<'a>(&'a mut self, out: &mut [Frame<'a>]) -> Result<usize, PcapError> {
        match self {
            Capture::Mapped(r) => r.next_batch(out),
            Capture::Stream(r) => r.next_batch(out),
        }
    }

    pub fn offset(&self) -> u64 {
        match self {
            Capture::Mapped(r) => r.reader().offset(),
            Capture::Stream(r) => r.offset(),
        }
    }

    pub fn format(&self) -> CaptureFormat {
        match self {
            Capture::Mapped(r) => r.reader().format(),
            Capture::Stream(r) => r.format(),
        }
    }

    pub fn clipped_packets(&self) -> u64 {
        match self {
            Capture::Mapped(r) => r.reader().clipped_packets(),
            Capture::Stream(r) => r.clipped_packets(),
        }
    }

    /// What the time-order stage did (nothing for a stream).
    pub fn reorder_stats(&self) -> ReorderStats {
        match self {
            Capture::Mapped(r) => r.stats(),
            Capture::Stream(_) => ReorderStats::default(),
        }
    }

    /// The mapped file every packet of a mapped capture is a view into
    /// (`None` for a stream, whose packets live in a buffer that is reused).
    pub fn shared_map(&self) -> Option<SharedMap> {
        match self {
            Capture::Mapped(r) => Some(r.reader().buffer().clone()),
            Capture::Stream(_) => None,
        }
    }

    /// Whether the input is streamed (not mapped).
    pub fn is_stream(&self) -> bool {
        matches!(self, Capture::Stream(_))
    }
}
