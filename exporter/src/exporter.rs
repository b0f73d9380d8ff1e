//! The exporter thread: one mio loop that takes records from the workers'
//! bounded channel, fans each out to every collector's link, and drives
//! their transports. Workers never block on the network: `send` is a
//! `try_send` whose failure is counted.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError, bounded, unbounded};
use mio::{Events, Poll, Token, Waker};
use tracing::{error, info};
use xdprobe_dataplane::FlowRecord;

use crate::collector::CollectorSpec;
use crate::link::{Globals, Link, encoder_for};
use crate::stats::{ExportStats, SharedCounters};
use crate::{ExporterConfig, ExporterError};

const WAKER: Token = Token(usize::MAX);
/// Longest sleep when idle: bounds the latency of a record in the channel.
const IDLE_TICK: Duration = Duration::from_millis(10);
/// Records taken from the channel per loop turn before servicing sockets.
const BATCH: usize = 8192;
const FILE_FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How often `live_stats` is refreshed (a scrape interval is seconds).
const PUBLISH_EVERY: Duration = Duration::from_secs(1);
const POLL_LOG_EVERY: Duration = Duration::from_secs(10);

enum Control {
    Shutdown,
    Reconfigure(Vec<CollectorSpec>, Sender<Result<(), ExporterError>>),
}

/// The channel was full (or the exporter has stopped): the record was
/// dropped and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("exporter channel full: record dropped")]
pub struct Full;

/// A worker's handle to the exporter. Cheap to clone; one per worker.
#[derive(Clone)]
pub struct RecordSender {
    tx: Sender<FlowRecord>,
    shared: Arc<SharedCounters>,
}

impl RecordSender {
    /// Never blocks: a full channel drops the record and counts it.
    pub fn send(&self, r: FlowRecord) -> Result<(), Full> {
        match self.tx.try_send(r) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.channel_drops.fetch_add(1, Ordering::Relaxed);
                Err(Full)
            }
        }
    }

    /// Offline mode: waits for room, never drops (unless the exporter thread
    /// is gone, which is counted).
    pub fn send_blocking(&self, r: FlowRecord) {
        if self.tx.send(r).is_err() {
            self.shared.channel_drops.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The running exporter.
pub struct Exporter {
    tx: Sender<FlowRecord>,
    ctl: Sender<Control>,
    waker: Arc<Waker>,
    shared: Arc<SharedCounters>,
    cfg: ExporterConfig,
    live: Arc<Mutex<ExportStats>>,
    thread: JoinHandle<ExportStats>,
}

impl Exporter {
    /// Validate the configuration, open every collector and start the thread.
    pub fn spawn(mut cfg: ExporterConfig) -> Result<Exporter, ExporterError> {
        // Resolved once: every collector (and later reconfigure) sends the same name.
        cfg.observation_name = Some(cfg.resolved_observation_name());
        let poll = Poll::new().map_err(ExporterError::Poll)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(ExporterError::Poll)?);
        let mut next_token = 0usize;
        let links = open_links(&cfg, cfg.collectors.clone(), &mut next_token)?;
        let (tx, rx) = bounded(cfg.channel_capacity.max(1));
        let (ctl, ctl_rx) = unbounded();
        let shared = Arc::new(SharedCounters::default());
        let live = Arc::new(Mutex::new(ExportStats::default()));
        let st = State {
            poll,
            rx,
            ctl: ctl_rx,
            links,
            cfg: cfg.clone(),
            shared: shared.clone(),
            next_token,
            received: 0,
            poll_errors: 0,
            poll_logged_at: None,
            live: live.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("xdprobe-export".into())
            .spawn(move || st.run())
            .map_err(ExporterError::Thread)?;
        info!(collectors = cfg.collectors.len(), "exporter started");
        Ok(Exporter {
            tx,
            ctl,
            waker,
            shared,
            cfg,
            live,
            thread,
        })
    }

    /// The counters as the exporter thread last published them (about
    /// once a second): what the metrics endpoint shows of the export.
    pub fn live_stats(&self) -> Arc<Mutex<ExportStats>> {
        self.live.clone()
    }

    pub fn sender(&self) -> RecordSender {
        RecordSender {
            tx: self.tx.clone(),
            shared: self.shared.clone(),
        }
    }

    /// Replace the collector set (SIGHUP). Collectors whose URL is
    /// unchanged keep their connection, queue and sequence numbers.
    pub fn reconfigure(&self, collectors: Vec<CollectorSpec>) -> Result<(), ExporterError> {
        for c in &collectors {
            encoder_for(c, &self.cfg)?;
        }
        let (reply, rx) = bounded(1);
        self.ctl
            .send(Control::Reconfigure(collectors, reply))
            .map_err(|_| ExporterError::Stopped)?;
        let _ = self.waker.wake();
        rx.recv_timeout(Duration::from_secs(10))
            .map_err(|_| ExporterError::Stopped)?
    }

    /// Drain the channel, flush every collector (TCP: up to
    /// `shutdown_timeout`), join the thread. Drop or stop every
    /// `RecordSender` user first, or their later records are dropped.
    pub fn shutdown(self) -> Result<ExportStats, ExporterError> {
        let _ = self.ctl.send(Control::Shutdown);
        let _ = self.waker.wake();
        drop(self.tx);
        let mut stats = self
            .thread
            .join()
            .map_err(|_| ExporterError::ThreadPanicked)?;
        stats.channel_drops = self.shared.channel_drops();
        Ok(stats)
    }
}

fn open_links(
    cfg: &ExporterConfig,
    specs: Vec<CollectorSpec>,
    next_token: &mut usize,
) -> Result<Vec<Link>, ExporterError> {
    let mut links = Vec::with_capacity(specs.len());
    for spec in specs {
        links.push(Link::new(spec, cfg, Token(*next_token))?);
        *next_token += 1;
    }
    Ok(links)
}

struct State {
    poll: Poll,
    rx: Receiver<FlowRecord>,
    ctl: Receiver<Control>,
    links: Vec<Link>,
    cfg: ExporterConfig,
    shared: Arc<SharedCounters>,
    next_token: usize,
    received: u64,
    poll_errors: u64,
    poll_logged_at: Option<Instant>,
    live: Arc<Mutex<ExportStats>>,
}

impl State {
    fn stats(&self) -> ExportStats {
        ExportStats {
            records_received: self.received,
            channel_drops: self.shared.channel_drops(),
            collectors: self.links.iter().map(Link::snapshot).collect(),
        }
    }

    /// Refreshes `live_stats`; a poisoned lock (a panicked reader) is
    /// taken over, the numbers are plain data.
    fn publish(&self) {
        let s = self.stats();
        match self.live.lock() {
            Ok(mut g) => *g = s,
            Err(p) => *p.into_inner() = s,
        }
    }

    fn globals(&self) -> Globals {
        let probe = |f: fn(&crate::ProbeCounters) -> &std::sync::atomic::AtomicU64| {
            self.cfg
                .probe_counters
                .as_deref()
                .map_or(0, |c| f(c).load(Ordering::Relaxed))
        };
        Globals {
            ignored_packets: probe(|c| &c.ignored_packets),
            channel_drops: self.shared.channel_drops(),
            flows_evicted: probe(|c| &c.flows_evicted),
            fragments_evicted: probe(|c| &c.fragments_evicted),
        }
    }

    /// Take up to `max` records and queue them on every link.
    fn drain(&mut self, max: usize, now: Instant) -> usize {
        let mut n = 0;
        while n < max {
            // A paced UDP collector's full queue holds the workers back.
            if self.links.iter().any(Link::paced_full) {
                break;
            }
            match self.rx.try_recv() {
                Ok(r) => {
                    for l in &mut self.links {
                        l.push(&r, now);
                    }
                    n += 1;
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        self.received += n as u64;
        n
    }

    fn service(&mut self, events: &mut Events, timeout: Duration) {
        if let Err(e) = self.poll.poll(events, Some(timeout))
            && e.kind() != std::io::ErrorKind::Interrupted
        {
            // A persistent failure would repeat every tick: one line per
            // POLL_LOG_EVERY, with the count.
            self.poll_errors += 1;
            let now = Instant::now();
            if self
                .poll_logged_at
                .is_none_or(|t| now.duration_since(t) >= POLL_LOG_EVERY)
            {
                error!(error = %e, occurrences = self.poll_errors, "exporter poll failed");
                self.poll_logged_at = Some(now);
                self.poll_errors = 0;
            }
            std::thread::sleep(IDLE_TICK);
        }
        let now = Instant::now();
        let reg = self.poll.registry();
        for ev in events.iter() {
            if let Some(l) = self.links.iter_mut().find(|l| l.token == ev.token()) {
                l.on_event(reg, ev, now);
            }
        }
    }

    fn pump_all(&mut self, now: Instant) {
        let g = self.globals();
        let reg = self.poll.registry();
        for l in &mut self.links {
            l.pump(reg, now, g);
        }
    }

    fn reconfigure(&mut self, specs: Vec<CollectorSpec>) -> Result<(), ExporterError> {
        let mut old: Vec<Link> = std::mem::take(&mut self.links);
        let mut links = Vec::with_capacity(specs.len());
        for spec in specs {
            if let Some(i) = old.iter().position(|l| l.spec == spec) {
                links.push(old.swap_remove(i));
            } else {
                match Link::new(spec, &self.cfg, Token(self.next_token)) {
                    Ok(l) => links.push(l),
                    Err(e) => {
                        // Keep the old set rather than half of a new one.
                        links.append(&mut old);
                        self.links = links;
                        return Err(e);
                    }
                }
                self.next_token += 1;
            }
        }
        let now = Instant::now();
        let g = self.globals();
        for mut l in old {
            l.pump(self.poll.registry(), now, g);
            l.close(self.poll.registry());
            info!(collector = %l.spec, "collector removed");
        }
        self.links = links;
        info!(collectors = self.links.len(), "collectors reconfigured");
        Ok(())
    }

    fn run(mut self) -> ExportStats {
        let mut events = Events::with_capacity(64);
        let mut next_options = Instant::now() + self.cfg.options_interval;
        let mut next_file_flush = Instant::now() + FILE_FLUSH_EVERY;
        let mut next_publish = Instant::now();
        let mut busy = false;
        loop {
            let now = Instant::now();
            let mut timeout = if busy { Duration::ZERO } else { IDLE_TICK };
            for w in self.links.iter().filter_map(Link::wake_at) {
                timeout = timeout.min(w.saturating_duration_since(now));
            }
            self.service(&mut events, timeout);
            match self.ctl.try_recv() {
                Ok(Control::Shutdown) | Err(TryRecvError::Disconnected) => break,
                Ok(Control::Reconfigure(specs, reply)) => {
                    let _ = reply.send(self.reconfigure(specs));
                }
                Err(TryRecvError::Empty) => {}
            }
            let now = Instant::now();
            busy = self.drain(BATCH, now) == BATCH;
            if now >= next_options {
                for l in &mut self.links {
                    l.options_due = true;
                }
                next_options = now + self.cfg.options_interval;
            }
            self.pump_all(now);
            if now >= next_file_flush {
                for l in &mut self.links {
                    l.flush_file();
                }
                next_file_flush = now + FILE_FLUSH_EVERY;
            }
            if now >= next_publish {
                self.publish();
                next_publish = now + PUBLISH_EVERY;
            }
        }
        self.finish(&mut events)
    }

    /// Shutdown: everything already in the channel goes out; TCP links get
    /// up to `shutdown_timeout` to connect and write their queues.
    fn finish(mut self, events: &mut Events) -> ExportStats {
        let deadline = Instant::now() + self.cfg.shutdown_timeout;
        // Final statistics record for every collector.
        for l in &mut self.links {
            l.options_due = true;
        }
        loop {
            let now = Instant::now();
            while self.drain(BATCH, now) > 0 {
                self.pump_all(now);
            }
            self.pump_all(now);
            let done = |l: &Link| l.idle() && !l.options_due;
            // TCP gets until the deadline; a paced UDP link always gets
            // through its queue (its rate bounds how long that takes).
            if self.rx.is_empty()
                && (self.links.iter().all(done)
                    || (now >= deadline && self.links.iter().all(|l| done(l) || l.is_tcp())))
            {
                break;
            }
            self.service(events, Duration::from_millis(5));
        }
        let reg = self.poll.registry();
        for l in &mut self.links {
            l.close(reg);
        }
        self.publish();
        self.stats()
    }
}
