//! `xdprobe trace` on the real kernel, in namespaces this test creates:
//!
//! - `list` counts agree with tracefs and kallsyms counted here;
//! - a missing point is a clear error (exit 2) and leaves nothing
//!   attached; a run stopped by SIGTERM leaves nothing attached either;
//! - the echo pair across a veth: the report lists the expected steps in
//!   order in both directions and the trails cross the namespaces; a
//!   `tbf` shaper kept full by background load grows the queueing step by
//!   backlog ÷ rate (the backlog read from `tc -s qdisc` during the run)
//!   and no other step materially, and the sender's own round-trip timing
//!   grows by the same amount; the background flow never shows up, so the
//!   in-kernel flow filter selected exactly the probes.
//!
//! Needs root; skips loudly otherwise (never under CI=true).

mod live_support;
mod trace_support;

use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use live_support::require_root;
use live_support::topo::{ChildGuard, TempDir, spawn_in, wait_for};
use serde_json::Value;
use trace_support::*;

#[test]
fn list_agrees_with_tracefs_and_kallsyms() {
    if !require_root!() {
        return;
    }
    let _g = serial();
    let out = xdprobe(&["trace", "list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let (mut tps, mut tps_skb, mut funcs) = (0usize, 0usize, BTreeSet::new());
    for l in stdout.lines() {
        let cols: Vec<&str> = l.split_whitespace().collect();
        match cols.first() {
            Some(&"tracepoint") => {
                tps += 1;
                if cols[2].starts_with("skb:") {
                    tps_skb += 1;
                    assert_eq!(cols[3], "attachable", "{l}");
                }
            }
            Some(&"function") => {
                funcs.insert(cols[1].to_owned());
            }
            _ => panic!("unexpected line {l:?}"),
        }
    }

    let (want_tps, want_skb) = tracefs_counts();
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let want_funcs = kallsyms_functions(&kallsyms);
    eprintln!(
        "list: {tps} tracepoints ({tps_skb} with an skb), {} functions; tracefs {want_tps} ({want_skb}), kallsyms {}",
        funcs.len(),
        want_funcs.len()
    );
    assert_eq!(tps, want_tps);
    assert_eq!(tps_skb, want_skb);
    assert!(want_skb >= 10, "the net/skb/qdisc tracepoints carry skbs");
    assert_eq!(funcs.len(), want_funcs.len());
    assert!(funcs.iter().all(|f| want_funcs.contains(f.as_str())));

    let summary = text(&out.stderr);
    assert!(
        summary.contains(&format!("{want_tps} tracepoints ({want_skb} carry an skb")),
        "{summary}"
    );
    let kprobes = Path::new("/sys/bus/event_source/devices/kprobe").exists()
        || tracefs().join("kprobe_events").exists();
    if !kprobes {
        assert!(
            summary.contains("kprobe/fentry: not available on this kernel"),
            "{summary}"
        );
    }

    // Patterns: only what matches, of the kinds the pattern names.
    let out = xdprobe(&["trace", "list", "--skb", "qdisc:*"]);
    let names: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap().to_owned())
        .collect();
    assert_eq!(names, ["qdisc:qdisc_dequeue", "qdisc:qdisc_enqueue"]);
}

#[test]
fn missing_points_are_clear_errors_and_nothing_stays_attached() {
    if !require_root!() {
        return;
    }
    let _g = serial();
    let before = attached();
    for (points, says) in [
        (
            "net:net_dev_queue,net:no_such_point",
            "point \"net:no_such_point\": no tracepoint matches it",
        ),
        ("nosuch:*", "no tracepoint matches it"),
        (
            "net:napi_gro_receive_exit",
            "net:napi_gro_receive_exit\": the tracepoint carries no skb",
        ),
        ("ip_rcv", "kernel functions need kprobes or fentry"),
        ("net:net_dev_xmit", "trace both"),
    ] {
        let out = xdprobe(&["trace", "run", "--points", points, "--duration", "1s"]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{points}: {err}");
        assert!(err.contains(says), "{points}: {err}");
        // Nothing was loaded at all: no grace period to wait for.
        assert_eq!(attached(), before, "{points} left something attached");
    }
    let out = xdprobe(&["trace", "run", "--flow", "udp dst port", "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("syntax error"));
    assert_eq!(attached(), before);

    // A run that attached, stopped by SIGTERM: every link goes with it.
    let dir = TempDir::new("trace-term");
    let log = dir.0.join("run.log");
    let mut child = spawn_trace(
        &[
            "--points",
            "net:*,skb:*,qdisc:*",
            "--duration",
            "30s",
            "--flow",
            "udp port 9",
        ],
        &dir.0.join("t.jsonl"),
        &log,
    );
    let mut during = (BTreeSet::new(), BTreeSet::new());
    wait_for(Duration::from_secs(20), "the tracer to attach", || {
        during = attached();
        during.1.len() > before.1.len() + 10
    });
    let new_links = during.1.difference(&before.1).count();
    stop_trace(&mut child, &log);
    // The kernel frees links and programs after an RCU grace period.
    wait_for(
        Duration::from_secs(5),
        "the links to go after SIGTERM",
        || attached() == before,
    );
    eprintln!("SIGTERM run: {new_links} links while running, none after");
}

#[test]
fn echo_paths_and_tbf_queueing() {
    if !require_root!() {
        return;
    }
    let _g = serial();
    let dir = TempDir::new("trace-echo");
    let p = pair();
    let _listener = start_echo(&p, &dir.0);
    let (ia, ib) = (ns_inode(&p.a), ns_inode(&p.b));
    let base = echo(&p, &dir.0, "baseline", 200, 300);
    check_baseline_paths(&base);
    check_baseline_trails(&base, ia, ib);
    let (shaped, backlog) = shaped_echo(&p, &dir.0);
    check_shaped(&base, &shaped, &backlog);
}

/// A qdisc that never shapes on A, B's echo listener up.
fn start_echo(p: &Pair, dir: &Path) -> ChildGuard {
    // A qdisc that never shapes (10 Gbit/s), so the baseline path has the
    // qdisc steps too (a veth has no qdisc by default).
    p.a.exec(&[
        "tc", "qdisc", "add", "dev", A_DEV, "root", "tbf", "rate", "10gbit", "burst", "1mb",
        "latency", "100ms",
    ]);
    let listener = spawn_in(
        &p.b,
        &[
            XDPROBE,
            "trace",
            "echo",
            "--listen",
            "7",
            "--duration",
            "60s",
        ],
        &dir.join("listen.log"),
    );
    let listener = ChildGuard::new(listener);
    wait_for(
        Duration::from_secs(10),
        "the echo listener on udp 7",
        || {
            let ss = p.b.command("ss").args(["-lunH", "sport = :7"]).output();
            ss.is_ok_and(|o| !o.stdout.is_empty())
        },
    );
    listener
}

/// The request's way from A's socket into B, through A's qdisc.
const REQUEST_STEPS: [&str; 7] = [
    "net:net_dev_queue",
    "qdisc:qdisc_enqueue",
    "qdisc:qdisc_dequeue",
    "net:net_dev_start_xmit",
    "net:netif_rx",
    "net:net_dev_xmit",
    "net:netif_receive_skb",
];

/// The baseline's common paths: the request through A's qdisc to B, the
/// reply back through B's veth, which has no qdisc; nearly every request
/// trail took the request's steps.
fn check_baseline_paths(base: &Run) {
    assert_eq!((base.sent, base.replies), (300, 300));
    let req = group(&base.report, "request");
    let rep = group(&base.report, "reply");
    let rp = path(req);
    eprintln!("request path: {}", rp.join(" → "));
    eprintln!("reply path: {}", path(rep).join(" → "));
    assert!(in_order(&rp, &REQUEST_STEPS), "{rp:?}");
    // Nearly every request trail took those steps in that order. (Not
    // necessarily the exact common path: a busy machine frees more skbs
    // by recycling, whose trails end `reused` without `consume_skb`; 124
    // of 300 did once.)
    let requests: Vec<&Value> = base
        .trails
        .iter()
        .filter(|t| t["probe"]["dir"] == "request")
        .collect();
    let full = requests
        .iter()
        .filter(|t| {
            let points: Vec<String> = t["steps"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s["point"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            in_order(&points, &REQUEST_STEPS)
        })
        .count();
    eprintln!(
        "{full} of {} request trails took the request path; {} the exact common path",
        requests.len(),
        req["common_count"]
    );
    assert!(
        requests.len() == 300 && full * 100 >= requests.len() * 95,
        "{full} of {} request trails took the request path: {req}",
        requests.len()
    );
    let pp = path(rep);
    assert!(
        in_order(
            &pp,
            &[
                "net:net_dev_queue",
                "net:net_dev_start_xmit",
                "net:netif_rx",
                "net:net_dev_xmit",
                "net:netif_receive_skb",
            ]
        ) && !pp.iter().any(|p| p.starts_with("qdisc:")),
        "reply leaves through B's veth, which has no qdisc: {pp:?}"
    );
}

/// Every baseline trail is a probe of this run, starting in A's namespace
/// and reaching B's.
fn check_baseline_trails(base: &Run, ia: u64, ib: u64) {
    // Every trail is a probe of this run (the flow filter ran in the
    // kernel), one per direction and sequence number; the request starts
    // in A's namespace and reaches B's.
    let mut seen = BTreeSet::new();
    for t in &base.trails {
        let pr = &t["probe"];
        assert!(pr.is_object(), "a trail that is not a probe: {t}");
        assert!(
            seen.insert((pr["dir"].to_string(), pr["seq"].as_u64().unwrap())),
            "{t}"
        );
    }
    assert_eq!(seen.len(), 600);
    let first_req = base
        .trails
        .iter()
        .find(|t| t["probe"]["dir"] == "request" && t["steps"].as_array().unwrap().len() >= 7)
        .unwrap();
    let steps = first_req["steps"].as_array().unwrap();
    assert_eq!(steps[0]["netns"].as_u64(), Some(ia), "{first_req}");
    let rx = steps
        .iter()
        .find(|s| s["point"] == "net:netif_receive_skb")
        .unwrap();
    assert_eq!(rx["netns"].as_u64(), Some(ib), "{first_req}");
}

/// Bytes per second of the shaper `shaped_echo` sets.
const RATE_BYTES: f64 = 4e6 / 8.0;

/// Echo probes through a 4 Mbit/s tbf kept full by a background flow;
/// the backlog sampled during the run.
fn shaped_echo(p: &Pair, dir: &Path) -> (Run, Vec<u64>) {
    p.a.exec(&[
        "tc", "qdisc", "replace", "dev", A_DEV, "root", "tbf", "rate", "4mbit", "burst", "5kb",
        "limit", "20kb",
    ]);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // 1000-byte datagrams to B's port 9 at 1.5× the shaper's rate,
        // bounded in time and count.
        s.spawn(|| {
            p.a.enter_current_thread();
            let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
            let buf = [0x5au8; 1000];
            let t0 = Instant::now();
            for i in 0..20_000u32 {
                if stop.load(Ordering::Relaxed) || t0.elapsed() > Duration::from_secs(15) {
                    break;
                }
                let due = t0 + Duration::from_secs_f64(f64::from(i) / 750.0);
                if let Some(d) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
                let _ = sock.send_to(&buf, (B_IP, 9));
            }
        });
        wait_for(Duration::from_secs(5), "the shaper's queue to fill", || {
            backlog_bytes(&p.a).is_some_and(|b| b > 10_000)
        });
        let sampler = s.spawn(|| {
            let mut v = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some(b) = backlog_bytes(&p.a) {
                    v.push(b);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            v
        });
        let run = echo(p, dir, "shaped", 100, 150);
        stop.store(true, Ordering::Relaxed);
        let v = sampler.join().unwrap();
        (run, v)
    })
}

/// The queueing step grew by backlog ÷ rate, and so did the sender's own
/// round trip; no other step moved materially.
fn check_shaped(base: &Run, shaped: &Run, backlog: &[u64]) {
    let req = group(&base.report, "request");
    let rep = group(&base.report, "reply");
    let mean_backlog = backlog.iter().sum::<u64>() as f64 / backlog.len().max(1) as f64;
    let expect_ms = mean_backlog / RATE_BYTES * 1e3;
    let sreq = group(&shaped.report, "request");
    let srep = group(&shaped.report, "reply");
    let q = |g: &Value| g["queueing"]["p50_us"].as_f64().unwrap() / 1e3;
    let (q0, q1) = (q(req), q(sreq));
    let rtt_growth_ms = (shaped.rtt_p50_us - base.rtt_p50_us) / 1e3;
    eprintln!(
        "tbf 4 Mbit/s: mean backlog {mean_backlog:.0} B over {} samples → expected queueing {expect_ms:.2} ms; \
         measured p50 {q1:.2} ms (baseline {:.1} µs); sender RTT p50 {:.2} → {:.2} ms (+{rtt_growth_ms:.2} ms); {} of {} probes returned",
        backlog.len(),
        q0 * 1e3,
        base.rtt_p50_us / 1e3,
        shaped.rtt_p50_us / 1e3,
        shaped.replies,
        shaped.sent
    );
    assert!(shaped.replies >= 100, "most probes pass the shaper");
    assert!(expect_ms > 10.0, "the background load kept the queue full");
    assert!(
        (q1 - expect_ms).abs() <= 0.2 * expect_ms,
        "queueing {q1:.2} ms vs backlog/rate {expect_ms:.2} ms"
    );
    assert!(
        (rtt_growth_ms - (q1 - q0)).abs() <= 0.15 * expect_ms,
        "the sender's own RTT grew {rtt_growth_ms:.2} ms, the queueing step {:.2} ms",
        q1 - q0
    );
    check_other_steps([(req, sreq), (rep, srep)], expect_ms);
    assert!(in_order(
        &path(sreq),
        &[
            "net:net_dev_queue",
            "qdisc:qdisc_enqueue",
            "qdisc:qdisc_dequeue",
            "net:net_dev_start_xmit",
            "net:netif_receive_skb"
        ]
    ));
    // The background datagrams (port 9) never started a trail.
    for t in &shaped.trails {
        assert!(t["probe"].is_object(), "{t}");
    }
}

/// Every other step of both paths (baseline, shaped) moved by far less
/// than the queueing did.
fn check_other_steps(pairs: [(&Value, &Value); 2], expect_ms: f64) {
    // Every other step of both paths moved by far less than the queueing
    // did (each well under 1 % of it).
    let limit_us = 0.01 * expect_ms * 1e3;
    for (g0, g1) in pairs {
        let s1 = step_p50s(g1);
        let mut compared = 0;
        for (k0, p0) in step_p50s(g0) {
            // The tail may differ (whether the socket's free was seen
            // before the buffer was reused); compare the steps both have.
            // A step to a free point is when the kernel got round to the
            // (deferred) free — the next packet's arrival — not a step of
            // the path; it is left out.
            let Some((_, p1)) = s1.iter().find(|(k, _)| *k == k0) else {
                continue;
            };
            if k0.1.starts_with("skb:") {
                continue;
            }
            eprintln!("  {} → {}: p50 {p0:.1} → {p1:.1} µs", k0.0, k0.1);
            compared += 1;
            if k0
                == (
                    "qdisc:qdisc_enqueue".to_owned(),
                    "qdisc:qdisc_dequeue".to_owned(),
                )
            {
                continue;
            }
            assert!(
                (p1 - p0).abs() < limit_us,
                "{} → {} moved {p0:.1} → {p1:.1} µs",
                k0.0,
                k0.1
            );
        }
        assert!(compared >= 5, "{g0}\n{g1}");
    }
}

#[test]
fn drops_end_trails_with_the_kernels_reason() {
    if !require_root!() {
        return;
    }
    let _g = serial();
    let dir = TempDir::new("trace-drop");
    let p = pair();
    let before = attached();
    let out = dir.0.join("drops.jsonl");
    let log = dir.0.join("run.log");
    let mut child = spawn_trace(
        &[
            "--points",
            "net:*,skb:*",
            "--duration",
            "20s",
            "--flow",
            &format!("udp and dst host {B_IP} and dst port 9"),
            "--idle",
            "300ms",
        ],
        &out,
        &log,
    );
    wait_for(Duration::from_secs(20), "the tracer to attach", || {
        attached().1.len() >= before.1.len() + 10
    });
    // Nothing listens on B's port 9: UDP drops each datagram (no socket).
    send_to_port9(&p.a, 20, None);
    std::thread::sleep(Duration::from_millis(500));
    stop_trace(&mut child, &log);
    // The reason's number as the tracepoint itself prints it.
    let fmt = std::fs::read_to_string(tracefs().join("events/skb/kfree_skb/format")).unwrap();
    let i = fmt
        .find("\"NO_SOCKET\"")
        .expect("NO_SOCKET in kfree_skb's print fmt");
    let no_socket: u64 = fmt[..i]
        .rsplit('{')
        .next()
        .unwrap()
        .trim()
        .trim_end_matches(',')
        .parse()
        .unwrap();
    let trails = read_trails(&out);
    let dropped: Vec<&Value> = trails.iter().filter(|t| t["end"] == "dropped").collect();
    eprintln!(
        "{} trails, {} dropped; NO_SOCKET = {no_socket}",
        trails.len(),
        dropped.len()
    );
    assert_eq!(dropped.len(), 20, "{trails:?}");
    for t in dropped {
        assert_eq!(t["drop_reason"].as_u64(), Some(no_socket), "{t}");
        assert_eq!(t["drop_reason_name"], "NO_SOCKET", "{t}");
        assert_eq!(t["flow"]["dport"], 9);
        let steps = t["steps"].as_array().unwrap();
        assert_eq!(steps.last().unwrap()["point"], "skb:kfree_skb", "{t}");
        assert_eq!(steps[0]["point"], "net:net_dev_queue", "{t}");
    }
    let rep = xdprobe(&["trace", "report", out.to_str().unwrap()]);
    assert!(
        text(&rep.stdout).contains("drops: NO_SOCKET 20"),
        "{}",
        text(&rep.stdout)
    );
}

#[test]
fn netns_and_mark_scope_where_trails_start() {
    if !require_root!() {
        return;
    }
    let _g = serial();
    let dir = TempDir::new("trace-scope");
    let p = pair();
    let points = dir.0.join("points");
    std::fs::write(&points, "# device and skb points\nnet:*\nskb:*   # frees\n").unwrap();
    let from = points.to_str().unwrap();
    let flow = "udp and dst port 9";

    // Only B's namespace: the datagrams leave A untraced and their trails
    // start where B's veth receives them.
    let ib = ns_inode(&p.b);
    let trails = trace_around(
        &dir.0,
        "netns",
        &["--from", from, "--flow", flow, "--netns", &p.b.name],
        || send_to_port9(&p.a, 10, None),
    );
    assert_eq!(trails.len(), 10, "{trails:?}");
    for t in &trails {
        let s0 = &t["steps"][0];
        assert_eq!(s0["netns"].as_u64(), Some(ib), "{t}");
        assert_ne!(s0["point"], "net:net_dev_queue", "{t}");
        assert_eq!(t["drop_reason_name"], "NO_SOCKET", "{t}");
    }

    // Only skbs marked 0x42 (the sender's SO_MARK): 10 of the 20.
    let trails = trace_around(
        &dir.0,
        "mark",
        &["--from", from, "--flow", flow, "--mark", "0x42/0xff"],
        || {
            send_to_port9(&p.a, 10, Some(0x1342));
            send_to_port9(&p.a, 10, None);
            send_to_port9(&p.a, 5, Some(0x43));
        },
    );
    assert_eq!(trails.len(), 10, "{trails:?}");
    for t in &trails {
        assert_eq!(t["steps"][0]["point"], "net:net_dev_queue", "{t}");
    }
}
