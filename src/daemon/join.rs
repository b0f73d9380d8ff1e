//! The daemon's side of the JSON output: the host agent's lines
//! (`host_stack`, `connect`) in the same stream as the wire records, and a
//! `joined` line when a `host_stack` report and the wire record of the same
//! connection have both been seen (`xdprobe_host::fleet::join`), as the
//! cross-host manager writes it. The capture crate's writer runs this as
//! its [`Companion`]. (The workers' sinks look a connection's process up in
//! the host agent's `host::Conns`.)

use std::io::Write;

use xdprobe_capture::sink::Companion;
use xdprobe_dataplane::FlowRecord;
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

/// The join's state, on the JSON writer's thread.
pub struct Joining {
    joiner: Joiner,
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

    fn write_joined(joined: Vec<Joined>, out: &mut dyn Write) -> std::io::Result<u64> {
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

    /// The joiner keeps the record as JSON (`Wire::from_json`), so the
    /// line is read back; only TCP records join, so only they are.
    fn after_record(
        &mut self,
        rec: &FlowRecord,
        line: &[u8],
        out: &mut dyn Write,
    ) -> std::io::Result<u64> {
        if !self.joining || rec.proto != 6 {
            return Ok(0);
        }
        let Some(wire) = serde_json::from_slice(line).ok().and_then(Wire::from_json) else {
            return Ok(0);
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
