//! `xdprobe pcap --workers N`: with one worker, the calling thread reads
//! and accounts ([`run_one`]); for N > 1, N worker threads, and the calling
//! thread writing their records.
//!
//! # Who reads
//! No thread only reads. The reader (the file, its time-order stage, the
//! capture filter and the progress bar, with every worker's ring) is one
//! value behind a lock, and a worker whose ring is empty takes it, reads
//! [`CHUNK`] frames and steers each to its owner's ring, its own included,
//! then goes back to its ring. So the reading is done by whichever worker
//! has the least to do, on the cores there are: a thread of its own was a
//! third busy thread on two cores, and on the bench file two workers took
//! 16 % less wall time and 12 % less CPU without it (`benches/LOG.md`). The
//! lock is taken once per chunk, never per packet; a worker that finds it
//! held has nothing to do but wait for frames anyway.
//!
//! # Same records as one worker
//! A flow's packets all reach one worker (the steering hash is symmetric
//! and covers fragments, see `crate::steer`), in file order, so each flow
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

use std::sync::{Mutex, TryLockError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use xdprobe_dataplane::{
    FlowRecord, Timestamp, Worker, WorkerStats,
    source::{
        Capture, Frame,
        pcap::{PcapError, SharedMap},
    },
    worker::BATCH,
};

use crate::handoff::file::{self as ring, Consumer, FRAMES, FrameRef, Next, Producer};
use crate::steer;

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

/// Waits without burning a core the other threads need for long: spin
/// briefly, then yield for up to [`YIELD_FOR`], then sleep in short naps.
/// Most waits are for another worker to finish steering a chunk or a
/// batch (tens of microseconds): a 50 µs nap there oversleeps it (timer
/// slack, the VM's wake-up), while the naps keep a wait for a stream's
/// paused writer from spinning a core.
struct Backoff {
    spins: u32,
    since: Option<Instant>,
}

/// How long a wait yields before it sleeps.
const YIELD_FOR: Duration = Duration::from_millis(1);

impl Backoff {
    fn new() -> Self {
        Backoff {
            spins: 0,
            since: None,
        }
    }
    fn reset(&mut self) {
        self.spins = 0;
        self.since = None;
    }
    fn wait(&mut self) {
        if self.spins < 64 {
            self.spins += 1;
            std::hint::spin_loop();
            return;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Runs `reader` through `workers` (already built: one thread each, which
/// take turns at reading; one alone runs on the calling thread). Finished
/// records go to `output` on the calling thread as `Some(record)`, and,
/// with several workers, `None` whenever no record is waiting (a moment to
/// flush buffered output, so records of a slow stream appear as flows
/// end). With `keep_records` false nothing wants the records (`--format
/// none` without `--export`): several workers drop them where they end, as
/// one worker's no-op output does, instead of copying every record into a
/// batch and across to the calling thread (on the bench file, ~1 L2 miss
/// a packet for records nobody reads). `hook` sees every batch, on the
/// worker reading it, before it is steered, with the reader's byte offset:
/// it keeps the frames it wants at the front and returns how many (a
/// capture filter; a progress bar). The flows read before an error in the
/// input are still emitted.
pub fn run<E: Send>(
    reader: &mut Capture,
    mut workers: Vec<Worker>,
    output: &mut impl FnMut(Option<FlowRecord>),
    keep_records: bool,
    hook: &mut (impl FnMut(&mut [Frame<'_>], u64) -> Result<usize, E> + Send),
) -> Outcome<E> {
    if let [worker] = workers.as_mut_slice() {
        return run_one(reader, worker, &mut |rec| output(Some(rec)), hook);
    }
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
    let base = map.as_ref().map(|m| m.as_ref().as_ptr() as usize);
    let shared = Mutex::new(Reading {
        reader,
        hook,
        base,
        producers,
        sent: vec![0; n],
        clock_sent: vec![Timestamp::ZERO; n],
        newest: Timestamp::ZERO,
        since_clock: 0,
        end: None,
        closed: vec![false; n],
    });
    let workers = std::thread::scope(|s| {
        let shared = &shared;
        let handles: Vec<_> = workers
            .into_iter()
            .zip(consumers)
            .enumerate()
            .map(|(i, (w, c))| {
                let (map, tx, back) = (map.clone(), rec_tx.clone(), back_rx.clone());
                std::thread::Builder::new()
                    .name(format!("xdprobe-w{i}"))
                    .spawn_scoped(s, move || {
                        work(i, w, c, map, shared, tx, back, keep_records)
                    })
                    .expect("spawning a worker thread")
            })
            .collect();
        drop(rec_tx);
        // Until every worker has hung up.
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
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let r = shared.into_inner().unwrap_or_else(|p| p.into_inner());
    Outcome {
        workers,
        sent: r.sent,
        read_result: r.end.unwrap_or(Ok(())),
    }
}

/// Frames read by a worker at a time while it holds the reader.
const CHUNK: usize = 1024;

/// The reader, taken in turn by whichever worker has nothing to do.
struct Reading<'r, H, E> {
    reader: &'r mut Capture,
    hook: &'r mut H,
    /// Where the mapped file starts (frames travel as offsets from it);
    /// `None` for a stream, whose frames are copied into the batches.
    base: Option<usize>,
    producers: Vec<Producer>,
    sent: Vec<u64>,
    clock_sent: Vec<Timestamp>,
    newest: Timestamp,
    since_clock: u64,
    /// Set once the input has ended (or failed).
    end: Option<Result<(), ReadStop<E>>>,
    /// Rings given their last batch and closed.
    closed: Vec<bool>,
}

impl<H, E> Reading<'_, H, E>
where
    H: FnMut(&mut [Frame<'_>], u64) -> Result<usize, E>,
{
    /// Reads up to [`CHUNK`] frames and steers them. A full ring is waited
    /// for: its worker is processing, not waiting for this lock (a worker
    /// asks for it only with its ring empty). Meanwhile `drain` accounts
    /// the reading worker's own oldest batch, if it has one (and it must
    /// when the full ring is its own: a stream's large frames can fill a
    /// ring within one chunk); it says whether there was one.
    fn read_chunk(&mut self, drain: &mut impl FnMut() -> bool) {
        let n = self.producers.len();
        let mut read = 0;
        'chunk: while read < CHUNK && self.end.is_none() {
            let mut batch = [Frame::default(); BATCH];
            let offset = self.reader.offset();
            let got = match self.reader.next_batch(&mut batch) {
                Ok(0) => {
                    self.end = Some(Ok(()));
                    break;
                }
                Ok(got) => got,
                Err(e) => {
                    self.end = Some(Err(ReadStop::Capture(e)));
                    break;
                }
            };
            let got = match (self.hook)(&mut batch[..got], offset) {
                Ok(kept) => kept.min(got),
                Err(e) => {
                    self.end = Some(Err(ReadStop::Hook(e)));
                    break;
                }
            };
            read += got;
            for p in &batch[..got] {
                let owner = p.link.and_then(|l| steer::owner_of(l, p.data, n));
                if owner.is_some() && p.ts.in_range() {
                    self.newest = self.newest.max(p.ts);
                }
                let w = owner.unwrap_or(0);
                let Some(prod) = self.producers.get_mut(w) else {
                    continue;
                };
                let f = FrameRef {
                    ts: p.ts,
                    link: p.link,
                    linktype: p.linktype,
                    wire_len: p.wire_len,
                    interface: p.interface,
                    // A mapped packet is a view into the map: its place in it.
                    offset: match self.base {
                        Some(base) if !p.data.is_empty() => {
                            (p.data.as_ptr() as usize).wrapping_sub(base)
                        }
                        _ => 0,
                    },
                    len: u32::try_from(p.data.len()).unwrap_or(u32::MAX),
                };
                let copy = self.base.is_none().then_some(p.data);
                let mut backoff = Backoff::new();
                loop {
                    while !prod.has_room() {
                        if prod.abandoned() {
                            self.end = Some(Ok(()));
                            break 'chunk;
                        }
                        // Its own oldest batch is work it has to do anyway:
                        // better now than waiting for a slower worker.
                        if !drain() {
                            backoff.wait();
                        }
                    }
                    let Some(slot) = prod.slot() else { continue };
                    if slot.push(f, copy) {
                        if slot.len >= FRAMES {
                            prod.publish(self.newest);
                            self.clock_sent[w] = self.newest;
                        }
                        break;
                    }
                    prod.publish(self.newest);
                    self.clock_sent[w] = self.newest;
                }
                self.sent[w] += 1;
            }
            self.since_clock += got as u64;
            if self.since_clock >= CLOCK_EVERY {
                self.since_clock = 0;
                for (w, prod) in self.producers.iter_mut().enumerate() {
                    send_clock(prod, &mut self.clock_sent[w], self.newest);
                }
            }
        }
    }

    /// After the end of the input: worker `me`, its ring drained, gets
    /// what is left for it and the input's last time, and its ring closes.
    fn close(&mut self, me: usize) {
        if let (Some(prod), Some(closed)) = (self.producers.get_mut(me), self.closed.get_mut(me))
            && !*closed
            && prod.has_room()
        {
            prod.publish(self.newest);
            self.clock_sent[me] = self.newest;
            prod.close();
            *closed = true;
        }
    }
}

/// Accounts the oldest batch in `ring` (its frames through
/// `Worker::on_batch`, its clock through `Worker::on_tick`), if there is
/// one.
fn process_one(
    worker: &mut Worker,
    ring: &mut Consumer,
    map: Option<&SharedMap>,
    out: &mut impl FnMut(FlowRecord),
) -> bool {
    let Next::Batch(b) = ring.peek() else {
        return false;
    };
    let base: &[u8] = match map {
        Some(m) => m.as_ref(),
        None => &b.arena,
    };
    // The worker's own batches of frames, converted as they are accounted
    // (one array of `FRAMES` was 12 KiB written and read back per batch).
    let len = b.len.min(FRAMES);
    for refs in b.frames[..len].chunks(BATCH) {
        let mut pkts = [Frame::default(); BATCH];
        for (p, f) in pkts.iter_mut().zip(refs) {
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
        worker.on_batch(&pkts[..refs.len()], out);
    }
    worker.on_tick(b.clock, out);
    ring.done();
    true
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
/// batch's clock through `Worker::on_tick`, records out in batches; with
/// its ring empty it takes the reader (if no other worker holds it) and
/// steers the next frames of the input to every worker's ring.
#[expect(
    clippy::too_many_arguments,
    reason = "the worker, its ring and the run's shared parts, each its own"
)]
fn work<H, E>(
    me: usize,
    mut worker: Worker,
    mut ring: Consumer,
    map: Option<SharedMap>,
    shared: &Mutex<Reading<'_, H, E>>,
    tx: Sender<Vec<FlowRecord>>,
    back: Receiver<Vec<FlowRecord>>,
    keep_records: bool,
) -> WorkerStats
where
    H: FnMut(&mut [Frame<'_>], u64) -> Result<usize, E>,
{
    let mut out: Vec<FlowRecord> = Vec::with_capacity(RECORD_BATCH);
    let push = |r: FlowRecord, out: &mut Vec<FlowRecord>| {
        if !keep_records {
            return;
        }
        out.push(r);
        if out.len() >= RECORD_BATCH {
            let fresh = back
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(RECORD_BATCH));
            // The output ends only after every worker: a send fails only
            // if the calling thread is unwinding, and then nothing is read.
            let _ = tx.send(std::mem::replace(out, fresh));
        }
    };
    let mut backoff = Backoff::new();
    loop {
        if process_one(&mut worker, &mut ring, map.as_ref(), &mut |r| {
            push(r, &mut out)
        }) {
            backoff.reset();
            continue;
        }
        if ring.is_closed() {
            break;
        }
        // Nothing to do: what this worker has finished goes out now rather
        // than when a batch of records is full (and before it reads: a
        // stream's read may wait for its writer as long as it likes).
        if !out.is_empty() {
            let fresh = back
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(RECORD_BATCH));
            let _ = tx.send(std::mem::replace(&mut out, fresh));
        }
        let guard = match shared.try_lock() {
            Ok(g) => Some(g),
            // Another worker panicked while reading: no more input (the
            // panic reaches the caller when its thread is joined).
            Err(TryLockError::Poisoned(p)) => {
                let mut g = p.into_inner();
                g.end.get_or_insert(Ok(()));
                Some(g)
            }
            Err(TryLockError::WouldBlock) => None,
        };
        if let Some(mut r) = guard {
            if r.end.is_none() {
                r.read_chunk(&mut || {
                    process_one(&mut worker, &mut ring, map.as_ref(), &mut |r| {
                        push(r, &mut out)
                    })
                });
            }
            if r.end.is_some() {
                r.close(me);
            }
            backoff.reset();
            continue;
        }
        backoff.wait();
    }
    worker.flush(&mut |r| push(r, &mut out));
    if !out.is_empty() {
        let _ = tx.send(out);
    }
    worker.stats()
}

/// One worker on the calling thread: batches straight from the reader,
/// through `hook`, into the worker, whose flows are then flushed (also
/// after an error in the input).
pub fn run_one<E>(
    reader: &mut Capture,
    worker: &mut Worker,
    emit: &mut impl FnMut(FlowRecord),
    hook: &mut impl FnMut(&mut [Frame<'_>], u64) -> Result<usize, E>,
) -> Outcome<E> {
    let read_result = loop {
        let mut batch = [Frame::default(); BATCH];
        // Where this batch starts (the batch borrows the reader after).
        let offset = reader.offset();
        let n = match reader.next_batch(&mut batch) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) => break Err(ReadStop::Capture(e)),
        };
        match hook(&mut batch[..n], offset) {
            Ok(kept) => worker.on_batch(&batch[..kept], emit),
            Err(e) => break Err(ReadStop::Hook(e)),
        }
    };
    worker.flush(emit);
    let stats = worker.stats();
    Outcome {
        sent: vec![stats.frames],
        workers: vec![stats],
        read_result,
    }
}
