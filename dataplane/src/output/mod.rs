//! Human and machine-readable record output: JSON lines (one object per
//! record; the schema the tests and operators' scripts read), an aligned
//! table, CSV.

mod csv;
mod json;
mod json_read;
mod table;

use std::io::{self, Write};

use crate::flow::record::FlowRecord;

pub use json::JsonRecord;
pub use json_read::from_json;

/// Output format of `xdprobe pcap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Table,
    Csv,
}

/// Writes records in one format; a header (table/CSV) comes with the first.
pub struct RecordWriter<W: Write> {
    out: W,
    format: Format,
    header_done: bool,
    line: String,
}

impl<W: Write> RecordWriter<W> {
    pub fn new(out: W, format: Format) -> Self {
        RecordWriter {
            out,
            format,
            header_done: false,
            line: String::with_capacity(512),
        }
    }

    pub fn write(&mut self, rec: &FlowRecord) -> io::Result<()> {
        self.line.clear();
        if !self.header_done {
            self.header_done = true;
            match self.format {
                Format::Json => {}
                Format::Table => table::header(&mut self.line),
                Format::Csv => csv::header(&mut self.line),
            }
        }
        match self.format {
            Format::Json => json::line(&mut self.line, rec)?,
            Format::Table => table::row(&mut self.line, rec),
            Format::Csv => csv::row(&mut self.line, rec),
        }
        self.out.write_all(self.line.as_bytes())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |x| x.to_string())
}
