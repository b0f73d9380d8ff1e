//! The agents' connections: one listening socket and every agent's
//! stream, non-blocking on the manager's mio loop. Bytes become frames
//! here (`session` for TLS, `fleet::proto::FrameReader`); who may speak
//! as whom is `fleet::admit`'s rule; what frames mean is the fleet core's
//! business.
//!
//! What a connection may cost is bounded: a HELLO within `hello_timeout`
//! (frames of at most `proto::MAX_HELLO` until then), silence for at most
//! `agent_timeout`, frames of at most `max_frame`, and all connections'
//! partial frames together (with the fleet's waiting events) within
//! `memory_limit`: the connection whose read would pass it is closed.
//! Connections that have not said HELLO are capped at `max_pending`; a new
//! one beyond pushes the oldest out, so idle sockets cannot lock agents
//! out. Every refusal is counted by reason (`ConnCounters`).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use xdprobe_common::host::StackEvent;
use xdprobe_host::fleet::admit::{self, Admitted, Auth};
use xdprobe_host::fleet::metrics::ConnCounters;
use xdprobe_host::fleet::proto::{self, AgentStats, Frame, FrameReader, Hello};
use xdprobe_host::fleet::tls::rustls::ServerConfig;

use super::session::{Got, Session, TLS_COST};

pub const LISTENER: Token = Token(0);
/// Bytes read from one connection per readiness event before the others
/// get their turn.
const READ_BUDGET: usize = 8 << 20;

/// What the connections brought.
pub enum Incoming {
    /// A HELLO, admitted; `sync` already replaced by the address derived
    /// from the connection.
    Hello(Hello),
    Events(String, Vec<StackEvent>),
    Stats(String, AgentStats),
    /// The agent's (current) connection is gone.
    Gone(String),
}

/// The bounds (config `[manager]`).
#[derive(Clone, Debug)]
pub struct Limits {
    pub hello_timeout: Duration,
    pub agent_timeout: Duration,
    pub max_frame: usize,
    pub memory_limit: usize,
    /// Connections before their HELLO.
    pub max_pending: usize,
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    session: Session,
    reader: FrameReader,
    agent: Option<String>,
    opened: Instant,
    last_rx: Instant,
    /// Bytes charged to the memory limit now.
    charged: usize,
}

pub struct Conns {
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    limits: Limits,
    conns: HashMap<Token, Conn>,
    /// The connection each agent speaks on now.
    current: HashMap<String, Token>,
    next: usize,
    buf: Vec<u8>,
    plain: Vec<u8>,
    /// Bytes all connections hold (partial frames, TLS buffers).
    charged: usize,
    pub counters: ConnCounters,
}

impl Conns {
    pub fn bind(
        addr: SocketAddr,
        reg: &Registry,
        tls: Option<Arc<ServerConfig>>,
        limits: Limits,
    ) -> io::Result<Conns> {
        let mut listener = TcpListener::bind(addr)?;
        reg.register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Conns {
            listener,
            tls,
            limits,
            conns: HashMap::new(),
            current: HashMap::new(),
            next: 1,
            buf: vec![0; 1 << 16],
            plain: Vec::with_capacity(1 << 16),
            charged: 0,
            counters: ConnCounters::default(),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn connected(&self) -> usize {
        self.current.len()
    }

    /// Bytes the connections hold now.
    pub fn charged(&self) -> usize {
        self.charged
    }

    pub fn on_event(
        &mut self,
        reg: &Registry,
        ev: &mio::event::Event,
        fleet_bytes: usize,
        out: &mut Vec<Incoming>,
    ) {
        if ev.token() == LISTENER {
            self.accept(reg, out);
            return;
        }
        let token = ev.token();
        if let Err((reason, why)) = self.pump(token, fleet_bytes, out) {
            self.close(reg, token, reason, &why, out);
        }
    }

    fn accept(&mut self, reg: &Registry, out: &mut Vec<Incoming>) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, peer)) => {
                    let pending = self.conns.values().filter(|c| c.agent.is_none()).count();
                    if pending >= self.limits.max_pending {
                        // The oldest silent one makes room: a flood of
                        // idle sockets cannot keep an agent out.
                        if let Some(t) = self
                            .conns
                            .iter()
                            .filter(|(_, c)| c.agent.is_none())
                            .min_by_key(|(_, c)| c.opened)
                            .map(|(t, _)| *t)
                        {
                            self.counters.pending_evicted += 1;
                            self.close(
                                reg,
                                t,
                                "evicted",
                                "too many connections without a HELLO: the oldest makes room",
                                out,
                            );
                        }
                    }
                    let session = match Session::new(self.tls.as_ref()) {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "TLS session");
                            continue;
                        }
                    };
                    let token = Token(self.next);
                    self.next += 1;
                    if reg
                        .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                        .is_err()
                    {
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    tracing::debug!(%peer, "agent connection");
                    self.counters.accepted += 1;
                    let now = Instant::now();
                    let charged = if session.is_tls() { TLS_COST } else { 0 };
                    self.charged += charged;
                    self.conns.insert(
                        token,
                        Conn {
                            stream,
                            peer,
                            session,
                            reader: FrameReader::with_limit(proto::MAX_HELLO),
                            agent: None,
                            opened: now,
                            last_rx: now,
                            charged,
                        },
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an agent connection");
                    return;
                }
            }
        }
    }

    /// Reads and writes what is there; `Err((reason, why))` when the
    /// connection must go.
    fn pump(
        &mut self,
        token: Token,
        fleet_bytes: usize,
        out: &mut Vec<Incoming>,
    ) -> Result<(), (&'static str, String)> {
        let Some(c) = self.conns.get_mut(&token) else {
            return Ok(());
        };
        let mut budget = READ_BUDGET;
        let mut result = Ok(());
        while budget > 0 {
            self.plain.clear();
            let got = c
                .session
                .read(&mut c.stream, &mut self.buf, &mut self.plain);
            let got = match got {
                Ok(g) => g,
                Err(e) => {
                    let reason = if e.kind() == io::ErrorKind::PermissionDenied {
                        "tls"
                    } else {
                        "broken"
                    };
                    result = Err((reason, e.to_string()));
                    break;
                }
            };
            if !self.plain.is_empty() {
                c.last_rx = Instant::now();
                budget = budget.saturating_sub(self.plain.len());
                // Memory: what this connection would hold after the bytes.
                let after = c
                    .reader
                    .would_hold(self.plain.len())
                    .max(c.reader.capacity());
                let others = self.charged - c.charged;
                let tls = if c.session.is_tls() { TLS_COST } else { 0 };
                if others + after + tls + fleet_bytes > self.limits.memory_limit {
                    result = Err((
                        "memory",
                        format!(
                            "the connections' memory limit ({} bytes) is reached",
                            self.limits.memory_limit
                        ),
                    ));
                    break;
                }
                c.reader.push(&self.plain);
                let r = frames(
                    c,
                    &mut self.current,
                    token,
                    &mut self.counters,
                    self.limits.max_frame,
                    out,
                );
                let now_charged = c.reader.capacity() + tls;
                self.charged = self.charged - c.charged + now_charged;
                c.charged = now_charged;
                if let Err(e) = r {
                    result = Err(e);
                    break;
                }
            }
            match got {
                Got::Data => {}
                Got::Blocked => break,
                Got::Closed => {
                    result = Err(("closed", "closed by the agent".into()));
                    break;
                }
            }
        }
        if let Err(e) = c.session.write(&mut c.stream)
            && result.is_ok()
        {
            result = Err(("broken", e.to_string()));
        }
        result
    }

    /// Times connections out: no HELLO within `hello_timeout`, or silent
    /// for `agent_timeout`.
    pub fn tick(&mut self, reg: &Registry, now: Instant, out: &mut Vec<Incoming>) {
        let mut late = Vec::new();
        for (t, c) in &self.conns {
            if c.agent.is_none() && now.duration_since(c.opened) >= self.limits.hello_timeout {
                late.push((*t, "hello_timeout"));
            } else if now.duration_since(c.last_rx) >= self.limits.agent_timeout {
                late.push((*t, "idle"));
            }
        }
        for (t, reason) in late {
            let why = if reason == "idle" {
                format!("silent for {:?}", self.limits.agent_timeout)
            } else {
                format!("no HELLO within {:?}", self.limits.hello_timeout)
            };
            self.close(reg, t, reason, &why, out);
        }
    }

    /// Closes `agent`'s connection: the fleet refused it.
    pub fn refuse(&mut self, reg: &Registry, agent: &str, out: &mut Vec<Incoming>) {
        if let Some(t) = self.current.get(agent).copied() {
            self.close(
                reg,
                t,
                "too_many_agents",
                "the manager remembers max_agents agents already",
                out,
            );
        }
    }

    fn close(
        &mut self,
        reg: &Registry,
        token: Token,
        reason: &'static str,
        why: &str,
        out: &mut Vec<Incoming>,
    ) {
        let Some(mut c) = self.conns.remove(&token) else {
            return;
        };
        self.charged -= c.charged;
        self.counters.count_close(reason);
        let _ = c.session.write(&mut c.stream);
        let _ = reg.deregister(&mut c.stream);
        if let Some(a) = c.agent {
            tracing::info!(agent = %a, peer = %c.peer, reason = why, "agent disconnected");
            if self.current.get(&a) == Some(&token) {
                self.current.remove(&a);
                out.push(Incoming::Gone(a));
            }
        } else {
            tracing::warn!(peer = %c.peer, reason = why, "connection closed before a hello");
        }
        if c.charged > 1 << 20 {
            trim();
        }
    }

    /// Closes connections that [`frames`] marked as taken over.
    pub fn reap(&mut self, reg: &Registry, out: &mut Vec<Incoming>) {
        let old: Vec<Token> = self
            .conns
            .iter()
            .filter(|(t, c)| {
                c.agent
                    .as_ref()
                    .is_some_and(|a| self.current.get(a).is_some_and(|cur| cur != *t))
            })
            .map(|(t, _)| *t)
            .collect();
        for t in old {
            self.close(
                reg,
                t,
                "taken_over",
                "a new authenticated connection took over",
                out,
            );
        }
    }
}

/// Gives freed heap pages back to the kernel (glibc keeps them for the
/// next allocation otherwise: a thousand closed connections' buffers would
/// stay resident).
fn trim() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe { libc::malloc_trim(0) };
}

/// Every complete frame of `c`.
fn frames(
    c: &mut Conn,
    current: &mut HashMap<String, Token>,
    token: Token,
    n: &mut ConnCounters,
    max_frame: usize,
    out: &mut Vec<Incoming>,
) -> Result<(), (&'static str, String)> {
    loop {
        let f = match c.reader.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(()),
            Err(e @ proto::ProtoError::TooLong(_)) => {
                return Err(("frame_too_long", e.to_string()));
            }
            Err(e) => return Err(("broken", format!("broken stream: {e}"))),
        };
        match (f, &c.agent) {
            (Frame::Hello(h), None) => {
                if c.session.is_tls() && c.session.peer_cert().is_none() {
                    return Err(("tls", "HELLO before the TLS handshake completed".into()));
                }
                hello(c, h, current, token, n, out)?;
                c.reader.set_limit(max_frame);
            }
            (Frame::Hello(_), Some(_)) => return Err(("broken", "a second hello".into())),
            (_, None) => return Err(("broken", "data before the hello".into())),
            (Frame::Events(evs), Some(a)) => {
                if current.get(a) == Some(&token) {
                    out.push(Incoming::Events(a.clone(), evs));
                }
            }
            (Frame::Stats(s), Some(a)) => {
                if !admit::valid_stats(&s) {
                    n.stats_invalid += 1;
                    tracing::warn!(agent = %a, stats = ?s, "STATS values that cannot be true: ignored");
                } else if current.get(a) == Some(&token) {
                    out.push(Incoming::Stats(a.clone(), s));
                }
            }
        }
    }
}

fn hello(
    c: &mut Conn,
    mut h: Hello,
    current: &mut HashMap<String, Token>,
    token: Token,
    n: &mut ConnCounters,
    out: &mut Vec<Incoming>,
) -> Result<(), (&'static str, String)> {
    let auth = match c.session.peer_cert() {
        Some(cert) => Auth::Cert(cert),
        None => Auth::Insecure,
    };
    let live = current.contains_key(&h.agent);
    let admitted = admit::admit(&h, auth, live).map_err(|e| {
        let reason = match e {
            admit::Refusal::CertName(_) => "cert_name",
            admit::Refusal::Connected(_) => "name_taken",
            _ => "broken",
        };
        (reason, e.to_string())
    })?;
    let (sync, claimed) = admit::sync_target(&h, c.peer.ip());
    if let Some(other) = claimed {
        n.sync_redirects += 1;
        tracing::warn!(agent = %h.agent, peer = %c.peer, claimed = %other, used = ?sync,
            "the HELLO named another clock-sync address than the connection's: probing the connection's");
    }
    h.sync = sync.map(|s| s.to_string());
    if admitted == Admitted::TakeOver {
        n.takeovers += 1;
        tracing::info!(agent = %h.agent, peer = %c.peer, "authenticated reconnection: takes over the agent's session");
    }
    tracing::info!(agent = %h.agent, peer = %c.peer, sync = ?h.sync, tls = c.session.is_tls(), "agent connected");
    c.agent = Some(h.agent.clone());
    current.insert(h.agent.clone(), token);
    out.push(Incoming::Hello(h));
    Ok(())
}
