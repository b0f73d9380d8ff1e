//! One thread per RX queue: drain its AF_XDP socket, hand frames whose
//! flow another worker owns to that worker, feed the rest (and what others
//! hand over, merged in timestamp order and in batches) to this worker's
//! own `xdprobe_dataplane::Worker`, and send finished records on.
//! Shared-nothing: the flow table and counters belong to the thread;
//! others only see a snapshot published once per tick.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use xdprobe_dataplane::{
    FlowConfig, FlowRecord, Timestamp, Worker, WorkerStats,
    parse::LinkType,
    source::{
        Frame,
        afxdp::{RxFrame, XskSocket, XskStats},
    },
    worker::BATCH,
};

use crate::{
    clock::{TaiClock, unix_now},
    handoff::{
        merge::Merge,
        queue::{Producer, Waiting},
    },
    lograte::{ERROR_LOG_EVERY, LogEvery},
    sink::RecordSink,
    steer,
};

/// Counters of the live loop itself (the flow counters are in
/// `WorkerStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopStats {
    /// Frames read from this worker's socket.
    pub rx_frames: u64,
    /// Failed reads of the socket (logged once per interval with a count).
    pub rx_errors: u64,
    pub rx_bytes: u64,
    /// Non-empty RX batches.
    pub batches: u64,
    /// Frames passed to another worker's ring.
    pub handed_off: u64,
    /// Frames lost because the owner's ring was full, or (for this
    /// worker's own frames) its lane.
    pub handoff_full: u64,
    /// Frames received from other workers.
    pub handoff_in: u64,
    /// Frames without an XDP timestamp, stamped at read time instead.
    pub ts_fallback: u64,
    /// Records sent on / dropped at a full exporter channel.
    pub records_out: u64,
    pub records_dropped: u64,
}

/// What a worker publishes for the metrics endpoint and the log line.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub queue: u32,
    pub core: Option<usize>,
    pub flows: WorkerStats,
    pub live: LoopStats,
    /// The socket's kernel statistics, read at the same tick.
    pub socket: XskStats,
}

/// State shared between the daemon and all workers.
#[derive(Default)]
pub struct Control {
    /// Phase 1 of shutdown: stop reading (XDP is already detached).
    pub stop_rx: AtomicBool,
    /// Workers that have drained their RX ring after `stop_rx`.
    pub rx_done: AtomicUsize,
    /// How many workers there are (all interfaces).
    pub workers: AtomicUsize,
    /// Flow timeouts from the last SIGHUP reload; workers apply them at
    /// their next tick when `flow_generation` moved.
    pub flow_update: Mutex<Option<FlowConfig>>,
    pub flow_generation: AtomicUsize,
}

/// Everything one worker thread needs; built by the daemon. `T`: the
/// lines its JSON writer takes besides records (`sink::JsonItem`).
pub struct QueueWorker<T = std::convert::Infallible> {
    pub index: usize,
    pub workers: usize,
    pub core: Option<usize>,
    pub socket: XskSocket,
    pub flow: FlowConfig,
    pub sink: RecordSink<T>,
    /// `producers[j]`: ring to worker j (`None` for this worker: its own
    /// frames go into its merge's lane); empty when hand-off is off.
    pub producers: Vec<Option<Producer>>,
    /// This worker's inputs when hand-off is on.
    pub merge: Option<Merge>,
    pub control: Arc<Control>,
    pub published: Arc<Mutex<Snapshot>>,
    /// How often expiry runs and the snapshot is published.
    pub tick: Duration,
    /// Ignore the XDP timestamps and stamp frames when their batch is read
    /// (only to measure what the XDP timestamps are worth).
    pub read_time_stamps: bool,
}

/// Poll timeout while frames wait in the merge for other workers.
const SHORT_WAIT: Duration = Duration::from_millis(1);

impl<T> QueueWorker<T> {
    /// The thread body: read and account until the daemon says stop, then
    /// drain the hand-off and end every flow. Returns the final snapshot.
    pub fn run(mut self) -> Snapshot {
        self.pin();
        let mut worker = Worker::new(&self.flow);
        let mut clock = TaiClock::new();
        let mut last_tick = Instant::now();
        let mut rx = LoopStats::default();
        let mut rx_log = LogEvery::new(ERROR_LOG_EVERY);
        let mut flow_generation = self.control.flow_generation.load(Ordering::Acquire);

        loop {
            let stopping = self.control.stop_rx.load(Ordering::Acquire);
            match self.receive(&mut worker, &mut clock, &mut rx) {
                Ok(0) => {
                    if stopping {
                        break;
                    }
                }
                Ok(_) => rx.batches += 1,
                Err(e) => {
                    rx.rx_errors += 1;
                    if let Some(n) = rx_log.due(Instant::now()) {
                        tracing::error!(queue = self.socket.queue, error = %e, occurrences = n,
                            "AF_XDP receive failed");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            if last_tick.elapsed() >= self.tick {
                last_tick = Instant::now();
                self.on_tick(&mut worker, &mut clock, &mut flow_generation, rx);
            }
        }

        self.drain(&mut worker, &mut rx);
        // Shutdown must not lose records: wait for room from here on.
        let sink = &self.sink;
        sink.set_blocking();
        worker.flush(&mut |rec| sink.send(rec));
        let snap = self.publish(&worker, rx);
        tracing::info!(
            queue = snap.queue,
            frames = snap.live.rx_frames,
            records = snap.live.records_out,
            "worker stopped"
        );
        snap
    }

    fn pin(&self) {
        if let Some(core) = self.core
            && !core_affinity::set_for_current(core_affinity::CoreId { id: core })
        {
            tracing::warn!(
                queue = self.socket.queue,
                core,
                "could not pin worker to its core"
            );
        }
    }

    /// One read of the socket. Alone, the worker accounts the frames as
    /// batches (parse all, prefetch their flows, then update); with
    /// hand-off, each frame goes to its owner's ring or this worker's own
    /// lane, and the merge then accounts what no source can still precede.
    fn receive(
        &mut self,
        worker: &mut Worker,
        clock: &mut TaiClock,
        rx: &mut LoopStats,
    ) -> std::io::Result<usize> {
        let (me, n, read_time) = (self.index, self.workers, self.read_time_stamps);
        let queue = self.socket.queue;
        let sink = &self.sink;
        let mut emit = |rec: FlowRecord| sink.send(rec);
        let waiting = self.merge.as_mut().is_some_and(Merge::pending);
        let wait = waiting.then_some(SHORT_WAIT);
        let mut read_ts: Option<Timestamp> = None;
        let mut newest = Timestamp::ZERO;
        let mut stamp = |frame: &RxFrame<'_>, rx: &mut LoopStats| {
            let ts = match frame.tai_ns.filter(|_| !read_time) {
                Some(tai) => clock.to_unix(tai),
                None => {
                    rx.ts_fallback += 1;
                    *read_ts.get_or_insert_with(unix_now)
                }
            };
            newest = newest.max(ts);
            let wire = u32::try_from(frame.data.len()).unwrap_or(u32::MAX);
            rx.rx_frames += 1;
            rx.rx_bytes += u64::from(wire);
            (ts, wire)
        };
        let got = match self.merge.as_mut().filter(|_| n > 1) {
            None => self.socket.recv_chunks::<BATCH>(wait, |frames| {
                let mut batch = [Frame::default(); BATCH];
                for (p, frame) in batch.iter_mut().zip(frames) {
                    let (ts, wire_len) = stamp(frame, rx);
                    *p = Frame {
                        ts,
                        link: Some(LinkType::Ethernet),
                        linktype: 1,
                        data: frame.data,
                        wire_len,
                        interface: queue,
                    };
                }
                worker.on_batch(&batch[..frames.len()], &mut emit);
            }),
            Some(m) => {
                let producers = &mut self.producers;
                let got = self.socket.recv_batch(wait, |frame| {
                    let (ts, wire_len) = stamp(&frame, rx);
                    let data = frame.data;
                    let owner = steer::owner(data, n).unwrap_or(me);
                    let w = Waiting { data, wire_len, ts };
                    match hand(me, owner, w, m, producers) {
                        Handed::Own => {}
                        Handed::Other => rx.handed_off += 1,
                        Handed::Full => rx.handoff_full += 1,
                    }
                });
                // The rings' new frames become visible (one store per
                // ring and read) before the watermark vouches for them.
                for p in producers.iter_mut().flatten() {
                    p.publish();
                }
                got
            }
        };
        if let Some(m) = &mut self.merge {
            match got {
                Ok(0) => m.marks.publish_idle(me),
                Ok(_) => m.marks.publish(me, newest),
                Err(_) => {}
            }
            rx.handoff_in += m.run(false, |b| worker.on_batch(b, &mut emit)) as u64;
        }
        got
    }

    /// Every `tick`: timeouts reloaded by SIGHUP, the TAI offset, expiry
    /// by the clock (a quiet queue still ends its flows), the snapshot.
    fn on_tick(
        &self,
        worker: &mut Worker,
        clock: &mut TaiClock,
        flow_generation: &mut usize,
        rx: LoopStats,
    ) {
        let g = self.control.flow_generation.load(Ordering::Acquire);
        if g != *flow_generation {
            *flow_generation = g;
            if let Ok(Some(cfg)) = self.control.flow_update.lock().as_deref() {
                worker.set_timeouts(cfg);
                tracing::info!(queue = self.socket.queue, "flow timeouts reloaded");
            }
        }
        clock.refresh();
        let sink = &self.sink;
        worker.on_tick(unix_now(), &mut |rec| sink.send(rec));
        self.publish(worker, rx);
    }

    /// Phase 2 of shutdown: every worker has stopped reading; take what is
    /// left in the lane and the hand-off rings (in order: every source is
    /// done, or 2 s have passed).
    fn drain(&mut self, worker: &mut Worker, rx: &mut LoopStats) {
        self.control.rx_done.fetch_add(1, Ordering::AcqRel);
        let Some(m) = &mut self.merge else {
            return;
        };
        let sink = &self.sink;
        let mut emit = |rec: FlowRecord| sink.send(rec);
        m.marks.publish(self.index, Timestamp::from_nanos(u64::MAX));
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let all_done = self.control.rx_done.load(Ordering::Acquire)
                >= self.control.workers.load(Ordering::Acquire);
            rx.handoff_in += m.run(all_done, |b| worker.on_batch(b, &mut emit)) as u64;
            if (all_done && !m.pending()) || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn publish(&self, worker: &Worker, mut live: LoopStats) -> Snapshot {
        (live.records_out, live.records_dropped) = self.sink.counts();
        let snap = Snapshot {
            queue: self.socket.queue,
            core: self.core,
            flows: worker.stats(),
            live,
            socket: self.socket.stats().unwrap_or_default(),
        };
        if let Ok(mut p) = self.published.lock() {
            *p = snap.clone();
        }
        snap
    }
}

/// Where [`hand`] put a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handed {
    /// Into this worker's own lane.
    Own,
    /// Into the ring to the worker owning its flow.
    Other,
    /// Nowhere: that lane or ring was full (a counted drop).
    Full,
}

/// Puts a frame this worker read where its flow's owner will merge it:
/// this worker's own lane, or the ring to the owner (published after the
/// read). A full lane or ring is a drop the caller counts, never a wait.
#[inline]
fn hand(
    me: usize,
    owner: usize,
    w: Waiting<'_>,
    merge: &mut Merge,
    producers: &mut [Option<Producer>],
) -> Handed {
    let (pushed, to) = if owner == me {
        (merge.own.push(w.data, w.wire_len, w.ts), Handed::Own)
    } else {
        let pushed = match producers.get_mut(owner) {
            Some(Some(p)) => p.push(w.data, w.wire_len, w.ts),
            _ => false,
        };
        (pushed, Handed::Other)
    };
    if pushed { to } else { Handed::Full }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::{
        merge::Marks,
        queue::{Lane, Source, ring},
    };

    fn frame(tag: u8) -> Waiting<'static> {
        static TAGS: [u8; 4] = [0, 1, 2, 3];
        Waiting {
            data: std::slice::from_ref(&TAGS[usize::from(tag)]),
            wire_len: 60,
            ts: Timestamp::from_nanos(u64::from(tag)),
        }
    }

    /// Worker 1 of 2 keeps its own frames in its lane (no ring to itself
    /// exists), hands the others to worker 0's ring, and reports a full
    /// lane or ring as a drop.
    #[test]
    fn own_frames_go_to_the_lane_others_to_the_owners_ring() {
        let (p0, mut c0) = ring(2);
        let mut producers = vec![Some(p0), None];
        let mut m = Merge {
            me: 1,
            own: Lane::new(2),
            inputs: Vec::new(),
            marks: Marks::new(2),
        };
        let mut hand1 = |owner, tag| hand(1, owner, frame(tag), &mut m, &mut producers);
        assert_eq!(hand1(1, 0), Handed::Own);
        assert_eq!(hand1(1, 1), Handed::Own);
        assert_eq!(hand1(1, 2), Handed::Full, "lane of 2 is full");
        assert_eq!(hand1(0, 2), Handed::Other);
        assert_eq!(hand1(0, 3), Handed::Other);
        assert_eq!(hand1(0, 1), Handed::Full, "ring of 2 is full");
        assert_eq!(
            hand1(5, 1),
            Handed::Full,
            "no such worker: counted, not lost silently"
        );
        assert_eq!(m.own.next_ts(), Some(Timestamp::from_nanos(0)));
        assert_eq!(c0.next_ts(), None, "not published before the read ends");
        for p in producers.iter_mut().flatten() {
            p.publish();
        }
        assert_eq!(c0.next_ts(), Some(Timestamp::from_nanos(2)));
    }
}
