//! `xdprobe trace` follows bulk TCP through GSO segmentation: a `tbf`
//! shaper cuts each GSO packet into segments (new skbs, new buffers), and
//! each segment's trail must still run from the stack's hand-off to the
//! device (`net_dev_queue → qdisc_enqueue → qdisc_dequeue →
//! net_dev_start_xmit …`), so that the queueing step is measured on
//! nearly every packet and agrees with the queue as the kernel's own
//! counters show it: mean backlog ÷ throughput over the transfer (Little's
//! law), both read from `tc -s -j qdisc` a few hundred times a second
//! during the run. Before, the segments' trails began at
//! `qdisc_dequeue`: queueing covered 0.08 % of the trails.

mod common;
mod host_support;
mod live_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use host_support::{Pair, SERVER_IP, mono_ns};
use live_support::{
    require_root,
    topo::{TempDir, signal, wait_exit, wait_for},
};
use serde_json::Value;

const PORT: u16 = 5351;

/// `tc -s -j qdisc show dev c0` in the client's namespace, one process
/// answering a query per line: (monotonic ns, bytes sent, backlog bytes).
fn sample_qdisc(ns: &str, stop: &AtomicBool) -> Vec<(u64, u64, u64)> {
    let mut tc = Command::new("ip")
        .args(["netns", "exec", ns, "tc", "-s", "-j", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tc");
    let mut input = tc.stdin.take().expect("stdin");
    let mut output = BufReader::new(tc.stdout.take().expect("stdout"));
    let mut out = Vec::new();
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) && out.len() < 100_000 {
        let t = mono_ns();
        if writeln!(input, "qdisc show dev c0").is_err() {
            break;
        }
        line.clear();
        if output.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let v: Value = serde_json::from_str(&line).expect("tc JSON");
        let q = &v[0];
        assert_eq!(q["kind"], "tbf", "{line}");
        out.push((
            t,
            q["bytes"].as_u64().expect("bytes"),
            q["backlog"].as_u64().expect("backlog"),
        ));
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(input);
    let _ = tc.wait();
    out
}

#[test]
fn bulk_tcp_trails_run_through_gso_segmentation_and_queueing_is_backlog_over_rate() {
    if !require_root(
        "bulk_tcp_trails_run_through_gso_segmentation_and_queueing_is_backlog_over_rate",
    ) {
        return;
    }
    let _serial = host_support::serial();
    let pair = Pair::new();
    // A token bucket smaller than any GSO packet: tbf cuts each one into
    // MSS-sized segments as it enqueues it.
    pair.c.exec(&[
        "tc", "qdisc", "add", "dev", "c0", "root", "tbf", "rate", "100mbit", "burst", "4kb",
        "limit", "2mb",
    ]);
    let dir = TempDir::new("trace_gso");
    let trails = dir.0.join("trails.jsonl");
    let log = dir.0.join("trace.err");
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_xdprobe"))
        .args([
            "trace",
            "run",
            "--flow",
            &format!("tcp and dst port {PORT}"),
        ])
        .args(["--out", trails.to_str().unwrap(), "--stats"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("xdprobe trace run");
    wait_for(Duration::from_secs(30), "the tracer attached", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("tracing")
    });
    let server: SocketAddr = format!("{SERVER_IP}:{PORT}").parse().unwrap();
    let stop = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let samples = std::thread::scope(|sc| {
        let sampler = sc.spawn(|| sample_qdisc(&pair.c.name, &stop));
        sc.spawn(|| {
            pair.s.enter_current_thread();
            let l = TcpListener::bind(server).expect("bind");
            // A bounded receive window keeps the queue in the shaper,
            // not growing until drops.
            let b: i32 = 256 << 10;
            // SAFETY: setsockopt(2) with an int by pointer.
            unsafe {
                libc::setsockopt(
                    l.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    (&b as *const i32).cast(),
                    4,
                )
            };
            tx.send(()).unwrap();
            let (mut c, _) = l.accept().expect("accept");
            let mut buf = vec![0u8; 1 << 16];
            while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("server up");
        std::thread::sleep(Duration::from_millis(300));
        sc.spawn(|| {
            pair.c.enter_current_thread();
            let mut c =
                TcpStream::connect_timeout(&server, Duration::from_secs(5)).expect("connect");
            let chunk = vec![0x42u8; 1 << 16];
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(4) {
                c.write_all(&chunk).expect("write");
            }
        })
        .join()
        .expect("client");
        // The queue drains, then the sampler stops.
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        sampler.join().expect("sampler")
    });
    signal(tracer.id(), libc::SIGTERM);
    assert!(wait_exit(&mut tracer, Duration::from_secs(60), "the tracer").success());
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    let stats = err.lines().find(|l| l.starts_with("trails:")).unwrap_or("");

    // Little's law over the whole transfer (the queue empty at both ends):
    // the mean time a byte waits is the mean backlog over the bytes sent
    // per second, both from the qdisc's own counters.
    let (first, last) = (samples[0], samples[samples.len() - 1]);
    assert_eq!((first.2, last.2), (0, 0), "sampled from empty to empty");
    let secs = (last.0 - first.0) as f64 / 1e9;
    let rate = (last.1 - first.1) as f64 / secs;
    // The time average of the backlog: each sample weighs the time to the next.
    let area: f64 = samples
        .windows(2)
        .map(|w| w[0].2 as f64 * (w[1].0 - w[0].0) as f64 / 1e9)
        .sum();
    let expect_us = area / secs / rate * 1e6;

    let out = Command::new(env!("CARGO_BIN_EXE_xdprobe"))
        .args(["trace", "report", trails.to_str().unwrap(), "--json"])
        .output()
        .expect("trace report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let g = r["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "all"))
        .unwrap_or_else(|| panic!("no group: {r}"));
    let q = &g["queueing"];
    let got_us = q["mean_us"]
        .as_f64()
        .unwrap_or_else(|| panic!("no queueing: {g}"));
    let share = g["queueing_share"].as_f64().unwrap();
    let path: Vec<&str> = g["common_path"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    eprintln!(
        "{stats}\n{} samples of the qdisc over {secs:.2} s: {:.2} MB/s, mean backlog {:.0} B → {expect_us:.0} µs;\n\
         trace: {} trails ({} packets cut into {} segments), queueing on {:.1} % of them, mean {got_us:.0} µs (p50 {:.0}); most common path ({:.1} %): {path:?}",
        samples.len(),
        rate / 1e6,
        area / secs,
        g["trails"],
        r["segmentation"]["packets"],
        r["segmentation"]["segments"],
        100.0 * share,
        q["p50_us"],
        100.0 * g["common_share"].as_f64().unwrap(),
    );
    assert!(
        r["segmentation"]["segments"].as_u64().unwrap() > 1000,
        "the shaper cut GSO packets into segments: {r}"
    );
    assert!(
        share >= 0.9,
        "queueing measured on {share:.3} of the trails"
    );
    assert_eq!(
        path.first(),
        Some(&"net:net_dev_queue"),
        "from the hand-off"
    );
    assert!(
        path.contains(&"net:net_dev_start_xmit"),
        "to the device: {path:?}"
    );
    assert!(
        (got_us - expect_us).abs() <= 0.1 * expect_us,
        "queueing {got_us:.0} µs, the qdisc's backlog ÷ throughput {expect_us:.0} µs"
    );
    assert!(
        expect_us > 1000.0,
        "a queue of milliseconds: {expect_us} µs"
    );
}
