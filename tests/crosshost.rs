//! Across hosts: agents on two "hosts" (namespaces A and B, each agent
//! watching only its own), `xdprobe manager` on a management network with
//! both, real kernel TCP between them.
//!
//! Namespaces share one kernel clock, so skew is simulated: each agent is
//! told (hidden flag) to shift its clock — the XDP responder's stamps and
//! its events alike. The truth is then known exactly: the injected offset.
//! The application's own timing (send time in the stream, read time at the
//! other end, one clock) is the reference for T8, the bridge's configured
//! delay for T4, tshark for the IPFIX records and the wire probe's RTT for
//! the joined view. Outages and restarts: `tests/crosshost_outage.rs`.

mod common;
mod crosshost_support;
mod host_support;
mod live_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crosshost_support::{
    DA6, DB4, DB6, M4, M6, METRICS_PORT, Middle, Rig, bridge_transit_us, flow, metric, reports,
    rounds, scrape, tcpdump, timed_duplex,
};
use host_support::{Timed, median};
use live_support::require_root;
use serde_json::Value;

/// Offset errors of one agent's rounds against the injected truth.
fn check_rounds(j: &[Value], agent: &str, truth_ns: i64, want: usize) -> Vec<i64> {
    let all = rounds(j, agent);
    assert!(all.len() >= want, "{agent}: {} rounds of {want}", all.len());
    // The proven bound is a guarantee, not an estimate: it must hold in
    // every round.
    for &(o, bound) in &all {
        assert!(
            (o - truth_ns).unsigned_abs() <= bound,
            "{agent}: offset {o} ns, truth {truth_ns}, proven bound ±{bound}"
        );
    }
    // The figures: over the first `want` rounds.
    let r = &all[..want];
    let mut errs: Vec<i64> = r.iter().map(|&(o, _)| o - truth_ns).collect();
    errs.sort_unstable();
    let mut abs: Vec<u64> = errs.iter().map(|e| e.unsigned_abs()).collect();
    abs.sort_unstable();
    let within = abs.iter().filter(|&&e| e <= 10_000).count();
    let offs: Vec<i64> = r.iter().map(|x| x.0).collect();
    let (lo, hi) = (
        offs.iter().min().copied().unwrap_or(0),
        offs.iter().max().copied().unwrap_or(0),
    );
    let mean = errs.iter().sum::<i64>() as f64 / errs.len() as f64;
    let sd =
        (errs.iter().map(|&e| (e as f64 - mean).powi(2)).sum::<f64>() / errs.len() as f64).sqrt();
    let mut bounds: Vec<u64> = r.iter().map(|x| x.1).collect();
    bounds.sort_unstable();
    eprintln!(
        "agent {agent}, injected {truth_ns} ns, {} rounds: error median {:.2} µs, p95 |error| {:.2} µs, max |error| {:.2} µs, mean {:.2} µs, sd {:.2} µs; spread of the estimates (max − min) {:.2} µs; proven bound median ±{:.1} µs",
        r.len(),
        errs[errs.len() / 2] as f64 / 1000.0,
        abs[abs.len() * 95 / 100] as f64 / 1000.0,
        abs[abs.len() - 1] as f64 / 1000.0,
        mean / 1000.0,
        sd / 1000.0,
        (hi - lo) as f64 / 1000.0,
        bounds[bounds.len() / 2] as f64 / 1000.0,
    );
    assert!(
        abs[abs.len() / 2] <= 10_000,
        "{agent}: median |error| {} ns over 10 µs",
        abs[abs.len() / 2]
    );
    assert!(
        within * 100 >= r.len() * 95,
        "{agent}: only {within} of {} rounds within 10 µs",
        r.len()
    );
    errs
}

#[test]
fn clock_sync_recovers_injected_offsets_within_10us() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let before = crosshost_support::clocksync_programs();
    let rig = Rig::new(Middle::Linux);
    let quiet = ["--port", "5499"];

    // ±1 ms over IPv4, 100 rounds: their spread is the BENCHMARKS.md figure.
    let m = rig.manager("sync_interval = \"100ms\"");
    let a = rig.agent('a', M4, Some(1_000_000), &quiet);
    let b = rig.agent('b', M4, Some(-1_000_000), &quiet);
    rig.wait_rounds(&["a", "b"], 100, Duration::from_secs(90));
    a.stop();
    b.stop();
    m.stop();
    let j = rig.manager_json();
    check_rounds(&j, "a", 1_000_000, 100);
    check_rounds(&j, "b", -1_000_000, 100);

    // ±250 ms over IPv6 (the responder computes the UDP checksum IPv6
    // requires), a fresh manager.
    let m = rig.manager("sync_interval = \"100ms\"");
    let a = rig.agent('a', M6, Some(250_000_000), &quiet);
    let b = rig.agent('b', M6, Some(-250_000_000), &quiet);
    rig.wait_rounds(&["a", "b"], 30, Duration::from_secs(60));
    let (la, lb) = (a.stop(), b.stop());
    m.stop();
    let j = rig.manager_json();
    assert!(
        j.iter()
            .filter(|v| v["type"] == "clock_sync")
            .all(|v| v["target"]
                .as_str()
                .unwrap_or("")
                .starts_with("[2001:db8:ff::")),
        "probed over IPv6"
    );
    check_rounds(&j, "a", 250_000_000, 30);
    check_rounds(&j, "b", -250_000_000, 30);
    // The responders answered what the manager sent.
    for l in [la, lb] {
        assert!(l.contains("clock probes answered: Some("), "{l}");
    }
    let left = crosshost_support::clocksync_left(&before);
    assert!(
        left.is_empty(),
        "every responder and pass-through detached; still loaded: {left:?}"
    );
}

fn p50(r: &Value, seg: &str) -> f64 {
    r["segments"][seg]["p50_us"]
        .as_f64()
        .unwrap_or_else(|| panic!("no {seg} in {r}"))
}

/// tshark's initial RTT (SYN to the handshake's ACK, µs) of the connection
/// to `port` in a capture.
fn tshark_initial_rtt_us(pcap: &std::path::Path, port: u16) -> f64 {
    let o = std::process::Command::new("tshark")
        .args(["-n", "-r", pcap.to_str().unwrap()])
        .args([
            "-Y",
            &format!("tcp.port == {port} && tcp.analysis.initial_rtt"),
        ])
        .args(["-T", "fields", "-e", "tcp.analysis.initial_rtt"])
        .output()
        .expect("tshark");
    let out = String::from_utf8_lossy(&o.stdout);
    let secs: f64 = out
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no initial RTT for port {port} in {}", pcap.display()));
    secs * 1e6
}

/// T4 ≈ the bridge's delay (as the captures on its ports measured it); T8
/// agrees with the application's own one-way times; the segments add up
/// to T8.
fn check_direction(r: &Value, timed: &[Timed], what: &str, delay_us: f64, transit_us: f64) {
    assert_eq!(r["cross_host"], true, "{what}: {r}");
    let t4 = p50(r, "T4");
    let app: Vec<u64> = timed.iter().map(Timed::t8_ns).collect();
    let app_p50 = median(&app) as f64 / 1000.0;
    let t8 = r["t8"]["p50_us"].as_f64().expect("t8");
    eprintln!(
        "{what}: T4 p50 {t4:.1} µs (bridge delay {delay_us} µs, transit as captured {transit_us:.1} µs), T8 p50 {t8:.1} µs vs application {app_p50:.1} µs, clock bound ±{} µs, {} timed bytes",
        r["clock_uncertainty_us"], r["complete"]
    );
    // Never early (the bridge holds every frame its delay; the clocks are
    // aligned within 10 µs); the frames' transit through the bridge, plus
    // the two veth hops the captures do not see.
    assert!(
        t4 >= delay_us - 10.0,
        "{what}: T4 {t4} µs, the bridge delays {delay_us} µs"
    );
    assert!(
        (t4 - transit_us).abs() <= (0.05 * transit_us).max(50.0),
        "{what}: T4 {t4} µs, the frames spent {transit_us} µs in the bridge"
    );
    let tol = (0.05 * app_p50).max(20.0);
    assert!(
        (t8 - app_p50).abs() <= tol,
        "{what}: T8 {t8} µs vs the application's {app_p50} µs (tolerance {tol})"
    );
    let sum: f64 = ["T1", "T2", "T3", "T4", "T5", "T6", "T7"]
        .iter()
        .map(|s| r["segments"][s]["mean_us"].as_f64().unwrap_or(0.0))
        .sum();
    let t8_mean = r["t8"]["mean_us"].as_f64().unwrap();
    assert!(
        (sum - t8_mean).abs() <= 0.05 * t8_mean,
        "{what}: segments add to {sum}, T8 mean {t8_mean}"
    );
}

/// Waits until the manager reported both directions of the flow on `port`.
fn wait_reports(rig: &Rig, port: u16, limit: Duration) -> Vec<Value> {
    let end = Instant::now() + limit;
    loop {
        let j = rig.manager_json();
        if !reports(&j, None, Some(port)).is_empty() && !reports(&j, Some(port), None).is_empty() {
            return j;
        }
        if Instant::now() > end {
            return j;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn t4_and_t8_across_a_5ms_bridge_ipv4_with_skewed_clocks_and_the_joined_view() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let delay = Duration::from_millis(5);
    let mut rig = Rig::new(Middle::Delay(delay));
    let port = 5401;
    let (svg, wire, wire_pcap, rb_pcap, ipfix_pcap) = (
        rig.path("flows.svg"),
        rig.path("wire.jsonl"),
        rig.path("wire.pcap"),
        rig.path("rb.pcap"),
        rig.path("ipfix.pcap"),
    );
    // The mirror port's view (what enters and leaves the bridge on A's
    // side), and the other port's, for the frames' transit.
    let mirror = tcpdump(&rig.r, "ra", &format!("tcp port {port}"), &wire_pcap);
    let far = tcpdump(&rig.r, "rb", &format!("tcp port {port}"), &rb_pcap);
    let collector = tcpdump(&rig.m, "lo", "udp port 4739", &ipfix_pcap);
    let m = rig.manager(&format!(
        "sync_interval = \"1s\"\nplot = \"{}\"\nwire_records = \"{}\"\n[export]\ncollectors = [\"udp://{M4}:4739\"]\n[metrics]\nlisten = \"{M4}:{METRICS_PORT}\"\n",
        svg.display(),
        wire.display()
    ));
    // A runs 250 ms ahead, B 1 ms behind: uncorrected, T4 would be −251 ms.
    let p = port.to_string();
    let a = rig.agent(
        'a',
        M4,
        Some(250_000_000),
        &["--port", &p, "--sample-bytes", "0"],
    );
    let b = rig.agent(
        'b',
        M4,
        Some(-1_000_000),
        &["--port", &p, "--sample-bytes", "0"],
    );
    rig.wait_rounds(&["a", "b"], 1, Duration::from_secs(30));
    let server: SocketAddr = format!("{DB4}:{port}").parse().unwrap();
    let (c2s, s2c) = timed_duplex(&rig.a, &rig.b, server, 150, 1000, Duration::from_millis(4));
    assert_eq!((c2s.len(), s2c.len()), (150, 150), "every message arrived");
    let j = wait_reports(&rig, port, Duration::from_secs(15));

    // The wire probe's records of the capture, which the manager follows.
    mirror.stop_quiet();
    far.stop_quiet();
    let (t_ab, t_ba) = bridge_transit_us(&wire_pcap, &rb_pcap, crosshost_support::DA4);
    let out = common::xdprobe()
        .args(["pcap", wire_pcap.to_str().unwrap(), "--format", "json"])
        .output()
        .expect("xdprobe pcap");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&wire, &out.stdout).unwrap();
    let metrics = scrape(&rig.m, &format!("{M4}:{METRICS_PORT}"));
    std::thread::sleep(Duration::from_millis(800));

    a.stop();
    b.stop();
    let mlog = m.stop();
    // Let tcpdump take the manager's last datagrams before it stops.
    std::thread::sleep(Duration::from_millis(500));
    collector.stop_quiet();
    let bridged = rig.stop_bridge().expect("bridge");
    assert!(bridged[0].a_to_b.forwarded > 150, "{bridged:?}");
    let j2 = rig.manager_json();
    let j = if reports(&j, None, Some(port)).is_empty() {
        j2.clone()
    } else {
        j
    };

    let d_us = delay.as_secs_f64() * 1e6;
    let fwd = flow(&j, None, Some(port));
    assert_eq!(fwd["sender"]["agent"], "a");
    assert_eq!(fwd["receiver"]["agent"], "b");
    assert_eq!(
        fwd["sender"]["clock"]["offset_ns"]
            .as_i64()
            .map(|o| (o - 250_000_000).abs() < 10_000),
        Some(true)
    );
    check_direction(fwd, &c2s, "IPv4 A→B", d_us, t_ab);
    let rev = flow(&j, Some(port), None);
    assert_eq!(rev["sender"]["agent"], "b");
    check_direction(rev, &s2c, "IPv4 B→A", d_us, t_ba);

    // Joined view: the wire record (RTT: both ways through the bridge)
    // beside each direction's layers, by the connection's 5-tuple.
    let joined: Vec<&Value> = j2.iter().filter(|v| v["type"] == "joined").collect();
    let dirs: Vec<&str> = joined
        .iter()
        .filter_map(|v| v["direction"].as_str())
        .collect();
    assert!(
        dirs.contains(&"c2s") && dirs.contains(&"s2c"),
        "joined: {joined:#?}\n{mlog}"
    );
    let wire_rtt = tshark_initial_rtt_us(&wire_pcap, port);
    for v in &joined {
        let rtt = v["wire"]["rtt_us"].as_f64().expect("wire rtt");
        let t4 = p50(&v["host"], "T4");
        eprintln!(
            "joined {}: wire RTT {rtt} µs, host T4 p50 {t4:.1} µs",
            v["direction"]
        );
        // The handshake crossed the bridge twice (never faster), and its
        // first frames may find the bridge's thread asleep on a loaded VM
        // (16 ms seen), which is on the wire: the reference is tshark's
        // initial RTT in the same capture.
        assert!(
            rtt >= 2.0 * d_us - 20.0 && (rtt - wire_rtt).abs() <= 1.0,
            "RTT {rtt} µs, tshark's initial RTT {wire_rtt} µs"
        );
        // Each direction's T4 against the frames' transit through the
        // bridge as captured on its two ports (on a loaded VM a user-space
        // wake-up runs late, and that lateness is on the wire, so in T4).
        let transit = if v["direction"] == "c2s" { t_ab } else { t_ba };
        assert!(
            t4 >= d_us - 10.0 && (t4 - transit).abs() <= (0.05 * transit).max(50.0),
            "T4 {t4}, transit as captured {transit}"
        );
        assert_eq!(v["wire"]["server_port"], port);
    }

    // IPFIX, as tshark decodes it: both directions, T4's median in ns.
    let verbose = tshark_ipfix(&ipfix_pcap);
    assert!(!verbose.contains("Malformed") && !verbose.contains("no template found"));
    let t4_ns = |sport: &str| -> u64 {
        let block: Vec<&str> = verbose
            .lines()
            .skip_while(|l| l.trim() != format!("SrcPort: {sport}"))
            .take(60)
            .collect();
        let line = block
            .iter()
            .find_map(|l| l.split_once("Type 1233: Value (hex bytes): "))
            .unwrap_or_else(|| panic!("no T4 p50 for {sport}"))
            .1
            .replace(' ', "");
        u64::from_str_radix(&line, 16).unwrap()
    };
    let fwd_sport = fwd["sport"].to_string();
    let ns = t4_ns(&fwd_sport);
    assert!(
        (ns as f64 / 1000.0 - p50(fwd, "T4")).abs() < 0.01,
        "IPFIX T4 p50 {ns} ns"
    );
    assert!((t4_ns(&port.to_string()) as f64 / 1000.0 - p50(rev, "T4")).abs() < 0.01);

    // Prometheus: every timed byte of both directions, T4 between 2 and
    // 200 ms: none uncorrected, which would read −251 ms (counted in the
    // lowest bucket) or +249 ms. The upper bound is the histogram's last
    // bucket below 249 ms, not a guess at the bridge's worst hold: a stalled
    // vCPU once held one segment of 299 in the bridge past 20 ms in CI.
    let h = "xdprobe_manager_segment_latency_seconds";
    let count = metric(&metrics, &format!("{h}_count{{segment=\"T4\"}}"));
    let below = metric(
        &metrics,
        &format!("{h}_bucket{{le=\"0.002\",segment=\"T4\"}}"),
    );
    let within = metric(
        &metrics,
        &format!("{h}_bucket{{le=\"0.2\",segment=\"T4\"}}"),
    );
    let timed = fwd["complete"].as_f64().unwrap() + rev["complete"].as_f64().unwrap();
    eprintln!(
        "metrics: T4 count {count}, ≤ 2 ms {below}, ≤ 200 ms {within}; reports timed {timed}"
    );
    assert!(count >= timed * 0.9, "{count} vs {timed}");
    assert_eq!(below, 0.0);
    assert_eq!(within, count);
    assert!(
        (metric(
            &metrics,
            "xdprobe_manager_clock_offset_seconds{agent=\"a\"}"
        ) - 0.25)
            .abs()
            < 1e-5
    );

    // The picture, with the network segment.
    let pic = std::fs::read_to_string(&svg).expect("svg");
    assert!(
        pic.contains("<svg") && pic.contains("T4"),
        "T4 in the legend"
    );
}

fn tshark_ipfix(pcap: &std::path::Path) -> String {
    let o = std::process::Command::new("tshark")
        .args([
            "-n",
            "-r",
            pcap.to_str().unwrap(),
            "-d",
            "udp.port==4739,cflow",
            "-V",
        ])
        .output()
        .expect("tshark");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn t4_and_t8_across_a_5ms_bridge_ipv6_synced_over_ipv6() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let delay = Duration::from_millis(5);
    let rig = Rig::new(Middle::Delay(delay));
    let port = 5402;
    let (ra_pcap, rb_pcap) = (rig.path("ra.pcap"), rig.path("rb.pcap"));
    let near = tcpdump(&rig.r, "ra", &format!("tcp port {port}"), &ra_pcap);
    let far = tcpdump(&rig.r, "rb", &format!("tcp port {port}"), &rb_pcap);
    let m = rig.manager("sync_interval = \"1s\"");
    let p = port.to_string();
    let a = rig.agent('a', M6, None, &["--port", &p, "--sample-bytes", "0"]);
    let b = rig.agent('b', M6, None, &["--port", &p, "--sample-bytes", "0"]);
    rig.wait_rounds(&["a", "b"], 1, Duration::from_secs(30));
    let server: SocketAddr = format!("[{DB6}]:{port}").parse().unwrap();
    let (c2s, s2c) = timed_duplex(&rig.a, &rig.b, server, 150, 1000, Duration::from_millis(4));
    assert_eq!((c2s.len(), s2c.len()), (150, 150));
    wait_reports(&rig, port, Duration::from_secs(15));
    a.stop();
    b.stop();
    m.stop();
    near.stop_quiet();
    far.stop_quiet();
    let (t_ab, t_ba) = bridge_transit_us(&ra_pcap, &rb_pcap, DA6);
    let j = rig.manager_json();
    let d_us = delay.as_secs_f64() * 1e6;
    let fwd = flow(&j, None, Some(port));
    assert_eq!(fwd["src"], DA6);
    check_direction(fwd, &c2s, "IPv6 A→B", d_us, t_ab);
    check_direction(flow(&j, Some(port), None), &s2c, "IPv6 B→A", d_us, t_ba);
}
