//! The manager's side of clock sync: a burst of timing probes to one
//! agent's responder, each timed on the manager's `CLOCK_MONOTONIC`.
//!
//! The reply is awaited by spinning on a non-blocking socket for a short
//! while (then sleeping in poll(2)): waking a sleeping thread costs tens of
//! µs on a VM, all of it on the return leg, and the estimate's error is
//! half the asymmetry between the legs. Probes go one at a time, so a
//! burst costs the manager about `burst × (RTT + gap)` of one core.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::clock::monotonic_ns;
use crate::sync::estimate::Exchange;
use crate::sync::wire::Probe;

/// How a burst is sent.
#[derive(Clone, Copy, Debug)]
pub struct BurstConfig {
    /// Probes per burst.
    pub probes: usize,
    /// Pause between one reply (or timeout) and the next probe.
    pub gap: Duration,
    /// How long a reply may take before the probe counts as lost.
    pub timeout: Duration,
    /// How long to spin for a reply before sleeping in poll(2).
    pub spin: Duration,
}

impl Default for BurstConfig {
    fn default() -> Self {
        BurstConfig {
            probes: 16,
            gap: Duration::from_micros(500),
            timeout: Duration::from_millis(50),
            spin: Duration::from_millis(2),
        }
    }
}

/// What one burst brought back.
#[derive(Clone, Debug, Default)]
pub struct Burst {
    pub exchanges: Vec<Exchange>,
    pub sent: usize,
    pub lost: usize,
    /// Replies that were not ours (wrong session or sequence, stale).
    pub stray: usize,
}

/// One UDP socket per address family, reused for every agent.
pub struct Prober {
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
    session: u32,
    seq: u32,
    buf: [u8; 128],
}

fn open(bind: &str) -> Option<UdpSocket> {
    let s = UdpSocket::bind(bind).ok()?;
    s.set_nonblocking(true).ok()?;
    Some(s)
}

impl Prober {
    /// `session` tells this manager's probes from an earlier run's.
    pub fn new(session: u32) -> io::Result<Prober> {
        let v4 = open("0.0.0.0:0");
        let v6 = open("[::]:0");
        if v4.is_none() && v6.is_none() {
            return Err(io::Error::other("no UDP socket for the timing probes"));
        }
        Ok(Prober {
            v4,
            v6,
            session,
            seq: 0,
            buf: [0; 128],
        })
    }

    /// Sends `cfg.probes` probes to `target`, one after the other.
    pub fn burst(&mut self, target: SocketAddr, cfg: &BurstConfig) -> io::Result<Burst> {
        let sock = match target {
            SocketAddr::V4(_) => self.v4.take(),
            SocketAddr::V6(_) => self.v6.take(),
        }
        .ok_or_else(|| io::Error::other(format!("no socket for {target}")))?;
        let r = self.burst_on(&sock, target, cfg);
        match target {
            SocketAddr::V4(_) => self.v4 = Some(sock),
            SocketAddr::V6(_) => self.v6 = Some(sock),
        }
        r
    }

    fn burst_on(
        &mut self,
        s: &UdpSocket,
        target: SocketAddr,
        cfg: &BurstConfig,
    ) -> io::Result<Burst> {
        let mut out = Burst::default();
        // Replies of an earlier, timed-out burst.
        while s.recv_from(&mut self.buf).is_ok() {
            out.stray += 1;
        }
        for _ in 0..cfg.probes {
            self.seq = self.seq.wrapping_add(1);
            let t1 = monotonic_ns();
            let msg = Probe::request(self.session, self.seq, t1).encode();
            s.send_to(&msg, target)?;
            out.sent += 1;
            match self.await_reply(s, target, t1, cfg, &mut out.stray) {
                Some(e) => out.exchanges.push(e),
                None => out.lost += 1,
            }
            std::thread::sleep(cfg.gap);
        }
        Ok(out)
    }

    fn await_reply(
        &mut self,
        s: &UdpSocket,
        target: SocketAddr,
        t1: u64,
        cfg: &BurstConfig,
        stray: &mut usize,
    ) -> Option<Exchange> {
        let start = Instant::now();
        loop {
            match s.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    let t4 = monotonic_ns();
                    let p = self.buf.get(..n).and_then(Probe::decode);
                    match p {
                        Some(p)
                            if p.answered
                                && p.session == self.session
                                && p.seq == self.seq
                                && from.ip() == target.ip() =>
                        {
                            return Some(Exchange {
                                t1,
                                t2: p.t2,
                                t3: p.t3,
                                t4,
                            });
                        }
                        _ => *stray += 1,
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // ICMP unreachable and the like: this probe is lost.
                Err(_) => return None,
            }
            let waited = start.elapsed();
            if waited >= cfg.timeout {
                return None;
            }
            if waited >= cfg.spin {
                crate::poll::wait_readable(s.as_raw_fd(), cfg.timeout - waited);
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
