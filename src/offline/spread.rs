//! `xdprobe pcap --workers N` for N > 1: the reader (the calling thread)
//! and N worker threads.
//!
//! # Same records as one worker
//! A flow's packets all reach one worker (the steering hash is symmetric
//! and covers fragments, see `live::steer`), in file order, so each flow
//! sees the packets a single worker would give it, in the same order.
//! Expiry runs on packet time: a worker's table takes its time from its
//! own packets *and* from the clock stamped on every batch (the newest
//! capture time the reader had read when it sent the batch: everything
//! stamped earlier for this worker has been sent by then). The reader
//! sends every worker a batch, empty if need be, at least every
//! [`CLOCK_EVERY`] frames, so a worker that gets no packets for a long
//! stretch still ends its idle and long-lived flows about when one worker
//! would, and at the end of the file every table has reached the file's
//! last time before the rest is flushed. Idle, active-timeout and TCP-close
//! endings therefore fall where one worker puts them: a table ends a flow
//! at the latest before processing any packet stamped past its deadline,
//! whichever flow's packet or clock moves its time there.
//!
//! What may differ from one worker, and why:
//! - the order of the records and `record_seq`-like positions: workers
//!   finish flows concurrently and their records are interleaved as they
//!   arrive;
//! - `[flow] capacity` / `--capacity` is per worker (as for live queues), so
//!   a file that fills one worker's table evicts less with several;
//! - where a flow's active interval is cut, and whether a record that
//!   passed both its idle and its active deadline before the table looked
//!   says `idle` or `active`: the flow table anchors the next active
//!   interval at the packet time it runs its expiry, and checks idle flows
//!   before active ones (`dataplane/src/flow/table/expiry.rs`). One table
//!   runs expiry at the first packet of *any* flow past a deadline, a
//!   worker at the first of *its* packets or clocks past it, so with
//!   timeouts shorter than the gaps between a flow's packets these can
//!   differ (every packet and byte still lands in the same flow and
//!   direction). With the default timeouts (30 s idle, 300 s active) the
//!   corpus gives identical records; `tests/pcap_workers.rs` checks both;
//! - at the end of the input, whether a flow idle past its timeout says
//!   `idle` or `forced`: idle expiry is lazy (a record leaves between 1×
//!   and 2× the idle timeout after its last packet,
//!   `dataplane/src/flow/table/expiry.rs`), and when a table looks depends
//!   on the other flows it holds, so a flow one table had not yet swept
//!   when the file ended (`forced`) may have been swept on its worker
//!   (`idle`), or the other way round. Its packets, bytes and times are
//!   the same either way;
//! - frames of an IP flow that the parser then refuses (a truncated header)
//!   move a worker's clock here but not one table's, the clock being the
//!   reader's: the same kind of difference at a timeout boundary;
//! - a packet stamped more than the reorder window (2 ms) *before* packets
//!   already read (the time-order stage hands it out late, in file order)
//!   that falls within a flow's timeout boundary: one worker's table time
//!   is the whole file's newest time, a worker's is its own newest or last
//!   batch clock, so such a packet may be counted in the flow's old record
//!   instead of a new one.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use xdprobe_dataplane::{
    FlowRecord, Timestamp, Worker, WorkerStats,
    source::{
        Frame,
        pcap::{Capture, PcapError, SharedMap},
    },
    worker::BATCH,
};

use super::ring::{self, Consumer, FRAMES, FrameRef, Next, Producer};
use crate::live::steer;

/// The reader sends every worker its clock at least this often (frames
/// read), in an empty batch when it has no frames for it.
pub const CLOCK_EVERY: u64 = 4096;

/// Records a worker sends at a time.
const RECORD_BATCH: usize = 256;

/// Record batches in flight from the workers to the output.
const RECORD_QUEUE: usize = 64;

/// Why reading stopped early: the capture (cut, corrupt) or the per-batch
/// hook (e.g. a filter with no meaning for a link type).
#[derive(Debug)]
pub enum ReadStop<E> {
    Capture(PcapError),
    Hook(E),
}

/// How a run ended.
pub struct Outcome<E> {
    /// Every worker's counters, by worker index.
    pub workers: Vec<WorkerStats>,
    /// Frames per worker the reader sent.
    pub sent: Vec<u64>,
    /// The reader's error, if the file ended in one (the flows read before
    /// it were still emitted).
    pub read_result: Result<(), ReadStop<E>>,
}

/// Waits without burning a core the other threads need: spin briefly, then
/// yield, then sleep in short naps.
struct Backoff(u32);

impl Backoff {
    fn new() -> Self {
        Backoff(0)
    }
    fn reset(&mut self) {
        self.0 = 0;
    }
    fn wait(&mut self) {
        self.0 = self.0.saturating_add(1);
        if self.0 <= 64 {
            std::hint::spin_loop();
        } else if self.0 <= 256 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Runs `reader` through `workers` (already built, one thread each) on a
/// reader thread; finished records go to `output` on the calling thread as
/// `Some(record)`, and `None` whenever no record is waiting (a moment to
/// flush buffered output, so records of a slow stream appear as flows end).
/// `hook` sees every batch on the reader thread before it is steered, with
/// the reader's byte offset: it keeps the frames it wants at the front and
/// returns how many (a capture filter; a progress bar).
pub fn run<E: Send>(
    reader: &mut Capture,
    workers: Vec<Worker>,
    output: &mut impl FnMut(Option<FlowRecord>),
    hook: &mut (impl FnMut(&mut [Frame<'_>], u64) -> Result<usize, E> + Send),
) -> Outcome<E> {
    let n = workers.len();
    let map = reader.shared_map();
    let stream = map.is_none();
    let (rec_tx, rec_rx) = crossbeam_channel::bounded::<Vec<FlowRecord>>(RECORD_QUEUE);
    let (back_tx, back_rx) = crossbeam_channel::bounded::<Vec<FlowRecord>>(RECORD_QUEUE + n);
    let mut producers = Vec::with_capacity(n);
    let mut consumers = Vec::with_capacity(n);
    for _ in 0..n {
        let (p, c) = ring::ring(stream);
        producers.push(p);
        consumers.push(c);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .into_iter()
            .zip(consumers)
            .enumerate()
            .map(|(i, (w, c))| {
                let (map, tx, back) = (map.clone(), rec_tx.clone(), back_rx.clone());
                std::thread::Builder::new()
                    .name(format!("xdprobe-w{i}"))
                    .spawn_scoped(s, move || work(w, c, map, tx, back))
                    .expect("spawning a worker thread")
            })
            .collect();
        drop(rec_tx);
        let map_ref = map.as_ref();
        let reading = std::thread::Builder::new()
            .name("xdprobe-read".into())
            .spawn_scoped(s, move || read(reader, map_ref, producers, hook))
            .expect("spawning the reader thread");
        // Until every worker has hung up (they end after the reader).
        loop {
            let v = match rec_rx.try_recv() {
                Ok(v) => v,
                Err(TryRecvError::Empty) => {
                    output(None);
                    match rec_rx.recv() {
                        Ok(v) => v,
                        Err(_) => break,
                    }
                }
                Err(TryRecvError::Disconnected) => break,
            };
            let mut v = v;
            for r in v.drain(..) {
                output(Some(r));
            }
            // Hand the buffer back; if the return queue is full it is freed.
            let _ = back_tx.try_send(v);
        }
        let (sent, read_result) = reading
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        let workers = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        Outcome {
            workers,
            sent,
            read_result,
        }
    })
}

/// The reader: steers every frame into its worker's current batch.
fn read<E>(
    reader: &mut Capture,
    map: Option<&SharedMap>,
    mut producers: Vec<Producer>,
    hook: &mut impl FnMut(&mut [Frame<'_>], u64) -> Result<usize, E>,
) -> (Vec<u64>, Result<(), ReadStop<E>>) {
    let n = producers.len();
    let base = map.map_or(0, |m| m.as_ref().as_ptr() as usize);
    let mut sent = vec![0u64; n];
    let mut clock_sent = vec![Timestamp::ZERO; n];
    let mut newest = Timestamp::ZERO;
    let mut since_clock = 0u64;
    let mut backoff = Backoff::new();
    let result = loop {
        let mut batch = [Frame::default(); BATCH];
        // Where this batch starts (the batch borrows the reader after).
        let offset = reader.offset();
        let got = match reader.next_batch(&mut batch) {
            Ok(0) => break Ok(()),
            Ok(got) => got,
            Err(e) => break Err(ReadStop::Capture(e)),
        };
        let got = match hook(&mut batch[..got], offset) {
            Ok(kept) => kept.min(got),
            Err(e) => break Err(ReadStop::Hook(e)),
        };
        for p in &batch[..got] {
            let owner = p.link.and_then(|l| steer::owner_of(l, p.data, n));
            // One table's time moves only with the packets it accounts:
            // IP frames stamped within range (a non-IP frame is a counted
            // drop and moves no clock). Same here.
            if owner.is_some() && p.ts.in_range() {
                newest = newest.max(p.ts);
            }
            let w = owner.unwrap_or(0);
            let Some(prod) = producers.get_mut(w) else {
                continue;
            };
            let f = FrameRef {
                ts: p.ts,
                link: p.link,
                linktype: p.linktype,
                wire_len: p.wire_len,
                interface: p.interface,
                // A mapped packet is a view into the map: its place in it.
                offset: if p.data.is_empty() {
                    0
                } else {
                    (p.data.as_ptr() as usize).wrapping_sub(base)
                },
                len: u32::try_from(p.data.len()).unwrap_or(u32::MAX),
            };
            let copy = map.is_none().then_some(p.data);
            loop {
                while !prod.has_room() {
                    if prod.abandoned() {
                        // Its worker is gone (a panic, which the join
                        // reports): stop reading rather than wait forever.
                        return (sent, Ok(()));
                    }
                    backoff.wait();
                }
                backoff.reset();
                let Some(slot) = prod.slot() else { continue };
                if slot.push(f, copy) {
                    if slot.len >= FRAMES {
                        prod.publish(newest);
                        clock_sent[w] = newest;
                    }
                    break;
                }
                // Full arena: send this batch, the frame goes in the next.
                prod.publish(newest);
                clock_sent[w] = newest;
            }
            sent[w] += 1;
        }
        since_clock += got as u64;
        if since_clock >= CLOCK_EVERY {
            since_clock = 0;
            for (w, prod) in producers.iter_mut().enumerate() {
                send_clock(prod, &mut clock_sent[w], newest);
            }
        }
    };
    // The end of the input (or its error): every worker gets what is
    // left and the file's last time before it flushes.
    for (w, prod) in producers.iter_mut().enumerate() {
        while !prod.has_room() {
            if prod.abandoned() {
                break;
            }
            backoff.wait();
        }
        prod.publish(newest);
        clock_sent[w] = newest;
        prod.close();
    }
    (sent, result)
}

/// Publishes the worker's partial batch, or an empty one, when its clock
/// is behind; skipped when its ring is full (the batches waiting there
/// carry a recent clock).
fn send_clock(prod: &mut Producer, clock_sent: &mut Timestamp, newest: Timestamp) {
    if newest <= *clock_sent || !prod.has_room() {
        return;
    }
    prod.publish(newest);
    *clock_sent = newest;
}

/// A worker thread: batches from its ring through `Worker::on_batch`, the
/// batch's clock through `Worker::on_tick`, records out in batches.
fn work(
    mut worker: Worker,
    mut ring: Consumer,
    map: Option<SharedMap>,
    tx: Sender<Vec<FlowRecord>>,
    back: Receiver<Vec<FlowRecord>>,
) -> WorkerStats {
    let mut out: Vec<FlowRecord> = Vec::with_capacity(RECORD_BATCH);
    let push = |r: FlowRecord, out: &mut Vec<FlowRecord>| {
        out.push(r);
        if out.len() >= RECORD_BATCH {
            let fresh = back
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(RECORD_BATCH));
            // The output ends only after every worker: a send fails only
            // if the reader thread is unwinding, and then nothing is read.
            let _ = tx.send(std::mem::replace(out, fresh));
        }
    };
    let mut backoff = Backoff::new();
    loop {
        match ring.peek() {
            Next::Batch(b) => {
                let base: &[u8] = match &map {
                    Some(m) => m.as_ref(),
                    None => &b.arena,
                };
                let mut pkts = [Frame::default(); FRAMES];
                for (p, f) in pkts.iter_mut().zip(&b.frames[..b.len.min(FRAMES)]) {
                    *p = Frame {
                        ts: f.ts,
                        link: f.link,
                        linktype: f.linktype,
                        data: base
                            .get(f.offset..f.offset.saturating_add(f.len as usize))
                            .unwrap_or(&[]),
                        wire_len: f.wire_len,
                        interface: f.interface,
                    };
                }
                let len = b.len.min(FRAMES);
                let clock = b.clock;
                worker.on_batch(&pkts[..len], &mut |r| push(r, &mut out));
                worker.on_tick(clock, &mut |r| push(r, &mut out));
                ring.done();
                backoff.reset();
            }
            Next::Empty => {
                // Nothing to do: what this worker has finished goes out
                // now rather than when a batch of records is full.
                if !out.is_empty() {
                    let fresh = back
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(RECORD_BATCH));
                    let _ = tx.send(std::mem::replace(&mut out, fresh));
                }
                backoff.wait();
            }
            Next::Closed => break,
        }
    }
    worker.flush(&mut |r| push(r, &mut out));
    if !out.is_empty() {
        let _ = tx.send(out);
    }
    worker.stats()
}
