//! RFC 5655 IPFIX file: the messages, back to back, as a collector would
//! have received them.
//!
//! The file only ever holds whole messages, and the counters say exactly
//! which made it. Messages are buffered whole and written by
//! [`FileOut::flush`] (the exporter's tick, a full buffer, shutdown); a
//! write that fails part-way (a full disk, a quota) is cut back with
//! `ftruncate` to the end of the last message written entirely, so the
//! file stays readable by nfdump and any IPFIX reader, and the flush
//! reports how many messages and records were written and how many were
//! lost. A later flush tries again (the disk may have room again). The
//! file is opened without following a planted symlink (`safe_file`).

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;

use crate::safe_file;

/// Buffered bytes that make `send` flush at once.
const FLUSH_AT: usize = 1 << 16;

/// What one flush did.
#[derive(Debug, Default)]
pub struct Flushed {
    pub messages: u64,
    pub records: u64,
    pub octets: u64,
    pub failed_messages: u64,
    pub failed_records: u64,
    /// The file holds no message now (what was lost included the first
    /// ones: the templates must be written again).
    pub empty: bool,
    pub error: Option<io::Error>,
}

pub struct FileOut {
    f: File,
    buf: Vec<u8>,
    /// Per buffered message: (bytes, flow records).
    msgs: Vec<(usize, u64)>,
    /// Bytes of whole messages in the file.
    committed: u64,
}

impl FileOut {
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(FileOut {
            f: safe_file::create_new_or_truncate(path)?,
            buf: Vec::with_capacity(FLUSH_AT * 2),
            msgs: Vec::new(),
            committed: 0,
        })
    }

    /// Takes one message of `records` flow records; returns what a flush
    /// did when the buffer filled up.
    pub fn send(&mut self, msg: &[u8], records: u64) -> Option<Flushed> {
        self.buf.extend_from_slice(msg);
        self.msgs.push((msg.len(), records));
        (self.buf.len() >= FLUSH_AT).then(|| self.flush())
    }

    /// Writes the buffered messages; see the module doc.
    pub fn flush(&mut self) -> Flushed {
        let mut out = Flushed::default();
        if self.msgs.is_empty() {
            return out;
        }
        let mut written = 0usize;
        while written < self.buf.len() {
            match self.f.write(&self.buf[written..]) {
                Ok(0) => {
                    out.error = Some(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
                    break;
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    out.error = Some(e);
                    break;
                }
            }
        }
        let mut whole = 0usize;
        let mut cut = false;
        for &(len, records) in &self.msgs {
            // Whole messages in file order: after the first cut one,
            // nothing counts (a later short one may fit in the bytes
            // written, but they are not its bytes).
            if !cut && whole + len <= written {
                whole += len;
                out.messages += 1;
                out.records += records;
                out.octets += len as u64;
            } else {
                cut = true;
                out.failed_messages += 1;
                out.failed_records += records;
            }
        }
        if written > whole {
            // A message cut in the middle: back to the last whole one.
            let end = self.committed + whole as u64;
            let cut = self
                .f
                .set_len(end)
                .and_then(|()| self.f.seek(SeekFrom::Start(end)).map(|_| ()));
            if let Err(e) = cut {
                out.error.get_or_insert(e);
            }
        }
        self.committed += whole as u64;
        out.empty = self.committed == 0;
        self.buf.clear();
        self.msgs.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_messages_are_counted_and_kept() {
        let d = std::env::temp_dir().join(format!("xdprobe-fileout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("out.ipfix");
        let mut f = FileOut::create(&p).unwrap();
        assert!(f.send(&[1; 100], 2).is_none());
        assert!(f.send(&[2; 50], 1).is_none());
        let r = f.flush();
        assert_eq!(
            (r.messages, r.records, r.octets, r.failed_messages),
            (2, 3, 150, 0)
        );
        assert!(!r.empty && r.error.is_none());
        // A full buffer flushes by itself.
        let big = vec![3u8; FLUSH_AT];
        let r = f.send(&big, 9).expect("flushed");
        assert_eq!(r.messages, 1);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 150 + FLUSH_AT as u64);
        let _ = std::fs::remove_dir_all(&d);
    }
}
