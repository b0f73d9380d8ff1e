//! `xdprobe demo client` (hidden): the demo's client, run by the demo
//! inside the client namespace. Over `--seconds` it uploads and downloads
//! in bulk (paced), and meanwhile runs HTTP-like sessions, DNS lookups and
//! one connection to a closed port, spread over the time. Every step has a
//! timeout; the whole run ends by `--seconds` + 10 s at the latest.

use std::{
    io::{self, Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket},
    process::ExitCode,
    sync::atomic::AtomicBool,
    time::{Duration, Instant},
};

use super::{
    dns,
    traffic::{
        DNS_PORT, DOWNLOAD_PORT, HTTP_PORT, REFUSED_PORT, UPLOAD_PORT, content_length, drain,
        head_end, is_timeout, paced_send,
    },
};

/// The body sizes asked for in each HTTP-like session (one request per
/// size).
const BODY_SIZES: [usize; 3] = [800, 4000, 16000];
const DNS_NAMES: [&str; 3] = ["www.example.com", "api.example.net", "mail.example.org"];
const CONNECT_TIMEOUT: Duration = Duration::from_secs(4);
/// Per HTTP response and per DNS attempt.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const DNS_TRY_TIMEOUT: Duration = Duration::from_millis(500);
const DNS_TRIES: u32 = 4;

#[derive(clap::Args, Debug)]
pub struct ClientArgs {
    #[arg(long)]
    pub server: Ipv4Addr,
    /// How long the bulk transfers run and the other exchanges are spread.
    #[arg(long)]
    pub seconds: u64,
    /// Rate of each bulk transfer, kbit/s.
    #[arg(long, default_value_t = 6000)]
    pub rate_kbit: u32,
}

#[derive(Clone, Copy)]
enum Step {
    Dns(usize),
    Http,
    Refused,
}

pub fn run(a: &ClientArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(a.seconds + 10);
    let bulk = Duration::from_millis((a.seconds * 1000).saturating_sub(1000).max(1000));
    let never = AtomicBool::new(false);
    let steps = [
        Step::Dns(0),
        Step::Http,
        Step::Refused,
        Step::Http,
        Step::Dns(1),
        Step::Http,
        Step::Dns(2),
        Step::Http,
    ];
    let gap = bulk / steps.len() as u32;
    let mut failures = Vec::new();
    let (up, down) = std::thread::scope(|sc| {
        let up = sc.spawn(|| upload(a, bulk, deadline, &never));
        let down = sc.spawn(|| download(a, bulk, deadline, &never));
        for (i, step) in steps.iter().enumerate() {
            let at = start + gap * i as u32;
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let outcome = match *step {
                Step::Dns(n) => lookup(a.server, n),
                Step::Http => http_session(a.server, deadline),
                Step::Refused => refused(a.server),
            };
            match outcome {
                Ok(line) => eprintln!("client: {line}"),
                Err(e) => failures.push(e),
            }
        }
        (
            up.join()
                .unwrap_or_else(|_| Err(io::Error::other("upload panicked"))),
            down.join()
                .unwrap_or_else(|_| Err(io::Error::other("download panicked"))),
        )
    });
    match (up, down) {
        (Ok(u), Ok(d)) => eprintln!(
            "client: bulk upload {:.1} MB and download {:.1} MB at {} kbit/s each over {:.1} s",
            u as f64 / 1e6,
            d as f64 / 1e6,
            a.rate_kbit,
            bulk.as_secs_f64()
        ),
        (u, d) => {
            for e in [u.err(), d.err()].into_iter().flatten() {
                failures.push(format!("bulk transfer: {e}"));
            }
        }
    }
    for f in &failures {
        eprintln!("client: FAILED {f}");
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn connect(server: Ipv4Addr, port: u16) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&SocketAddr::from((server, port)), CONNECT_TIMEOUT)?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    s.set_write_timeout(Some(Duration::from_secs(3)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn upload(a: &ClientArgs, bulk: Duration, deadline: Instant, stop: &AtomicBool) -> io::Result<u64> {
    let mut s = connect(a.server, UPLOAD_PORT)?;
    let n = paced_send(&mut s, bulk, a.rate_kbit, deadline, stop)?;
    s.shutdown(std::net::Shutdown::Write)?;
    drain(&mut s, deadline, stop)?;
    Ok(n)
}

fn download(
    a: &ClientArgs,
    bulk: Duration,
    deadline: Instant,
    stop: &AtomicBool,
) -> io::Result<u64> {
    let mut s = connect(a.server, DOWNLOAD_PORT)?;
    s.write_all(format!("SEND {} {}\n", bulk.as_millis(), a.rate_kbit).as_bytes())?;
    drain(&mut s, deadline, stop)
}

/// One connection, one request per body size, each answered before the
/// next is sent; then the client closes.
fn http_session(server: Ipv4Addr, deadline: Instant) -> Result<String, String> {
    let run = || -> io::Result<(u16, Vec<Duration>)> {
        let mut s = connect(server, HTTP_PORT)?;
        let port = s.local_addr()?.port();
        let mut times = Vec::new();
        for size in BODY_SIZES {
            let t = Instant::now();
            s.write_all(
                format!(
                    "GET /obj/{size} HTTP/1.1\r\nHost: demo.example\r\nUser-Agent: xdprobe-demo\r\n\r\n"
                )
                .as_bytes(),
            )?;
            let got = read_response(&mut s, deadline.min(t + RESPONSE_TIMEOUT))?;
            if got != size {
                return Err(io::Error::other(format!("asked {size} bytes, got {got}")));
            }
            times.push(t.elapsed());
        }
        Ok((port, times))
    };
    match run() {
        Ok((port, times)) => Ok(format!(
            "http session from port {port}: {} exchanges, {} ms each (client side)",
            times.len(),
            times
                .iter()
                .map(|t| format!("{:.1}", t.as_secs_f64() * 1e3))
                .collect::<Vec<_>>()
                .join(" / ")
        )),
        Err(e) => Err(format!("http session: {e}")),
    }
}

/// Reads one response; returns its body length.
fn read_response(s: &mut TcpStream, limit: Instant) -> io::Result<usize> {
    let mut buf = Vec::with_capacity(32 * 1024);
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(end) = head_end(&buf) {
            let len = content_length(buf.get(..end).unwrap_or_default())
                .ok_or_else(|| io::Error::other("response without Content-Length"))?;
            if buf.len() >= end + len {
                return Ok(len);
            }
        }
        if Instant::now() >= limit {
            return Err(io::ErrorKind::TimedOut.into());
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// A stub resolver's lookup from its own socket (so its own flow), retried
/// with the same ID when the query or answer is lost.
fn lookup(server: Ipv4Addr, n: usize) -> Result<String, String> {
    let name = DNS_NAMES.get(n).copied().unwrap_or("www.example.com");
    let id = (std::process::id() as u16)
        .wrapping_mul(2654)
        .wrapping_add(n as u16);
    let run = || -> io::Result<(Ipv4Addr, u32, Duration)> {
        let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        sock.connect((server, DNS_PORT))?;
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let mut q = Vec::new();
        dns::build_query(id, name, &mut q).map_err(io::Error::other)?;
        let mut buf = [0u8; 512];
        let t = Instant::now();
        for attempt in 1..=DNS_TRIES {
            sock.send(&q)?;
            let until = Instant::now() + DNS_TRY_TIMEOUT;
            while Instant::now() < until {
                let got = match sock.recv(&mut buf) {
                    Ok(g) => g,
                    Err(e) if is_timeout(&e) => continue,
                    Err(e) => return Err(e),
                };
                match dns::parse_answer(buf.get(..got).unwrap_or_default(), id) {
                    Ok(Some(addr)) => return Ok((addr, attempt, t.elapsed())),
                    Ok(None) => return Err(io::Error::other("answer without an A record")),
                    Err(dns::DnsError::Mismatch) => {} // a late answer to someone else
                    Err(e) => return Err(io::Error::other(e)),
                }
            }
        }
        Err(io::Error::other(format!(
            "no answer after {DNS_TRIES} tries"
        )))
    };
    match run() {
        Ok((addr, tries, took)) => Ok(format!(
            "dns {name} -> {addr} in {:.1} ms{}",
            took.as_secs_f64() * 1e3,
            if tries > 1 {
                format!(" ({tries} tries)")
            } else {
                String::new()
            }
        )),
        Err(e) => Err(format!("dns {name}: {e}")),
    }
}

/// A connection to a port nobody listens on must be refused.
fn refused(server: Ipv4Addr) -> Result<String, String> {
    match TcpStream::connect_timeout(&SocketAddr::from((server, REFUSED_PORT)), CONNECT_TIMEOUT) {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(format!(
            "port {REFUSED_PORT}: connection refused, as intended"
        )),
        Err(e) => Err(format!("port {REFUSED_PORT}: {e} (expected a refusal)")),
        Ok(_) => Err(format!(
            "port {REFUSED_PORT}: connected (expected a refusal)"
        )),
    }
}
