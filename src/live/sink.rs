//! Where a worker's finished records go: the exporter's bounded channel
//! and, optionally, a JSON-lines writer thread. Both are non-blocking: a
//! full channel drops the record and counts it (the exporter counts its
//! own drops too), it never stalls the receive loop.
//!
//! The JSON writer also takes the host agent's reports (`[host]`), and
//! joins them with the wire records of the same connection
//! (`xdprobe_host::fleet::join`): a `joined` line holds both, as the
//! cross-host manager writes it.

use std::{cell::Cell, io::Write, sync::Arc, thread::JoinHandle};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use xdprobe_dataplane::{
    FlowRecord,
    output::{Format, RecordWriter},
};
use xdprobe_exporter::RecordSender;
use xdprobe_host::fleet::join::{Host, Joiner, Wire};

use crate::live::host::Conns;

/// One line for the JSON writer.
#[expect(
    clippy::large_enum_variant,
    reason = "flow records, the many, travel by value without an allocation each; host lines are few"
)]
pub enum JsonItem {
    /// A wire flow record (the `xdprobe pcap` schema).
    Flow(FlowRecord),
    /// A host agent's line (`host_stack`, `connect`), written as it is;
    /// a `host_stack` report also joins the wire record of its connection.
    Host {
        line: serde_json::Value,
        /// For the join: sender, receiver, start and end (Unix µs).
        join: Option<Host>,
    },
}

/// One worker's handle. Counters are plain cells: a sink belongs to one
/// thread, and the worker reads them when it publishes its snapshot.
pub struct RecordSink {
    exporter: Option<RecordSender>,
    json: Option<Sender<JsonItem>>,
    /// The connections this host started (`[host] connlat`): a TCP record
    /// of one of them carries its process.
    conns: Option<Arc<Conns>>,
    sent: Cell<u64>,
    dropped: Cell<u64>,
    blocking: Cell<bool>,
}

impl RecordSink {
    pub fn new(exporter: Option<RecordSender>, json: Option<Sender<JsonItem>>) -> Self {
        RecordSink {
            exporter,
            json,
            conns: None,
            sent: Cell::new(0),
            dropped: Cell::new(0),
            blocking: Cell::new(false),
        }
    }

    /// Records of connections this host started get their process.
    pub fn with_conns(mut self, conns: Option<Arc<Conns>>) -> Self {
        self.conns = conns;
        self
    }

    /// The record with its local process, when this host started it. Once
    /// per finished record, not per packet: the lock is the host agent's
    /// and the workers', held for one lookup.
    fn enrich(&self, mut rec: FlowRecord) -> FlowRecord {
        if rec.proto == 6
            && rec.process.is_none()
            && let Some(c) = &self.conns
        {
            rec.process = c.get(
                (rec.client_addr, rec.client_port),
                (rec.server_addr, rec.server_port),
            );
        }
        rec
    }

    /// From now on wait for room instead of dropping (shutdown flush).
    pub fn set_blocking(&self) {
        self.blocking.set(true);
    }

    /// Sends a record on; counted as dropped when any destination was
    /// full.
    pub fn send(&self, rec: FlowRecord) {
        let rec = self.enrich(rec);
        if self.blocking.get() {
            if let Some(j) = &self.json {
                let _ = j.send(JsonItem::Flow(rec.clone()));
            }
            if let Some(e) = &self.exporter {
                e.send_blocking(rec);
            }
            self.sent.set(self.sent.get() + 1);
            return;
        }
        let ok = match (&self.exporter, &self.json) {
            (Some(e), Some(j)) => {
                let j_ok = json_ok(j.try_send(JsonItem::Flow(rec.clone())));
                e.send(rec).is_ok() && j_ok
            }
            (Some(e), None) => e.send(rec).is_ok(),
            (None, Some(j)) => json_ok(j.try_send(JsonItem::Flow(rec))),
            (None, None) => true,
        };
        if ok {
            self.sent.set(self.sent.get() + 1);
        } else {
            self.dropped.set(self.dropped.get() + 1);
        }
    }

    /// (records sent, records dropped).
    pub fn counts(&self) -> (u64, u64) {
        (self.sent.get(), self.dropped.get())
    }
}

/// A stopped JSON writer (its error was logged) is not a drop per record.
fn json_ok(r: Result<(), TrySendError<JsonItem>>) -> bool {
    !matches!(r, Err(TrySendError::Full(_)))
}

/// A thread writing records as JSON lines (the `xdprobe pcap` schema) to
/// `out`, and the host agent's lines with their joins; it ends when every
/// sender is gone.
/// `join`: a host agent runs, so wire records are kept for the join from
/// the first one on (a flow's wire record often comes before its host
/// report).
pub fn spawn_json_writer(
    out: Box<dyn Write + Send>,
    capacity: usize,
    join: bool,
) -> std::io::Result<(Sender<JsonItem>, JoinHandle<u64>)> {
    let (tx, rx): (Sender<JsonItem>, Receiver<JsonItem>) =
        crossbeam_channel::bounded(capacity.max(1));
    let handle = std::thread::Builder::new()
        .name("xdprobe-json".into())
        .spawn(move || {
            let mut w = JsonWriter {
                out: std::io::BufWriter::new(out),
                joiner: Joiner::default(),
                joining: join,
                n: 0,
                line: RecordWriter::new(Vec::with_capacity(1024), Format::Json),
            };
            // Block for a record, write whatever else is queued, flush when
            // the queue is empty: a reader following the output sees each
            // record soon, and bursts cost one flush.
            'outer: while let Ok(item) = rx.recv() {
                let mut next = Some(item);
                while let Some(item) = next {
                    if let Err(e) = w.write(item) {
                        tracing::error!(error = %e, "writing JSON records failed; stopping the JSON output");
                        break 'outer;
                    }
                    next = rx.try_recv().ok();
                }
                if let Err(e) = w.out.flush() {
                    tracing::error!(error = %e, "flushing JSON records failed; stopping the JSON output");
                    break;
                }
            }
            let _ = w.out.flush();
            w.n
        })?;
    Ok((tx, handle))
}

struct JsonWriter {
    out: std::io::BufWriter<Box<dyn Write + Send>>,
    joiner: Joiner,
    /// A host report has been seen: wire records are kept for the join
    /// from then on (without a host agent they are only written).
    joining: bool,
    n: u64,
    /// One record's line, reused: no allocation per record.
    line: RecordWriter<Vec<u8>>,
}

impl JsonWriter {
    fn write(&mut self, item: JsonItem) -> std::io::Result<()> {
        match item {
            JsonItem::Flow(rec) => {
                self.line.get_mut().clear();
                self.line.write(&rec)?;
                self.out.write_all(self.line.get_mut())?;
                self.n += 1;
                if self.joining
                    && let Ok(v) = serde_json::from_slice::<serde_json::Value>(self.line.get_mut())
                    && let Some(wire) = Wire::from_json(v)
                {
                    let joined = self.joiner.wire(wire, now_us());
                    self.joined(joined)?;
                }
            }
            JsonItem::Host { line, join } => {
                serde_json::to_writer(&mut self.out, &line)?;
                self.out.write_all(b"\n")?;
                self.n += 1;
                if let Some(h) = join {
                    self.joining = true;
                    let joined = self.joiner.host(h, now_us());
                    self.joined(joined)?;
                }
            }
        }
        Ok(())
    }

    fn joined(&mut self, joined: Vec<xdprobe_host::fleet::join::Joined>) -> std::io::Result<()> {
        for j in joined {
            serde_json::to_writer(&mut self.out, &j)?;
            self.out.write_all(b"\n")?;
            self.n += 1;
        }
        Ok(())
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
