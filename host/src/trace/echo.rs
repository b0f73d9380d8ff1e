//! The active mode: marked UDP probes sent at a set rate to a listener
//! that returns them, so both directions of a known packet cross the
//! kernels being traced. The mark lets the trails say which probe and
//! direction they are (`record::ProbeRecord`) and lets the sender time
//! each round trip itself, the reference the trails can be held to.
//!
//! Payload (big-endian): `XDPQ` (request) or `XDPR` (reply), run ID
//! (u32, random per sender run), sequence (u32), the sender's send time
//! (u64, CLOCK_MONOTONIC ns), then zero padding to the probe size.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::stack::stats::Samples;

const REQUEST: &[u8; 4] = b"XDPQ";
const REPLY: &[u8; 4] = b"XDPR";
/// Bytes of the mark; probes are at least this big.
pub const MARK_LEN: usize = 20;
/// Largest probe payload (one unfragmented datagram on a 1500-byte MTU).
pub const MAX_SIZE: usize = 1472;
/// Most probes one sender run sends.
pub const MAX_COUNT: u32 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Request,
    Reply,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Request => "request",
            Direction::Reply => "reply",
        }
    }
}

/// Writes a request mark into `buf` (at least `MARK_LEN` bytes).
pub fn write_mark(buf: &mut [u8], run: u32, seq: u32, sent_ns: u64) {
    buf[..4].copy_from_slice(REQUEST);
    buf[4..8].copy_from_slice(&run.to_be_bytes());
    buf[8..12].copy_from_slice(&seq.to_be_bytes());
    buf[12..20].copy_from_slice(&sent_ns.to_be_bytes());
}

/// `(run, seq, direction)` of a marked payload (only its first 12 bytes
/// are needed: trails keep few bytes).
pub fn parse_mark(p: &[u8]) -> Option<(u32, u32, Direction)> {
    let dir = match p.get(..4)? {
        m if m == REQUEST => Direction::Request,
        m if m == REPLY => Direction::Reply,
        _ => return None,
    };
    let run = u32::from_be_bytes(p.get(4..8)?.try_into().ok()?);
    let seq = u32::from_be_bytes(p.get(8..12)?.try_into().ok()?);
    Some((run, seq, dir))
}

fn sent_ns(p: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(p.get(12..20)?.try_into().ok()?))
}

/// What a listener did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenStats {
    pub echoed: u64,
    /// Datagrams without a request mark: not answered.
    pub ignored: u64,
}

/// Returns every marked request arriving on `sock` to its sender, as a
/// reply, until `stop` is set or `duration` passes.
pub fn listen(
    sock: &UdpSocket,
    duration: Option<Duration>,
    stop: &AtomicBool,
) -> io::Result<ListenStats> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let started = Instant::now();
    let mut st = ListenStats::default();
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) && duration.is_none_or(|d| started.elapsed() < d) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let p = &mut buf[..n];
        if !matches!(parse_mark(p), Some((_, _, Direction::Request))) {
            st.ignored += 1;
            continue;
        }
        p[..4].copy_from_slice(REPLY);
        // A reply that cannot be sent (no buffer, no route) is the
        // sender's lost probe: it counts what came back.
        if sock.send_to(p, from).is_ok() {
            st.echoed += 1;
        }
    }
    Ok(st)
}

/// How a sender runs.
#[derive(Clone, Debug)]
pub struct SendPlan {
    pub target: SocketAddr,
    /// Probes per second.
    pub rate: f64,
    pub count: u32,
    /// Payload bytes per probe (`MARK_LEN..=MAX_SIZE`).
    pub size: usize,
    /// How long to wait for replies after the last probe.
    pub wait: Duration,
    pub run: u32,
}

/// What a sender saw.
#[derive(Clone, Debug, Default)]
pub struct SendStats {
    pub sent: u32,
    /// Replies of this run (each sequence counted once).
    pub received: u32,
    /// Sends that failed (no buffer space, unreachable…).
    pub send_errors: u32,
    /// Round trips the sender timed itself (send call → reply read).
    pub rtt: Samples,
}

#[derive(Debug, thiserror::Error)]
pub enum EchoError {
    #[error("--rate must be above 0 and at most 1000000 per second")]
    Rate,
    #[error("--count must be 1..={MAX_COUNT}")]
    Count,
    #[error("--size must be {MARK_LEN}..={MAX_SIZE} bytes")]
    Size,
    #[error("probe socket")]
    Io(#[from] io::Error),
}

impl SendPlan {
    pub fn check(&self) -> Result<(), EchoError> {
        if !(self.rate > 0.0 && self.rate <= 1e6) {
            return Err(EchoError::Rate);
        }
        if self.count == 0 || self.count > MAX_COUNT {
            return Err(EchoError::Count);
        }
        if !(MARK_LEN..=MAX_SIZE).contains(&self.size) {
            return Err(EchoError::Size);
        }
        Ok(())
    }

    /// The longest the run can take: the sending, then the wait.
    pub fn bound(&self) -> Duration {
        Duration::from_secs_f64(f64::from(self.count) / self.rate) + self.wait
    }
}

/// Sends the plan's probes from `sock`, paced, while a second thread
/// reads the replies (blocking, so each round trip is timed when the
/// reply arrives, not when a pacing sleep ends), for `wait` after the
/// last; stops early when `stop` is set.
pub fn send(sock: &UdpSocket, plan: &SendPlan, stop: &AtomicBool) -> Result<SendStats, EchoError> {
    plan.check()?;
    let rx = sock.try_clone()?;
    rx.set_read_timeout(Some(Duration::from_millis(20)))?;
    let sending = AtomicBool::new(true);
    let gap = Duration::from_secs_f64(1.0 / plan.rate);
    let mut out = vec![0u8; plan.size];
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut st = SendStats::default();
            let mut seen = vec![false; plan.count as usize];
            let mut inb = vec![0u8; 65536];
            let mut until: Option<Instant> = None;
            loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if until.is_none() && !sending.load(Ordering::Acquire) {
                    until = Some(Instant::now() + plan.wait);
                }
                if until.is_some_and(|u| Instant::now() >= u) {
                    break;
                }
                let Ok((n, _)) = rx.recv_from(&mut inb) else {
                    continue;
                };
                let now = crate::clock::monotonic_ns();
                let p = &inb[..n];
                let (Some((run, seq, Direction::Reply)), Some(t0)) = (parse_mark(p), sent_ns(p))
                else {
                    continue;
                };
                let Some(slot) = seen.get_mut(seq as usize) else {
                    continue;
                };
                if run != plan.run || *slot {
                    continue;
                }
                *slot = true;
                st.received += 1;
                st.rtt.add(now.saturating_sub(t0));
            }
            st
        });
        let started = Instant::now();
        let (mut sent, mut errors) = (0u32, 0u32);
        for seq in 0..plan.count {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let due = started + gap * seq;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            write_mark(&mut out, plan.run, seq, crate::clock::monotonic_ns());
            match sock.send_to(&out, plan.target) {
                Ok(_) => sent += 1,
                Err(_) => errors += 1,
            }
        }
        sending.store(false, Ordering::Release);
        let mut st = reader.join().unwrap_or_default();
        st.sent = sent;
        st.send_errors = errors;
        Ok(st)
    })
}

/// A run ID that differs between runs (time and process mixed).
pub fn new_run_id() -> u32 {
    let t = crate::clock::monotonic_ns();
    let x = t ^ (u64::from(std::process::id()) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    ((x >> 32) ^ x) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip() {
        let mut b = [0u8; 32];
        write_mark(&mut b, 7, 42, 123_456);
        assert_eq!(parse_mark(&b), Some((7, 42, Direction::Request)));
        assert_eq!(sent_ns(&b), Some(123_456));
        b[..4].copy_from_slice(REPLY);
        assert_eq!(parse_mark(&b), Some((7, 42, Direction::Reply)));
        assert_eq!(parse_mark(&b[..11]), None);
        assert_eq!(parse_mark(b"hello, world"), None);
    }

    #[test]
    fn plans_are_bounded() {
        let ok = SendPlan {
            target: "127.0.0.1:7".parse().unwrap(),
            rate: 100.0,
            count: 200,
            size: 64,
            wait: Duration::from_millis(500),
            run: 1,
        };
        ok.check().unwrap();
        assert_eq!(ok.bound(), Duration::from_millis(2500));
        for bad in [
            SendPlan {
                rate: 0.0,
                ..ok.clone()
            },
            SendPlan {
                count: 0,
                ..ok.clone()
            },
            SendPlan {
                count: MAX_COUNT + 1,
                ..ok.clone()
            },
            SendPlan {
                size: 8,
                ..ok.clone()
            },
            SendPlan {
                size: 9000,
                ..ok.clone()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    /// A real exchange on loopback: every probe comes back once, marked
    /// as a reply, and is timed.
    #[test]
    fn echo_on_loopback() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let target = server.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let l = s.spawn(|| listen(&server, Some(Duration::from_secs(5)), &stop).unwrap());
            let client = UdpSocket::bind("127.0.0.1:0").unwrap();
            client.send_to(b"not a probe", target).unwrap();
            let plan = SendPlan {
                target,
                rate: 500.0,
                count: 50,
                size: 100,
                wait: Duration::from_secs(1),
                run: new_run_id(),
            };
            let st = send(&client, &plan, &stop).unwrap();
            stop.store(true, Ordering::Relaxed);
            let ls = l.join().unwrap();
            assert_eq!(st.sent, 50);
            assert_eq!(st.received, 50);
            assert_eq!(st.rtt.count(), 50);
            assert_eq!(ls.echoed, 50);
            assert_eq!(ls.ignored, 1);
        });
    }
}
