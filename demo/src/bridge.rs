//! The impairing bridge: a user-space Ethernet bridge between two
//! interfaces of the middle namespace (the kernel here has no netem), with,
//! per direction, a one-way delay and seeded random loss, reordering and
//! duplication. The delay can be changed while it runs
//! ([`Bridge::set_delay`]): the live tests step it to see the probe's
//! continuous RTT follow.
//!
//! Each leg is one thread that has entered the middle namespace (network
//! namespaces are per thread). It reads frames from two AF_PACKET sockets,
//! drops some, and holds the rest in a per-direction delay line: with one
//! fixed delay per direction the line is a FIFO whose fronts are the next
//! due frames, so a bounded ring of fixed-size slots is the whole queue
//! (frames are received straight into their slot; no allocation while
//! running). A frame is never sent before its arrival time plus the delay;
//! it may be a few microseconds late (timer slack is set to 1 ns). A longer
//! delay applies to frames arriving from then on; a shorter one too, but as
//! the line stays a FIFO, they wait behind the frames already queued.
//!
//! Reordering works as netem's does with a delay: a frame picked for it is
//! sent at once, overtaking the frames still in the delay line (so it needs
//! a delay to reorder anything). A duplicated frame is queued twice, one
//! right after the other. Every frame draws its three coins (loss, reorder,
//! duplicate) whatever the outcome, so one seed gives one pattern for a
//! given frame sequence whichever impairments are switched on.

use std::{
    io,
    os::fd::AsRawFd,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::Context;

use super::packet::{PacketSocket, Recv};

/// Bytes per delay-line slot: an MTU-1500 frame with a VLAN tag fits.
const SLOT: usize = 2048;
/// Frames a delay line holds; more are dropped and counted as overflow
/// (at the demo's rates a few dozen are in flight).
const SLOTS: usize = 1024;
/// Frames read from one socket before the other gets its turn.
const BURST: usize = 64;
/// Longest sleep, so a stop request is seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(50);

/// One direction's impairment. Percentages are of the frames received.
#[derive(Clone, Copy, Debug, Default)]
pub struct Impair {
    pub delay: Duration,
    pub loss_pct: f64,
    /// Sent at once, ahead of the delayed frames (needs `delay` > 0).
    pub reorder_pct: f64,
    /// Queued twice.
    pub dup_pct: f64,
    pub seed: u64,
}

/// A leg: frames from `a` go out of `b` impaired by `a_to_b`, and back.
#[derive(Clone, Debug)]
pub struct Leg {
    pub a: String,
    pub b: String,
    pub a_to_b: Impair,
    pub b_to_a: Impair,
}

/// What happened to one direction's frames.
#[derive(Clone, Copy, Debug, Default)]
pub struct DirCounters {
    pub received: u64,
    pub forwarded: u64,
    /// Dropped on purpose (the random loss).
    pub lost: u64,
    /// Sent ahead of the delayed frames on purpose.
    pub reordered: u64,
    /// Queued a second time on purpose (each copy is counted in
    /// `forwarded`).
    pub duplicated: u64,
    /// Dropped because the delay line was full.
    pub overflow: u64,
    /// Dropped because longer than a slot.
    pub oversize: u64,
    /// Dropped because the kernel refused to send them.
    pub tx_errors: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct LegStats {
    pub a_to_b: DirCounters,
    pub b_to_a: DirCounters,
}

/// splitmix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): tiny, seedable, good enough for a loss coin
/// (and for the live tests' reproducible DNS query IDs).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `pct` percent.
    fn chance(&mut self, pct: f64) -> bool {
        if pct <= 0.0 {
            return false;
        }
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        unit * 100.0 < pct
    }
}

/// A FIFO of frames with their due times in a preallocated ring.
struct DelayLine {
    buf: Box<[u8]>,
    lens: Box<[usize]>,
    due: Box<[Instant]>,
    head: usize,
    len: usize,
}

impl DelayLine {
    fn new(slots: usize) -> DelayLine {
        let now = Instant::now();
        DelayLine {
            buf: vec![0u8; slots * SLOT].into_boxed_slice(),
            lens: vec![0; slots].into_boxed_slice(),
            due: vec![now; slots].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    fn cap(&self) -> usize {
        self.lens.len()
    }

    fn is_full(&self) -> bool {
        self.len == self.cap()
    }

    fn slot(&mut self, i: usize) -> &mut [u8] {
        let start = i * SLOT;
        self.buf.get_mut(start..start + SLOT).unwrap_or_default()
    }

    /// The free slot the next frame is received into (empty when full).
    fn tail(&mut self) -> &mut [u8] {
        if self.is_full() {
            return &mut [];
        }
        let i = (self.head + self.len) % self.cap();
        self.slot(i)
    }

    /// Keeps the frame just received into [`DelayLine::tail`].
    fn commit(&mut self, len: usize, due: Instant) {
        if self.is_full() {
            return;
        }
        let i = (self.head + self.len) % self.cap();
        if let (Some(l), Some(d)) = (self.lens.get_mut(i), self.due.get_mut(i)) {
            *l = len.min(SLOT);
            *d = due;
            self.len += 1;
        }
    }

    /// Queues a second copy of the frame committed last; false (no copy)
    /// when the line is full.
    fn commit_copy_of_last(&mut self, due: Instant) -> bool {
        if self.is_full() || self.len == 0 {
            return false;
        }
        let cap = self.cap();
        let last = (self.head + self.len - 1) % cap;
        let next = (self.head + self.len) % cap;
        let len = self.lens.get(last).copied().unwrap_or(0);
        self.buf
            .copy_within(last * SLOT..last * SLOT + len, next * SLOT);
        self.commit(len, due);
        true
    }

    fn front_due(&self) -> Option<Instant> {
        (self.len > 0).then(|| self.due.get(self.head).copied())?
    }

    fn front(&self) -> &[u8] {
        let len = self.lens.get(self.head).copied().unwrap_or(0);
        let start = self.head * SLOT;
        self.buf.get(start..start + len).unwrap_or_default()
    }

    fn pop(&mut self) {
        if self.len > 0 {
            self.head = (self.head + 1) % self.cap();
            self.len -= 1;
        }
    }
}

/// One direction of a leg while running.
struct Direction {
    src: usize,
    dst: usize,
    imp: Impair,
    /// The current delay (ns), which [`Bridge::set_delay`] may change.
    delay_ns: Arc<AtomicU64>,
    rng: Rng,
    line: DelayLine,
    scratch: Box<[u8]>,
    n: DirCounters,
}

impl Direction {
    fn new(src: usize, dst: usize, imp: Impair, delay_ns: Arc<AtomicU64>) -> Direction {
        Direction {
            src,
            dst,
            imp,
            delay_ns,
            rng: Rng(imp.seed),
            line: DelayLine::new(SLOTS),
            scratch: vec![0u8; SLOT].into_boxed_slice(),
            n: DirCounters::default(),
        }
    }

    /// Reads up to a burst; true when the burst was full (more may wait).
    fn receive(&mut self, socks: &[PacketSocket; 2]) -> io::Result<bool> {
        let Some(src) = socks.get(self.src) else {
            return Ok(false);
        };
        let delay = Duration::from_nanos(self.delay_ns.load(Ordering::Relaxed));
        for _ in 0..BURST {
            let full = self.line.is_full();
            let buf = if full {
                &mut self.scratch[..]
            } else {
                self.line.tail()
            };
            let len = match src.recv(buf)? {
                Recv::Empty => return Ok(false),
                Recv::Oversize => {
                    self.n.received += 1;
                    self.n.oversize += 1;
                    continue;
                }
                Recv::Frame(len) => len,
            };
            // Stamped per frame, after it arrived: never early.
            let arrived = Instant::now();
            self.n.received += 1;
            let lose = self.rng.chance(self.imp.loss_pct);
            let reorder = self.rng.chance(self.imp.reorder_pct) && !delay.is_zero();
            let dup = self.rng.chance(self.imp.dup_pct);
            if full {
                self.n.overflow += 1;
            } else if lose {
                self.n.lost += 1;
            } else if reorder {
                // Out of the slot it was received into, ahead of the line.
                self.n.reordered += 1;
                let copies = if dup { 2 } else { 1 };
                self.n.duplicated += u64::from(dup);
                for _ in 0..copies {
                    self.send_now(socks, len);
                }
            } else {
                let due = arrived + delay;
                self.line.commit(len, due);
                if dup && self.line.commit_copy_of_last(due) {
                    self.n.duplicated += 1;
                }
            }
        }
        Ok(true)
    }

    /// Sends the frame just received into the line's tail slot at once.
    fn send_now(&mut self, socks: &[PacketSocket; 2], len: usize) {
        let Some(dst) = socks.get(self.dst) else {
            return;
        };
        let frame = self.line.tail();
        match dst.send(frame.get(..len).unwrap_or_default()) {
            Ok(()) => self.n.forwarded += 1,
            Err(_) => self.n.tx_errors += 1,
        }
    }

    /// Sends every frame that is due.
    fn transmit(&mut self, socks: &[PacketSocket; 2], now: Instant) {
        let Some(dst) = socks.get(self.dst) else {
            return;
        };
        while self.line.front_due().is_some_and(|d| d <= now) {
            match dst.send(self.line.front()) {
                Ok(()) => self.n.forwarded += 1,
                Err(_) => self.n.tx_errors += 1,
            }
            self.line.pop();
        }
    }
}

/// The running bridge: one thread per leg.
pub struct Bridge {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<io::Result<LegStats>>>,
    /// Per leg, the a→b and b→a delays (ns) its thread reads per burst.
    delays: Vec<[Arc<AtomicU64>; 2]>,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Bridge {
    /// Starts every leg inside the namespace at `netns` (or, with `None`,
    /// the caller's) and returns once all are forwarding. Each leg stops by
    /// itself after `limit`.
    pub fn start(netns: Option<&Path>, legs: &[Leg], limit: Duration) -> anyhow::Result<Bridge> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut bridge = Bridge {
            stop: stop.clone(),
            threads: Vec::new(),
            delays: Vec::new(),
        };
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        for leg in legs {
            let delays =
                [leg.a_to_b.delay, leg.b_to_a.delay].map(|d| Arc::new(AtomicU64::new(ns(d))));
            bridge.delays.push(delays.clone());
            let (leg, stop, ready, ns) = (
                leg.clone(),
                stop.clone(),
                ready_tx.clone(),
                netns.map(Path::to_owned),
            );
            let t = std::thread::Builder::new()
                .name(format!("bridge-{}-{}", leg.a, leg.b))
                .spawn(move || leg_thread(ns.as_deref(), &leg, delays, &stop, limit, &ready))
                .context("starting a bridge thread")?;
            bridge.threads.push(t);
        }
        drop(ready_tx);
        for _ in legs {
            match ready_rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => anyhow::bail!("bridge: {e}"),
                Err(_) => anyhow::bail!("bridge: a leg did not start"),
            }
        }
        Ok(bridge)
    }

    /// Changes the delays of leg `leg` (index into the legs given to
    /// `start`) for frames arriving from now on. False if there is no such
    /// leg.
    pub fn set_delay(&self, leg: usize, a_to_b: Duration, b_to_a: Duration) -> bool {
        let Some(d) = self.delays.get(leg) else {
            return false;
        };
        d[0].store(ns(a_to_b), Ordering::Relaxed);
        d[1].store(ns(b_to_a), Ordering::Relaxed);
        true
    }

    /// Stops every leg and returns their counters (in the order of the
    /// legs given to `start`).
    pub fn stop(&mut self) -> anyhow::Result<Vec<LegStats>> {
        self.stop.store(true, Ordering::Release);
        let mut out = Vec::new();
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(r) => out.push(r.context("bridge leg failed")?),
                Err(_) => anyhow::bail!("a bridge thread panicked"),
            }
        }
        Ok(out)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn leg_thread(
    netns: Option<&Path>,
    leg: &Leg,
    delays: [Arc<AtomicU64>; 2],
    stop: &AtomicBool,
    limit: Duration,
    ready: &mpsc::Sender<Result<(), String>>,
) -> io::Result<LegStats> {
    let socks = match open_leg(netns, leg) {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let _ = ready.send(Err(format!("{}<->{}: {e}", leg.a, leg.b)));
            return Err(e);
        }
    };
    let [ab, ba] = delays;
    let mut dirs = [
        Direction::new(0, 1, leg.a_to_b, ab),
        Direction::new(1, 0, leg.b_to_a, ba),
    ];
    let mut fds = socks.each_ref().map(|s| libc::pollfd {
        fd: s.raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let end = Instant::now() + limit;
    while !stop.load(Ordering::Acquire) && Instant::now() < end {
        let mut more = false;
        for d in &mut dirs {
            more |= d.receive(&socks)?;
        }
        let now = Instant::now();
        for d in &mut dirs {
            d.transmit(&socks, now);
        }
        let next_due = dirs.iter().filter_map(|d| d.line.front_due()).min();
        let wait = if more {
            Duration::ZERO
        } else {
            next_due.map_or(MAX_SLEEP, |d| {
                d.saturating_duration_since(Instant::now()).min(MAX_SLEEP)
            })
        };
        poll(&mut fds, wait)?;
    }
    Ok(LegStats {
        a_to_b: dirs[0].n,
        b_to_a: dirs[1].n,
    })
}

fn open_leg(netns: Option<&Path>, leg: &Leg) -> io::Result<[PacketSocket; 2]> {
    if let Some(netns) = netns {
        let f = std::fs::File::open(netns)?;
        // SAFETY: a valid namespace descriptor; setns only moves this thread
        // into the namespace, nothing else in the process.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // Fine-grained sleeps: the delay is a few milliseconds, and the default
    // 50 µs slack would add to every frame's.
    // SAFETY: PR_SET_TIMERSLACK takes an integer and only affects this
    // thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    Ok([PacketSocket::open(&leg.a)?, PacketSocket::open(&leg.b)?])
}

/// ppoll(2) with a sub-millisecond timeout.
fn poll(fds: &mut [libc::pollfd; 2], wait: Duration) -> io::Result<()> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(wait.as_secs()).unwrap_or(1),
        tv_nsec: libc::c_long::from(wait.subsec_nanos()),
    };
    // SAFETY: `fds` is a valid array of 2 pollfd, `ts` lives for the call,
    // and a null signal mask means "leave it unchanged".
    let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &raw const ts, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_line_is_a_bounded_fifo() {
        let t0 = Instant::now();
        let mut l = DelayLine::new(3);
        for i in 0..3u8 {
            let s = l.tail();
            s[0] = i;
            l.commit(1, t0 + Duration::from_millis(u64::from(i)));
        }
        assert!(l.is_full());
        assert!(l.tail().is_empty(), "no slot when full");
        for i in 0..3u8 {
            assert_eq!(
                l.front_due(),
                Some(t0 + Duration::from_millis(u64::from(i)))
            );
            assert_eq!(l.front(), &[i]);
            l.pop();
            // Wraps around: refill the freed slot.
            let s = l.tail();
            s[0] = 10 + i;
            l.commit(1, t0);
        }
        assert_eq!(l.front(), &[10]);
    }

    #[test]
    fn loss_rate_matches_the_setting() {
        // Binomial(n, p): the count stays within 5 standard deviations.
        let n = 200_000u32;
        for pct in [0.5, 1.0, 2.0, 10.0] {
            let mut r = Rng(7);
            let hits = (0..n).filter(|_| r.chance(pct)).count() as f64;
            let p = pct / 100.0;
            let mean = f64::from(n) * p;
            let sd = (f64::from(n) * p * (1.0 - p)).sqrt();
            assert!((hits - mean).abs() < 5.0 * sd, "{pct} %: {hits} vs {mean}");
        }
        let mut r = Rng(7);
        assert!((0..10_000).all(|_| !r.chance(0.0)));
    }

    #[test]
    fn same_seed_same_pattern() {
        let (mut a, mut b) = (Rng(42), Rng(42));
        let pa: Vec<bool> = (0..1000).map(|_| a.chance(5.0)).collect();
        let pb: Vec<bool> = (0..1000).map(|_| b.chance(5.0)).collect();
        assert_eq!(pa, pb);
    }
}
