//! Aligned table for people reading a terminal, its columns as wide as
//! their content (an IPv4 endpoint takes 21 characters at most, not the 47
//! of the longest IPv6 one). Rows are held in blocks of up to
//! [`BLOCK`] records, the widths taken from the header and every row seen
//! so far, then written; a later wider value widens its column from its
//! block on. A block goes out when full or when the writer is flushed.

use std::fmt::Write;

use super::opt;
use crate::record::FlowRecord;

/// Rows held before the widths are fixed for them: bounds the memory a
/// long capture's table takes, and how long a row waits for output when
/// nothing flushes.
pub(super) const BLOCK: usize = 1024;

const N: usize = 16;

/// Column names, and whether the column is numeric (right-aligned).
const COLUMNS: [(&str, bool); N] = [
    ("proto", false),
    ("client", false),
    ("server", false),
    ("c2s_pkt", true),
    ("c2s_bytes", true),
    ("s2c_pkt", true),
    ("s2c_bytes", true),
    ("rtt_us", true),
    ("ts_rtt_us", true),
    ("srt_us", true),
    ("dur_ms", true),
    ("rtx", true),
    ("ooo", true),
    ("end", false),
    ("app", false),
    ("name", false),
];

/// The rows waiting for their block to be written, and the widths so far.
pub(super) struct Table {
    widths: [usize; N],
    rows: Vec<[String; N]>,
    header_done: bool,
}

impl Table {
    pub(super) fn new() -> Table {
        Table {
            widths: COLUMNS.map(|(name, _)| name.len()),
            rows: Vec::new(),
            header_done: false,
        }
    }

    /// Holds one record's row; true when the block is full (write it out).
    pub(super) fn push(&mut self, r: &FlowRecord) -> bool {
        let row = cells(r);
        for (w, c) in self.widths.iter_mut().zip(&row) {
            *w = (*w).max(c.chars().count());
        }
        self.rows.push(row);
        self.rows.len() >= BLOCK
    }

    /// Writes the header (the first time) and the held rows into `out`.
    pub(super) fn drain(&mut self, out: &mut String) {
        if self.rows.is_empty() {
            return;
        }
        if !self.header_done {
            self.header_done = true;
            self.line(out, COLUMNS.map(|(name, _)| name));
        }
        for row in std::mem::take(&mut self.rows) {
            self.line(out, row.each_ref().map(String::as_str));
        }
    }

    fn line(&self, out: &mut String, cells: [&str; N]) {
        for (i, (cell, ((_, numeric), width))) in cells
            .iter()
            .zip(COLUMNS.iter().zip(self.widths))
            .enumerate()
        {
            let sep = if i == 0 { "" } else { " " };
            if *numeric {
                let _ = write!(out, "{sep}{cell:>width$}");
            } else if i + 1 == N {
                // No trailing blanks after the last column.
                let _ = write!(out, "{sep}{cell}");
            } else {
                let _ = write!(out, "{sep}{cell:<width$}");
            }
        }
        // An empty last cell (a flow without a name) leaves no blanks.
        let kept = out.trim_end_matches(' ').len();
        out.truncate(kept);
        out.push('\n');
    }
}

/// What names the flow: the TLS or QUIC server name, the HTTP Host, the
/// DNS question (then, for HTTP, the status of the last response).
fn name(r: &FlowRecord) -> String {
    use xdprobe_l7::L7Fields;
    use xdprobe_l7::text::Shown;
    let shown = |s: &Option<Box<[u8]>>| {
        s.as_deref()
            .map_or_else(String::new, |b| Shown(b).to_string())
    };
    match &r.l7 {
        Some(L7Fields::Tls(t)) => shown(&t.sni),
        Some(L7Fields::Quic(q)) => shown(&q.sni),
        Some(L7Fields::Http(h)) => match h.status {
            Some(s) => format!("{} {s}", shown(&h.host)),
            None => shown(&h.host),
        },
        Some(L7Fields::Dns(d)) => shown(&d.qname),
        None => String::new(),
    }
}

/// The interval's timestamp RTT at the probe: the two legs' medians
/// summed, when both have one.
fn ts_rtt_us(r: &FlowRecord) -> Option<u32> {
    let t = r.npm.ts_rtt?;
    Some(t.server.p50_us?.saturating_add(t.client.p50_us?))
}

fn cells(r: &FlowRecord) -> [String; N] {
    let ep = |a: std::net::IpAddr, p: u16| match a {
        std::net::IpAddr::V6(_) => format!("[{a}]:{p}"),
        std::net::IpAddr::V4(_) => format!("{a}:{p}"),
    };
    let dur_ms = r.end.nanos_since(r.start) as f64 / 1e6;
    let guess = if r.direction_guessed { "?" } else { "" };
    [
        super::proto_name(r.proto).to_string(),
        format!("{}{guess}", ep(r.client_addr, r.client_port)),
        ep(r.server_addr, r.server_port),
        r.c2s.packets.to_string(),
        r.c2s.bytes.to_string(),
        r.s2c.packets.to_string(),
        r.s2c.bytes.to_string(),
        opt(r.npm.rtt_us),
        opt(ts_rtt_us(r)),
        opt(r.npm.srt_us),
        format!("{dur_ms:.1}"),
        (r.c2s.retrans + r.s2c.retrans).to_string(),
        (r.c2s.ooo + r.s2c.ooo).to_string(),
        format!("{:?}", r.end_reason).to_lowercase(),
        r.app.map_or("-", |a| a.as_str()).to_string(),
        name(r),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::EndReason;

    fn record(client: &str, server: &str) -> FlowRecord {
        FlowRecord {
            client_addr: client.parse().unwrap(),
            client_port: 40_000,
            server_addr: server.parse().unwrap(),
            server_port: 443,
            end_reason: EndReason::End,
            ..FlowRecord::blank(6)
        }
    }

    fn render(recs: &[FlowRecord]) -> String {
        let mut t = Table::new();
        for r in recs {
            t.push(r);
        }
        let mut out = String::new();
        t.drain(&mut out);
        out
    }

    #[test]
    fn columns_are_as_wide_as_their_content() {
        let out = render(&[record("192.0.2.1", "192.0.2.200")]);
        let lines: Vec<&str> = out.lines().collect();
        // "192.0.2.1:40000" is 15 characters: the server column starts
        // one blank after it, not 42 characters in.
        assert_eq!(lines[0].find("server"), Some(6 + 16));
        assert_eq!(lines[1].find("192.0.2.200:443"), Some(6 + 16));
        // Numeric columns end where their header ends; no trailing blanks.
        let end = lines[0].find("c2s_pkt").unwrap() + "c2s_pkt".len();
        assert_eq!(&lines[1][end - 1..end], "0");
        assert!(lines.iter().all(|l| !l.ends_with(' ')));
    }

    #[test]
    fn an_ipv6_row_widens_its_block() {
        let out = render(&[
            record("192.0.2.1", "192.0.2.2"),
            record("2001:db8::1", "2001:db8:ffff::2"),
        ]);
        let lines: Vec<&str> = out.lines().collect();
        let col = lines[0].find("server").unwrap();
        assert_eq!(col, 6 + "[2001:db8::1]:40000".len() + 1);
        assert!(
            lines[1..]
                .iter()
                .all(|l| l.chars().nth(col - 1) == Some(' '))
        );
    }
}
