//! Timestamp RTT live: real kernel TCP, bulk both ways, through the demo's
//! user-space bridge with a fixed delay on the client side of the tap
//! (5 ms each way, then 20 ms), captured by the real `xdprobe run` (XDP +
//! AF_XDP) on the mirror port with 1 s active timeouts.
//!
//! The reference is the endpoints' own kernels: the `tcp:tcp_probe`
//! tracepoint reports the sending socket's smoothed RTT (`srtt`, µs) on
//! every segment it receives. It is read from a tracefs instance of this
//! test's own (the trace pipe, clock `mono`), independent of the probe.
//! For each bulk flow and delay, the sum of the two legs' medians in its
//! interval records must be within 5 % + 1 ms of the `srtt` its sender
//! reported over the same intervals (medians over the phase's intervals),
//! the growth between the two delays within 5 % of the srtt's growth, and
//! each interval between 2 × and 3 × the configured one-way delay; the
//! first interval that starts after the delay change shows the new delay.
//! The Prometheus summary counts every sample the records hold.
//!
//! The 1 ms is what the kernel counts and the wire does not: both hosts'
//! stacks (socket to wire and back) on every sample, and a smoothed mean
//! over a right-skewed distribution against a median. It is absolute, not
//! relative, and it grows with the load on the shared vCPUs: the kernel's
//! srtt read 400–600 µs above the legs at 10 ms and 200–300 µs above at
//! 40 ms in CI, 970 µs at 10 ms with both vCPUs busy. Across the delay
//! change it cancels: the growth is the sharp check (0.9–3 % apart seen).

mod live_support;

use std::{
    fs::{File, OpenOptions},
    io::{Read, Write},
    net::{SocketAddrV4, TcpListener, TcpStream},
    os::{
        fd::{FromRawFd, RawFd},
        unix::fs::OpenOptionsExt,
    },
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use live_support::{
    NetNs,
    probe::{Probe, ProbeOpts, metric},
    require_root,
    topo::{Bench, CLIENT_IP, SERVER_IP, TempDir},
};
use serde_json::Value;
use xdprobe_demo::bridge::{Bridge, Impair, Leg};

const UP_PORT: u16 = 5601;
const DOWN_PORT: u16 = 5602;
const DELAY_1: Duration = Duration::from_millis(5);
const DELAY_2: Duration = Duration::from_millis(20);
const PHASE: Duration = Duration::from_secs(6);
/// The receivers' buffer: it bounds the window, so the senders are
/// window-limited (they answer every ACK at once) and the bridge never
/// queues.
const RCVBUF: i32 = 16 * 1024;

// ------------------------------------------------------------ tcp_probe

/// One `tcp:tcp_probe` event: the socket (local and remote `addr:port`),
/// its smoothed RTT and when (Unix µs).
#[derive(Clone, Debug)]
struct Probed {
    at_us: u64,
    src: String,
    dest: String,
    srtt_us: u64,
}

/// A tracefs instance with `tcp:tcp_probe` enabled for the test's ports,
/// read by a thread; removed on drop.
struct Trace {
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Vec<Probed>>>,
}

fn clock(id: libc::clockid_t) -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `t`, which lives for
    // the call.
    unsafe { libc::clock_gettime(id, &raw mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

impl Trace {
    fn start() -> Trace {
        let root = Path::new("/sys/kernel/tracing");
        if !root.join("instances").is_dir() {
            live_support::sh(&["mount", "-t", "tracefs", "tracefs", "/sys/kernel/tracing"]);
        }
        let dir = root
            .join("instances")
            .join(format!("xdprobe-tsrtt-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("create a tracefs instance");
        let mut t = Trace {
            dir: dir.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            reader: None,
        };
        write(&dir.join("trace_clock"), "mono");
        write(&dir.join("buffer_size_kb"), "8192");
        let ev = dir.join("events/tcp/tcp_probe");
        write(
            &ev.join("filter"),
            &format!(
                "sport == {UP_PORT} || dport == {UP_PORT} || sport == {DOWN_PORT} || dport == {DOWN_PORT}"
            ),
        );
        write(&ev.join("enable"), "1");
        // Unix time = mono + offset, sampled back to back.
        let offset = clock(libc::CLOCK_REALTIME) - clock(libc::CLOCK_MONOTONIC);
        let pipe = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(dir.join("trace_pipe"))
            .expect("open trace_pipe");
        let stop = t.stop.clone();
        t.reader = Some(std::thread::spawn(move || read_pipe(pipe, &stop, offset)));
        t
    }

    fn finish(mut self) -> Vec<Probed> {
        self.stop.store(true, Ordering::Release);
        self.reader
            .take()
            .map(|r| r.join().expect("trace reader"))
            .unwrap_or_default()
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let _ = std::fs::write(self.dir.join("events/tcp/tcp_probe/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn read_pipe(mut pipe: File, stop: &AtomicBool, offset: f64) -> Vec<Probed> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut partial = String::new();
    // Drain until stopped, then once more.
    let mut last = false;
    while !last {
        last = stop.load(Ordering::Acquire);
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    partial.push_str(&String::from_utf8_lossy(&buf[..n]));
                    while let Some(i) = partial.find('\n') {
                        let line: String = partial.drain(..=i).collect();
                        out.extend(parse_probe(&line, offset));
                    }
                }
                Err(_) => break, // EAGAIN: nothing pending.
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    out
}

/// `… 1234.567890: tcp_probe: family=AF_INET src=A:P dest=B:Q … srtt=N …`
fn parse_probe(line: &str, offset: f64) -> Option<Probed> {
    let (head, body) = line.split_once(" tcp_probe: ")?;
    let mono: f64 = head
        .split_whitespace()
        .last()?
        .trim_end_matches(':')
        .parse()
        .ok()?;
    let kv = |k: &str| {
        body.split_whitespace()
            .find_map(|t| t.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_owned)
    };
    Some(Probed {
        at_us: ((mono + offset) * 1e6) as u64,
        src: kv("src")?,
        dest: kv("dest")?,
        srtt_us: kv("srtt")?.parse().ok()?,
    })
}

// -------------------------------------------------------------- traffic

/// A TCP socket with SO_RCVBUF set before it connects or listens (the
/// window it advertises follows from it).
fn socket_with_rcvbuf(rcvbuf: Option<i32>) -> RawFd {
    // SAFETY: socket(2) with constant arguments; the fd is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    if let Some(b) = rcvbuf {
        // SAFETY: setsockopt reads one c_int from `b` for the call.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&raw const b).cast(),
                size_of::<i32>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
    }
    fd
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn listen(port: u16, rcvbuf: Option<i32>) -> TcpListener {
    let fd = socket_with_rcvbuf(rcvbuf);
    let sa = sockaddr(SocketAddrV4::new(SERVER_IP.parse().unwrap(), port));
    let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `sa` is a valid sockaddr_in of `len` bytes for both calls.
    let ok =
        unsafe { libc::bind(fd, (&raw const sa).cast(), len) == 0 && libc::listen(fd, 4) == 0 };
    assert!(
        ok,
        "bind/listen {port}: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `fd` is a listening socket this function owns from here.
    unsafe { TcpListener::from_raw_fd(fd) }
}

fn connect(port: u16, rcvbuf: Option<i32>) -> TcpStream {
    let fd = socket_with_rcvbuf(rcvbuf);
    let sa = sockaddr(SocketAddrV4::new(SERVER_IP.parse().unwrap(), port));
    let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `sa` is a valid sockaddr_in of `len` bytes.
    let rc = unsafe { libc::connect(fd, (&raw const sa).cast(), len) };
    assert_eq!(rc, 0, "connect {port}: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is a connected socket this function owns from here.
    unsafe { TcpStream::from_raw_fd(fd) }
}

/// Writes as fast as the window allows until `until`.
fn send_until(mut s: TcpStream, until: Instant) {
    s.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let chunk = [0x5au8; 65536];
    while Instant::now() < until {
        if s.write(&chunk).is_err_and(|e| !is_timeout(&e)) {
            break;
        }
    }
}

/// Reads and discards until EOF or `until`.
fn drain_until(mut s: TcpStream, until: Instant) {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 65536];
    while Instant::now() < until {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Upload (client → server :5601) and download (server :5602 → client),
/// both window-limited by the receiver's buffer, until `until`.
fn bulk_both_ways(c: &NetNs, s: &NetNs, until: Instant) {
    let (up_l, down_l) = s.run(|| (listen(UP_PORT, Some(RCVBUF)), listen(DOWN_PORT, None)));
    std::thread::scope(|sc| {
        sc.spawn(|| {
            s.enter_current_thread();
            let (conn, _) = up_l.accept().expect("accept upload");
            drain_until(conn, until);
        });
        sc.spawn(|| {
            s.enter_current_thread();
            let (conn, _) = down_l.accept().expect("accept download");
            send_until(conn, until);
        });
        sc.spawn(|| {
            c.enter_current_thread();
            send_until(connect(UP_PORT, None), until);
        });
        sc.spawn(|| {
            c.enter_current_thread();
            drain_until(connect(DOWN_PORT, Some(RCVBUF)), until);
        });
    });
}

// ---------------------------------------------------------------- check

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    (!v.is_empty()).then(|| v[v.len() / 2])
}

#[test]
fn live_ts_rtt_follows_the_delay_and_agrees_with_the_kernels_srtt() {
    if !require_root!() {
        return;
    }
    let tmp = TempDir::new("live-tsrtt");
    let b = Bench::unbridged(1, &tmp.0);
    let imp = |delay| Impair {
        delay,
        loss_pct: 0.0,
        reorder_pct: 0.0,
        dup_pct: 0.0,
        seed: 1,
    };
    // Leg A (client side of the tap) delays; leg B forwards at once.
    let legs = [
        Leg {
            a: "c1".into(),
            b: "m0".into(),
            a_to_b: imp(DELAY_1),
            b_to_a: imp(DELAY_1),
        },
        Leg {
            a: "m1".into(),
            b: "s1".into(),
            a_to_b: imp(Duration::ZERO),
            b_to_a: imp(Duration::ZERO),
        },
    ];
    let bridge_ns = PathBuf::from(format!("/var/run/netns/{}", b.m.name));
    let mut bridge =
        Bridge::start(Some(&bridge_ns), &legs, Duration::from_secs(90)).expect("bridge");
    let probe = Probe::start(
        &b.p,
        &tmp.0,
        &ProbeOpts {
            metrics_port: 9465,
            idle_timeout: "60s",
            active_timeout: "1s",
            ..ProbeOpts::default()
        },
    );
    let trace = Trace::start();

    let start = Instant::now();
    let until = start + 2 * PHASE;
    let mut change_unix_us = 0;
    std::thread::scope(|sc| {
        sc.spawn(|| bulk_both_ways(&b.c, &b.s, until));
        std::thread::sleep(PHASE);
        change_unix_us = (clock(libc::CLOCK_REALTIME) * 1e6) as u64;
        assert!(bridge.set_delay(0, DELAY_2, DELAY_2));
    });
    // Let the last ACKs pass and the worker publish its snapshot.
    std::thread::sleep(Duration::from_secs(2));
    let metrics = probe.metrics(&b.p);
    let probed = trace.finish();
    let (status, recs, log) = probe.stop();
    let _ = bridge.stop();
    assert!(status.success(), "xdprobe run: {status}\n{log}");

    let mut problems: Vec<String> = Vec::new();
    let mut checked = 0;
    let mut client_samples = 0;
    let mut server_samples = 0;
    for (port, sender) in [(UP_PORT, CLIENT_IP), (DOWN_PORT, SERVER_IP)] {
        let mut flow: Vec<&Value> = recs
            .iter()
            .filter(|r| u(&r["proto"]) == 6 && u(&r["server_port"]) == u64::from(port))
            .collect();
        flow.sort_by_key(|r| u(&r["start_us"]));
        assert!(flow.len() >= 8, "{port}: {} interval records", flow.len());
        let sender_events: Vec<&Probed> = probed
            .iter()
            .filter(|p| {
                p.src.starts_with(&format!("{sender}:"))
                    && (p.src.ends_with(&format!(":{port}"))
                        || p.dest.ends_with(&format!(":{port}")))
            })
            .collect();
        assert!(
            sender_events.len() > 100,
            "{port}: {} tcp_probe events of the sender",
            sender_events.len()
        );
        eprintln!(
            "port {port} ({sender} sends): interval, legs p50 (server + client), kernel srtt median"
        );
        // (sum of the legs' medians, median srtt) per interval, by phase.
        let mut phases: [Vec<(u64, u64)>; 2] = Default::default();
        for r in &flow {
            let (s, e) = (u(&r["start_us"]), u(&r["end_us"]));
            let (srv, cli) = (&r["ts_rtt_server"], &r["ts_rtt_client"]);
            server_samples += u(&srv["count"]);
            client_samples += u(&cli["count"]);
            let srtt = median(
                sender_events
                    .iter()
                    .filter(|p| (s..=e).contains(&p.at_us))
                    .map(|p| p.srtt_us)
                    .collect(),
            );
            let sum = srv["p50_us"]
                .as_u64()
                .zip(cli["p50_us"].as_u64())
                .map(|(a, b)| a + b);
            eprintln!(
                "  #{} {:>6.3}-{:>6.3} s: {:?} + {:?} = {sum:?} µs, srtt {srtt:?} µs ({} + {} samples)",
                r["record_seq"],
                (s as f64 - start_ms(&flow)) / 1e6,
                (e as f64 - start_ms(&flow)) / 1e6,
                srv["p50_us"],
                cli["p50_us"],
                srv["count"],
                cli["count"]
            );
            // The first interval holds the handshake and slow start, the
            // last one the end; one that spans the change is two delays.
            let first = u(&r["record_seq"]) == 0;
            let spans_change = s <= change_unix_us + 100_000 && e >= change_unix_us;
            let last = std::ptr::eq(*r, *flow.last().unwrap());
            if first || last || spans_change || e - s < 500_000 {
                continue;
            }
            let (Some(sum), Some(srtt)) = (sum, srtt) else {
                problems.push(format!(
                    "{port} record {}: no legs or no srtt: {r}",
                    r["record_seq"]
                ));
                continue;
            };
            let phase = usize::from(s > change_unix_us);
            let delay = [DELAY_1, DELAY_2][phase];
            // Each interval on its own shows the delay that applies: at
            // least 2 × delay, at most half as much more (the user-space
            // bridge and both hosts share 2 vCPUs: a queueing burst put
            // 14 ms on both flows' same 10 ms interval in CI rehearsal, and
            // the kernel's srtt saw it too).
            // Against the kernel's srtt it is compared per phase below: a
            // burst of queueing (this machine is shared) moves a smoothed
            // mean more than a median, one interval at a time.
            let floor = 2 * delay.as_micros() as u64;
            if sum < floor || sum > floor * 3 / 2 {
                problems.push(format!(
                    "{port} record {}: {sum} µs for 2 × {delay:?}",
                    r["record_seq"]
                ));
            }
            if phase == 1 && phases[1].is_empty() && s > change_unix_us + 1_500_000 {
                problems.push(format!("{port}: no interval right after the change"));
            }
            phases[phase].push((sum, srtt));
        }
        // Per phase: the intervals' sums of medians against the kernel's
        // srtt over the same intervals, 5 % plus the hosts' own stack time
        // (see the top of this file); then the change between the phases,
        // 5 %.
        let mut per_phase: [Option<(u64, u64)>; 2] = [None, None];
        for (i, p) in phases.iter().enumerate() {
            let (Some(sum), Some(srtt)) = (
                median(p.iter().map(|x| x.0).collect()),
                median(p.iter().map(|x| x.1).collect()),
            ) else {
                problems.push(format!("{port} phase {i}: no interval"));
                continue;
            };
            let dev = (sum as f64 - srtt as f64).abs() / srtt as f64;
            eprintln!(
                "  phase {i} ({} intervals): legs' medians {sum} µs, kernel srtt {srtt} µs, {:.1} % apart",
                p.len(),
                dev * 100.0
            );
            per_phase[i] = Some((sum, srtt));
            let allowed = srtt as f64 * 0.05 + 1000.0;
            if p.len() < 3 || (sum as f64 - srtt as f64).abs() > allowed {
                problems.push(format!(
                    "{port} phase {i}: {} intervals, legs' medians {sum} µs vs kernel srtt {srtt} µs ({:.1} % apart, {allowed:.0} µs allowed)",
                    p.len(),
                    dev * 100.0
                ));
            }
            checked += p.len();
        }
        // The change of delay as both see it: the hosts' own stack time is
        // in both phases' srtt and cancels, so this is the sharp check.
        if let [Some((l0, k0)), Some((l1, k1))] = per_phase {
            let (legs, kernel) = (l1 as f64 - l0 as f64, k1 as f64 - k0 as f64);
            let dev = (legs - kernel).abs() / kernel;
            eprintln!(
                "  the delay change: legs' medians grew {legs:.0} µs, kernel srtt {kernel:.0} µs, {:.1} % apart",
                dev * 100.0
            );
            if dev > 0.05 {
                problems.push(format!(
                    "{port}: the delay change grew the legs {legs:.0} µs, the kernel's srtt {kernel:.0} µs ({:.1} % apart)",
                    dev * 100.0
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 12, "only {checked} intervals compared");

    // The summary per worker counts what the records hold.
    for (leg, n) in [("server", server_samples), ("client", client_samples)] {
        let got = metric(
            &metrics,
            "xdprobe_tcp_ts_rtt_seconds_count",
            &format!("leg=\"{leg}\""),
        );
        assert_eq!(got, n, "{leg} leg samples: summary vs records\n{metrics}");
        let q = metrics
            .lines()
            .find(|l| {
                l.starts_with("xdprobe_tcp_ts_rtt_seconds{")
                    && l.contains(&format!("leg=\"{leg}\",quantile=\"0.5\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        assert!(q > 0.0 && q < 0.1, "{leg} leg p50 {q} s\n{metrics}");
    }
}

/// The earliest start of a flow's records, µs, for readable offsets.
fn start_ms(flow: &[&Value]) -> f64 {
    flow.first().map_or(0.0, |r| u(&r["start_us"]) as f64)
}
