//! Where a worker's finished records go: the exporter's bounded channel
//! and, optionally, a JSON-lines writer thread. Both are non-blocking: a
//! full channel drops the record and counts it (the exporter counts its
//! own drops too), it never stalls the receive loop.

use std::{cell::Cell, io::Write, thread::JoinHandle};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use xdprobe_dataplane::{
    FlowRecord,
    output::{Format, RecordWriter},
};
use xdprobe_exporter::RecordSender;

/// One worker's handle. Counters are plain cells: a sink belongs to one
/// thread, and the worker reads them when it publishes its snapshot.
pub struct RecordSink {
    exporter: Option<RecordSender>,
    json: Option<Sender<FlowRecord>>,
    sent: Cell<u64>,
    dropped: Cell<u64>,
    blocking: Cell<bool>,
}

impl RecordSink {
    pub fn new(exporter: Option<RecordSender>, json: Option<Sender<FlowRecord>>) -> Self {
        RecordSink {
            exporter,
            json,
            sent: Cell::new(0),
            dropped: Cell::new(0),
            blocking: Cell::new(false),
        }
    }

    /// From now on wait for room instead of dropping (shutdown flush).
    pub fn set_blocking(&self) {
        self.blocking.set(true);
    }

    /// Sends a record on; counted as dropped when any destination was
    /// full.
    pub fn send(&self, rec: FlowRecord) {
        if self.blocking.get() {
            if let Some(j) = &self.json {
                let _ = j.send(rec);
            }
            if let Some(e) = &self.exporter {
                e.send_blocking(rec);
            }
            self.sent.set(self.sent.get() + 1);
            return;
        }
        let ok = match (&self.exporter, &self.json) {
            (Some(e), Some(j)) => {
                let j_ok = json_ok(j.try_send(rec));
                e.send(rec).is_ok() && j_ok
            }
            (Some(e), None) => e.send(rec).is_ok(),
            (None, Some(j)) => json_ok(j.try_send(rec)),
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
fn json_ok(r: Result<(), TrySendError<FlowRecord>>) -> bool {
    !matches!(r, Err(TrySendError::Full(_)))
}

/// A thread writing records as JSON lines (the `xdprobe pcap` schema) to
/// `out`; it ends when every sender is gone.
pub fn spawn_json_writer(
    out: Box<dyn Write + Send>,
    capacity: usize,
) -> std::io::Result<(Sender<FlowRecord>, JoinHandle<u64>)> {
    let (tx, rx): (Sender<FlowRecord>, Receiver<FlowRecord>) =
        crossbeam_channel::bounded(capacity.max(1));
    let handle = std::thread::Builder::new()
        .name("xdprobe-json".into())
        .spawn(move || {
            let mut w = RecordWriter::new(std::io::BufWriter::new(out), Format::Json);
            let mut n = 0u64;
            // Block for a record, write whatever else is queued, flush when
            // the queue is empty: a reader following the output sees each
            // record soon, and bursts cost one flush.
            'outer: while let Ok(rec) = rx.recv() {
                let mut next = Some(rec);
                while let Some(rec) = next {
                    if let Err(e) = w.write(&rec) {
                        tracing::error!(error = %e, "writing JSON records failed; stopping the JSON output");
                        break 'outer;
                    }
                    n += 1;
                    next = rx.try_recv().ok();
                }
                if let Err(e) = w.flush() {
                    tracing::error!(error = %e, "flushing JSON records failed; stopping the JSON output");
                    break;
                }
            }
            let _ = w.flush();
            n
        })?;
    Ok((tx, handle))
}
