//! Real kernel traffic for the capture rig: servers in the server
//! namespace, clients in the client namespace, each a thread that has
//! joined its namespace (or a real tool: `openssl s_server`, `curl`). Every
//! loop is bounded by a deadline and every socket has a timeout, so a lost
//! packet can slow a run but never hang it.
//!
//! What it provokes, and why each piece is here:
//! - bulk TCP both ways (paced): loss, reordering and duplication on long
//!   streams → every retransmission class, out-of-order, duplicate ACKs;
//! - HTTP-like GETs of 1 MiB and request/response turns: server response
//!   time, and bulk in one direction after a request;
//! - TLS (openssl s_server, curl): the TLS-aware SRT and TLS detection;
//! - DNS over UDP, half the queries from one fixed socket, a query whose
//!   ID is a multiple of 17 left unanswered: per-query flows, and one flow
//!   whose requests stop alternating;
//! - a keep-alive connection that idles with 1 s TCP keep-alives;
//! - a connection to a closed port (SYN, RST);
//! - optionally many short UDP and TCP flows.

use std::{
    io::{self, Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    path::Path,
    process::{Child, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::{
    NetNs,
    topo::{ChildGuard, wait_for},
};

pub const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
pub const UPLOAD_PORT: u16 = 5201;
pub const DOWNLOAD_PORT: u16 = 5202;
pub const HTTP_PORT: u16 = 8080;
pub const TLS_PORT: u16 = 443;
pub const DNS_PORT: u16 = 53;
pub const KEEPALIVE_PORT: u16 = 9000;
/// Nobody listens here.
pub const REFUSED_PORT: u16 = 9;
pub const SHORT_UDP_PORT: u16 = 9999;
pub const SHORT_TCP_PORT: u16 = 7000;
/// A receiver that stops reading (zero window).
pub const STALL_PORT: u16 = 7100;

/// What one run sends.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// How long the bulk transfers run.
    pub bulk: Duration,
    /// Rate of each bulk direction, kbit/s (0: no bulk transfer).
    pub bulk_kbit: u32,
    pub http_gets: usize,
    pub http_bytes: usize,
    pub tls_gets: usize,
    pub dns_queries: usize,
    pub dns_interval: Duration,
    pub dns_seed: u64,
    pub keepalive_idle: Duration,
    /// Short UDP flows (2 datagrams each); a tenth as many short TCP ones.
    pub short_flows: usize,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            bulk: Duration::from_secs(3),
            bulk_kbit: 20_000,
            http_gets: 3,
            http_bytes: 1 << 20,
            tls_gets: 2,
            dns_queries: 40,
            dns_interval: Duration::from_millis(100),
            dns_seed: 1,
            keepalive_idle: Duration::from_millis(3500),
            short_flows: 0,
        }
    }
}

/// splitmix64: the DNS client's query IDs, reproducible from a seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Starts `f` on a thread that has joined `ns`.
pub fn in_ns<T: Send + 'static>(
    ns: &NetNs,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let name = ns.name.clone();
    std::thread::spawn(move || {
        super::enter_netns(&name);
        f()
    })
}

fn timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn set_int(fd: i32, level: i32, name: i32, v: i32) {
    // SAFETY: `v` lives for the call and the length is its size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const v).cast::<libc::c_void>(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
}

/// Accepts on `port` until `stop`, each connection on its own thread.
fn serve(
    port: u16,
    stop: Arc<AtomicBool>,
    handle: impl Fn(TcpStream) + Send + Sync + Clone + 'static,
) {
    let l = TcpListener::bind((SERVER, port)).unwrap_or_else(|e| panic!("listen :{port}: {e}"));
    l.set_nonblocking(true).expect("nonblocking");
    let mut conns = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                let h = handle.clone();
                conns.push(std::thread::spawn(move || h(s)));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    for c in conns {
        let _ = c.join();
    }
}

/// Reads until EOF, an error or `stop`.
fn drain(s: &mut TcpStream, stop: &AtomicBool) -> u64 {
    let mut buf = [0u8; 16384];
    let mut n = 0;
    let end = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => n += k as u64,
            Err(e) if timeout(&e) => {}
            Err(_) => break,
        }
    }
    n
}

/// Writes for `dur` at `kbit` kbit/s in 8 KiB chunks; stops early on an
/// error.
fn paced(s: &mut TcpStream, dur: Duration, kbit: u32) -> u64 {
    let chunk = [0x5au8; 8192];
    let gap = Duration::from_secs_f64(8192.0 * 8.0 / (f64::from(kbit.max(1)) * 1e3));
    let end = Instant::now() + dur;
    let mut next = Instant::now();
    let mut sent = 0;
    while Instant::now() < end {
        if s.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len() as u64;
        next += gap;
        if let Some(w) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
    }
    sent
}

/// Reads one line (at most 64 bytes).
fn read_line(s: &mut TcpStream) -> Option<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    let end = Instant::now() + Duration::from_secs(5);
    while line.len() < 64 && Instant::now() < end {
        match s.read(&mut b) {
            Ok(0) => return None,
            Ok(_) if b[0] == b'\n' => return String::from_utf8(line).ok(),
            Ok(_) => line.push(b[0]),
            Err(e) if timeout(&e) => {}
            Err(_) => return None,
        }
    }
    None
}

/// The servers of one run; stopped (threads joined, tools killed) on drop.
pub struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    children: Vec<ChildGuard>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.children.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts every server of `plan` in `s` and waits until each listens.
pub fn start_servers(s: &NetNs, plan: &Plan, dir: &Path) -> Servers {
    let stop = Arc::new(AtomicBool::new(false));
    let mut sv = Servers {
        stop: stop.clone(),
        threads: Vec::new(),
        children: Vec::new(),
    };
    let st = stop.clone();
    sv.threads.push(in_ns(s, move || {
        serve(UPLOAD_PORT, st.clone(), {
            let st = st.clone();
            move |mut c| {
                drain(&mut c, &st);
            }
        })
    }));
    let st = stop.clone();
    sv.threads.push(in_ns(s, move || {
        serve(DOWNLOAD_PORT, st, |mut c| {
            // "SEND <ms> <kbit>\n": send that long at that rate, then close.
            let Some(line) = read_line(&mut c) else {
                return;
            };
            let w: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            if let [ms, kbit] = w[..] {
                paced(
                    &mut c,
                    Duration::from_millis(ms.min(60_000)),
                    kbit.min(1_000_000) as u32,
                );
            }
        })
    }));
    let st = stop.clone();
    sv.threads.push(in_ns(s, move || {
        serve(HTTP_PORT, st, |mut c| {
            // "GET <bytes>\n" → that many bytes, for as long as asked.
            let body = vec![b'h'; 1 << 20];
            while let Some(line) = read_line(&mut c) {
                let n: usize = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1000);
                if c.write_all(body.get(..n.min(body.len())).unwrap_or_default())
                    .is_err()
                {
                    return;
                }
            }
        })
    }));
    let st = stop.clone();
    sv.threads.push(in_ns(s, move || {
        serve(KEEPALIVE_PORT, st, |mut c| {
            let mut buf = [0u8; 4096];
            let end = Instant::now() + Duration::from_secs(20);
            while Instant::now() < end {
                match c.read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => {
                        // 20 ms of "server processing" per request.
                        std::thread::sleep(Duration::from_millis(20));
                        if c.write_all(&[b'R'; 1000]).is_err() {
                            return;
                        }
                    }
                    Err(e) if timeout(&e) => {}
                    Err(_) => return,
                }
            }
        })
    }));
    let st = stop.clone();
    sv.threads.push(in_ns(s, move || dns_server(&st)));
    if plan.short_flows > 0 {
        let st = stop.clone();
        sv.threads.push(in_ns(s, move || {
            let u = UdpSocket::bind((SERVER, SHORT_UDP_PORT)).expect("bind :9999");
            u.set_read_timeout(Some(Duration::from_millis(100))).ok();
            let mut buf = [0u8; 2048];
            while !st.load(Ordering::Relaxed) {
                let _ = u.recv_from(&mut buf);
            }
        }));
        let st = stop.clone();
        sv.threads.push(in_ns(s, move || {
            serve(SHORT_TCP_PORT, st, |mut c| {
                let mut buf = [0u8; 1024];
                if matches!(c.read(&mut buf), Ok(n) if n > 0) {
                    std::thread::sleep(Duration::from_millis(2));
                    let _ = c.write_all(&[b'r'; 2000]);
                }
            })
        }));
    }
    if plan.tls_gets > 0 {
        sv.children.push(ChildGuard::new(tls_server(s, dir)));
    }
    let mut ports = vec![UPLOAD_PORT, DOWNLOAD_PORT, HTTP_PORT, KEEPALIVE_PORT];
    if plan.tls_gets > 0 {
        ports.push(TLS_PORT);
    }
    let mut udp = vec![DNS_PORT];
    if plan.short_flows > 0 {
        ports.push(SHORT_TCP_PORT);
        udp.push(SHORT_UDP_PORT);
    }
    wait_listening(s, &ports);
    wait_listening_udp(s, &udp);
    sv
}

/// Only the DNS responder (for benches with traffic of their own).
pub fn start_dns(s: &NetNs) -> Servers {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let t = in_ns(s, move || dns_server(&st));
    // An early query would be retried by nobody and stay unanswered.
    wait_listening_udp(s, &[DNS_PORT]);
    Servers {
        stop,
        threads: vec![t],
        children: Vec::new(),
    }
}

/// The DNS client of `plan` alone, in `c`; returns the unanswered count.
pub fn dns_queries(c: &NetNs, plan: &Plan) -> usize {
    let p = *plan;
    in_ns(c, move || dns_client(&p))
        .join()
        .unwrap_or(p.dns_queries)
}

/// Polls `ss` in `ns` until every TCP port listens (a test connection
/// would be a flow of its own in the capture).
pub fn wait_listening(ns: &NetNs, ports: &[u16]) {
    wait_bound(ns, "-ltnH", ports);
}

/// Polls `ss` in `ns` until a socket is bound to every UDP port.
pub fn wait_listening_udp(ns: &NetNs, ports: &[u16]) {
    wait_bound(ns, "-lunH", ports);
}

fn wait_bound(ns: &NetNs, ss_flags: &str, ports: &[u16]) {
    wait_for(Duration::from_secs(10), "servers listening", || {
        let out = ns.command("ss").arg(ss_flags).output();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        ports.iter().all(|p| text.contains(&format!(":{p} ")))
    });
}

/// `openssl s_server -www` on :443 with a fresh self-signed EC key.
fn tls_server(s: &NetNs, dir: &Path) -> Child {
    let (key, cert) = (dir.join("tls.key"), dir.join("tls.crt"));
    let st = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=server.example.test", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl req");
    assert!(st.success(), "openssl req failed");
    s.command("openssl")
        .args([
            "s_server",
            "-accept",
            &TLS_PORT.to_string(),
            "-www",
            "-quiet",
        ])
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server")
}

/// Answers A queries after 3 + (ID mod 7) ms; a query whose ID is a
/// multiple of 17 stays unanswered.
fn dns_server(stop: &AtomicBool) {
    let u = UdpSocket::bind((SERVER, DNS_PORT)).expect("bind :53/udp");
    u.set_read_timeout(Some(Duration::from_millis(100))).ok();
    let mut buf = [0u8; 512];
    let mut out = Vec::with_capacity(512);
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, peer)) = u.recv_from(&mut buf) else {
            continue;
        };
        let Some((id, qend)) = dns::query(buf.get(..n).unwrap_or_default()) else {
            continue;
        };
        if id % 17 == 0 {
            continue;
        }
        std::thread::sleep(Duration::from_millis(3 + u64::from(id % 7)));
        dns::answer(&buf[..qend], id, &mut out);
        let _ = u.send_to(&out, peer);
    }
}

/// Just enough DNS (RFC 1035 §4.1) for a resolver and a responder.
pub mod dns {
    /// An A query for `name`.
    pub fn build(id: u16, name: &str, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name.split('.') {
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
        out.extend_from_slice(&[0, 0, 1, 0, 1]);
    }

    /// A query's ID and the end of its question, if it is one.
    pub fn query(m: &[u8]) -> Option<(u16, usize)> {
        if m.len() < 17 || m[2] & 0x80 != 0 {
            return None;
        }
        let mut i = 12;
        while *m.get(i)? != 0 {
            i += usize::from(m[i]) + 1;
            if i > 300 {
                return None;
            }
        }
        let end = i + 5;
        (end <= m.len()).then(|| (u16::from_be_bytes([m[0], m[1]]), end))
    }

    /// The answer to `q` (header + question): one A record.
    pub fn answer(q: &[u8], id: u16, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
        out.extend_from_slice(q.get(12..).unwrap_or_default());
        out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        out.extend_from_slice(&[192, 0, 2, 100 + (id % 50) as u8]);
    }

    /// The ID of a response, if it is one.
    pub fn response_id(m: &[u8]) -> Option<u16> {
        (m.len() >= 12 && m[2] & 0x80 != 0).then(|| u16::from_be_bytes([m[0], m[1]]))
    }
}

fn connect(port: u16) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&SocketAddr::from((SERVER, port)), Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    Ok(s)
}

/// Runs every client of `plan` in `c` at once and waits for all (each is
/// bounded). Failures of single exchanges are expected under loss and only
/// counted.
pub fn run_clients(c: &NetNs, plan: &Plan) -> usize {
    let p = *plan;
    let mut jobs: Vec<JoinHandle<usize>> = Vec::new();
    if p.bulk_kbit > 0 {
        jobs.push(in_ns(c, move || {
            let Ok(mut s) = connect(UPLOAD_PORT) else {
                return 1;
            };
            paced(&mut s, p.bulk, p.bulk_kbit);
            let _ = s.shutdown(std::net::Shutdown::Write);
            drain(&mut s, &AtomicBool::new(false));
            0
        }));
        jobs.push(in_ns(c, move || {
            let Ok(mut s) = connect(DOWNLOAD_PORT) else {
                return 1;
            };
            let line = format!("SEND {} {}\n", p.bulk.as_millis(), p.bulk_kbit);
            if s.write_all(line.as_bytes()).is_err() {
                return 1;
            }
            drain(&mut s, &AtomicBool::new(false));
            0
        }));
    }
    jobs.push(in_ns(c, move || {
        let mut failed = 0;
        for _ in 0..p.http_gets {
            let ok = connect(HTTP_PORT).is_ok_and(|mut s| {
                let got = s
                    .write_all(format!("GET {}\n", p.http_bytes).as_bytes())
                    .is_ok()
                    .then(|| read_n(&mut s, p.http_bytes));
                got == Some(p.http_bytes)
            });
            failed += usize::from(!ok);
        }
        // Refused: SYN, RST.
        let _ = TcpStream::connect_timeout(
            &SocketAddr::from((SERVER, REFUSED_PORT)),
            Duration::from_secs(2),
        );
        failed
    }));
    jobs.push(in_ns(c, move || dns_client(&p)));
    jobs.push(in_ns(c, move || {
        usize::from(keepalive_client(p.keepalive_idle).is_err())
    }));
    if p.short_flows > 0 {
        jobs.push(in_ns(c, move || {
            for _ in 0..p.short_flows {
                if let Ok(u) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) {
                    let _ = u.send_to(&[b'u'; 64], (SERVER, SHORT_UDP_PORT));
                    let _ = u.send_to(&[b'v'; 64], (SERVER, SHORT_UDP_PORT));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let mut failed = 0;
            for k in 0..p.short_flows / 10 {
                let ok = connect(SHORT_TCP_PORT).is_ok_and(|mut s| {
                    s.write_all(format!("GET {k}\r\n").as_bytes()).is_ok()
                        && read_n(&mut s, 2000) == 2000
                });
                failed += usize::from(!ok);
            }
            failed
        }));
    }
    let mut tls = Vec::new();
    for _ in 0..p.tls_gets {
        tls.push(
            c.command("curl")
                .args(["-sk", "--max-time", "4", "-o", "/dev/null"])
                .arg(format!("https://{SERVER}:{TLS_PORT}/"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status(),
        );
    }
    let mut failed = tls
        .iter()
        .filter(|s| !s.as_ref().is_ok_and(|s| s.success()))
        .count();
    for j in jobs {
        failed += j.join().unwrap_or(1);
    }
    failed
}

/// Reads up to `n` bytes (until EOF or 5 s); returns how many came.
fn read_n(s: &mut TcpStream, n: usize) -> usize {
    let mut buf = [0u8; 16384];
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(5);
    while got < n && Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if timeout(&e) => {}
            Err(_) => break,
        }
    }
    got
}

/// `plan.dns_queries` lookups, one every `dns_interval`; even ones from one
/// fixed socket (one flow of many transactions), odd ones from a fresh
/// socket each. Returns the unanswered count.
fn dns_client(p: &Plan) -> usize {
    let mut rng = Rng(p.dns_seed);
    let Ok(fixed) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) else {
        return p.dns_queries;
    };
    let mut q = Vec::new();
    let mut buf = [0u8; 512];
    let mut unanswered = 0;
    for k in 0..p.dns_queries {
        let id = (rng.next() % 65534 + 1) as u16;
        dns::build(id, &format!("host{k}.example.test"), &mut q);
        let fresh;
        let s = if k % 2 == 0 {
            &fixed
        } else {
            match UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) {
                Ok(u) => {
                    fresh = u;
                    &fresh
                }
                Err(_) => continue,
            }
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let answered = s.send_to(&q, (SERVER, DNS_PORT)).is_ok()
            && matches!(s.recv_from(&mut buf), Ok((n, _)) if dns::response_id(&buf[..n]).is_some());
        unanswered += usize::from(!answered);
        std::thread::sleep(p.dns_interval);
    }
    unanswered
}

/// Three request/response turns, then idle with 1 s keep-alives.
fn keepalive_client(idle: Duration) -> io::Result<()> {
    let mut s = connect(KEEPALIVE_PORT)?;
    let fd = s.as_raw_fd();
    set_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 1);
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 1);
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 5);
    for _ in 0..3 {
        s.write_all(&[b'Q'; 100])?;
        if read_n(&mut s, 1000) < 1000 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    std::thread::sleep(idle);
    Ok(())
}

/// DNS over TCP (RFC 1035 §4.2.2: each message after a two-byte length) on
/// :53, answering after 5 ms.
pub fn start_dns_tcp(s: &NetNs) -> Servers {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let t = in_ns(s, move || {
        serve(DNS_PORT, st, |mut c| {
            let mut out = Vec::new();
            while let Some(q) = read_framed(&mut c) {
                let Some((id, qend)) = dns::query(&q) else {
                    return;
                };
                std::thread::sleep(Duration::from_millis(5));
                dns::answer(&q[..qend], id, &mut out);
                let mut framed = (out.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&out);
                if c.write_all(&framed).is_err() {
                    return;
                }
            }
        })
    });
    wait_listening(s, &[DNS_PORT]);
    Servers {
        stop,
        threads: vec![t],
        children: Vec::new(),
    }
}

/// One length-prefixed DNS message, or `None` at EOF or after 5 s.
fn read_framed(c: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    read_exact_by(c, &mut len)?;
    let mut m = vec![0u8; usize::from(u16::from_be_bytes(len))];
    read_exact_by(c, &mut m)?;
    Some(m)
}

/// `read_exact` with the socket's short read timeout, bounded to 5 s.
fn read_exact_by(c: &mut TcpStream, buf: &mut [u8]) -> Option<()> {
    let mut have = 0;
    let end = Instant::now() + Duration::from_secs(5);
    while have < buf.len() {
        if Instant::now() > end {
            return None;
        }
        match c.read(&mut buf[have..]) {
            Ok(0) => return None,
            Ok(n) => have += n,
            Err(e) if timeout(&e) => {}
            Err(_) => return None,
        }
    }
    Some(())
}

/// A DNS-over-TCP client connection made from `c` (the socket stays in
/// the client namespace whichever thread uses it).
pub fn dns_tcp_connect(c: &NetNs) -> TcpStream {
    in_ns(c, || connect(DNS_PORT).expect("connect :53/tcp"))
        .join()
        .expect("connect thread")
}

/// One query on a DNS-over-TCP connection; true when answered.
pub fn dns_tcp_query(s: &mut TcpStream, id: u16, name: &str) -> bool {
    let mut q = Vec::new();
    dns::build(id, name, &mut q);
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    s.write_all(&framed).is_ok() && read_framed(s).is_some_and(|a| dns::response_id(&a) == Some(id))
}

/// A receiver that stops reading: the client sends `bytes` as fast as it
/// can; the server reads nothing for `stall`, then 4 KiB every 10 ms for
/// `slow`, then everything. The sender fills the advertised window (window
/// full), the receiver advertises a zero window and the sender probes it.
pub fn stalled_receiver(s: &NetNs, c: &NetNs, bytes: usize, stall: Duration, slow: Duration) {
    let server = in_ns(s, move || {
        let l = TcpListener::bind((SERVER, STALL_PORT)).expect("listen :7100");
        l.set_nonblocking(true).ok();
        let end = Instant::now() + Duration::from_secs(10);
        let mut conn = None;
        while conn.is_none() && Instant::now() < end {
            match l.accept() {
                Ok((c, _)) => conn = Some(c),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let Some(mut c) = conn else { return 0 };
        c.set_nonblocking(false).ok();
        c.set_read_timeout(Some(Duration::from_millis(200))).ok();
        std::thread::sleep(stall);
        let mut got = 0;
        let mut buf = [0u8; 4096];
        let slow_end = Instant::now() + slow;
        while Instant::now() < slow_end {
            match c.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => got += n,
                Err(e) if timeout(&e) => {}
                Err(_) => return got,
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        got + read_n(&mut c, usize::MAX / 2)
    });
    wait_listening(s, &[STALL_PORT]);
    let client = in_ns(c, move || {
        let Ok(mut s) = connect(STALL_PORT) else {
            return 0;
        };
        let data = vec![b'z'; bytes];
        let sent = s.write_all(&data).map_or(0, |()| bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        sent
    });
    let sent = client.join().unwrap_or(0);
    let got = server.join().unwrap_or(0);
    assert_eq!(sent, bytes, "the stalled receiver's sender did not finish");
    assert_eq!(got, bytes, "the stalled receiver did not read everything");
}
