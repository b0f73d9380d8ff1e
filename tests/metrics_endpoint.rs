//! Robustness finding 8: the metrics endpoint against idle, slow and
//! oversized clients. Scrapes are real HTTP over loopback; a scrape "times
//! out" as Prometheus' would, after 10 s.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xdprobe::daemon::report::{QueueReport, Report, ReportCollector};
use xdprobe::prom::{Limits, Metrics, MetricsServer};

fn server(limits: Limits) -> MetricsServer {
    let report = Arc::new(Mutex::new(Report {
        xdp: vec![("eth9".into(), Default::default())],
        queues: vec![QueueReport {
            iface: "eth9".into(),
            worker: Default::default(),
        }],
    }));
    let m = Metrics::new();
    m.register(ReportCollector(report));
    let (l, _) = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    MetricsServer::start(l, m, limits).unwrap()
}

/// One scrape as Prometheus makes it; the response, or panics after 10 s.
fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: probe\r\nAccept: application/openmetrics-text\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out)
        .expect("scrape answered within 10 s");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.contains("xdprobe_worker_rx_frames_total{iface=\"eth9\",queue=\"0\"} 0"),
        "{out}"
    );
    out
}

/// Whether the server still holds `s` open (no EOF, no reset).
fn still_open(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let open = matches!(s.read(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    open
}

/// Waits (bounded) for the server to close `s`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while start.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) | Err(_) if start.elapsed() < limit => return true,
            Ok(_) => continue,
            _ => return false,
        }
    }
    false
}

/// Scrapes until `cond` holds on the answer (bounded: 10 s).
fn scrape_until(addr: SocketAddr, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(addr);
        if cond(&text) {
            return text;
        }
        assert!(Instant::now() < end, "{what} never seen in\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const ACCEPTED: &str = "xdprobe_metrics_http_connections_total{outcome=\"accepted\"}";

fn metric(text: &str, needle: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(needle))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{needle} not in {text}"))
}

#[test]
fn idle_connections_do_not_delay_scrapes() {
    let srv = server(Limits::default());
    // One idle connection: the scrape is answered while it is still open
    // (the old server waited out its 2 s read timeout first).
    // The listen queue is first in, first out: the server has accepted
    // the idle connection by the time it accepts the scrape (counted).
    let mut idle = TcpStream::connect(srv.addr).unwrap();
    assert_eq!(metric(&scrape(srv.addr), ACCEPTED), 2);
    assert!(
        still_open(&mut idle),
        "the scrape waited for the idle client to be dropped"
    );

    // Fifty idle connections: every scrape still answered, none of them
    // dropped to make room.
    let mut idle: Vec<TcpStream> = (0..50)
        .map(|_| TcpStream::connect(srv.addr).unwrap())
        .collect();
    for _ in 0..10 {
        scrape(srv.addr);
    }
    assert!(idle.iter_mut().all(still_open));
    let text = scrape(srv.addr);
    assert_eq!(
        metric(
            &text,
            "xdprobe_metrics_http_connections_total{outcome=\"evicted\"}"
        ),
        0
    );
}

#[test]
fn idle_and_slow_heads_are_closed_after_the_header_timeout() {
    let srv = server(Limits {
        header_timeout: Duration::from_millis(500),
        ..Limits::default()
    });
    let mut idle = TcpStream::connect(srv.addr).unwrap();
    // Slowloris: a request head one byte at a time, never finished in time.
    let mut slow = TcpStream::connect(srv.addr).unwrap();
    let dribble = std::thread::spawn({
        let mut s = slow.try_clone().unwrap();
        move || {
            for b in b"GET /metrics HTTP/1.1\r\nX-Slow: "
                .iter()
                .chain([b'a'; 40].iter())
            {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    scrape(srv.addr);
    assert!(
        closed_within(&mut idle, Duration::from_secs(5)),
        "idle client kept"
    );
    assert!(
        closed_within(&mut slow, Duration::from_secs(5)),
        "slow client kept"
    );
    dribble.join().unwrap();
    scrape(srv.addr);
}

#[test]
fn oversized_requests_are_refused_and_the_endpoint_goes_on() {
    let srv = server(Limits::default());
    let mut big = TcpStream::connect(srv.addr).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = b"GET /metrics HTTP/1.1\r\nHost: probe\r\nX-Big: ".to_vec();
    head.resize(200_000, b'x');
    // The server may close before it has read it all: that is the point.
    let _ = big.write_all(&head);
    let mut reply = Vec::new();
    let _ = big.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 431"),
        "oversized head answered: {reply}"
    );
    // HTTP/1.0 without a Host (curl -0, the live tests): answered, closed.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.0 200"), "{out}");
    assert!(out.contains("xdprobe_xdp_packets_total{iface=\"eth9\",result=\"seen\"} 0"));
    // Wrong path and method: an answer, not a hang.
    for (req, status) in [
        (
            "GET / HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n",
            "404",
        ),
        (
            "POST /metrics HTTP/1.1\r\nHost: p\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            "405",
        ),
    ] {
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with(&format!("HTTP/1.1 {status}")), "{out}");
    }
    let text = scrape(srv.addr);
    assert!(
        metric(
            &text,
            "xdprobe_metrics_http_connections_total{outcome=\"failed\"}"
        ) >= 1
    );
}

#[test]
fn a_flood_past_the_connection_limit_closes_the_oldest_not_the_scraper() {
    let srv = server(Limits {
        max_connections: 8,
        ..Limits::default()
    });
    let mut flood: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(srv.addr).unwrap())
        .collect();
    // Accepted in the order they queued (and the oldest evicted then):
    // the scrape comes after all 20.
    let text = scrape(srv.addr);
    assert_eq!(metric(&text, ACCEPTED), 21);
    // 21 connections into 8 places: the 13 oldest were closed.
    assert_eq!(
        metric(
            &text,
            "xdprobe_metrics_http_connections_total{outcome=\"evicted\"}"
        ),
        13
    );
    let open = flood.iter_mut().map(still_open).filter(|o| *o).count();
    assert!(open <= 8, "{open} flood connections still open");
}

#[test]
fn a_client_that_never_reads_is_cut_off_at_the_lifetime() {
    let srv = server(Limits {
        lifetime: Duration::from_secs(1),
        ..Limits::default()
    });
    // Pipelined requests whose answers are never read fill the socket
    // buffers; the connection must not live on.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    let req = b"GET /metrics HTTP/1.1\r\nHost: p\r\n\r\n".repeat(2000);
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(&req);
    scrape(srv.addr);
    // Cut off once its lifetime (1 s) is over: polled, at most 10 s.
    scrape_until(srv.addr, "an expired connection", |text| {
        metric(
            text,
            "xdprobe_metrics_http_connections_total{outcome=\"expired\"}",
        ) >= 1
    });
}
