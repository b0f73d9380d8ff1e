//! TCP: a non-blocking connection with reconnect and exponential backoff.
//!
//! Readiness comes from mio. A closed peer is noticed two ways: a READABLE
//! event that reads EOF, and a `peek` right before each new message, so
//! that as few bytes as possible are written into a connection the
//! collector has already left (those bytes would be accepted by the kernel
//! and then lost).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

enum State {
    Down { retry_at: Instant },
    Connecting(TcpStream),
    Up(TcpStream),
}

/// A change the link must react to.
#[derive(Debug)]
pub enum Change {
    /// Connected: send templates first.
    Up,
    /// The connection is gone; any partially written message is lost.
    Lost(io::Error),
}

pub struct TcpOut {
    addr: SocketAddr,
    token: Token,
    state: State,
    min_backoff: Duration,
    max_backoff: Duration,
    backoff: Duration,
    out: Vec<u8>,
    out_pos: usize,
    /// Keep what the peer sends (for a TLS session on top) instead of
    /// discarding it; at most [`MAX_INPUT`] bytes between two takes.
    keep_input: bool,
    input: Vec<u8>,
}

/// Bytes of peer input kept between two [`TcpOut::take_input`] calls; a
/// peer sending more is dropped (a collector or manager says little).
pub const MAX_INPUT: usize = 1 << 20;

impl TcpOut {
    pub fn new(
        addr: SocketAddr,
        token: Token,
        min_backoff: Duration,
        max_backoff: Duration,
    ) -> Self {
        TcpOut {
            addr,
            token,
            state: State::Down {
                retry_at: Instant::now(),
            },
            min_backoff,
            max_backoff: max_backoff.max(min_backoff),
            backoff: min_backoff,
            out: Vec::with_capacity(1 << 16),
            out_pos: 0,
            keep_input: false,
            input: Vec::new(),
        }
    }

    /// What the peer sends is kept for [`take_input`](Self::take_input)
    /// (a TLS session's records) rather than discarded.
    pub fn keeping_input(mut self) -> Self {
        self.keep_input = true;
        self
    }

    /// The peer's bytes since the last call (with `keeping_input`).
    pub fn take_input(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.input)
    }

    /// Drops the connection for a reason found above the transport (a
    /// failed TLS handshake); reconnects after the backoff.
    pub fn reset(&mut self, reg: &Registry, now: Instant, e: io::Error) -> Change {
        self.go_down(reg, now);
        Change::Lost(e)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn is_up(&self) -> bool {
        matches!(self.state, State::Up(_))
    }

    /// Bytes of a message not yet accepted by the kernel.
    pub fn has_pending(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// When the next connect attempt is due (for the poll timeout).
    pub fn retry_at(&self) -> Option<Instant> {
        match self.state {
            State::Down { retry_at } => Some(retry_at),
            _ => None,
        }
    }

    fn go_down(&mut self, reg: &Registry, now: Instant) {
        let old = std::mem::replace(
            &mut self.state,
            State::Down {
                retry_at: now + self.backoff,
            },
        );
        if let State::Connecting(mut s) | State::Up(mut s) = old {
            // Deregistering a socket we are about to drop cannot matter.
            let _ = reg.deregister(&mut s);
        }
        self.backoff = (self.backoff * 2).min(self.max_backoff);
        self.out.clear();
        self.out_pos = 0;
        self.input.clear();
    }

    /// Start a connection attempt if one is due.
    pub fn tick(&mut self, reg: &Registry, now: Instant) -> Option<Change> {
        let State::Down { retry_at } = self.state else {
            return None;
        };
        if now < retry_at {
            return None;
        }
        match TcpStream::connect(self.addr) {
            Ok(mut s) => {
                if let Err(e) =
                    reg.register(&mut s, self.token, Interest::READABLE | Interest::WRITABLE)
                {
                    self.go_down(reg, now);
                    return Some(Change::Lost(e));
                }
                self.state = State::Connecting(s);
                None
            }
            Err(e) => {
                self.go_down(reg, now);
                Some(Change::Lost(e))
            }
        }
    }

    /// Handle a readiness event for this collector's token.
    pub fn on_event(
        &mut self,
        reg: &Registry,
        ev: &mio::event::Event,
        now: Instant,
    ) -> Option<Change> {
        match &mut self.state {
            State::Down { .. } => None,
            State::Connecting(s) => {
                if let Some(e) = connect_error(s) {
                    self.go_down(reg, now);
                    return Some(Change::Lost(e));
                }
                if !ev.is_writable() && !ev.is_readable() {
                    return None;
                }
                match s.peer_addr() {
                    Ok(_) => {
                        let _ = s.set_nodelay(true);
                        let State::Connecting(s) =
                            std::mem::replace(&mut self.state, State::Down { retry_at: now })
                        else {
                            return None;
                        };
                        self.state = State::Up(s);
                        self.backoff = self.min_backoff;
                        Some(Change::Up)
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
                    Err(e) => {
                        self.go_down(reg, now);
                        Some(Change::Lost(e))
                    }
                }
            }
            State::Up(_) => {
                if (ev.is_readable() || ev.is_read_closed() || ev.is_error())
                    && let Some(e) = self.drain_input()
                {
                    self.go_down(reg, now);
                    return Some(Change::Lost(e));
                }
                None
            }
        }
    }

    /// Collectors send nothing on an IPFIX TCP session: read and discard
    /// (or keep, `keeping_input`), and report EOF or an error as a lost
    /// connection.
    fn drain_input(&mut self) -> Option<io::Error> {
        let State::Up(s) = &mut self.state else {
            return None;
        };
        let mut scratch = [0u8; 4096];
        loop {
            match s.read(&mut scratch) {
                Ok(0) => {
                    return Some(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the connection",
                    ));
                }
                Ok(n) if self.keep_input => {
                    if self.input.len() + n > MAX_INPUT {
                        return Some(io::Error::other("the peer sends more than expected"));
                    }
                    self.input.extend_from_slice(&scratch[..n]);
                }
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(e),
            }
        }
    }

    /// True if the peer has closed (checked before starting a message).
    pub fn check_alive(&mut self, reg: &Registry, now: Instant) -> Option<Change> {
        let State::Up(s) = &mut self.state else {
            return None;
        };
        let mut b = [0u8; 1];
        let gone = match s.peek(&mut b) {
            Ok(0) => Some(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "collector closed the connection",
            )),
            Ok(_) => self.drain_input(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(e) => Some(e),
        };
        gone.map(|e| {
            self.go_down(reg, now);
            Change::Lost(e)
        })
    }

    /// Take one message's bytes; only call when up and nothing is pending.
    pub fn push(&mut self, msg: &[u8]) {
        if self.out_pos >= self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        self.out.extend_from_slice(msg);
    }

    /// Write what is pending. `Ok(true)`: all written; `Ok(false)`: the
    /// socket is full, wait for WRITABLE.
    pub fn flush(&mut self, reg: &Registry, now: Instant) -> Result<bool, Change> {
        let State::Up(s) = &mut self.state else {
            return Ok(!self.has_pending());
        };
        while self.out_pos < self.out.len() {
            let Some(chunk) = self.out.get(self.out_pos..) else {
                break;
            };
            match s.write(chunk) {
                Ok(0) => {
                    self.go_down(reg, now);
                    return Err(Change::Lost(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "write returned 0",
                    )));
                }
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.go_down(reg, now);
                    return Err(Change::Lost(e));
                }
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(true)
    }

    /// Drop the connection (shutdown or reconfiguration).
    pub fn close(&mut self, reg: &Registry) {
        if let State::Connecting(s) | State::Up(s) = &mut self.state {
            let _ = reg.deregister(s);
        }
        self.state = State::Down {
            retry_at: Instant::now() + self.max_backoff,
        };
    }
}

/// A failed non-blocking connect reports through SO_ERROR.
fn connect_error(s: &TcpStream) -> Option<io::Error> {
    match s.take_error() {
        Ok(Some(e)) | Err(e) => Some(e),
        Ok(None) => None,
    }
}
