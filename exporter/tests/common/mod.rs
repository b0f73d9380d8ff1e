//! The exporter tests' sample records; the collector-side helpers and the
//! skip rule come from the workspace's test-support crate.
#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses a different subset"
)]

use std::net::IpAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ipfix::{IpfixConsumer, IpfixPrinter};
use serde_json::Value;

use xdprobe_dataplane::l7::fields::{DnsInfo, HttpInfo, QuicInfo, SrtSummary, TlsInfo};
use xdprobe_dataplane::l7::{App, L7Fields};
use xdprobe_dataplane::record::{DirStats, Npm, TsRttLeg, TsRttRecord};
use xdprobe_dataplane::{EndReason, FlowRecord, Timestamp};
use xdprobe_exporter::{ExportStats, Exporter, ExporterConfig};

/// Polls the exporter's live numbers until `cond` holds (bounded: 10 s):
/// a test waits for what it needs, not for a fixed time.
pub fn wait_stats(ex: &Exporter, cond: impl Fn(&ExportStats) -> bool) -> ExportStats {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let s = ex.live_stats().lock().unwrap().clone();
        if cond(&s) {
            return s;
        }
        assert!(Instant::now() < end, "live stats never got there: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 2024-03-01T12:00:00Z in Unix seconds.
pub const T0: u64 = 1_709_294_400;

/// A TCP record with every NPM field set; `i` varies ports, times, counts.
pub fn tcp_record(i: u32) -> FlowRecord {
    let start_ns = (T0 + u64::from(i)) * 1_000_000_000 + 123_456_789 + u64::from(i) * 1_000;
    FlowRecord {
        client_addr: IpAddr::from([192, 0, 2, 10]),
        client_port: 40_000 + (i % 20_000) as u16,
        server_addr: IpAddr::from([198, 51, 100, 20]),
        server_port: 443,
        proto: 6,
        vlan: Some(100),
        direction_guessed: false,
        start: Timestamp::from_nanos(start_ns),
        end: Timestamp::from_nanos(start_ns + 2_345_678_000),
        end_reason: EndReason::End,
        tos: 0x28,
        c2s: DirStats {
            packets: 10 + u64::from(i),
            bytes: 1_000 + u64::from(i) * 7,
            tcp_flags: 0x1b,
            retrans: 3,
            retrans_fast: 1,
            retrans_spurious: 1,
            retrans_other: 1,
            ooo: 2,
            keepalive: 1,
            dup_ack: 4,
            zero_window: 7,
            window_full: 2,
        },
        s2c: DirStats {
            packets: 20 + u64::from(i),
            bytes: 30_000 + u64::from(i) * 11,
            tcp_flags: 0x1a,
            retrans: 5,
            retrans_fast: 2,
            retrans_spurious: 0,
            retrans_other: 3,
            ooo: 1,
            keepalive: 0,
            dup_ack: 6,
            zero_window: 0,
            window_full: 9 + i % 3,
        },
        npm: Npm {
            rtt_us: Some(15_300 + i),
            server_net_us: Some(10_100 + i),
            client_net_us: Some(5_200),
            srt_us: Some(2_500_123),
            srt_count: 3,
            srt_min_us: Some(1_000),
            srt_mean_us: Some(2_000),
            srt_max_us: Some(3_000),
            tls: true,
            ts_rtt: Some(TsRttRecord {
                server: TsRttLeg {
                    count: 40 + i,
                    min_us: Some(90),
                    mean_us: Some(120 + i),
                    max_us: Some(400),
                    p50_us: Some(110),
                    p90_us: Some(300),
                    missed: 2,
                },
                // A leg with no sample this interval: count 0, values absent.
                client: TsRttLeg::default(),
            }),
        },
        seq_in_flow: i % 3,
        process: None,
        app: None,
        l7: None,
    }
}

/// A UDP (DNS) record over IPv6 with no RTT (absent, not 0).
pub fn dns_v6_record(i: u32) -> FlowRecord {
    let start_ns = (T0 + 100 + u64::from(i)) * 1_000_000_000 + 999_999_000;
    FlowRecord {
        client_addr: "2001:db8::1".parse().unwrap(),
        client_port: 53_000 + (i % 1000) as u16,
        server_addr: "2001:db8::53".parse().unwrap(),
        server_port: 53,
        proto: 17,
        vlan: None,
        direction_guessed: true,
        start: Timestamp::from_nanos(start_ns),
        end: Timestamp::from_nanos(start_ns + 1_500_000),
        end_reason: EndReason::Idle,
        tos: 0,
        c2s: DirStats {
            packets: 1,
            bytes: 71,
            ..DirStats::default()
        },
        s2c: DirStats {
            packets: 1,
            bytes: 187,
            ..DirStats::default()
        },
        npm: Npm {
            srt_us: Some(1_400),
            srt_count: 1,
            srt_min_us: Some(1_400),
            srt_mean_us: Some(1_400),
            srt_max_us: Some(1_400),
            ..Npm::default()
        },
        seq_in_flow: 0,
        process: None,
        app: None,
        l7: None,
    }
}

/// `n` records mixing both kinds.
pub fn mixed_records(n: u32) -> Vec<FlowRecord> {
    (0..n)
        .map(|i| {
            if i % 4 == 3 {
                dns_v6_record(i)
            } else {
                tcp_record(i)
            }
        })
        .collect()
}

pub use xdprobe_test_support::collect::*;
pub use xdprobe_test_support::require_tool as require;

/// Parse with the `ipfix` crate in a thread (it can loop on malformed
/// input: a hang must fail the test, not stall it), after cutting out the
/// observation-domain-name sets, which are returned separately.
pub fn decode_all(msgs: Vec<Vec<u8>>) -> (Vec<Value>, Vec<(u32, String)>) {
    let mut names = Vec::new();
    let msgs: Vec<Vec<u8>> = msgs
        .iter()
        .map(|m| {
            let (m, n) = strip_domain_name(m);
            names.extend(n);
            m
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut c = IpfixConsumer::new();
        let p = IpfixPrinter::new();
        let mut recs = Vec::new();
        for m in &msgs {
            let sets = c.parse_message(m).expect("ipfix crate rejected a message");
            for s in sets {
                for j in p.print_json(s) {
                    recs.push(serde_json::from_str::<Value>(&j).expect("json"));
                }
            }
        }
        let _ = tx.send(recs);
    });
    let recs = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("ipfix crate hung or panicked");
    (recs, names)
}

/// Exports `recs` through an exporter of `cfg`, pausing `pause` after
/// the records whose index `pause_after` picks, and shuts it down: its
/// final numbers.
pub fn export_paced(
    cfg: ExporterConfig,
    recs: &[FlowRecord],
    pause_after: impl Fn(usize) -> bool,
    pause: Duration,
) -> ExportStats {
    let ex = Exporter::spawn(cfg).unwrap();
    let tx = ex.sender();
    for (i, r) in recs.iter().enumerate() {
        tx.send_blocking(r.clone());
        if pause_after(i) {
            std::thread::sleep(pause);
        }
    }
    drop(tx);
    ex.shutdown().unwrap()
}

fn s(b: &str) -> Option<Box<[u8]>> {
    Some(b.as_bytes().into())
}

/// One record of each kind (TLS, QUIC over IPv6, HTTP, DNS A and AAAA, a
/// label only) and one with L7 off.
pub fn l7_records() -> Vec<FlowRecord> {
    let mut srt = SrtSummary::default();
    srt.add(1_500_000);
    let with = |i, app, l7| FlowRecord {
        app: Some(app),
        l7,
        ..tcp_record(i)
    };
    let mut quic = with(
        2,
        App::QuicH3,
        Some(L7Fields::Quic(Box::new(QuicInfo {
            version: 0x6b33_43cf,
            sni: s("quic.example.org"),
            alpn: Some(b"\x02h3"[..].into()),
            ja4: Some(*b"q13d0310h3_55b375c5d22e_cd85d2d88918"),
        }))),
    );
    quic.client_addr = "2001:db8::10".parse().unwrap();
    quic.server_addr = "2001:db8::20".parse().unwrap();
    quic.proto = 17;
    let dns = |i, qname: &str, addr: &str| {
        let mut r = with(
            i,
            App::Dns,
            Some(L7Fields::Dns(Box::new(DnsInfo {
                qname: s(qname),
                qtype: Some(if addr.contains(':') { 28 } else { 1 }),
                qclass: Some(1),
                rcode: Some(0),
                answers: Some(1),
                answer_addr: addr.parse().ok(),
                rcodes: [1, 0, 0, 0],
            }))),
        );
        r.proto = 17;
        r
    };
    vec![
        with(
            1,
            App::TlsH2,
            Some(L7Fields::Tls(Box::new(TlsInfo {
                sni: s("www.example.com"),
                alpn: Some(b"\x02h2\x08http/1.1"[..].into()),
                version: Some(0x0304),
                cipher: Some(0x1301),
                ja3: Some([0xab; 16]),
                ja4: Some(*b"t13d1516h2_8daaf6152771_e5627efa2ab1"),
                cert_cn: s("cert.example.com"),
            }))),
        ),
        quic,
        with(
            3,
            App::Http,
            Some(L7Fields::Http(Box::new(HttpInfo {
                method: s("GET"),
                host: s("web.example.net"),
                target: s("/orders?id=7"),
                user_agent: s("curl/7.88.1"),
                status: Some(503),
                requests: 4,
                status_class: [0, 3, 0, 0, 1],
                srt,
            }))),
        ),
        dns(4, "dns.example.org", "192.0.2.77"),
        dns(5, "v6.example.org", "2001:db8::77"),
        with(6, App::Ssh, None),
        tcp_record(7),
    ]
}
