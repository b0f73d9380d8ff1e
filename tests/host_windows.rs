//! Time sampling (`--sample-window D --sample-window-every P`) and the
//! hold, against applications that time their own system calls:
//!
//! - no send call entered before a window opened is paired with a return
//!   inside it (a stale entry once read T1 983 ms against a 16 ms truth):
//!   every timed byte's socket-layer time lies inside the write that
//!   carried its TCP-layer copy, by the writer's own clock;
//! - every timed byte slower than the hold is counted (`cut`), and a
//!   longer `--hold` times them: the report adds up to the stream's timed
//!   bytes as the applications count them;
//! - the windows' phase is random per period: traffic that repeats with
//!   the period is timed about window/period of the time, not always or
//!   never; `--stats` reports the share attached as measured, and T8 of
//!   the bytes entering in a window's first 5 ms beside the rest.

mod common;
mod host_support;
mod live_support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use host_support::{HostProbe, Pair, SERVER_IP, mono_ns, raw_samples, the_report};
use live_support::{require_root, topo::TempDir};
use serde_json::Value;

/// A deterministic generator (xorshift64*) for the readers' pauses.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) % n.max(1)
    }
}

fn set_buf(s: &impl AsRawFd, opt: libc::c_int, bytes: i32) {
    // SAFETY: setsockopt(2) with a valid descriptor and an int by pointer.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&bytes as *const i32).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// One system call as the application timed it: entered, returned, and
/// the stream offset its bytes end at.
#[derive(Clone, Copy, Debug)]
struct Call {
    enter: u64,
    ret: u64,
    end: u64,
}

/// How the test's reader reads.
#[derive(Clone, Copy)]
struct Reading {
    /// Pause before each drain of the socket: uniform below this many ms.
    pause_ms: u64,
    rcvbuf: Option<i32>,
}

/// How the test's writer writes.
#[derive(Clone, Copy)]
struct Writing {
    chunk: usize,
    /// Pause after each write.
    gap: Duration,
    sndbuf: Option<i32>,
    run: Duration,
}

/// A writer in `c` and a reader in `s` on `port`; both time every call.
fn traffic(pair: &Pair, port: u16, w: Writing, r: Reading) -> (Vec<Call>, Vec<Call>) {
    let server: SocketAddr = format!("{SERVER_IP}:{port}").parse().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            pair.s.enter_current_thread();
            let l = TcpListener::bind(server).expect("bind");
            if let Some(b) = r.rcvbuf {
                set_buf(&l, libc::SO_RCVBUF, b);
            }
            tx.send(()).expect("ready");
            let (mut c, _) = l.accept().expect("accept");
            c.set_nonblocking(true).expect("nonblocking");
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(port));
            let mut buf = vec![0u8; 1 << 20];
            let (mut calls, mut total) = (Vec::new(), 0u64);
            let deadline = Instant::now() + w.run + Duration::from_secs(20);
            'outer: while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(rng.below(r.pause_ms)));
                loop {
                    let enter = mono_ns();
                    match c.read(&mut buf) {
                        Ok(0) => break 'outer,
                        Ok(n) => {
                            total += n as u64;
                            calls.push(Call {
                                enter,
                                ret: mono_ns(),
                                end: total,
                            });
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("read: {e}"),
                    }
                }
                if r.pause_ms == 0 {
                    host_support::wait_readable_ms(&c, 100);
                }
            }
            calls
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("reader up");
        let writer = sc.spawn(|| {
            pair.c.enter_current_thread();
            let s = socket2_connect(server, w.sndbuf);
            let mut c = s;
            let chunk = vec![0x77u8; w.chunk];
            let (mut calls, mut total) = (Vec::new(), 0u64);
            let start = Instant::now();
            while start.elapsed() < w.run {
                let enter = mono_ns();
                c.write_all(&chunk).expect("write");
                total += chunk.len() as u64;
                calls.push(Call {
                    enter,
                    ret: mono_ns(),
                    end: total,
                });
                std::thread::sleep(w.gap);
            }
            calls
        });
        let writes = writer.join().expect("writer");
        (writes, reader.join().expect("reader"))
    })
}

/// A connected stream with its send buffer set before connecting (so
/// autotuning never grows it).
fn socket2_connect(to: SocketAddr, sndbuf: Option<i32>) -> TcpStream {
    use std::os::fd::FromRawFd;
    // SAFETY: socket(2) with constant arguments; the TcpStream made from
    // it owns and closes it.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor nothing else owns.
    let s = unsafe { TcpStream::from_raw_fd(fd) };
    if let Some(b) = sndbuf {
        set_buf(&s, libc::SO_SNDBUF, b);
    }
    let SocketAddr::V4(a) = to else {
        panic!("IPv4 only")
    };
    // SAFETY: all-zero bytes are a valid sockaddr_in.
    let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sin.sin_family = libc::AF_INET as libc::sa_family_t;
    sin.sin_port = a.port().to_be();
    sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
    // SAFETY: connect(2) with a sockaddr_in of its own size.
    let rc = unsafe {
        libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
    s
}

/// A number from `--stats`: the one after `key` (e.g. `stale_entry: `).
fn stat(stderr: &str, key: &str) -> u64 {
    stderr
        .split(key)
        .nth(1)
        .and_then(|s| {
            s.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {key:?} in {stderr}"))
}

#[test]
fn a_send_entered_before_a_window_never_pairs_with_a_return_inside_it() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let pair = Pair::new();
    let port = 5331;
    let dir = TempDir::new("host_win_stale");
    let samples = dir.0.join("samples.jsonl");
    let probe = HostProbe::on_port(
        &dir.0,
        port,
        "0",
        &[
            "--sample-window",
            "50ms",
            "--sample-window-every",
            "300ms",
            "--samples",
            samples.to_str().unwrap(),
            "--stats",
        ],
    );
    // Writes that block for tens of ms on a reader that drains the
    // socket every 0-60 ms through small buffers: the last write a
    // window lets in returns after the window closed, the next one
    // enters unwatched and returns inside the next window, whose entry
    // must not be paired with the first one's entry still in the slot.
    let (writes, _) = traffic(
        &pair,
        port,
        Writing {
            chunk: 64 << 10,
            gap: Duration::ZERO,
            sndbuf: Some(16 << 10),
            run: Duration::from_secs(12),
        },
        Reading {
            pause_ms: 60,
            rcvbuf: Some(16 << 10),
        },
    );
    std::thread::sleep(Duration::from_millis(400));
    let (reports, err) = probe.stop_with_stderr();
    let r = the_report(&reports, port);
    let raw = raw_samples(&samples, port);
    let stale = stat(&err, "stale_entry: ");
    let longest = writes.iter().map(|c| c.ret - c.enter).max().unwrap_or(0);
    eprintln!(
        "{} writes (longest {:.1} ms), {} timed bytes, {stale} send calls entered before their window (not paired); report {r}",
        writes.len(),
        longest as f64 / 1e6,
        raw.len()
    );
    assert!(raw.len() >= 20, "too few timed bytes: {}", raw.len());
    for (_, times) in &raw {
        let get = |n: &str| times.iter().find(|(l, _)| l == n).map(|x| x.1).unwrap();
        let (sock, tcp) = (get("sock_tx"), get("tcp_tx"));
        // The write whose call the socket-layer time falls in.
        let call = writes
            .iter()
            .find(|c| c.enter <= sock && sock <= c.ret)
            .unwrap_or_else(|| {
                panic!("socket-layer time {sock} inside no write of the application")
            });
        assert!(
            tcp <= call.ret,
            "a send entry paired with another call's bytes: entered {:.1} ms before TCP took them, its call had returned {:.1} ms before",
            (tcp - sock) as f64 / 1e6,
            (tcp - call.ret) as f64 / 1e6
        );
        assert!(
            tcp - sock <= longest,
            "T1 {} ns, longer than any write",
            tcp - sock
        );
    }
    // And the case did happen: the kernel refused such entries.
    assert!(
        stale > 0,
        "the case this test is about never happened: no write entered before a window and returned inside it"
    );
}

/// Per stream byte the probe can time with `--sample-bytes 0` (the last
/// byte of every write and of every read), its true T8 by the
/// applications' clocks: from the entry of the write that carried it to
/// the return of the read that delivered it. `(byte, T8 ns, ends a write)`.
fn truth(writes: &[Call], reads: &[Call]) -> Vec<(u64, u64, bool)> {
    let mut bytes: Vec<(u64, bool)> = writes.iter().map(|c| (c.end - 1, true)).collect();
    bytes.extend(reads.iter().map(|c| (c.end - 1, false)));
    bytes.sort_unstable();
    bytes.dedup_by(|a, b| {
        if a.0 == b.0 {
            b.1 |= a.1;
            true
        } else {
            false
        }
    });
    let last = reads.last().map_or(0, |c| c.end);
    bytes
        .into_iter()
        .filter(|&(b, _)| b < last)
        .map(|(b, w)| {
            let wi = writes.partition_point(|c| c.end <= b);
            let ri = reads.partition_point(|c| c.end <= b);
            (b, reads[ri].ret.saturating_sub(writes[wi].enter), w)
        })
        .collect()
}

fn hold_run(pair: &Pair, port: u16, hold: &str) -> (Value, Vec<(u64, u64, bool)>, String) {
    let dir = TempDir::new("host_hold");
    let probe = HostProbe::on_port(&dir.0, port, "0", &["--hold", hold, "--stats"]);
    // 4 KiB every 4 ms to a reader that comes back every 0-400 ms: bytes
    // wait up to 400 ms in its receive queue.
    let (writes, reads) = traffic(
        pair,
        port,
        Writing {
            chunk: 4096,
            gap: Duration::from_millis(4),
            sndbuf: None,
            run: Duration::from_secs(6),
        },
        Reading {
            pause_ms: 400,
            rcvbuf: None,
        },
    );
    std::thread::sleep(Duration::from_millis(400));
    let (reports, err) = probe.stop_with_stderr();
    (the_report(&reports, port), truth(&writes, &reads), err)
}

#[test]
fn every_byte_slower_than_the_hold_is_counted_and_a_longer_hold_times_it() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let pair = Pair::new();
    let hold = 100_000_000u64;
    let (r, truth, err) = hold_run(&pair, 5332, "100ms");
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
    let (complete, cut, incomplete, edge) = (n("complete"), n("cut"), n("incomplete"), n("edge"));
    // Slow bytes are given up when the hold runs out at the agent's next
    // look (every 50 ms): a byte a little slower than the hold may still
    // be timed. A byte that ends a read is timed when the read returns.
    let slow = |over: u64| truth.iter().filter(|&&(_, t8, w)| w && t8 > over).count() as u64;
    let (surely, maybe) = (slow(hold + 80_000_000), slow(hold));
    eprintln!(
        "hold 100 ms: {} timed bytes in the stream ({surely}..{maybe} slower than the hold); complete {complete}, cut {cut}, incomplete {incomplete}, edge {edge}",
        truth.len()
    );
    assert!(surely > 20, "the reader was not slow enough: {surely}");
    assert_eq!(
        complete + cut + incomplete + edge,
        truth.len() as u64,
        "every timed byte is accounted for"
    );
    // (+2: a read that returns between the agent's drain of the ring
    // and its look at the clock is seen at the next look.)
    assert!(
        (surely..=maybe + 2).contains(&cut),
        "cut {cut}: between {surely} and {maybe} bytes were slower than the hold"
    );
    assert!(incomplete <= 2, "{incomplete} incomplete");
    assert!(
        err.contains(&format!(
            "held out (slower than the hold, 100 ms): {cut} timed bytes"
        )),
        "--stats says so: {err}"
    );
    // With a hold longer than any wait every byte is timed, and the
    // slowest ones are in the figures.
    let (r, truth, _) = hold_run(&pair, 5333, "2s");
    let n = |k: &str| r[k].as_u64().unwrap();
    assert_eq!(n("cut"), 0, "{r}");
    assert_eq!(
        n("complete") + n("incomplete") + n("edge"),
        truth.len() as u64
    );
    let mut t8: Vec<u64> = truth.iter().map(|t| t.1).collect();
    t8.sort_unstable();
    let want = t8[t8.len() - 1] as f64 / 1000.0;
    let got = r["t8"]["max_us"].as_f64().unwrap();
    let p99 = t8[(0.99 * t8.len() as f64).ceil() as usize - 1] as f64 / 1000.0;
    eprintln!(
        "hold 2 s: T8 max {got:.0} µs vs the applications' {want:.0} µs; p99 {:.0} vs {p99:.0} µs",
        r["t8"]["p99_us"]
    );
    assert!(want > 300_000.0, "bytes waited up to {want} µs");
    assert!((got - want).abs() <= 0.01 * want, "T8 max {got} vs {want}");
}

#[test]
fn window_phase_is_random_so_periodic_traffic_is_sampled_at_the_window_share() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let pair = Pair::new();
    let (port, steady) = (5334, 5335);
    let dir = TempDir::new("host_win_phase");
    let probe = HostProbe::on_port(
        &dir.0,
        port,
        "0",
        &[
            "--port",
            &steady.to_string(),
            "--sample-window",
            "40ms",
            "--sample-window-every",
            "200ms",
            "--stats",
        ],
    );
    periodic_and_steady(&pair, port, steady);
    std::thread::sleep(Duration::from_millis(400));
    let (reports, err) = probe.stop_with_stderr();
    let r = the_report(&reports, port);
    let timed = r["complete"].as_u64().unwrap();
    let share = timed as f64 / f64::from(PERIODS);
    let line = err
        .lines()
        .find(|l| l.starts_with("sampling windows: "))
        .unwrap_or_else(|| panic!("no window line: {err}"));
    let early = err
        .lines()
        .find(|l| l.starts_with("T8 of bytes entering"))
        .unwrap_or_else(|| panic!("no early/later line: {err}"));
    eprintln!(
        "{timed} of {PERIODS} periodic messages timed ({share:.2}; window/period 0.20)\n{line}\n{early}"
    );
    assert!(
        (0.06..=0.40).contains(&share),
        "periodic traffic timed {share:.2} of the time, not about 0.2: the windows are locked to its phase"
    );
    // The measured shares: the entry open about 20 % (the schedule's
    // nominal), attached a little longer.
    let pct = |key: &str| -> f64 {
        line.split(key)
            .nth(1)
            .and_then(|s| s.trim_start().split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {key:?} in {line}"))
    };
    let (attached, entry) = (pct("("), pct("entry open"));
    assert!((17.0..=26.0).contains(&entry), "entry open {entry} %");
    assert!(
        attached >= entry,
        "attached {attached} % < entry open {entry} %"
    );
    assert!(
        stat(early, "first 5 ms: ") > 0 && stat(early, "later: ") > 0,
        "{early}"
    );
}

/// Messages on [`periodic_and_steady`]'s periodic connection.
const PERIODS: u32 = 75;

/// One message per period on one connection (as a timer would send),
/// one per ms on the other (for the early-vs-later T8).
fn periodic_and_steady(pair: &Pair, port: u16, steady: u16) {
    std::thread::scope(|sc| {
        sc.spawn(|| {
            traffic(
                pair,
                steady,
                Writing {
                    chunk: 1000,
                    gap: Duration::from_millis(1),
                    sndbuf: None,
                    run: Duration::from_millis(200) * PERIODS,
                },
                Reading {
                    pause_ms: 0,
                    rcvbuf: None,
                },
            )
        });
        let server: SocketAddr = format!("{SERVER_IP}:{port}").parse().unwrap();
        let l = pair.s.run(|| TcpListener::bind(server).expect("bind"));
        let reader = sc.spawn(move || {
            let (mut c, _) = l.accept().expect("accept");
            let mut buf = [0u8; 4096];
            while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
        });
        pair.c.run(|| {
            let mut c = TcpStream::connect(server).expect("connect");
            c.set_nodelay(true).ok();
            let start = Instant::now();
            for k in 1..=PERIODS {
                c.write_all(&[0x42; 100]).expect("write");
                let next = start + Duration::from_millis(200) * k;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        reader.join().expect("reader");
    });
}
