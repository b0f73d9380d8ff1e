//! The agent's stream to its manager, with the IPFIX TCP exporter's
//! discipline (`xdprobe_exporter`): the probe loop hands events over a
//! bounded channel and never blocks; one thread owns the connection
//! (mio, the exporter's reconnecting [`TcpOut`] with exponential backoff)
//! and a bounded buffer that keeps the newest events while the manager is
//! away. Every event that cannot be kept is counted, by reason, and the
//! counts travel to the manager in STATS frames.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use mio::{Events, Poll, Token};
use xdprobe_common::host::StackEvent;
use xdprobe_exporter::{TcpChange, TcpOut};

use rustls::ClientConnection;
use rustls::pki_types::ServerName;

use crate::fleet::proto::{self, AgentStats, Hello};

/// Longest sleep: bounds how long an event waits in the channel.
const TICK: Duration = Duration::from_millis(10);
/// How often the agent's counters go to the manager.
const STATS_EVERY: Duration = Duration::from_secs(1);
const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct ForwardConfig {
    pub manager: SocketAddr,
    pub hello: Hello,
    /// Events kept while the manager is unreachable or slow; beyond, the
    /// oldest are dropped and counted. 262144 events are 18 MiB.
    pub buffer_events: usize,
    /// Probe loop → forwarder hand-off, events.
    pub channel_events: usize,
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
    /// TLS to the manager (`fleet::tls::client_config`) and the name its
    /// certificate must carry; `None`: plaintext (`--manager-insecure`).
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

impl ForwardConfig {
    pub fn new(manager: SocketAddr, hello: Hello) -> ForwardConfig {
        ForwardConfig {
            manager,
            hello,
            buffer_events: 262_144,
            channel_events: 65_536,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(2),
            tls: None,
        }
    }
}

#[derive(Default)]
struct Shared {
    events: AtomicU64,
    dropped_channel: AtomicU64,
    kernel_ringbuf_full: AtomicU64,
    /// How long the thread may go on sending once told to stop, ms.
    linger_ms: AtomicU64,
    /// The thread's counters, published every turn.
    snapshot: Mutex<AgentStats>,
}

impl Shared {
    fn stats(&self) -> AgentStats {
        let mut s = self.snapshot.lock().map(|s| *s).unwrap_or_default();
        s.events = self.events.load(Ordering::Relaxed);
        s.dropped_channel = self.dropped_channel.load(Ordering::Relaxed);
        s.kernel_ringbuf_full = self.kernel_ringbuf_full.load(Ordering::Relaxed);
        s
    }
}

/// The running forwarder.
pub struct Forwarder {
    tx: Sender<StackEvent>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    pub fn start(cfg: ForwardConfig) -> io::Result<Forwarder> {
        let (tx, rx) = bounded(cfg.channel_events.max(1));
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let poll = Poll::new()?;
        let st = State {
            poll,
            tcp: TcpOut::new(cfg.manager, Token(0), cfg.reconnect_min, cfg.reconnect_max)
                .keeping_input(),
            tls: cfg.tls,
            session: None,
            wire: Vec::new(),
            rx,
            queue: VecDeque::with_capacity(cfg.buffer_events.min(1 << 16)),
            cap: cfg.buffer_events.max(1),
            hello: cfg.hello,
            shared: shared.clone(),
            stop: stop.clone(),
            stats: AgentStats::default(),
            msg: Vec::with_capacity(proto::MAX_EVENTS_PER_FRAME * proto::EVENT_LEN + 16),
            in_flight: 0,
            hello_due: false,
            stats_due: false,
            down_logged: false,
            drop_logged: None,
        };
        let thread = std::thread::Builder::new()
            .name("xdprobe-forward".into())
            .spawn(move || st.run())?;
        Ok(Forwarder {
            tx,
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// Hands one event over; never blocks (a full hand-off is a counted drop).
    pub fn push(&self, ev: &StackEvent) {
        self.shared.events.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(*ev) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.dropped_channel.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The kernel's count of events it could not write, to report along.
    pub fn set_kernel_ringbuf_full(&self, n: u64) {
        self.shared.kernel_ringbuf_full.store(n, Ordering::Relaxed);
    }

    pub fn stats(&self) -> AgentStats {
        self.shared.stats()
    }

    /// Stops, giving the connection up to `linger` to take what is
    /// buffered; what is left counts as dropped.
    pub fn stop(mut self, linger: Duration) -> AgentStats {
        self.finish(linger);
        self.shared.stats()
    }

    fn finish(&mut self, linger: Duration) {
        let Some(t) = self.thread.take() else { return };
        self.shared
            .linger_ms
            .store(linger.as_millis() as u64, Ordering::Relaxed);
        self.stop.store(true, Ordering::Release);
        // The thread leaves by itself within `linger` and a tick.
        let _ = t.join();
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.finish(Duration::ZERO);
    }
}

/// What the TLS part of a turn left to do.
enum TlsTurn {
    /// TLS records were queued: flush them before anything else.
    Wrote,
    /// The handshake waits for the manager.
    Wait,
    /// Frames may go.
    Ready,
}

struct State {
    poll: Poll,
    tcp: TcpOut,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// This connection's TLS session.
    session: Option<ClientConnection>,
    /// TLS records to write.
    wire: Vec<u8>,
    rx: Receiver<StackEvent>,
    queue: VecDeque<StackEvent>,
    cap: usize,
    hello: Hello,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    stats: AgentStats,
    msg: Vec<u8>,
    /// Events in the message the kernel has not fully taken yet.
    in_flight: u64,
    hello_due: bool,
    stats_due: bool,
    down_logged: bool,
    drop_logged: Option<Instant>,
}

impl State {
    fn run(mut self) {
        let mut events = Events::with_capacity(16);
        let mut next_stats = Instant::now() + STATS_EVERY;
        let mut stop_at: Option<Instant> = None;
        loop {
            if let Err(e) = self.poll.poll(&mut events, Some(TICK))
                && e.kind() != io::ErrorKind::Interrupted
            {
                tracing::error!(error = %e, "forwarder poll failed");
                std::thread::sleep(TICK);
            }
            let now = Instant::now();
            for ev in events.iter() {
                if let Some(ch) = self.tcp.on_event(self.poll.registry(), ev, now) {
                    self.on_change(ch);
                }
            }
            self.drain(now);
            if now >= next_stats {
                self.stats_due = true;
                next_stats = now + STATS_EVERY;
            }
            self.pump(now);
            self.publish();
            if self.stop.load(Ordering::Acquire) {
                let linger = Duration::from_millis(self.shared.linger_ms.load(Ordering::Relaxed));
                let at = *stop_at.get_or_insert(now + linger);
                let idle = self.queue.is_empty() && self.in_flight == 0;
                if idle || now >= at || !self.tcp.is_up() {
                    break;
                }
            }
        }
        // What never left is dropped.
        self.drain(Instant::now());
        self.stats.dropped_buffer += self.queue.len() as u64 + self.in_flight;
        self.queue.clear();
        self.in_flight = 0;
        self.publish();
        self.tcp.close(self.poll.registry());
    }

    fn drain(&mut self, now: Instant) {
        while let Ok(ev) = self.rx.try_recv() {
            if self.queue.len() >= self.cap {
                self.queue.pop_front();
                self.stats.dropped_buffer += 1;
                if self
                    .drop_logged
                    .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
                {
                    tracing::warn!(
                        capacity = self.cap,
                        dropped = self.stats.dropped_buffer,
                        "manager stream: buffer full, dropping the oldest events"
                    );
                    self.drop_logged = Some(now);
                }
            }
            self.queue.push_back(ev);
        }
    }

    fn on_change(&mut self, ch: TcpChange) {
        match ch {
            TcpChange::Up => {
                self.session = match &self.tls {
                    None => None,
                    Some((c, name)) => match ClientConnection::new(c.clone(), name.clone()) {
                        Ok(mut s) => {
                            // One frame (at most proto::MAX_FRAME) is encrypted
                            // and handed to the socket's buffer at a time: no
                            // second limit below that one (rustls's default of
                            // 64 KiB would refuse a full EVENTS frame).
                            s.set_buffer_limit(None);
                            Some(s)
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "TLS session to the manager");
                            None
                        }
                    },
                };
                self.stats.connects += 1;
                self.hello_due = true;
                self.down_logged = false;
                tracing::info!(manager = %self.tcp.addr(), buffered = self.queue.len(), "connected to the manager");
            }
            TcpChange::Lost(e) => {
                self.session = None;
                self.stats.dropped_connection += self.in_flight;
                self.in_flight = 0;
                if self.down_logged {
                    tracing::debug!(error = %e, "manager still unreachable");
                } else {
                    tracing::warn!(manager = %self.tcp.addr(), error = %e, buffered = self.queue.len(),
                        "manager connection down; buffering events and retrying");
                    self.down_logged = true;
                }
            }
        }
    }

    /// Moves frames to the connection as far as it takes them.
    fn pump(&mut self, now: Instant) {
        if let Some(ch) = self.tcp.tick(self.poll.registry(), now) {
            self.on_change(ch);
        }
        // Bounded: each round sends one frame or stops.
        for _ in 0..1024 {
            if !self.tcp.is_up() {
                return;
            }
            match self.tcp.flush(self.poll.registry(), now) {
                Ok(true) => {
                    self.stats.sent += self.in_flight;
                    self.in_flight = 0;
                }
                Ok(false) => return,
                Err(ch) => return self.on_change(ch),
            }
            if let Some(ch) = self.tcp.check_alive(self.poll.registry(), now) {
                return self.on_change(ch);
            }
            match self.tls_turn(now) {
                Err(ch) => return self.on_change(ch),
                Ok(TlsTurn::Wrote) => {
                    self.in_flight = 0;
                    continue;
                }
                Ok(TlsTurn::Wait) => return,
                Ok(TlsTurn::Ready) => {}
            }
            self.msg.clear();
            let mut n = 0u64;
            if self.hello_due {
                proto::encode_hello(&self.hello, &mut self.msg);
                self.hello_due = false;
            } else if self.stats_due {
                let mut s = self.stats;
                s.buffered = self.queue.len() as u64;
                s.events = self.shared.events.load(Ordering::Relaxed);
                s.dropped_channel = self.shared.dropped_channel.load(Ordering::Relaxed);
                s.kernel_ringbuf_full = self.shared.kernel_ringbuf_full.load(Ordering::Relaxed);
                proto::encode_stats(&s, &mut self.msg);
                self.stats_due = false;
            } else if !self.queue.is_empty() {
                let k = self.queue.len().min(proto::MAX_EVENTS_PER_FRAME);
                n = proto::encode_events(self.queue.range(..k), &mut self.msg) as u64;
                self.queue.drain(..k);
            } else {
                return;
            }
            match self.session.as_mut() {
                None => self.tcp.push(&self.msg),
                Some(s) => {
                    if let Err(e) = s.writer().write_all(&self.msg) {
                        let ch = self.tcp.reset(self.poll.registry(), now, e);
                        self.stats.dropped_buffer += n;
                        return self.on_change(ch);
                    }
                    self.wire.clear();
                    while s.wants_write() {
                        if s.write_tls(&mut self.wire).is_err() {
                            break;
                        }
                    }
                    self.tcp.push(&self.wire);
                }
            }
            self.in_flight = n;
        }
    }

    /// TLS's own part of a turn: what the manager sent goes into the
    /// session, what the session has to say (handshake) goes out first,
    /// and frames wait for the handshake to finish.
    fn tls_turn(&mut self, now: Instant) -> Result<TlsTurn, TcpChange> {
        let Some(s) = self.session.as_mut() else {
            return Ok(TlsTurn::Ready);
        };
        let input = self.tcp.take_input();
        let mut rd = &input[..];
        let mut failed = None;
        while !rd.is_empty() {
            if let Err(e) = s.read_tls(&mut rd) {
                failed = Some(e);
                break;
            }
            if let Err(e) = s.process_new_packets() {
                failed = Some(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("TLS: {e}"),
                ));
                break;
            }
        }
        // The manager sends no application data; anything is discarded.
        let mut sink = [0u8; 512];
        while matches!(s.reader().read(&mut sink), Ok(n) if n > 0) {}
        self.wire.clear();
        while s.wants_write() {
            if s.write_tls(&mut self.wire).is_err() {
                break;
            }
        }
        if let Some(e) = failed {
            // The alert, best effort, before the connection goes.
            if !self.wire.is_empty() {
                self.tcp.push(&self.wire);
                let _ = self.tcp.flush(self.poll.registry(), now);
            }
            tracing::warn!(manager = %self.tcp.addr(), error = %e, "TLS with the manager failed");
            return Err(self.tcp.reset(self.poll.registry(), now, e));
        }
        if !self.wire.is_empty() {
            self.tcp.push(&self.wire);
            return Ok(TlsTurn::Wrote);
        }
        if s.is_handshaking() {
            return Ok(TlsTurn::Wait);
        }
        Ok(TlsTurn::Ready)
    }

    fn publish(&mut self) {
        self.stats.buffered = self.queue.len() as u64 + self.in_flight;
        if let Ok(mut s) = self.shared.snapshot.lock() {
            *s = self.stats;
        }
    }
}
