//! RFC 5655 IPFIX file: the messages, back to back, as a collector would
//! have received them. Buffered; flushed by the exporter's tick and at
//! shutdown.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::Sent;

pub struct FileOut {
    w: BufWriter<File>,
}

impl FileOut {
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(FileOut {
            w: BufWriter::with_capacity(1 << 16, File::create(path)?),
        })
    }

    pub fn send(&mut self, msg: &[u8]) -> Sent {
        match self.w.write_all(msg) {
            Ok(()) => Sent::Ok,
            Err(e) => Sent::Dropped(e),
        }
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}
