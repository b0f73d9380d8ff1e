//! Where a worker's finished records go: the exporter's bounded channel
//! and, optionally, a JSON-lines writer thread. Both are non-blocking: a
//! full channel drops the record and counts it (the exporter counts its
//! own drops too), it never stalls the receive loop.
//!
//! The JSON writer also takes other parts of the probe's lines (the
//! daemon's host agent: its reports, and their joins with the wire
//! records of the same connection) through a [`Companion`]; this crate
//! knows nothing of them.

use std::{cell::Cell, convert::Infallible, io::Write, net::IpAddr, sync::Arc, thread::JoinHandle};

use crossbeam_channel::{Sender, TrySendError};
use xdprobe_dataplane::{
    FlowRecord, Process,
    output::{Format, RecordWriter},
};
use xdprobe_exporter::RecordSender;

/// One line for the JSON writer.
#[expect(
    clippy::large_enum_variant,
    reason = "flow records, the many, travel by value without an allocation each; other lines are few"
)]
pub enum JsonItem<T = Infallible> {
    /// A wire flow record (the `xdprobe pcap` schema).
    Flow(FlowRecord),
    /// A line of the writer's [`Companion`], written by it.
    Other(T),
}

/// The JSON writer's channel.
pub type JsonSender<T = Infallible> = Sender<JsonItem<T>>;

/// What the JSON writer adds to the wire records: lines of another part of
/// the probe, and lines that follow a wire record (a join). Runs on the
/// writer's thread.
pub trait Companion: Send + 'static {
    /// Its lines, sent as [`JsonItem::Other`].
    type Item: Send + 'static;
    /// Writes one of its lines (and what follows it); returns how many
    /// lines it wrote.
    fn item(&mut self, item: Self::Item, out: &mut dyn Write) -> std::io::Result<u64>;
    /// After the wire record `rec`, just written as its JSON line: writes
    /// what follows it; returns how many lines it wrote.
    fn after_record(&mut self, rec: &FlowRecord, out: &mut dyn Write) -> std::io::Result<u64>;
}

/// No companion: wire records only.
impl Companion for () {
    type Item = Infallible;
    fn item(&mut self, item: Infallible, _: &mut dyn Write) -> std::io::Result<u64> {
        match item {}
    }
    fn after_record(&mut self, _: &FlowRecord, _: &mut dyn Write) -> std::io::Result<u64> {
        Ok(0)
    }
}

/// The local process of a connection this host started (the daemon's
/// `[host] connlat`), for the wire records of that connection.
pub trait Processes: Send + Sync {
    /// The process that started the connection between `a` and `b`, in
    /// either order.
    fn process(&self, a: (IpAddr, u16), b: (IpAddr, u16)) -> Option<Process>;
}

/// One worker's handle. Counters are plain cells: a sink belongs to one
/// thread, and the worker reads them when it publishes its snapshot.
pub struct RecordSink<T = Infallible> {
    exporter: Option<RecordSender>,
    json: Option<JsonSender<T>>,
    /// The connections this host started (`[host] connlat`): a TCP record
    /// of one of them carries its process.
    conns: Option<Arc<dyn Processes>>,
    sent: Cell<u64>,
    dropped: Cell<u64>,
    blocking: Cell<bool>,
}

impl<T> RecordSink<T> {
    pub fn new(exporter: Option<RecordSender>, json: Option<JsonSender<T>>) -> Self {
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
    pub fn with_conns(mut self, conns: Option<Arc<dyn Processes>>) -> Self {
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
            rec.process = c.process(
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
fn json_ok<T>(r: Result<(), TrySendError<JsonItem<T>>>) -> bool {
    !matches!(r, Err(TrySendError::Full(_)))
}

/// A thread writing records as JSON lines (the `xdprobe pcap` schema) to
/// `out`, and the `companion`'s lines; it ends when every sender is gone.
pub fn spawn_json_writer<C: Companion>(
    out: Box<dyn Write + Send>,
    capacity: usize,
    companion: C,
) -> std::io::Result<(JsonSender<C::Item>, JoinHandle<u64>)> {
    let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
    let handle = std::thread::Builder::new()
        .name("xdprobe-json".into())
        .spawn(move || {
            let mut w = JsonWriter {
                out: std::io::BufWriter::new(out),
                companion,
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

struct JsonWriter<C> {
    out: std::io::BufWriter<Box<dyn Write + Send>>,
    companion: C,
    n: u64,
    /// One record's line, reused: no allocation per record.
    line: RecordWriter<Vec<u8>>,
}

impl<C: Companion> JsonWriter<C> {
    fn write(&mut self, item: JsonItem<C::Item>) -> std::io::Result<()> {
        match item {
            JsonItem::Flow(rec) => {
                self.line.get_mut().clear();
                self.line.write(&rec)?;
                self.out.write_all(self.line.get_mut())?;
                self.n += 1;
                self.n += self.companion.after_record(&rec, &mut self.out)?;
            }
            JsonItem::Other(item) => self.n += self.companion.item(item, &mut self.out)?,
        }
        Ok(())
    }
}
