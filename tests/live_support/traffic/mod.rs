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

mod clients;
pub mod dns;

pub use clients::{run_clients, stalled_receiver};
pub use dns::{dns_queries, dns_tcp_connect, dns_tcp_query, start_dns, start_dns_tcp};

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

/// splitmix64 (the demo bridge's): the DNS client's query IDs,
/// reproducible from a seed.
pub use xdprobe_demo::bridge::Rng;

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
    let tcp = |port: u16, handle: fn(TcpStream)| {
        let st = stop.clone();
        in_ns(s, move || serve(port, st, handle))
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
    sv.threads.push(tcp(DOWNLOAD_PORT, download));
    sv.threads.push(tcp(HTTP_PORT, http));
    sv.threads.push(tcp(KEEPALIVE_PORT, keepalive));
    let st = stop.clone();
    sv.threads.push(in_ns(s, move || dns::dns_server(&st)));
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
        sv.threads.push(tcp(SHORT_TCP_PORT, short_tcp));
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

/// "SEND <ms> <kbit>\n": sends that long at that rate, then closes.
fn download(mut c: TcpStream) {
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
}

/// "GET <bytes>\n" → that many bytes, for as long as asked.
fn http(mut c: TcpStream) {
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
}

/// 1000 bytes back per request, after 20 ms of "server processing".
fn keepalive(mut c: TcpStream) {
    let mut buf = [0u8; 4096];
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        match c.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {
                std::thread::sleep(Duration::from_millis(20));
                if c.write_all(&[b'R'; 1000]).is_err() {
                    return;
                }
            }
            Err(e) if timeout(&e) => {}
            Err(_) => return,
        }
    }
}

/// One short request, 2000 bytes back.
fn short_tcp(mut c: TcpStream) {
    let mut buf = [0u8; 1024];
    if matches!(c.read(&mut buf), Ok(n) if n > 0) {
        std::thread::sleep(Duration::from_millis(2));
        let _ = c.write_all(&[b'r'; 2000]);
    }
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

fn connect(port: u16) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&SocketAddr::from((SERVER, port)), Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    Ok(s)
}
