//! Captures that cannot be mapped (stdin, pipes, FIFOs, character devices)
//! read through a buffer, with the same parsers as the mapped reader.
//!
//! The buffer holds the unread tail of the input; before a record is
//! parsed, the reader makes sure the whole record is in it (its header
//! says how long it is), so the parsers see exactly what they would see in
//! a mapped file and report the same errors at the same byte offsets. It
//! grows only to the largest record met: at most [`MAX_CAPLEN`] plus a
//! header for classic pcap, [`STREAM_MAX_BLOCK`] for a pcapng block (a
//! larger block is an error in a stream; a mapped file may hold it).

use std::io::{ErrorKind, Read};

use super::{CaptureFormat, Format, Frame, MAX_CAPLEN, PcapError, Peek};

/// Largest pcapng block a stream may carry: 16 MiB, far above any packet
/// block (at most [`MAX_CAPLEN`] of data) and the name-resolution or
/// decryption-secrets blocks real tools write.
pub const STREAM_MAX_BLOCK: usize = 16 << 20;
const _: () = assert!(STREAM_MAX_BLOCK > MAX_CAPLEN as usize + 64);

/// The buffer's least size: a pipe hands out at most 64 KiB per read.
const CHUNK: usize = 64 << 10;

/// The input and its buffer: `buf[pos..filled]` is read but not parsed.
struct Buffered<R> {
    input: R,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
    /// Input offset of `buf[0]`.
    base: u64,
    eof: bool,
}

impl<R: Read> Buffered<R> {
    fn rest(&self) -> &[u8] {
        self.buf.get(self.pos..self.filled).unwrap_or_default()
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Reads until `rest()` holds at least `need` bytes or the input ends.
    /// Moves the unparsed tail to the front first, so the buffer never holds
    /// more than one record beyond a read chunk.
    fn fill_to(&mut self, need: usize) -> Result<(), PcapError> {
        if self.filled - self.pos >= need || self.eof {
            return Ok(());
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.filled, 0);
            self.base += self.pos as u64;
            self.filled -= self.pos;
            self.pos = 0;
        }
        let want = need.max(CHUNK);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        while self.filled < need {
            let Some(room) = self.buf.get_mut(self.filled..) else {
                break;
            };
            match self.input.read(room) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(PcapError::Read {
                        offset: self.base + self.filled as u64,
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Buffers `peek.need` bytes at `pos` (or all that is left). A block
    /// above [`STREAM_MAX_BLOCK`] is refused once the input is seen to hold
    /// more than that; if it ends sooner, the parser reports the block as
    /// truncated, as it would in a mapped file.
    fn fill_for(&mut self, peek: Peek) -> Result<(), PcapError> {
        if peek.need <= STREAM_MAX_BLOCK {
            return self.fill_to(peek.need);
        }
        self.fill_to(STREAM_MAX_BLOCK + 1)?;
        if self.eof && self.rest().len() <= STREAM_MAX_BLOCK {
            return Ok(());
        }
        Err(PcapError::StreamBlockTooLarge {
            offset: self.offset(),
            block_type: peek.block_type,
            len: u32::try_from(peek.need).unwrap_or(u32::MAX),
        })
    }
}

/// Reads packets from a byte stream. Like [`PcapReader`](super::PcapReader)
/// it lends out packets that borrow its buffer; unlike it, a batch holds
/// only records already buffered (at least one), since refilling moves the
/// buffer.
pub struct StreamReader<R: Read> {
    src: Buffered<R>,
    format: Format,
    clipped: u64,
}

impl<R: Read> StreamReader<R> {
    /// Reads and parses the file header (classic) or first section header
    /// (pcapng).
    pub fn new(input: R) -> Result<Self, PcapError> {
        let mut src = Buffered {
            input,
            buf: Vec::new(),
            pos: 0,
            filled: 0,
            base: 0,
            eof: false,
        };
        // Enough to tell a classic header (24 bytes) from a section header
        // block and read the latter's length.
        src.fill_to(12)?;
        let need = Format::header_len(src.rest());
        src.fill_for(Peek {
            need,
            packet: false,
            block_type: 0x0a0d_0d0a,
        })?;
        let (format, pos) = Format::from_header(src.rest())?;
        src.pos = pos;
        Ok(StreamReader {
            src,
            format,
            clipped: 0,
        })
    }

    /// Up to `out.len()` packets (at least one unless the input ended or is
    /// bad); returns how many were written, 0 at a clean end. An error after
    /// some packets is held back for the next call, as with
    /// [`PcapReader::next_batch`](super::PcapReader::next_batch).
    pub fn next_batch<'a>(&'a mut self, out: &mut [Frame<'a>]) -> Result<usize, PcapError> {
        // Phase 1 (may refill, nothing borrowed): consume blocks until a
        // whole packet record is buffered at `pos`.
        loop {
            let peek = self.format.peek(self.src.rest());
            self.src.fill_for(peek)?;
            let rest = self.src.rest();
            if rest.is_empty() {
                return Ok(0);
            }
            // The header may have been incomplete before the refill.
            let peek = self.format.peek(rest);
            if rest.len() < peek.need && !self.src.eof {
                continue;
            }
            if peek.packet && rest.len() >= peek.need {
                break;
            }
            // A non-packet block, or a record cut by the end of the input:
            // the parser consumes the one or reports the other.
            let end = self.src.pos + peek.need.min(rest.len());
            let (base, at) = (self.src.base, self.src.pos);
            let window = self.src.buf.get(..end).unwrap_or_default();
            if let Err(e) = self
                .format
                .next(window, &mut self.src.pos, &mut self.clipped)
            {
                return Err(e.shifted(base));
            }
            if self.src.pos == at {
                // Cannot happen (the parser either consumes a block or
                // fails); never loop on it.
                return Ok(0);
            }
        }
        // Phase 2 (no refill; packets borrow the buffer): every whole record
        // already buffered, up to `out.len()`.
        let StreamReader {
            src,
            format,
            clipped,
        } = self;
        let bytes: &'a [u8] = src.buf.get(..src.filled).unwrap_or_default();
        let base = src.base;
        let pos = &mut src.pos;
        let mut n = 0;
        while n < out.len() {
            let rest = bytes.get(*pos..).unwrap_or_default();
            let need = format.peek(rest).need;
            if rest.is_empty() || rest.len() < need {
                break;
            }
            let window = bytes.get(..*pos + need).unwrap_or_default();
            match format.next(window, pos, clipped) {
                Ok(Some(p)) => {
                    if let Some(slot) = out.get_mut(n) {
                        *slot = p;
                    }
                    n += 1;
                }
                Ok(None) => {}
                Err(e) if n == 0 => return Err(e.shifted(base)),
                Err(_) => break,
            }
        }
        Ok(n)
    }

    /// Input offset of the next record or block.
    pub fn offset(&self) -> u64 {
        self.src.offset()
    }

    pub fn format(&self) -> CaptureFormat {
        self.format.kind()
    }

    /// As [`PcapReader::clipped_packets`](super::PcapReader::clipped_packets).
    pub fn clipped_packets(&self) -> u64 {
        self.clipped
    }
}
