//! pcap and pcapng capture files: the offline packet source.
//!
//! A regular file is one byte slice (a read-only memory map, or a buffer the
//! caller already holds) and every packet handed out is a view into it, so
//! reading costs no copy and no allocation per packet. [`PcapReader::next_packet`]
//! is a lending iterator for that reason: a packet borrows the reader.
//! Streams (stdin, a pipe, a FIFO, a character device) cannot be mapped:
//! [`StreamReader`] reads them through a buffer that holds at least one
//! whole record, with the same parsers and the same errors and offsets.
//! [`Capture::open`] picks one by what the path is (`-` is stdin).
//!
//! The format is chosen by the magic number, never by the file name (real
//! corpora contain pcapng files named `*.pcap`). Every length in the file is
//! checked before it is used: a corrupt or truncated file ends in a
//! [`PcapError`] naming the byte offset, never in a panic or an endless loop.
//! A failed read does not advance the reader, so calling `next_packet` again
//! returns the same error.
//!
//! Specifications: classic pcap is draft-ietf-opsawg-pcap, pcapng is
//! draft-ietf-opsawg-pcapng.
//!
//! Two rules that are choices rather than spec:
//! - **Clipping.** A packet is never handed out with more bytes than the
//!   record says were on the wire, nor more than the snapshot length
//!   (`data.len() <= min(wire_len, snaplen)`; snaplen 0 means unlimited). Both
//!   specs say the captured length is at most that minimum, so bytes beyond it
//!   are padding, a trailer from the capture hardware, or damage; libpcap
//!   likewise cuts records longer than the snapshot length. Such records are
//!   accepted and counted in [`PcapReader::clipped_packets`]. A captured length
//!   above [`MAX_CAPLEN`] or past the end of the file or block is an error.
//! - **Simple Packet Blocks** carry no timestamp; they get the timestamp of
//!   the packet before them in the file (any interface), or 0 (the Unix
//!   epoch) when they come first. The flow code needs monotone-ish time, and
//!   the previous packet's time is the closest lower bound we have.

mod classic;
mod pcapng;
mod stream;

#[cfg(test)]
mod damage_tests;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::{Frame, Placed};

pub use stream::{STREAM_MAX_BLOCK, StreamReader};

/// Largest captured length accepted in one record: 256 KiB, libpcap's and
/// Wireshark's limit for the link types we parse. A larger value is a corrupt
/// length field; trusting it would silently swallow the packets after it.
pub const MAX_CAPLEN: u32 = 262_144;

/// The container format, as told by the magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap; `nanos` for the a1b23c4d nanosecond variant.
    Pcap {
        nanos: bool,
    },
    PcapNg,
}

/// What went wrong reading a capture. Every variant about file content names
/// the byte offset of the record or block at fault.
#[derive(thiserror::Error, Debug)]
pub enum PcapError {
    #[error("cannot open capture file {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is a directory, not a capture file")]
    Directory { path: PathBuf },
    #[error("empty input: no capture file header")]
    Empty,
    #[error("reading the capture at byte {offset}")]
    Read {
        offset: u64,
        #[source]
        source: io::Error,
    },
    #[error(
        "pcapng block at byte {offset} (type {block_type:#x}): {len} bytes is more than the {STREAM_MAX_BLOCK} bytes a stream is buffered to"
    )]
    StreamBlockTooLarge {
        offset: u64,
        block_type: u32,
        len: u32,
    },
    #[error("not a pcap or pcapng file: magic number {magic:#010x} at byte 0")]
    UnknownMagic { magic: u32 },
    #[error("unsupported {format} version {major}.{minor} at byte {offset}")]
    UnsupportedVersion {
        offset: u64,
        format: &'static str,
        major: u16,
        minor: u16,
    },
    #[error("truncated {what} at byte {offset}: need {need} bytes, {remain} remain")]
    Truncated {
        offset: u64,
        what: &'static str,
        need: u64,
        remain: u64,
    },
    #[error(
        "truncated packet record at byte {offset}: header says {caplen} bytes, {remain} remain"
    )]
    TruncatedPacket {
        offset: u64,
        caplen: u32,
        remain: u64,
    },
    #[error(
        "packet at byte {offset}: captured length {caplen} exceeds the {MAX_CAPLEN}-byte limit (corrupt length field?)"
    )]
    CaptureTooLarge { offset: u64, caplen: u32 },
    #[error(
        "truncated pcapng block at byte {offset} (type {block_type:#x}): header says {len} bytes, {remain} remain"
    )]
    TruncatedBlock {
        offset: u64,
        block_type: u32,
        len: u32,
        remain: u64,
    },
    #[error("pcapng block at byte {offset} (type {block_type:#x}): invalid length {len}: {reason}")]
    BadBlockLength {
        offset: u64,
        block_type: u32,
        len: u32,
        reason: &'static str,
    },
    #[error(
        "pcapng block at byte {offset} (type {block_type:#x}): trailing length {trailing} differs from leading length {leading}"
    )]
    BlockLengthMismatch {
        offset: u64,
        block_type: u32,
        leading: u32,
        trailing: u32,
    },
    #[error("section header block at byte {offset}: bad byte-order magic {magic:#010x}")]
    BadByteOrderMagic { offset: u64, magic: u32 },
    #[error(
        "{what} at byte {offset}: captured length {caplen} does not fit in the block's {room} data bytes"
    )]
    CaptureExceedsBlock {
        offset: u64,
        what: &'static str,
        caplen: u32,
        room: u64,
    },
    #[error(
        "{what} at byte {offset} refers to interface {interface}, but its section has {count} interface(s)"
    )]
    UnknownInterface {
        offset: u64,
        what: &'static str,
        interface: u32,
        count: u32,
    },
    #[error(
        "interface description block at byte {offset}: option {code} of {len} bytes runs past the block end"
    )]
    BadOption { offset: u64, code: u16, len: u16 },
    #[error(
        "interface description block at byte {offset}: if_tsresol {value:#04x} is finer than 64-bit timestamps can count"
    )]
    BadTsResol { offset: u64, value: u8 },
}

impl PcapError {
    /// Byte offset of the faulty record or block; `None` when the error is
    /// not about file content (opening failed).
    pub fn offset(&self) -> Option<u64> {
        use PcapError::*;
        match self {
            Open { .. } | Directory { .. } => None,
            UnknownMagic { .. } | Empty => Some(0),
            Read { offset, .. }
            | StreamBlockTooLarge { offset, .. }
            | UnsupportedVersion { offset, .. }
            | Truncated { offset, .. }
            | TruncatedPacket { offset, .. }
            | CaptureTooLarge { offset, .. }
            | TruncatedBlock { offset, .. }
            | BadBlockLength { offset, .. }
            | BlockLengthMismatch { offset, .. }
            | BadByteOrderMagic { offset, .. }
            | CaptureExceedsBlock { offset, .. }
            | UnknownInterface { offset, .. }
            | BadOption { offset, .. }
            | BadTsResol { offset, .. } => Some(*offset),
        }
    }

    /// The same error with its byte offset moved by `by` (a stream reader
    /// parses a window of the input that starts at byte `by`).
    pub(crate) fn shifted(mut self, by: u64) -> Self {
        use PcapError::*;
        match &mut self {
            Open { .. } | Directory { .. } | Empty | UnknownMagic { .. } => {}
            Read { offset, .. }
            | StreamBlockTooLarge { offset, .. }
            | UnsupportedVersion { offset, .. }
            | Truncated { offset, .. }
            | TruncatedPacket { offset, .. }
            | CaptureTooLarge { offset, .. }
            | TruncatedBlock { offset, .. }
            | BadBlockLength { offset, .. }
            | BlockLengthMismatch { offset, .. }
            | BadByteOrderMagic { offset, .. }
            | CaptureExceedsBlock { offset, .. }
            | UnknownInterface { offset, .. }
            | BadOption { offset, .. }
            | BadTsResol { offset, .. } => *offset += by,
        }
        self
    }
}

/// Byte order of a file or pcapng section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    #[inline(always)]
    fn u16(self, b: [u8; 2]) -> u16 {
        match self {
            Endian::Little => u16::from_le_bytes(b),
            Endian::Big => u16::from_be_bytes(b),
        }
    }

    #[inline(always)]
    fn u32(self, b: [u8; 4]) -> u32 {
        match self {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        }
    }

    /// The `u16` at `off` in a header whose length was checked already (an
    /// out-of-range `off` is a bug that reads 0, never a panic; with a fixed
    /// header array and a constant offset the check compiles away).
    #[inline(always)]
    fn u16_at(self, h: &[u8], off: usize) -> u16 {
        bytes_at::<2>(h, off).map_or(0, |b| self.u16(b))
    }

    /// The `u32` at `off`, as for [`Endian::u16_at`].
    #[inline(always)]
    fn u32_at(self, h: &[u8], off: usize) -> u32 {
        bytes_at::<4>(h, off).map_or(0, |b| self.u32(b))
    }
}

/// `N` bytes at `off`, or `None` past the end (never panics, whatever `off`).
#[inline(always)]
fn bytes_at<const N: usize>(buf: &[u8], off: usize) -> Option<[u8; N]> {
    buf.get(off..)?.first_chunk::<N>().copied()
}

/// Cuts `data` to `min(wire_len, snaplen)` (the module doc says why) and
/// counts the records that needed it.
#[inline(always)]
fn clip<'a>(data: &'a [u8], wire_len: u32, snaplen: u32, clipped: &mut u64) -> &'a [u8] {
    let limit = wire_len.min(snaplen) as usize;
    match data.get(..limit) {
        Some(cut) if limit < data.len() => {
            *clipped += 1;
            cut
        }
        _ => data,
    }
}

/// What a record's or block's header says about it, before it is parsed
/// (the stream reader buffers it whole first).
#[derive(Clone, Copy, Debug)]
struct Peek {
    /// Bytes it takes; just the header's while that is incomplete or
    /// impossible (the parser reports what is wrong).
    need: usize,
    /// It is a packet record or packet block.
    packet: bool,
    /// pcapng block type (0 for classic records).
    block_type: u32,
}

enum Format {
    Classic(classic::Classic),
    PcapNg(pcapng::PcapNg),
}

impl Format {
    /// Parses the file header (classic) or first section header (pcapng)
    /// at the start of `bytes`; returns the state and the first record's
    /// offset.
    fn from_header(bytes: &[u8]) -> Result<(Format, usize), PcapError> {
        let Some(magic) = bytes_at::<4>(bytes, 0) else {
            if bytes.is_empty() {
                return Err(PcapError::Empty);
            }
            return Err(PcapError::Truncated {
                offset: 0,
                what: "file header",
                need: 4,
                remain: bytes.len() as u64,
            });
        };
        if magic == pcapng::SHB_TYPE {
            let (ng, pos) = pcapng::PcapNg::from_first_section(bytes)?;
            Ok((Format::PcapNg(ng), pos))
        } else {
            let (c, pos) = classic::Classic::from_header(bytes, magic)?;
            Ok((Format::Classic(c), pos))
        }
    }

    #[inline(always)]
    fn next<'a>(
        &mut self,
        bytes: &'a [u8],
        pos: &mut usize,
        clipped: &mut u64,
    ) -> Result<Option<Frame<'a>>, PcapError> {
        match self {
            Format::Classic(c) => c.next(bytes, pos, clipped),
            Format::PcapNg(ng) => ng.next(bytes, pos, clipped),
        }
    }

    /// As [`next`](Self::next), the packet by its place in `bytes`,
    /// written into `into` (false at the end).
    #[inline(always)]
    fn next_placed(
        &mut self,
        bytes: &[u8],
        pos: &mut usize,
        clipped: &mut u64,
        into: &mut Placed,
    ) -> Result<bool, PcapError> {
        match self {
            Format::Classic(c) => c.next_placed(bytes, pos, clipped, into),
            Format::PcapNg(ng) => match ng.next(bytes, pos, clipped)? {
                Some(f) => {
                    *into = Placed::of(&f, bytes);
                    Ok(true)
                }
                None => Ok(false),
            },
        }
    }

    /// The record or block at the start of `rest`, as far as its header
    /// tells.
    fn peek(&self, rest: &[u8]) -> Peek {
        match self {
            Format::Classic(c) => c.peek(rest),
            Format::PcapNg(ng) => ng.peek(rest),
        }
    }

    /// Bytes the file header or first section header at the start of
    /// `rest` takes (before there is a `Format` to ask).
    fn header_len(rest: &[u8]) -> usize {
        if rest.first_chunk::<4>() == Some(&pcapng::SHB_TYPE) {
            pcapng::peek_block(rest, Endian::Little).need
        } else {
            24
        }
    }

    fn kind(&self) -> CaptureFormat {
        match self {
            Format::Classic(c) => CaptureFormat::Pcap { nanos: c.nanos() },
            Format::PcapNg(_) => CaptureFormat::PcapNg,
        }
    }
}

/// Reads packets from a pcap or pcapng file held in memory.
pub struct PcapReader<B: AsRef<[u8]>> {
    buf: B,
    /// Offset of the next record or block; always `<= buf.len()`.
    pos: usize,
    format: Format,
    clipped: u64,
}

impl PcapReader<memmap2::Mmap> {
    /// Maps the file read-only with every page mapped up front
    /// (`MAP_POPULATE`): no minor fault per 4 KiB as the reader walks it
    /// (on a 478 MB capture those were a third of the run time), at the
    /// price of waiting for the whole mapping before the first packet.
    /// [`open_shared`](PcapReader::open_shared) maps the pages on another
    /// thread instead, while the file is read.
    pub fn open(path: &Path) -> Result<Self, PcapError> {
        Self::from_bytes(map_file(path, true)?)
    }
}

/// Maps `path` read-only, every page up front if `populate`.
fn map_file(path: &Path, populate: bool) -> Result<memmap2::Mmap, PcapError> {
    let open_err = |source| PcapError::Open {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(open_err)?;
    let mut opts = memmap2::MmapOptions::new();
    if populate {
        opts.populate();
    }
    // SAFETY: the map is read-only and private to this reader. memmap2's
    // remaining hazard is another process truncating or rewriting the file
    // while it is mapped (SIGBUS or changing bytes); capture files are
    // written once and then read, and every length read from the map is
    // bounds-checked, so changed bytes can only produce a PcapError.
    let map = unsafe { opts.map(&file) }.map_err(open_err)?;
    // Only a hint for read-ahead: reading is correct without it.
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(map)
}

/// Bytes of the map the page-in thread maps at a time: small enough that
/// the reader, starting at the same moment, soon walks pages already
/// mapped; large enough that the calls cost nothing beside the work.
const PAGE_IN_CHUNK: usize = 8 << 20;

/// A mapped capture several threads can hold at once: the reader walks it
/// while workers read their packets' bytes from it by offset, so a packet
/// handed to another thread is still a view into the file, never a copy.
#[derive(Clone)]
pub struct SharedMap(std::sync::Arc<memmap2::Mmap>);

impl AsRef<[u8]> for SharedMap {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl PcapReader<SharedMap> {
    /// As [`PcapReader::open`], with a map that can be shared
    /// ([`PcapReader::buffer`]), whose pages a thread of its own maps
    /// ahead of the reader (`MADV_POPULATE_READ`, chunk by chunk from the
    /// start) instead of the `mmap` call mapping them all before the first
    /// packet: on the 478 MB bench file that wait was ~0.09 s, a tenth of
    /// a two-worker run, with one core otherwise idle. Where the kernel
    /// lacks `MADV_POPULATE_READ` (before 5.14) the file is mapped as
    /// [`open`](PcapReader::open) maps it. The thread only maps pages (the
    /// reader is correct without it, taking the faults itself where it
    /// gets ahead) and holds the map until it is done.
    pub fn open_shared(path: &Path) -> Result<Self, PcapError> {
        let map = map_file(path, false)?;
        let first = map.len().min(PAGE_IN_CHUNK);
        let map = if first == 0 || populate(&map, 0, first) {
            map
        } else {
            drop(map);
            map_file(path, true)?
        };
        let shared = SharedMap(std::sync::Arc::new(map));
        if shared.0.len() > first {
            let pager = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("xdprobe-page-in".into())
                .spawn(move || {
                    let mut at = first;
                    while at < pager.0.len() {
                        let len = (pager.0.len() - at).min(PAGE_IN_CHUNK);
                        if !populate(&pager.0, at, len) {
                            break;
                        }
                        at += len;
                    }
                });
            if let Err(e) = spawned {
                tracing::debug!(error = %e, "no page-in thread: the reader maps the pages itself");
            }
        }
        let r = PcapReader::from_bytes(shared)?;
        Ok(r)
    }
}

/// Maps `len` bytes of `map` from `at` into the page tables (reading from
/// disk what is not cached); false if the kernel cannot.
fn populate(map: &memmap2::Mmap, at: usize, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        map.advise_range(memmap2::Advice::PopulateRead, at, len)
            .is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (map, at, len);
        false
    }
}

impl<B: AsRef<[u8]>> PcapReader<B> {
    /// Parses the file header (classic) or first section header (pcapng).
    pub fn from_bytes(buf: B) -> Result<Self, PcapError> {
        let (format, pos) = Format::from_header(buf.as_ref())?;
        Ok(PcapReader {
            buf,
            pos,
            format,
            clipped: 0,
        })
    }

    /// The next packet, `Ok(None)` at a clean end of file. Non-packet blocks
    /// are consumed on the way. On an error the reader stays at the faulty
    /// record or block (`offset()` equals the error's offset), so the caller
    /// may stop, keeping what it has, or see the same error again.
    #[inline]
    pub fn next_packet(&mut self) -> Result<Option<Frame<'_>>, PcapError> {
        let bytes = self.buf.as_ref();
        self.format.next(bytes, &mut self.pos, &mut self.clipped)
    }

    /// As [`next_packet`](Self::next_packet), the packet by its place in
    /// [`bytes`](Self::bytes), written into `into` (the time-order stage's
    /// ring); false at the end of the file.
    #[inline(always)]
    pub(crate) fn next_placed(&mut self, into: &mut Placed) -> Result<bool, PcapError> {
        let bytes = self.buf.as_ref();
        self.format
            .next_placed(bytes, &mut self.pos, &mut self.clipped, into)
    }

    /// Up to `out.len()` packets at once, for batched processing; returns
    /// how many were written (0 at a clean end of file). An error after some
    /// packets is held back: those packets are returned and the next call
    /// reports the error (the reader stays on the faulty record).
    pub fn next_batch<'a>(&'a mut self, out: &mut [Frame<'a>]) -> Result<usize, PcapError> {
        let bytes = self.buf.as_ref();
        let mut n = 0;
        for slot in out.iter_mut() {
            match self.format.next(bytes, &mut self.pos, &mut self.clipped) {
                Ok(Some(p)) => {
                    *slot = p;
                    n += 1;
                }
                Ok(None) => break,
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(n)
    }

    /// The whole file as the reader holds it; every packet it hands out is
    /// a part of this (`source::reorder` keeps packets by their place in
    /// it).
    pub fn bytes(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The buffer itself (for a [`SharedMap`], a handle to clone).
    pub fn buffer(&self) -> &B {
        &self.buf
    }

    /// Byte offset of the next record or block.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// Which container the file is.
    pub fn format(&self) -> CaptureFormat {
        self.format.kind()
    }

    /// Packets handed out shorter than their record's captured length (see
    /// the module doc on clipping). Worth a warning when non-zero.
    pub fn clipped_packets(&self) -> u64 {
        self.clipped
    }
}
