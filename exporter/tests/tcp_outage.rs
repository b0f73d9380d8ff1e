//! TCP collector outages. No real TCP IPFIX collector is installed here
//! (nfcapd 1.7 and pmacct 1.7.7 nfacctd take UDP only), so the collector is
//! a small in-test TCP reader and the byte stream of every connection is
//! decoded by the independent `ipfix` crate, with a fresh decoder per
//! connection: that only works if templates are resent on reconnect. The
//! observation-domain-name record must come again with them; its sets are
//! cut out before the crate sees the bytes (it panics on variable-length
//! fields) and read by `common::strip_domain_name`.

mod common;

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
    mpsc,
};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use xdprobe_exporter::{CollectorSpec, Exporter, ExporterConfig};

/// Accepts one connection and returns every byte it carried. Stopped by
/// `stop` (closes the socket: the collector goes away) or by EOF.
struct Reader {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<Vec<u8>>,
    /// Bytes read so far.
    read: Arc<AtomicU64>,
}

impl Reader {
    fn start(port: u16) -> Reader {
        let l = TcpListener::bind(("127.0.0.1", port)).expect("rebind collector port");
        let (stop, stop_rx) = mpsc::channel::<()>();
        let read = Arc::new(AtomicU64::new(0));
        let counter = read.clone();
        let thread = std::thread::spawn(move || {
            l.set_nonblocking(true).unwrap();
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut conn: Option<TcpStream> = None;
            let mut bytes = Vec::new();
            let mut buf = vec![0u8; 65536];
            while Instant::now() < deadline {
                if stop_rx.try_recv().is_ok() {
                    break;
                }
                match &mut conn {
                    None => match l.accept() {
                        Ok((s, _)) => {
                            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                            conn = Some(s);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    },
                    Some(s) => match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            bytes.extend_from_slice(&buf[..n]);
                            counter.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(_) => {}
                    },
                }
            }
            bytes
        });
        Reader { stop, thread, read }
    }

    fn read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    fn stop(self) -> Vec<u8> {
        let _ = self.stop.send(());
        self.thread.join().unwrap()
    }

    fn until_eof(self) -> Vec<u8> {
        self.thread.join().unwrap()
    }
}

/// Source ports of the flow records in one connection's byte stream. Also
/// checks that the connection carried the observation name exactly once.
fn ports_of(stream: Vec<u8>) -> Vec<u64> {
    let (recs, names) = decode_all(split_ipfix(&stream));
    assert_eq!(
        names,
        vec![(1, NAME.to_string())],
        "one name record per connection, with its templates"
    );
    recs.iter()
        .filter_map(|v| v.get("sourceTransportPort").and_then(Value::as_u64))
        .collect()
}

const NAME: &str = "xdprobe test: outage";

fn config(port: u16, buffer: usize) -> ExporterConfig {
    ExporterConfig {
        observation_name: Some(NAME.to_string()),
        collectors: vec![CollectorSpec::parse(&format!("tcp://127.0.0.1:{port}")).unwrap()],
        tcp_buffer_records: buffer,
        tcp_reconnect_max: Duration::from_millis(500),
        shutdown_timeout: Duration::from_secs(10),
        ..ExporterConfig::default()
    }
}

#[test]
fn thirty_second_outage_loses_nothing_and_keeps_order() {
    let port = free_tcp_port();
    let reader = Reader::start(port);
    let ex = Exporter::spawn(config(port, 100_000)).unwrap();
    let tx = ex.sender();
    let recs: Vec<_> = (0..900).map(tcp_record).collect();

    // Phase 1: collector up.
    for r in &recs[..300] {
        tx.send(r.clone()).expect("channel has room");
        std::thread::sleep(Duration::from_millis(1));
    }
    // All 300 sent, and every byte sent read, before the collector goes.
    wait_stats(&ex, |s| {
        s.collectors
            .first()
            .is_some_and(|c| c.records == 300 && c.octets == reader.read())
    });
    let first = reader.stop();

    // Phase 2: collector down for 30 s while records keep coming.
    let down = Instant::now();
    for r in &recs[300..600] {
        tx.send(r.clone()).expect("channel has room");
        std::thread::sleep(Duration::from_millis(95));
    }
    std::thread::sleep(Duration::from_secs(30).saturating_sub(down.elapsed()));

    // Phase 3: collector back on the same port.
    let reader = Reader::start(port);
    for r in &recs[600..] {
        tx.send(r.clone()).expect("channel has room");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(tx);
    let stats = ex.shutdown().unwrap();
    let second = reader.until_eof();

    let c = &stats.collectors[0];
    assert_eq!(c.connects, 2, "connected, then reconnected once");
    assert_eq!(c.not_sent, 0);
    assert_eq!(c.records, 900);
    let mut got = ports_of(first);
    let n1 = got.len();
    got.extend(ports_of(second));
    let want: Vec<u64> = recs.iter().map(|r| u64::from(r.client_port)).collect();
    assert_eq!(n1, 300, "phase 1 delivered before the outage");
    assert_eq!(got, want, "every record exactly once, in order");
}

#[test]
fn overflow_beyond_the_buffer_is_counted_and_the_rest_arrives() {
    let port = free_tcp_port();
    // No collector yet: everything is buffered, the bound is 100.
    let ex = Exporter::spawn(config(port, 100)).unwrap();
    let tx = ex.sender();
    let recs: Vec<_> = (0..250).map(tcp_record).collect();
    for r in &recs {
        tx.send_blocking(r.clone());
    }
    // Every record reached the buffer (and the oldest 150 fell out of it)
    // before the collector comes up.
    wait_stats(&ex, |s| {
        s.collectors.first().is_some_and(|c| c.not_sent == 150)
    });
    let reader = Reader::start(port);
    drop(tx);
    let stats = ex.shutdown().unwrap();
    let got = ports_of(reader.until_eof());
    assert_eq!(
        stats.collectors[0].not_sent, 150,
        "what overflowed the bound is counted"
    );
    let want: Vec<u64> = recs[150..]
        .iter()
        .map(|r| u64::from(r.client_port))
        .collect();
    assert_eq!(got, want, "the newest 100 arrive, in order");
}

#[test]
fn full_channel_is_counted_not_silent() {
    let port = free_udp_port();
    let cfg = ExporterConfig {
        collectors: vec![CollectorSpec::parse(&format!("udp://127.0.0.1:{port}")).unwrap()],
        channel_capacity: 4,
        ..ExporterConfig::default()
    };
    let ex = Exporter::spawn(cfg).unwrap();
    let tx = ex.sender();
    let mut refused = 0u64;
    for i in 0..20_000 {
        if tx.send(tcp_record(i)).is_err() {
            refused += 1;
        }
    }
    drop(tx);
    let stats = ex.shutdown().unwrap();
    assert!(
        refused > 0,
        "a 4-slot channel must overflow under a 20k burst"
    );
    assert_eq!(stats.channel_drops, refused);
    assert_eq!(stats.records_received + refused, 20_000);
}
