//! `xdprobe demo serve` (hidden): the demo's server, run by the demo inside
//! the server namespace. An HTTP-like responder that thinks before each
//! response, an upload sink, a paced download source, and a DNS responder
//! with a processing delay. It exits at `--lifetime-s` or on SIGTERM.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    path::PathBuf,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;

use super::{
    dns,
    traffic::{
        DNS_PORT, DOWNLOAD_PORT, HTTP_PORT, UPLOAD_PORT, drain, head_end, is_timeout, paced_send,
    },
};

/// Connections served at once; more are closed at once.
const MAX_CONNS: usize = 32;
/// Largest body the HTTP-like server sends.
const MAX_BODY: usize = 1 << 18;
/// Largest request head it reads.
const MAX_HEAD: usize = 8192;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[arg(long)]
    pub addr: Ipv4Addr,
    /// Think time before each HTTP-like response, ms.
    #[arg(long)]
    pub think_ms: u64,
    /// Processing delay before each DNS answer, ms.
    #[arg(long)]
    pub dns_delay_ms: u64,
    /// Exit after this many seconds at the latest.
    #[arg(long)]
    pub lifetime_s: u64,
    /// Created once every socket listens.
    #[arg(long)]
    pub ready: PathBuf,
}

#[derive(Default)]
struct Counts {
    responses: AtomicU64,
    uploaded: AtomicU64,
    downloaded: AtomicU64,
    dns: AtomicU64,
    refused_busy: AtomicU64,
}

#[derive(Clone, Copy)]
enum Service {
    Http,
    Upload,
    Download,
}

pub fn run(a: &ServeArgs) -> anyhow::Result<ExitCode> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let deadline = Instant::now() + Duration::from_secs(a.lifetime_s);
    let mut listeners = Vec::new();
    for (port, svc) in [
        (HTTP_PORT, Service::Http),
        (UPLOAD_PORT, Service::Upload),
        (DOWNLOAD_PORT, Service::Download),
    ] {
        let l = TcpListener::bind((a.addr, port)).with_context(|| format!("listen :{port}"))?;
        l.set_nonblocking(true)?;
        listeners.push((l, svc));
    }
    let udp = UdpSocket::bind((a.addr, DNS_PORT)).context("bind :53/udp")?;
    udp.set_read_timeout(Some(Duration::from_millis(100)))?;
    std::fs::write(&a.ready, b"ready\n").context("ready file")?;

    let counts = Counts::default();
    let live = AtomicUsize::new(0);
    let think = Duration::from_millis(a.think_ms);
    std::thread::scope(|sc| {
        sc.spawn(|| dns_loop(&udp, a.dns_delay_ms, deadline, &stop, &counts));
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            wait_readable(&listeners);
            for (l, svc) in &listeners {
                let Ok((s, _)) = l.accept() else { continue };
                if live.load(Ordering::Acquire) >= MAX_CONNS {
                    counts.refused_busy.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                live.fetch_add(1, Ordering::AcqRel);
                let (svc, counts, live, stop) = (*svc, &counts, &live, &*stop);
                sc.spawn(move || {
                    let _ = serve_conn(s, svc, think, deadline, stop, counts);
                    live.fetch_sub(1, Ordering::AcqRel);
                });
            }
        }
        stop.store(true, Ordering::Release);
    });
    eprintln!(
        "server: {} HTTP-like responses (think {} ms), {} DNS answers (delay {} ms), \
         received {:.1} MB, sent {:.1} MB in bulk{}",
        counts.responses.load(Ordering::Relaxed),
        a.think_ms,
        counts.dns.load(Ordering::Relaxed),
        a.dns_delay_ms,
        counts.uploaded.load(Ordering::Relaxed) as f64 / 1e6,
        counts.downloaded.load(Ordering::Relaxed) as f64 / 1e6,
        match counts.refused_busy.load(Ordering::Relaxed) {
            0 => String::new(),
            n => format!(", {n} connections turned away (busy)"),
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Sleeps until a listener has a connection waiting (or 50 ms pass): a
/// connection is accepted at once, so the first request's response time
/// is the think time, not a polling interval.
fn wait_readable(listeners: &[(TcpListener, Service)]) {
    let mut fds: Vec<libc::pollfd> = listeners
        .iter()
        .map(|(l, _)| libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd for the call.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
}

fn serve_conn(
    mut s: TcpStream,
    svc: Service,
    think: Duration,
    deadline: Instant,
    stop: &AtomicBool,
    counts: &Counts,
) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    s.set_write_timeout(Some(Duration::from_secs(3)))?;
    s.set_nodelay(true)?;
    match svc {
        Service::Http => http(&mut s, think, deadline, stop, counts),
        Service::Upload => {
            let n = drain(&mut s, deadline, stop)?;
            counts.uploaded.fetch_add(n, Ordering::Relaxed);
            Ok(())
        }
        Service::Download => download(&mut s, deadline, stop, counts),
    }
}

/// Requests are `GET /obj/<bytes> HTTP/1.1` heads; each gets, after the
/// think time, a response with a body of that many bytes (default 1000).
fn http(
    s: &mut TcpStream,
    think: Duration,
    deadline: Instant,
    stop: &AtomicBool,
    counts: &Counts,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut have = 0;
    let body = vec![b'x'; MAX_BODY];
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        let Some(free) = buf.get_mut(have..).filter(|f| !f.is_empty()) else {
            return Ok(()); // head too long: hang up
        };
        match s.read(free) {
            Ok(0) => return Ok(()),
            Ok(n) => have += n,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(e),
        }
        while let Some(end) = buf.get(..have).and_then(head_end) {
            let size = buf
                .get(..end)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| h.split_whitespace().nth(1))
                .and_then(|path| path.strip_prefix("/obj/"))
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(1000)
                .min(MAX_BODY);
            std::thread::sleep(think);
            let head = format!(
                "HTTP/1.1 200 OK\r\nServer: xdprobe-demo\r\nContent-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n"
            );
            let mut resp = Vec::with_capacity(head.len() + size);
            resp.extend_from_slice(head.as_bytes());
            resp.extend_from_slice(body.get(..size).unwrap_or_default());
            s.write_all(&resp)?;
            counts.responses.fetch_add(1, Ordering::Relaxed);
            buf.copy_within(end..have, 0);
            have -= end;
        }
    }
    Ok(())
}

/// The client sends `SEND <ms> <kbit/s>\n`; the server sends that long at
/// that rate, then closes.
fn download(
    s: &mut TcpStream,
    deadline: Instant,
    stop: &AtomicBool,
    counts: &Counts,
) -> std::io::Result<()> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") && line.len() < 64 && Instant::now() < deadline {
        match s.read(&mut byte) {
            Ok(0) => return Ok(()),
            Ok(_) => line.extend_from_slice(&byte),
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let text = String::from_utf8_lossy(&line);
    let mut words = text.split_whitespace();
    let (Some("SEND"), Some(ms), Some(kbit)) = (words.next(), words.next(), words.next()) else {
        return Ok(());
    };
    let (Ok(ms), Ok(kbit)) = (ms.parse::<u64>(), kbit.parse::<u32>()) else {
        return Ok(());
    };
    let n = paced_send(s, Duration::from_millis(ms), kbit, deadline, stop)?;
    counts.downloaded.fetch_add(n, Ordering::Relaxed);
    s.shutdown(std::net::Shutdown::Write)?;
    // Let the client close first, so its FIN is the flow's last word.
    let _ = drain(
        s,
        deadline.min(Instant::now() + Duration::from_secs(3)),
        stop,
    );
    Ok(())
}

fn dns_loop(udp: &UdpSocket, delay_ms: u64, deadline: Instant, stop: &AtomicBool, counts: &Counts) {
    let mut buf = [0u8; 512];
    let mut out = Vec::with_capacity(512);
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        let (n, from): (usize, SocketAddr) = match udp.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue,
        };
        let Ok(q) = dns::parse_query(buf.get(..n).unwrap_or_default()) else {
            continue;
        };
        std::thread::sleep(Duration::from_millis(delay_ms));
        dns::answer(&q, dns::address_for(q.qname), &mut out);
        if udp.send_to(&out, from).is_ok() {
            counts.dns.fetch_add(1, Ordering::Relaxed);
        }
    }
}
