//! `xdprobe demo` live, end to end, as a user runs it: one command builds
//! the namespaces, drives traffic through the impairing bridge, captures it
//! with XDP/AF_XDP, exports IPFIX to nfcapd and cleans up.
//!
//! The references are physical and independent of the probe: the bridge
//! delays every frame by the configured time each way (so no handshake RTT
//! can be shorter than twice it), the server sleeps its think time between
//! reading a request and answering (so no request-to-response time at the
//! tap can be shorter), the DNS responder sleeps its delay, the bridge
//! drops frames after the tap (so retransmissions must appear), and nfdump
//! reads what nfcapd received on its own.

mod common;

use std::{
    collections::HashMap,
    process::{Command, Output, Stdio},
    sync::mpsc,
    time::Duration,
};

use common::{TempDir, have, is_root, require};
use serde_json::Value;

const SECONDS: u64 = 5;
const DELAY_MS: u64 = 5;
const THINK_MS: u64 = 20;
const DNS_DELAY_MS: u64 = 3;
const LOSS_PCT: &str = "2";

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Runs the demo with a deadline; returns its pid and output.
fn run_demo(keep: &std::path::Path) -> (u32, Output) {
    let child = Command::new(env!("CARGO_BIN_EXE_xdprobe"))
        .args(["demo", "--format", "json"])
        .args(["--seconds", &SECONDS.to_string()])
        .args(["--loss", LOSS_PCT])
        .args(["--delay-ms", &DELAY_MS.to_string()])
        .args(["--think-ms", &THINK_MS.to_string()])
        .args(["--dns-delay-ms", &DNS_DELAY_MS.to_string()])
        .arg("--keep-dir")
        .arg(keep)
        .arg("--plot")
        .arg(keep.join("host.svg"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn xdprobe demo");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(180)) {
        Ok(out) => (pid, out.expect("xdprobe demo output")),
        Err(_) => {
            // SAFETY: kill(2) on the child this test spawned.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            panic!("xdprobe demo did not finish within 180 s");
        }
    }
}

#[test]
fn live_demo_measures_rtt_srt_retransmissions_and_feeds_the_collector() {
    if !require(is_root(), "demo_live needs root (network namespaces, XDP)") {
        return;
    }
    if !require(
        have("nfcapd") && have("nfdump") && have("ethtool"),
        "nfdump (nfcapd) or ethtool is not installed",
    ) {
        return;
    }
    let tmp = TempDir::new("demo-live");
    let (pid, out) = run_demo(&tmp.0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "xdprobe demo failed ({}):\n{stderr}",
        out.status
    );

    // stdout carries the records and nothing else.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("stdout line not JSON ({e}): {l}"))
        })
        .collect();
    // Wire records have no `type`; the host agent's lines (host_stack,
    // connect, joined) do.
    let (recs, host): (Vec<Value>, Vec<Value>) =
        lines.into_iter().partition(|v| v.get("type").is_none());
    assert!(!recs.is_empty(), "no records:\n{stderr}");
    eprintln!("{stderr}");
    check_host(&host, &recs, &tmp.0.join("host.svg"));

    let is = |r: &Value, proto: u64, port: u64| {
        n(&r["proto"]) == proto
            && r["client_addr"] == "192.0.2.1"
            && r["server_addr"] == "192.0.2.2"
            && n(&r["server_port"]) == port
    };

    // Handshake RTT: the bridge delays each way by DELAY_MS, so a clean
    // handshake takes at least twice that at the tap and not much more.
    // Under loss a lost SYN+ACK makes client and server retry at once, and
    // the handshake ACK (answering the first retried SYN+ACK) can follow the
    // client's retried SYN by one bridge delay only: the spec's RTT (and
    // tshark's initial_rtt, ACK − last SYN) is then one delay. So: every RTT
    // at least one delay, the median at least two and less than twice
    // that: the bridge forwards from user space beside the bulk flows, and
    // with both vCPUs busy its late wake-ups put the median at 14.2 ms.
    // (The RTT's accuracy against tshark is tests/live_capture.rs.)
    let floor = 2 * DELAY_MS * 1000;
    let mut rtts: Vec<u64> = recs
        .iter()
        .filter(|r| n(&r["proto"]) == 6 && r["client_addr"] == "192.0.2.1")
        .filter_map(|r| r["rtt_us"].as_u64())
        .collect();
    assert!(rtts.len() >= 6, "TCP flows with an RTT: {rtts:?}");
    for &rtt in &rtts {
        assert!(
            rtt >= floor / 2,
            "RTT {rtt} µs < one bridge delay: {rtts:?}"
        );
    }
    rtts.sort_unstable();
    let median = rtts[rtts.len() / 2];
    assert!(
        (floor..2 * floor).contains(&median),
        "median RTT {median} µs not within [2 × delay, 4 × delay): {rtts:?}"
    );

    // SRT of the HTTP-like flows: the request-to-response time at the tap
    // (srt + server network time, spec §2) can never undercut the think time.
    let http: Vec<&Value> = recs.iter().filter(|r| is(r, 6, 80)).collect();
    assert_eq!(http.len(), 4, "four HTTP-like sessions");
    let think = THINK_MS * 1000;
    for r in &http {
        if n(&r["srt_count"]) > 0 {
            let rr = n(&r["srt_us"]) + n(&r["server_net_us"]);
            assert!(rr + 2 >= think, "Δt_rr {rr} µs < think time: {r}");
        }
    }
    assert!(
        http.iter()
            .any(|r| (think..think + 20_000).contains(&n(&r["srt_us"]))),
        "no HTTP-like flow with an SRT between the think time and +20 ms: {http:?}"
    );

    // DNS: SRT is the plain request-to-response time; the responder waits.
    let dns: Vec<&Value> = recs.iter().filter(|r| is(r, 17, 53)).collect();
    assert_eq!(dns.len(), 3, "three DNS lookups, each from its own port");
    let dns_delay = DNS_DELAY_MS * 1000;
    for r in dns.iter().filter(|r| n(&r["srt_count"]) > 0) {
        assert!(
            n(&r["srt_us"]) >= dns_delay,
            "DNS SRT below the responder's delay: {r}"
        );
    }
    assert!(
        dns.iter()
            .any(|r| (dns_delay..dns_delay + 20_000).contains(&n(&r["srt_us"]))),
        "no DNS flow with an SRT of about the responder's delay: {dns:?}"
    );

    // What the flows are, from their payload (docs/l7.md): the client's
    // requests name demo.example and get 200s; the lookups ask the
    // client's three names and get answers.
    for r in &http {
        assert_eq!(r["app"], "http", "{r}");
        assert_eq!(r["http_host"], "demo.example", "{r}");
        assert_eq!(r["http_method"], "GET", "{r}");
        assert!(n(&r["http_requests"]) >= 1, "{r}");
        assert_eq!(n(&r["http_status_2xx"]), n(&r["http_requests"]), "{r}");
    }
    let mut names: Vec<&str> = dns.iter().filter_map(|r| r["dns_qname"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["api.example.net", "mail.example.org", "www.example.com"],
        "DNS questions"
    );
    assert!(dns.iter().all(|r| r["app"] == "dns" && r["dns_rcode"] == 0));
    for line in [
        "HTTP host demo.example: ",
        "DNS names asked: api.example.net (NOERROR), mail.example.org (NOERROR), www.example.com (NOERROR)",
    ] {
        assert!(
            stderr.contains(line),
            "the demo should say {line:?}:\n{stderr}"
        );
    }

    // Loss after the tap: both bulk transfers retransmit in their data
    // direction (about 2 % of some 2000 segments each).
    let dir_retrans = |port: u64, dir: &str| -> u64 {
        recs.iter()
            .filter(|r| is(r, 6, port))
            .map(|r| n(&r[dir]["retrans"]))
            .sum()
    };
    let (up, down) = (dir_retrans(5001, "c2s"), dir_retrans(5002, "s2c"));
    assert!(
        up > 0 && down > 0,
        "retransmissions: upload {up}, download {down}"
    );

    // The refused connection: a SYN and its RST.
    assert!(
        recs.iter()
            .any(|r| is(r, 6, 81) && n(&r["c2s"]["packets"]) >= 1 && n(&r["s2c"]["packets"]) >= 1),
        "refused connection missing"
    );

    // The collector got every record, with the same packet counts.
    let nf = Command::new("nfdump")
        .arg("-R")
        .arg(tmp.0.join("collector"))
        .args(["-o", "json"])
        .output()
        .expect("nfdump");
    assert!(
        nf.status.success(),
        "nfdump: {}",
        String::from_utf8_lossy(&nf.stderr)
    );
    let collected: Vec<Value> = serde_json::from_slice(&nf.stdout).unwrap_or_default();
    let flows: Vec<&Value> = collected.iter().filter(|c| c["type"] == "FLOW").collect();
    assert_eq!(flows.len(), recs.len(), "collector flows vs probe records");
    let by_ports: HashMap<(u64, u64, u64), &Value> = flows
        .iter()
        .map(|c| ((n(&c["proto"]), n(&c["src_port"]), n(&c["dst_port"])), *c))
        .collect();
    for r in &recs {
        let key = (n(&r["proto"]), n(&r["client_port"]), n(&r["server_port"]));
        let c = by_ports
            .get(&key)
            .unwrap_or_else(|| panic!("record {key:?} missing at the collector"));
        assert_eq!(
            (n(&c["in_packets"]), n(&c["out_packets"])),
            (n(&r["c2s"]["packets"]), n(&r["s2c"]["packets"])),
            "packets of {key:?} at the collector"
        );
    }

    // Nothing left behind.
    let ns = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let ns = String::from_utf8_lossy(&ns.stdout);
    let ours = format!("xdpdemo-{pid}-");
    assert!(!ns.contains(&ours), "namespaces left behind:\n{ns}");
    // No process the demo started (all name files under the kept
    // directory on their command line) outlives it.
    let dir = tmp.0.to_string_lossy().into_owned();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&dir))
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// The probe's host agent watched the client's and server's kernels: the
/// bulk flows' stack layers with the bridge's delay in T4 (the client leg
/// delays each way by DELAY_MS; the server leg none), the client's
/// connects at one round trip through the bridge, joined records, the
/// picture.
fn check_host(host: &[Value], recs: &[Value], svg: &std::path::Path) {
    let of = |t: &'static str| host.iter().filter(move |v| v["type"] == t);
    let delay = (DELAY_MS * 1000) as f64;
    for port in [5001u64, 5002] {
        let r = of("host_stack")
            .filter(|v| v["dport"] == port || v["sport"] == port)
            .max_by_key(|v| n(&v["complete"]))
            .unwrap_or_else(|| panic!("no host report of the bulk flow on port {port}: {host:#?}"));
        assert!(n(&r["complete"]) >= 10, "timed bytes: {r}");
        let t4 = r["segments"]["T4"]["p50_us"].as_f64().expect("T4");
        assert!(
            t4 >= delay && t4 <= delay + 3000.0,
            "T4 {t4} µs for a {delay} µs bridge delay: {r}"
        );
        let t8 = r["t8"]["p50_us"].as_f64().expect("T8");
        assert!(t8 >= t4, "T8 {t8} < T4 {t4}");
    }
    let connects: Vec<f64> = of("connect")
        .filter(|v| v["outcome"] == "established" && v["dport"] != 81)
        .filter_map(|v| v["latency_us"].as_f64())
        .collect();
    assert!(connects.len() >= 6, "client connects: {connects:?}");
    // Every connect takes at least one round trip through the bridge. A
    // lost SYN or SYN-ACK (the bridge drops LOSS_PCT of frames) is sent
    // again after the kernel's 1 s initial RTO, and that connect reads
    // ≥ 1 s, correctly; the user-space bridge on a busy 2-vCPU VM can also
    // be late by tens of ms now and then (29.5 ms seen in CI rehearsal). So
    // each one is only bounded by physics and by a few RTOs; the median
    // below must be one round trip.
    for c in &connects {
        assert!(*c >= 2.0 * delay && *c <= 4e6, "connect {c} µs");
    }
    let mut sorted = connects.clone();
    sorted.sort_by(f64::total_cmp);
    // The lower median of a handful, one of which may have waited an RTO,
    // under 2.5 round trips: the user-space bridge stalls on this VM
    // (14.3 and 20.8 ms seen for a 10 ms round trip). The accuracy of
    // connect latency is host_connlat's and host_bridge's check, against
    // the client's own timing.
    let mid = sorted[(sorted.len() - 1) / 2];
    assert!(mid < 5.0 * delay, "median connect {mid} µs: {sorted:?}");
    assert!(
        of("connect").any(|v| v["dport"] == 81 && v["outcome"] == "refused"),
        "the refused connection"
    );
    // Wire records of the client's connections name its process.
    let named = recs
        .iter()
        .filter(|r| n(&r["proto"]) == 6 && r["process"]["pid"].as_u64().is_some_and(|p| p > 0))
        .count();
    assert!(named >= 6, "TCP records with the client's process: {named}");
    assert!(of("joined").count() >= 2, "joined records");
    let pic = std::fs::read_to_string(svg).expect("the picture");
    assert!(
        pic.starts_with("<svg") && pic.contains("T4 network"),
        "SVG with the T4 legend"
    );
}
