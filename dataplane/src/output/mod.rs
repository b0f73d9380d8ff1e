//! Human and machine-readable record output: JSON lines (one object per
//! record; the schema the tests and operators' scripts read), an aligned
//! table, CSV.

mod csv;
mod json;
mod json_l7;
#[cfg(feature = "json-read")]
mod json_read;
mod json_text;
mod table;

use std::io::{self, Write};

use crate::record::FlowRecord;

pub use json::JsonRecord;
pub use json_l7::{JsonL7, hex_bytes, hex_code};
#[cfg(feature = "json-read")]
pub use json_read::from_json;

/// Output format of `xdprobe pcap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Table,
    Csv,
}

/// Writes records in one format; a header (table/CSV) comes with the first.
/// The table holds its rows in blocks of up to 1024 to size its columns:
/// call [`RecordWriter::flush`] at the end.
pub struct RecordWriter<W: Write> {
    out: W,
    format: Format,
    header_done: bool,
    /// Format::Table: the rows of the block being sized.
    table: Option<table::Table>,
    /// The text formats build a line here…
    line: String,
    /// …and JSON here, as bytes; both are reused for every record.
    bytes: Vec<u8>,
}

impl<W: Write> RecordWriter<W> {
    pub fn new(out: W, format: Format) -> Self {
        RecordWriter {
            out,
            format,
            header_done: false,
            table: (format == Format::Table).then(table::Table::new),
            line: String::with_capacity(512),
            bytes: Vec::with_capacity(1024),
        }
    }

    pub fn write(&mut self, rec: &FlowRecord) -> io::Result<()> {
        let text: fn(&mut String, &FlowRecord) = match self.format {
            Format::Json => {
                self.bytes.clear();
                json::line(&mut self.bytes, rec);
                return self.out.write_all(&self.bytes);
            }
            Format::Table => {
                let full = self.table.as_mut().is_some_and(|t| t.push(rec));
                return if full { self.write_table() } else { Ok(()) };
            }
            Format::Csv => csv::row,
        };
        self.line.clear();
        if !self.header_done {
            self.header_done = true;
            csv::header(&mut self.line);
        }
        text(&mut self.line, rec);
        self.out.write_all(self.line.as_bytes())
    }

    /// The table's held rows, written with their block's widths.
    fn write_table(&mut self) -> io::Result<()> {
        let Some(t) = self.table.as_mut() else {
            return Ok(());
        };
        self.line.clear();
        t.drain(&mut self.line);
        self.out.write_all(self.line.as_bytes())
    }

    /// Writes the table's held rows, then flushes the output: at the end,
    /// or whenever every row must be out.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_table()?;
        self.out.flush()
    }

    /// Flushes what was written, leaving the table's rows held until their
    /// block is full or [`RecordWriter::flush`]: a stream's JSON or CSV
    /// lines appear as flows end, a table's columns stay one width.
    pub fn flush_written(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The output, e.g. to take and clear a `Vec` the writer fills line by
    /// line while keeping the writer (and its buffer) for the next record.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// The output (a table's held rows are written first; an error doing
    /// so is dropped, as the caller asked for the output, not a flush).
    pub fn into_inner(mut self) -> W {
        let _ = self.write_table();
        self.out
    }
}

/// The protocol as operators write it (tcpdump's and `/etc/protocols`'
/// names, `icmpv6` for 58), the number for any other. Only the text formats
/// use it: JSON keeps the number, the field collectors' parsers read.
pub fn proto_name(p: u8) -> ProtoName {
    ProtoName(p)
}

/// [`proto_name`]'s result; `Display` writes the name or the number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtoName(pub u8);

impl ProtoName {
    /// The name, when the protocol has one here.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "icmp",
            2 => "igmp",
            4 => "ipip",
            6 => "tcp",
            17 => "udp",
            41 => "ipv6",
            47 => "gre",
            50 => "esp",
            51 => "ah",
            58 => "icmpv6",
            89 => "ospf",
            103 => "pim",
            112 => "vrrp",
            132 => "sctp",
            136 => "udplite",
            _ => return None,
        })
    }
}

impl std::fmt::Display for ProtoName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(n) => f.pad(n),
            None => f.pad(itoa::Buffer::new().format(self.0)),
        }
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |x| x.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_and_numbers() {
        let text = |p| proto_name(p).to_string();
        assert_eq!(
            [6, 17, 1, 58, 132].map(text),
            ["tcp", "udp", "icmp", "icmpv6", "sctp"]
        );
        assert_eq!([0, 143, 255].map(text), ["0", "143", "255"]);
        assert_eq!(format!("{:<7}|", proto_name(6)), "tcp    |");
        assert_eq!(format!("{:<7}|", proto_name(200)), "200    |");
    }
}
