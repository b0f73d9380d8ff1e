//! The daemon's side of the JSON output: the host agent's lines
//! (`host_stack`, `connect`) in the same stream as the wire records, and a
//! `joined` line when a `host_stack` report and the wire record of the same
//! connection have both been seen (`xdprobe_host::fleet::join`), as the
//! cross-host manager writes it. The capture crate's writer runs this as
//! its [`Companion`]. (The workers' sinks look a connection's process up in
//! the host agent's `host::Conns`.)

use std::io::Write;

use serde::{Serialize, Serializer};
use xdprobe_capture::sink::Companion;
use xdprobe_dataplane::{FlowRecord, output::JsonRecord};
use xdprobe_host::fleet::join::{Host, Joined, Joiner, Wire};

/// One line of the JSON output: a wire record or a host agent's line.
pub type JsonItem = xdprobe_capture::sink::JsonItem<HostLine>;

/// A host agent's line, written as it is; a `host_stack` report also joins
/// the wire record of its connection.
pub struct HostLine {
    pub line: serde_json::Value,
    /// For the join: sender, receiver, start and end (Unix µs).
    pub join: Option<Host>,
}

/// A wire record as the joiner holds it: the typed record itself, written
/// in the record schema (`JsonRecord`, as its own line) as the joined
/// line's `wire`.
#[derive(Clone)]
struct WireRecord(FlowRecord);

impl Serialize for WireRecord {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        JsonRecord::from(&self.0).serialize(s)
    }
}

/// The join's state, on the JSON writer's thread.
pub struct Joining {
    joiner: Joiner<WireRecord>,
    /// A host agent runs (or a host report has been seen): wire records
    /// are kept for the join from then on (a flow's wire record often
    /// comes before its host report; without a host agent they are only
    /// written).
    joining: bool,
}

impl Joining {
    /// `host_agent`: one runs, so wire records are kept from the first.
    pub fn new(host_agent: bool) -> Self {
        Joining {
            joiner: Joiner::default(),
            joining: host_agent,
        }
    }

    fn write_joined(joined: Vec<Joined<WireRecord>>, out: &mut dyn Write) -> std::io::Result<u64> {
        let n = joined.len() as u64;
        for j in joined {
            serde_json::to_writer(&mut *out, &j)?;
            out.write_all(b"\n")?;
        }
        Ok(n)
    }
}

impl Companion for Joining {
    type Item = HostLine;

    fn item(&mut self, item: HostLine, out: &mut dyn Write) -> std::io::Result<u64> {
        serde_json::to_writer(&mut *out, &item.line)?;
        out.write_all(b"\n")?;
        let mut n = 1;
        if let Some(h) = item.join {
            self.joining = true;
            let joined = self.joiner.host(h, now_us());
            n += Self::write_joined(joined, out)?;
        }
        Ok(n)
    }

    /// Only TCP records join, so only they are held.
    fn after_record(&mut self, rec: &FlowRecord, out: &mut dyn Write) -> std::io::Result<u64> {
        if !self.joining || rec.proto != 6 {
            return Ok(0);
        }
        let wire = Wire {
            client: (rec.client_addr, rec.client_port),
            server: (rec.server_addr, rec.server_port),
            start_us: rec.start.as_micros(),
            end_us: rec.end.as_micros(),
            record: WireRecord(rec.clone()),
        };
        let joined = self.joiner.wire(wire, now_us());
        Self::write_joined(joined, out)
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use xdprobe_dataplane::time::Timestamp;

    use super::*;

    /// A TCP record and a host report of the same connection make one
    /// joined line whose `wire` is the record's own line.
    #[test]
    fn the_joined_wire_is_the_record_line() {
        let mut rec = FlowRecord::blank(6);
        rec.client_addr = "192.0.2.1".parse().unwrap();
        rec.client_port = 40000;
        rec.server_addr = "192.0.2.2".parse().unwrap();
        rec.server_port = 5201;
        rec.start = Timestamp::from_micros(1_000);
        rec.end = Timestamp::from_micros(9_000);
        rec.npm.rtt_us = Some(10_040);
        let mut j = Joining::new(true);
        let mut out = Vec::new();
        j.after_record(&rec, &mut out).unwrap();
        assert!(out.is_empty(), "no host report yet");
        let host = Host {
            sender: (rec.client_addr, rec.client_port),
            receiver: (rec.server_addr, rec.server_port),
            start_us: 2_000,
            end_us: 8_000,
            report: serde_json::json!({"type": "host_stack", "t4": 5000}),
        };
        let line = host.report.clone();
        let n = j
            .item(
                HostLine {
                    line,
                    join: Some(host),
                },
                &mut out,
            )
            .unwrap();
        assert_eq!(n, 2, "the host line and one joined line");
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let want: serde_json::Value = serde_json::to_value(JsonRecord::from(&rec)).unwrap();
        assert_eq!(lines[1]["type"], "joined");
        assert_eq!(lines[1]["direction"], "c2s");
        assert_eq!(lines[1]["wire"], want);
        assert_eq!(lines[1]["wire"]["rtt_us"], 10_040);
        assert_eq!(lines[1]["host"]["t4"], 5000);
    }

    #[test]
    fn only_tcp_records_are_held() {
        let mut j = Joining::new(true);
        let mut out = Vec::new();
        j.after_record(&FlowRecord::blank(17), &mut out).unwrap();
        assert_eq!(j.joiner.held(), 0);
        j.after_record(&FlowRecord::blank(6), &mut out).unwrap();
        assert_eq!(j.joiner.held(), 1);
    }
}
