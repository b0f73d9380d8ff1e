//! One kernel, two end namespaces joined through the demo's delaying
//! bridge (5 ms each way) in a third: the network's delay must land in T4
//! and nothing else, and connect latency must read ≈ 10 ms (a SYN and a
//! SYN+ACK each cross the bridge once) within 100 µs of the clients' own
//! timing. The bridge namespace's own device events are hops, not ends.

mod common;
mod crosshost_support;
mod host_support;
mod live_support;

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use crosshost_support::{DB4, Middle, Rig, bridge_transit_a_to_b_us, tcpdump};
use host_support::{HostProbe, Messages, Reader, flow, realtime, seg, timed_messages};
use live_support::require_root;
use serde_json::Value;

const DELAY: Duration = Duration::from_millis(5);

fn data_flow(reports: &[Value], port: u16) -> Value {
    let f = flow(reports, port, crosshost_support::DA4);
    assert_eq!(f.len(), 1, "one report for the data flow: {reports:#?}");
    f[0].clone()
}

/// Timed messages A → B under a probe; the data flow's report and the
/// frames' median transit through the middle as captured on its two ports
/// (µs).
fn run(rig: &Rig, port: u16, tag: &str) -> (Value, f64) {
    let dir = live_support::topo::TempDir::new(tag);
    let p = port.to_string();
    let filter = format!("tcp port {port}");
    let (ra, rb) = (dir.0.join("ra.pcap"), dir.0.join("rb.pcap"));
    let near = tcpdump(&rig.r, "ra", &filter, &ra);
    let far = tcpdump(&rig.r, "rb", &filter, &rb);
    let probe = HostProbe::start(&dir.0, &["--port", &p, "--sample-bytes", "0"]);
    let server: SocketAddr = format!("{DB4}:{port}").parse().unwrap();
    let m = Messages {
        count: 60,
        size: 1000,
        gap: Duration::from_millis(30),
        reader: Reader::Eager,
    };
    let timed = timed_messages(&rig.a, &rig.b, server, &m, &|_| {});
    assert_eq!(timed.len(), 60);
    std::thread::sleep(Duration::from_millis(400));
    let report = data_flow(&probe.stop(), port);
    near.stop_quiet();
    far.stop_quiet();
    (
        report,
        bridge_transit_a_to_b_us(&ra, &rb, crosshost_support::DA4),
    )
}

#[test]
fn a_delaying_bridge_grows_t4_and_nothing_else() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let (plain, _) = run(&Rig::new(Middle::Linux), 5311, "t4_plain");
    let (delayed, transit) = run(&Rig::new(Middle::Delay(DELAY)), 5312, "t4_delayed");
    // Only the two ends' layers: the bridge namespace's receive and send
    // events are left out.
    for r in [&plain, &delayed] {
        assert_eq!(r["layers"].as_array().unwrap().len(), 8, "{r}");
        assert_ne!(r["sender"]["netns"], r["receiver"]["netns"]);
    }
    let grow = |n: &str| seg(&delayed, n, "p50_us") - seg(&plain, n, "p50_us");
    let t4 = grow("T4");
    let want = DELAY.as_secs_f64() * 1e6;
    let t4_delayed = seg(&delayed, "T4", "p50_us");
    eprintln!(
        "T4 p50: {:.1} µs through a Linux bridge, {t4_delayed:.1} µs through the 5 ms bridge; frames' transit as captured on its ports {transit:.1} µs",
        seg(&plain, "T4", "p50_us"),
    );
    // Never less than the delay. Against the frames' transit as captured
    // on the bridge's two ports: the user-space bridge forwards each frame
    // after its own wake-up, which on a loaded 2-vCPU machine is late by
    // up to a few hundred µs, and that lateness is on the wire, so in T4.
    // What the captures do not see is the two veth hops, tens of µs.
    assert!(
        t4 >= want,
        "T4 grew by {t4} µs for a {want} µs one-way delay"
    );
    assert!(
        (t4_delayed - transit).abs() <= (0.05 * transit).max(50.0),
        "T4 {t4_delayed} µs, the frames spent {transit} µs in the bridge"
    );
    let moved: Vec<(&str, f64)> = ["T1", "T2", "T3", "T5", "T6", "T7"]
        .into_iter()
        .map(|n| (n, grow(n)))
        .collect();
    eprintln!(
        "the other segments' p50 moved by (µs): {moved:.1?}; T7 {:.1} → {:.1} µs",
        seg(&plain, "T7", "p50_us"),
        seg(&delayed, "T7", "p50_us")
    );
    // A segment the delay was put in by mistake would grow by all 5 ms:
    // none grows by 5 % of it. T7 holds the reader's wake-up, which drops
    // through the user-space bridge (the frames no longer arrive in the
    // sender's own softirq on the reader's vCPU: 85–117 µs → 30–40 µs
    // seen), so only its growth is bounded; the others stay within 5 %.
    for (n, g) in moved {
        let ok = g < 0.05 * want && (n == "T7" || g > -0.05 * want);
        assert!(ok, "{n} moved by {g} µs");
    }
}

#[test]
fn connect_latency_through_the_bridge_is_one_round_trip() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    // The bridge's threads and the client on one CPU: the SYN-ACK the
    // bridge sends is processed in its context, and the client it wakes
    // then runs there at once (SCHED_FIFO) instead of waiting for an
    // inter-processor wake-up, which on a loaded 2-vCPU machine takes
    // 100 µs and more: the client's own timing stays a tight reference.
    host_support::pin_to(0);
    let rig = Rig::new(Middle::Delay(DELAY));
    let dir = live_support::topo::TempDir::new("connlat_bridge");
    let out = dir.0.join("connlat.jsonl");
    let err = dir.0.join("connlat.err");
    let mut child = common::xdprobe()
        .args(["connlat", "--json"])
        .env("XDPROBE_LOG", "info")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("xdprobe connlat");
    live_support::topo::wait_for(Duration::from_secs(30), "connlat attached", || {
        std::fs::read_to_string(&err).is_ok_and(|s| s.contains("attached"))
    });
    let server: SocketAddr = format!("{DB4}:5313").parse().unwrap();
    let n = 20;
    let listener = rig.b.run(|| TcpListener::bind(server).expect("bind"));
    let accept = std::thread::spawn(move || {
        for _ in 0..n {
            if listener.accept().is_err() {
                break;
            }
        }
    });
    let own: Vec<(u16, f64)> = rig.a.run(|| {
        realtime();
        (0..n)
            .map(|_| host_support::timed_connect(server))
            .collect()
    });
    accept.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    live_support::topo::signal(child.id(), libc::SIGTERM);
    assert!(child.wait().unwrap().success());
    let rows: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &Value| r["dport"] == 5313)
        .collect();
    assert_eq!(rows.len(), n, "every connection once: {rows:#?}");
    let rtt = 2.0 * DELAY.as_secs_f64() * 1e6;
    let mut gaps = Vec::with_capacity(n);
    let mut lats = Vec::with_capacity(n);
    for (port, client) in own {
        let r = rows
            .iter()
            .find(|r| r["sport"] == port)
            .unwrap_or_else(|| panic!("port {port} missing"));
        let lat = r["latency_us"].as_f64().unwrap();
        // The probe's interval (→ SYN_SENT inside the call, → ESTABLISHED
        // in softirq) lies inside the client's own: what the client adds is
        // the syscall entry and its wake-up after the SYN-ACK.
        let gap = client - lat;
        assert!(
            (-5.0..=1000.0).contains(&gap),
            "port {port}: probe {lat} µs, the client's own connect() {client} µs"
        );
        gaps.push(gap);
        // Never less than the bridge's two delays.
        assert!(lat >= rtt, "≥ 10 ms: {lat} µs");
        lats.push(lat);
    }
    // The bridge forwards from user space: on a loaded machine one of its
    // wake-ups can be late by ms; the typical connection is one round trip.
    lats.sort_by(f64::total_cmp);
    assert!(lats[n / 2] <= rtt * 1.25, "≈ 10 ms: {lats:?}");
    // A wake-up on a loaded 2-core machine (the bridge forwards from user
    // space on the same cores) can take longer than 100 µs now and then;
    // nearly every connection stays within it.
    gaps.sort_by(f64::total_cmp);
    let within = gaps.iter().filter(|g| **g <= 100.0).count();
    eprintln!(
        "{n} connects through the bridge: client's own minus probe, median {:.1} µs, max {:.1} µs",
        gaps[n / 2],
        gaps[n - 1]
    );
    assert!(
        within * 10 >= n * 9,
        "{within}/{n} within 100 µs of the client's own figure: gaps {gaps:?}"
    );
}
