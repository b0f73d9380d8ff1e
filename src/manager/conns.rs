//! The agents' connections: one listening socket and every agent's
//! stream, non-blocking on the manager's mio loop. Bytes become frames
//! here (`fleet::proto::FrameReader`); what they mean is the fleet core's
//! business. A broken stream is dropped (the agent reconnects); a second
//! connection under a name replaces the first.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::SocketAddr;

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use xdprobe_common::host::StackEvent;
use xdprobe_host::fleet::proto::{self, AgentStats, Frame, FrameReader, Hello};

pub const LISTENER: Token = Token(0);
/// Bytes read from one connection per readiness event before the others
/// get their turn.
const READ_BUDGET: usize = 8 << 20;

/// What the connections brought.
pub enum Incoming {
    Hello(Hello),
    Events(String, Vec<StackEvent>),
    Stats(String, AgentStats),
    /// The agent's (current) connection is gone.
    Gone(String),
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    reader: FrameReader,
    agent: Option<String>,
}

pub struct Conns {
    listener: TcpListener,
    conns: HashMap<Token, Conn>,
    /// The connection each agent speaks on now.
    current: HashMap<String, Token>,
    next: usize,
    max: usize,
    buf: Vec<u8>,
    pub refused: u64,
    pub broken: u64,
}

impl Conns {
    pub fn bind(addr: SocketAddr, reg: &Registry, max: usize) -> io::Result<Conns> {
        let mut listener = TcpListener::bind(addr)?;
        reg.register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Conns {
            listener,
            conns: HashMap::new(),
            current: HashMap::new(),
            next: 1,
            max,
            buf: vec![0; 1 << 16],
            refused: 0,
            broken: 0,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn connected(&self) -> usize {
        self.current.len()
    }

    pub fn on_event(&mut self, reg: &Registry, ev: &mio::event::Event, out: &mut Vec<Incoming>) {
        if ev.token() == LISTENER {
            self.accept(reg);
            return;
        }
        let token = ev.token();
        if let Err(why) = self.read(token, out) {
            self.close(reg, token, &why, out);
        }
    }

    fn accept(&mut self, reg: &Registry) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, peer)) => {
                    if self.conns.len() >= self.max {
                        self.refused += 1;
                        tracing::warn!(%peer, "too many agent connections: refused");
                        continue;
                    }
                    let token = Token(self.next);
                    self.next += 1;
                    if reg
                        .register(&mut stream, token, Interest::READABLE)
                        .is_err()
                    {
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    tracing::debug!(%peer, "agent connection");
                    self.conns.insert(
                        token,
                        Conn {
                            stream,
                            peer,
                            reader: FrameReader::default(),
                            agent: None,
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

    /// Reads what is there; `Err` when the connection must go.
    fn read(&mut self, token: Token, out: &mut Vec<Incoming>) -> Result<(), String> {
        let Some(c) = self.conns.get_mut(&token) else {
            return Ok(());
        };
        let mut budget = READ_BUDGET;
        while budget > 0 {
            match c.stream.read(&mut self.buf) {
                Ok(0) => return Err("closed by the agent".into()),
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    c.reader.push(&self.buf[..n]);
                    loop {
                        match c.reader.next_frame() {
                            Ok(Some(f)) => frame(c, f, &mut self.current, token, out)?,
                            Ok(None) => break,
                            Err(e) => return Err(format!("broken stream: {e}")),
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }

    fn close(&mut self, reg: &Registry, token: Token, why: &str, out: &mut Vec<Incoming>) {
        let Some(mut c) = self.conns.remove(&token) else {
            return;
        };
        let _ = reg.deregister(&mut c.stream);
        if let Some(a) = c.agent {
            tracing::info!(agent = %a, peer = %c.peer, reason = why, "agent disconnected");
            if self.current.get(&a) == Some(&token) {
                self.current.remove(&a);
                out.push(Incoming::Gone(a));
            }
        } else {
            self.broken += 1;
            tracing::warn!(peer = %c.peer, reason = why, "connection closed before a hello");
        }
    }
}

fn frame(
    c: &mut Conn,
    f: Frame,
    current: &mut HashMap<String, Token>,
    token: Token,
    out: &mut Vec<Incoming>,
) -> Result<(), String> {
    match (f, &c.agent) {
        (Frame::Hello(h), None) => {
            if h.version != proto::VERSION {
                return Err(format!(
                    "protocol version {} (this manager speaks {})",
                    h.version,
                    proto::VERSION
                ));
            }
            if h.agent.is_empty() || h.agent.len() > 255 {
                return Err("agent name empty or longer than 255 bytes".into());
            }
            tracing::info!(agent = %h.agent, peer = %c.peer, sync = ?h.sync, "agent connected");
            c.agent = Some(h.agent.clone());
            current.insert(h.agent.clone(), token);
            out.push(Incoming::Hello(h));
            Ok(())
        }
        (Frame::Hello(_), Some(_)) => Err("a second hello".into()),
        (_, None) => Err("data before the hello".into()),
        (Frame::Events(evs), Some(a)) => {
            // A replaced connection's late bytes are not this agent's now.
            if current.get(a) == Some(&token) {
                out.push(Incoming::Events(a.clone(), evs));
            }
            Ok(())
        }
        (Frame::Stats(s), Some(a)) => {
            if current.get(a) == Some(&token) {
                out.push(Incoming::Stats(a.clone(), s));
            }
            Ok(())
        }
    }
}
