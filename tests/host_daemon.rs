//! The daemon with `[host]` on: one box that captures the mirrored link
//! (XDP + AF_XDP) and watches its own kernel, where the client and server
//! namespaces live. The wire record and the host's layer breakdown of the
//! same connection come out joined; the connections this kernel started
//! carry their process; the metrics endpoint has the host families; the
//! collector file has host-stack records; SIGTERM leaves nothing loaded.

mod common;
mod host_support;
mod live_support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use live_support::{
    probe::{Probe, ProbeOpts},
    require_root,
    topo::{Bench, SERVER_IP, TempDir, signal, wait_exit},
};
use serde_json::Value;

const PORT: u16 = 9201;
const CONNS: usize = 3;

/// SIGTERM: the daemon exits cleanly and its own host programs (told
/// apart by ID from those other tests load meanwhile) are unloaded.
fn stop_unloading(probe: &mut Probe) {
    let ours = host_support::host_programs_of(probe.child.id());
    assert!(!ours.is_empty(), "the daemon holds its host programs");
    signal(probe.child.id(), libc::SIGTERM);
    let st = wait_exit(probe.child.child(), Duration::from_secs(20), "xdprobe run");
    assert!(st.success(), "{}", probe.log_text());
    let left = host_support::still_loaded(&ours);
    assert!(left.is_empty(), "the host programs are gone: {left:?}");
}

#[test]
fn wire_records_and_the_hosts_layers_come_out_joined() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let tmp = TempDir::new("host_daemon");
    let b = Bench::new(1, None, &tmp.0);
    let ipfix = tmp.0.join("wire.ipfix");
    let host_file = tmp.0.join("host.ipfix");
    let host = format!(
        "[host]\nstack = true\nconnlat = true\nsample_bytes = 0\ncollectors = [\"file://{}\"]\n[host.filter]\nports = [{PORT}]\n",
        host_file.display()
    );
    let opts = ProbeOpts {
        collectors: vec![format!("file://{}", ipfix.display())],
        metrics_port: 19481,
        extra_config: &host,
        ..ProbeOpts::default()
    };
    let mut probe = Probe::start(&b.p, &tmp.0, &opts);
    let log = probe.log_text();
    assert!(
        log.contains("host stack layer attached") && log.contains("host connect latency attached"),
        "{log}"
    );

    let listener =
        b.s.run(|| TcpListener::bind((SERVER_IP, PORT)).expect("listen"));
    let server = std::thread::spawn(move || {
        for _ in 0..CONNS {
            let Ok((mut c, _)) = listener.accept() else {
                break;
            };
            let mut buf = [0u8; 4096];
            while let Ok(n) = c.read(&mut buf) {
                if n == 0 {
                    break;
                }
            }
        }
    });
    let ports: Vec<u16> = b.c.run(|| {
        (0..CONNS)
            .map(|_| {
                let mut s = TcpStream::connect((SERVER_IP, PORT)).expect("connect");
                for _ in 0..20 {
                    s.write_all(&[7u8; 1000]).unwrap();
                    std::thread::sleep(Duration::from_millis(2));
                }
                s.local_addr().unwrap().port()
            })
            .collect()
    });
    server.join().unwrap();
    // FIN + the probe's 1 s linger, then the host report's hold.
    std::thread::sleep(Duration::from_millis(2500));
    let metrics = probe.metrics(&b.p);
    stop_unloading(&mut probe);

    let lines: Vec<Value> = std::fs::read_to_string(&probe.json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |t: &str| -> Vec<&Value> { lines.iter().filter(|v| v["type"] == t).collect() };
    for port in &ports {
        // The connect, by this test's own process.
        let c = of("connect")
            .into_iter()
            .find(|v| v["sport"] == *port)
            .unwrap_or_else(|| panic!("no connect line for port {port}"));
        assert_eq!(c["pid"], std::process::id());
        assert_eq!(c["outcome"], "established");
        // The wire record of that connection names the same process.
        let w = lines
            .iter()
            .find(|v| v.get("type").is_none() && v["client_port"] == *port)
            .unwrap_or_else(|| panic!("no wire record for port {port}"));
        assert_eq!(w["process"]["pid"], std::process::id(), "{w}");
        assert_eq!(w["process"]["comm"], c["comm"], "{w}");
        let lat = c["latency_us"].as_f64().unwrap();
        let got = w["process"]["connect_us"].as_f64().unwrap();
        assert!((got - lat).abs() <= 1.0, "connect_us {got} vs {lat}");
        // The wire record (client 192.0.2.1:port) and the host report of
        // the client's data, joined.
        let j = of("joined")
            .into_iter()
            .find(|v| v["wire"]["client_port"] == *port && v["direction"] == "c2s")
            .unwrap_or_else(|| panic!("no joined record for port {port}: {lines:#?}"));
        assert_eq!(j["wire"]["server_port"], PORT);
        assert!(j["wire"]["rtt_us"].as_u64().is_some(), "wire RTT: {j}");
        assert_eq!(j["host"]["sport"], *port);
        assert!(
            j["host"]["t8"]["samples"].as_u64().is_some_and(|n| n >= 19),
            "{j}"
        );
    }
    // The endpoint's host families count what the reports count.
    let count = |prefix: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{metrics}"))
    };
    let t8: u64 = of("host_stack")
        .iter()
        .filter_map(|v| v["t8"]["samples"].as_u64())
        .sum();
    assert!(t8 >= 19 * CONNS as u64);
    assert_eq!(
        count("xdprobe_host_segment_latency_seconds_count{segment=\"T8\"}") as u64,
        t8
    );
    assert!(count("xdprobe_host_connect_attempts_total{outcome=\"established\"}") >= CONNS as f64);
    // Host-stack IPFIX records reached the collector file: a template set
    // announcing 320 and a data set 320.
    // The wire collector's file has the flow records with the process
    // elements (PEN 32473, 1300-1302) and no host-stack records; those are
    // in [host] collectors' file.
    let wire = std::fs::read(&ipfix).expect("collector file");
    let pids = ipfix_process_ids(&wire);
    for port in &ports {
        assert!(
            pids.contains(&(*port, std::process::id())),
            "IPFIX record of port {port} with pid {}: {pids:?}",
            std::process::id()
        );
    }
    assert!(
        !ipfix_set_ids(&wire).contains(&320),
        "no host-stack records among the flows"
    );
    let bytes = std::fs::read(&host_file).expect("host collector file");
    let mut sets = Vec::new();
    let mut at = 0;
    while at + 16 <= bytes.len() {
        assert_eq!(
            u16::from_be_bytes([bytes[at], bytes[at + 1]]),
            10,
            "IPFIX version"
        );
        let len = usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
        let mut s = at + 16;
        while s + 4 <= at + len {
            let id = u16::from_be_bytes([bytes[s], bytes[s + 1]]);
            let slen = usize::from(u16::from_be_bytes([bytes[s + 2], bytes[s + 3]]));
            let first_template =
                (id == 2).then(|| u16::from_be_bytes([bytes[s + 4], bytes[s + 5]]));
            sets.push((id, first_template));
            s += slen.max(4);
        }
        at += len.max(16);
    }
    assert!(sets.contains(&(2, Some(320))), "{sets:?}");
    assert!(sets.iter().any(|s| s.0 == 320), "{sets:?}");
}

/// (source port, processId) of every IPv4 flow record (template 256) in an
/// IPFIX file, read through the template the file announces.
fn ipfix_process_ids(bytes: &[u8]) -> Vec<(u16, u32)> {
    let be16 = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    // Every template by its ID: flow records come in one template per
    // kind (with or without application-layer fields), so any of them may
    // carry the process elements.
    let mut layouts: HashMap<u16, Vec<(u16, u32, usize)>> = HashMap::new();
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= bytes.len() {
        assert_eq!(be16(bytes, at), 10, "IPFIX version");
        let len = usize::from(be16(bytes, at + 2));
        let mut s = at + 16;
        while s + 4 <= at + len {
            let (id, slen) = (be16(bytes, s), usize::from(be16(bytes, s + 2)));
            let body = &bytes[s + 4..s + slen];
            if id == 2 {
                read_templates(body, &mut layouts);
            } else if let Some(f) = layouts.get(&id) {
                read_process_ids(body, f, &mut out);
            }
            s += slen.max(4);
        }
        at += len.max(16);
    }
    out
}

/// A template set's templates: (element, enterprise, length) each.
fn read_templates(body: &[u8], layouts: &mut HashMap<u16, Vec<(u16, u32, usize)>>) {
    let be16 = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let mut r = 0;
    while r + 4 <= body.len() {
        let (tid, n) = (be16(body, r), usize::from(be16(body, r + 2)));
        r += 4;
        let mut fields = Vec::new();
        for _ in 0..n {
            let (fid, flen) = (be16(body, r), usize::from(be16(body, r + 2)));
            r += 4;
            let pen = if fid & 0x8000 != 0 {
                r += 4;
                u32::from_be_bytes(body[r - 4..r].try_into().unwrap())
            } else {
                0
            };
            fields.push((fid & 0x7fff, pen, flen));
        }
        layouts.insert(tid, fields);
    }
}

/// (sourceTransportPort, processId) of each record of a data set whose
/// template has both; variable-length fields (RFC 7011 §7) are walked.
fn read_process_ids(body: &[u8], f: &[(u16, u32, usize)], out: &mut Vec<(u16, u32)>) {
    let (Some(sport), Some(pid)) = (
        f.iter().position(|x| (x.0, x.1) == (7, 0)),
        f.iter().position(|x| (x.0, x.1) == (1300, 32473)),
    ) else {
        return;
    };
    let mut r = 0;
    'records: while r < body.len() {
        let (mut port, mut proc_id) = (0u16, 0u32);
        for (i, &(_, _, flen)) in f.iter().enumerate() {
            let n = if flen == 0xffff {
                let Some(&l) = body.get(r) else {
                    break 'records;
                };
                r += 1;
                if l == 255 {
                    let Some(w) = body.get(r..r + 2) else {
                        break 'records;
                    };
                    r += 2;
                    usize::from(u16::from_be_bytes([w[0], w[1]]))
                } else {
                    usize::from(l)
                }
            } else {
                flen
            };
            let Some(v) = body.get(r..r + n) else {
                break 'records;
            };
            if i == sport {
                port = u16::from_be_bytes([v[0], v[1]]);
            } else if i == pid {
                proc_id = u32::from_be_bytes(v[..4].try_into().unwrap());
            }
            r += n;
        }
        out.push((port, proc_id));
    }
}

/// The set IDs of an IPFIX file, in order.
fn ipfix_set_ids(bytes: &[u8]) -> Vec<u16> {
    let be16 = |i: usize| u16::from_be_bytes([bytes[i], bytes[i + 1]]);
    let mut ids = Vec::new();
    let mut at = 0;
    while at + 16 <= bytes.len() {
        let len = usize::from(be16(at + 2));
        let mut s = at + 16;
        while s + 4 <= at + len {
            ids.push(be16(s));
            s += usize::from(be16(s + 2)).max(4);
        }
        at += len.max(16);
    }
    ids
}

/// `[host] sample_window` in the daemon: the programs are attached about
/// the configured share of the time (the metrics say how much), the host
/// report times about that share of the writes, and SIGTERM still leaves
/// nothing loaded.
#[test]
fn the_daemon_keeps_sampling_windows() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let tmp = TempDir::new("host_daemon_win");
    let b = Bench::new(1, None, &tmp.0);
    let host = format!(
        "[host]\nstack = true\nsample_bytes = 0\nsample_window = \"100ms\"\n\
         sample_window_every = \"500ms\"\n[host.filter]\nports = [{}]\n",
        PORT + 1
    );
    let opts = ProbeOpts {
        metrics_port: 19482,
        extra_config: &host,
        ..ProbeOpts::default()
    };
    let mut probe = Probe::start(&b.p, &tmp.0, &opts);
    let listener =
        b.s.run(|| TcpListener::bind((SERVER_IP, PORT + 1)).expect("listen"));
    let server = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().expect("accept");
        let mut buf = [0u8; 4096];
        while let Ok(n) = c.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
    });
    const WRITES: u32 = 1000;
    let started = std::time::Instant::now();
    b.c.run(|| {
        let mut s = TcpStream::connect((SERVER_IP, PORT + 1)).expect("connect");
        s.set_nodelay(true).unwrap();
        for _ in 0..WRITES {
            s.write_all(&[7u8; 500]).unwrap();
            std::thread::sleep(Duration::from_millis(3));
        }
    });
    server.join().unwrap();
    let secs = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(2500));
    let metrics = probe.metrics(&b.p);
    stop_unloading(&mut probe);

    let count = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
    };
    let windows = count("xdprobe_host_windows_total");
    let attached = count("xdprobe_host_attached_seconds_total");
    let lines: Vec<Value> = std::fs::read_to_string(&probe.json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let timed: u64 = lines
        .iter()
        .filter(|v| v["type"] == "host_stack" && v["dport"] == PORT + 1)
        .filter_map(|v| v["t8"]["samples"].as_u64())
        .sum();
    eprintln!(
        "{windows} windows, attached {attached:.2} s; {timed} of {WRITES} writes timed over {secs:.1} s of traffic"
    );
    assert!(windows >= 8.0, "{windows} windows");
    // 100 ms of every 500 ms, over the traffic and the 2.5 s after it.
    let total = secs + 2.5;
    assert!(
        (0.12 * total..=0.35 * total).contains(&attached),
        "attached {attached} s of {total:.1}"
    );
    let share = f64::from(u32::try_from(timed).unwrap()) / f64::from(WRITES);
    assert!(
        (0.10..=0.35).contains(&share),
        "timed {share:.3} of the writes, expected about 0.2"
    );
}
