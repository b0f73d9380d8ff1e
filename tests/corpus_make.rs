//! Remakes the captures this project recorded itself for `tests/corpus`
//! (`xdprobe_*`, listed with their recipe in `tests/corpus/SOURCES.tsv`):
//! real kernel traffic between network namespaces through the project's
//! impairing bridge (`xdprobe demo bridge`), recorded by tcpdump on the
//! link between the bridge's legs (`live_support::rig`). Two of them are
//! then written the way another kind of recorder would have written the
//! same packets: a TAP whose two directions reach the recorder with
//! different delays, and a recorder with a millisecond clock.
//!
//! Not part of the normal run (it rewrites checked-in files):
//! `sudo cargo test --test corpus_make -- --ignored`, then review the diff
//! (`XDPROBE_REMAKE=zero-window,split-tap,ms-clock,dns-tcp` picks some;
//! frame numbers in `npm_oracle.rs`' exception list follow the files).
//! The traffic is real, so each remake differs in detail; the tests that
//! read these files ask only for what the scenario is there to show.

mod live_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use live_support::rig::{self, Rig};
use live_support::topo::{Bench, TempDir};
use live_support::traffic::{self, Plan};
use xdprobe_dataplane::source::pcap::PcapReader;

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name)
}

/// One packet read back from a capture.
struct Frame {
    ts_ns: u64,
    data: Vec<u8>,
    wire_len: u32,
}

fn read_all(file: &Path) -> Vec<Frame> {
    let mut r = PcapReader::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut v = Vec::new();
    while let Some(p) = r.next_packet().expect("clean capture") {
        v.push(Frame {
            ts_ns: p.ts.as_nanos(),
            data: p.data.to_vec(),
            wire_len: p.wire_len,
        });
    }
    v
}

/// Classic pcap, microsecond timestamps (the inputs are tcpdump's, so no
/// rounding happens), Ethernet, little-endian.
fn write_pcap(out: &Path, frames: &[&Frame], snaplen: u32) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, snaplen, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for f in frames {
        let us = f.ts_ns / 1000;
        for v in [
            (us / 1_000_000) as u32,
            (us % 1_000_000) as u32,
            f.data.len() as u32,
            f.wire_len,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&f.data);
    }
    std::fs::write(out, b).expect("write capture");
}

/// pcapng with one Ethernet interface whose clock ticks in milliseconds
/// (`if_tsresol` = 3): every time is the millisecond it falls in.
fn write_pcapng_ms(out: &Path, frames: &[&Frame], snaplen: u32) {
    fn block(b: &mut Vec<u8>, ty: u32, body: &[u8]) {
        let len = 12 + body.len().next_multiple_of(4);
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(body);
        b.resize(b.len() + body.len().next_multiple_of(4) - body.len(), 0);
        b.extend_from_slice(&(len as u32).to_le_bytes());
    }
    let mut b = Vec::new();
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut b, 0x0a0d_0d0a, &shb);
    let mut idb = Vec::new();
    idb.extend_from_slice(&1u16.to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&snaplen.to_le_bytes());
    // if_tsresol (9) = 3: 10^-3 s; then opt_endofopt.
    idb.extend_from_slice(&[9, 0, 1, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
    block(&mut b, 1, &idb);
    for f in frames {
        let ms = f.ts_ns / 1_000_000;
        let mut epb = Vec::new();
        for v in [
            0u32,
            (ms >> 32) as u32,
            ms as u32,
            f.data.len() as u32,
            f.wire_len,
        ] {
            epb.extend_from_slice(&v.to_le_bytes());
        }
        epb.extend_from_slice(&f.data);
        block(&mut b, 6, &epb);
    }
    std::fs::write(out, b).expect("write capture");
}

/// A receiver that stops reading for 3 s, then reads slowly: zero windows,
/// window-full segments, zero-window probes (Linux backs off 0.2, 0.4,
/// 0.8 … s) and the repeated zero-window ACKs that answer them.
fn zero_window(tmp: &Path) {
    let rig = Rig {
        server_delay_ms: 1.0,
        client_delay_ms: 1.0,
        snaplen: 96,
        ..Rig::default()
    };
    let cap = rig.capture_with(tmp, "zero-window", |b, _| {
        traffic::stalled_receiver(
            &b.s,
            &b.c,
            3 << 20,
            Duration::from_secs(3),
            Duration::from_millis(800),
        );
    });
    std::fs::copy(&cap, corpus("xdprobe_zero-window.pcap")).expect("copy");
}

/// Short request/response connections and DNS lookups seen by a split
/// TAP: tcpdump records each direction of the link separately, and the
/// client→server direction is written 1.9 ms late (just inside the
/// probe's 2 ms window), as if its TAP port were that much further from
/// the recorder. The server is next to the tap, so a SYN+ACK sent within
/// 1.9 ms lands in the file before the SYN it answers, stamped later.
fn split_tap(tmp: &Path) {
    let rig = Rig {
        server_delay_ms: 0.0,
        client_delay_ms: 5.0,
        snaplen: 128,
        ..Rig::default()
    };
    let mut b = rig.bench(tmp, "split-tap");
    let (c2s, s2c) = (tmp.join("c2s.pcap"), tmp.join("s2c.pcap"));
    // m0 sends what the client leg forwards toward the server.
    let td1 = b.start_tcpdump_on("m0", &["-Q", "out"], &c2s, 128);
    let td2 = b.start_tcpdump_on("m0", &["-Q", "in"], &s2c, 128);
    short_connections(&b, (2, 20_000), (6, 30), 50);
    rig.settle();
    b.stop_tcpdump(td1);
    b.stop_tcpdump(td2);
    const SKEW_NS: u64 = 1_900_000;
    let (a, z) = (read_all(&c2s), read_all(&s2c));
    let mut all: Vec<(u64, &Frame)> = a
        .iter()
        .map(|f| (f.ts_ns + SKEW_NS, f))
        .chain(z.iter().map(|f| (f.ts_ns, f)))
        .collect();
    all.sort_by_key(|(arrival, _)| *arrival);
    let frames: Vec<&Frame> = all.into_iter().map(|(_, f)| f).collect();
    write_pcap(&corpus("xdprobe_split-tap.pcap"), &frames, 128);
}

/// Short connections, no bulk, no TLS, no idle keep-alive: `http` GETs
/// of (count, bytes), `dns` queries (count, ms apart), `short` short
/// flows; servers up for the clients' run only.
fn short_connections(b: &Bench, http: (usize, usize), dns: (usize, u64), short: usize) {
    let plan = Plan {
        bulk_kbit: 0,
        http_gets: http.0,
        http_bytes: http.1,
        tls_gets: 0,
        dns_queries: dns.0,
        dns_interval: Duration::from_millis(dns.1),
        keepalive_idle: Duration::ZERO,
        short_flows: short,
        ..Plan::default()
    };
    let servers = traffic::start_servers(&b.s, &plan, &b.dir);
    traffic::run_clients(&b.c, &plan);
    drop(servers);
}

/// The same kind of short connections with no delay anywhere, written by
/// a recorder whose clock ticks in milliseconds: a handshake's SYN,
/// SYN+ACK and ACK carry one timestamp.
fn millisecond_clock(tmp: &Path) {
    let rig = Rig {
        server_delay_ms: 0.0,
        client_delay_ms: 0.0,
        snaplen: 128,
        ..Rig::default()
    };
    let cap = rig.capture_with(tmp, "ms-clock", |b, _| {
        short_connections(b, (3, 30_000), (4, 20), 30);
    });
    let frames = read_all(&cap);
    let refs: Vec<&Frame> = frames.iter().collect();
    write_pcapng_ms(&corpus("xdprobe_ms-clock.pcapng"), &refs, 128);
}

/// A DNS-over-TCP connection the capture starts in the middle of: one
/// lookup before tcpdump runs, five after it, 40 ms apart.
fn dns_tcp_mid_stream(tmp: &Path) {
    let rig = Rig {
        server_delay_ms: 2.0,
        client_delay_ms: 1.0,
        snaplen: 256,
        ..Rig::default()
    };
    let mut b = rig.bench(tmp, "dns-tcp");
    let out = tmp.join("dns-tcp.pcap");
    let srv = traffic::start_dns_tcp(&b.s);
    let mut conn = traffic::dns_tcp_connect(&b.c);
    assert!(traffic::dns_tcp_query(
        &mut conn,
        0x1001,
        "before.example.test"
    ));
    std::thread::sleep(Duration::from_millis(200));
    let td = b.start_tcpdump_snap(&out, 256);
    for (i, id) in [0x2002u16, 0x3003, 0x4004, 0x5005, 0x6006]
        .into_iter()
        .enumerate()
    {
        assert!(traffic::dns_tcp_query(
            &mut conn,
            id,
            &format!("q{i}.example.test")
        ));
        std::thread::sleep(Duration::from_millis(40));
    }
    drop(conn);
    rig.settle();
    b.stop_tcpdump(td);
    drop(srv);
    std::fs::copy(&out, corpus("xdprobe_dns-tcp-mid-stream.pcap")).expect("copy");
}

#[test]
#[ignore = "rewrites tests/corpus/xdprobe_*: run as root with --ignored, then review"]
fn remake_own_captures() {
    if !rig::can_run() {
        return;
    }
    let tmp = TempDir::new("corpus-make");
    let pick = std::env::var("XDPROBE_REMAKE").unwrap_or_default();
    let want = |name: &str| pick.is_empty() || pick.split(',').any(|p| p == name);
    type Scenario = fn(&Path);
    let scenarios: [(&str, Scenario); 4] = [
        ("zero-window", zero_window),
        ("split-tap", split_tap),
        ("ms-clock", millisecond_clock),
        ("dns-tcp", dns_tcp_mid_stream),
    ];
    for (name, make) in scenarios {
        if want(name) {
            make(&tmp.0);
        }
    }
}
