//! The manager against an attacker on the management network: a second
//! namespace (B) that can reach the manager's port, with or without a
//! certificate of the fleet's CA. Each test is an attack that worked
//! before the channel was authenticated and bounded (issue 24's
//! measurements: a HELLO replaced a real agent, forged events got
//! clock-synced, a HELLO redirected the clock probes, 8 idle sockets
//! locked an agent out, 1,000 partial frames took 1 GB and kept 960 MB).
//! The manager is the real binary; its Prometheus counters and JSON say
//! what it did.

mod common;
mod crosshost_support;
mod host_support;
mod live_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crosshost_support::{B4, M4, MANAGER_PORT, METRICS_PORT, Middle, Rig, metric, scrape};
use live_support::require_root;
use xdprobe_host::fleet::proto::{self, AgentStats, Hello};
use xdprobe_host::fleet::tls::{self, TlsFiles, rustls};

fn manager_addr() -> SocketAddr {
    format!("{M4}:{MANAGER_PORT}").parse().unwrap()
}

fn metrics_section() -> String {
    format!("[metrics]\nlisten = \"{M4}:{METRICS_PORT}\"\n")
}

fn hello(agent: &str, sync: Option<&str>) -> Vec<u8> {
    let mut b = Vec::new();
    proto::encode_hello(
        &Hello {
            version: proto::VERSION,
            agent: agent.into(),
            instance: 7,
            sample_bytes: 0,
            layers: vec!["sock_tx".into()],
            sync: sync.map(str::to_owned),
        },
        &mut b,
    );
    b
}

fn events(n: usize) -> Vec<u8> {
    let evs: Vec<_> = (0..n)
        .map(|i| xdprobe_common::host::StackEvent {
            ts_ns: 1_000_000 + i as u64,
            seq: i as u32 * 100,
            end: i as u32 * 100 + 100,
            layer: 1,
            family: 2,
            sport: 40000,
            dport: 5201,
            ..Default::default()
        })
        .collect();
    let mut b = Vec::new();
    proto::encode_events(&evs, &mut b);
    b
}

/// A TCP connection from namespace `ns` (the attacker's), blocking.
fn connect_from(ns: &live_support::NetNs) -> TcpStream {
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_current_thread();
            let c = TcpStream::connect_timeout(&manager_addr(), Duration::from_secs(5))
                .expect("connect to the manager");
            c.set_read_timeout(Some(Duration::from_secs(5))).ok();
            c
        })
        .join()
        .expect("connect thread")
    })
}

/// TLS from `ns` with `files`; the stream after the handshake, or the
/// error the handshake (or the first read) ended with.
fn tls_from(
    ns: &live_support::NetNs,
    files: &TlsFiles,
    first: &[u8],
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let cfg = tls::client_config(files).expect("client config");
    let name = tls::server_name(M4).unwrap();
    let conn = rustls::ClientConnection::new(Arc::clone(&cfg), name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, connect_from(ns));
    // Errors show as the manager's counters; the write may or may not see
    // the alert first.
    let _ = s.write_all(first).and_then(|()| s.flush());
    s
}

/// Reads until the manager closes (or the timeout): true if it closed.
fn closed_by_manager(s: &mut impl Read) -> bool {
    let mut b = [0u8; 256];
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

fn scrape_m(rig: &Rig) -> String {
    scrape(&rig.m, &format!("{M4}:{METRICS_PORT}"))
}

fn closed(text: &str, reason: &str) -> f64 {
    metric(
        text,
        &format!("xdprobe_manager_connections_closed_total{{reason=\"{reason}\"}}"),
    )
}

fn agent_metric(text: &str, name: &str, agent: &str) -> Option<f64> {
    let p = format!("{name}{{agent=\"{agent}\"}}");
    text.lines()
        .find(|l| l.starts_with(&p))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Waits until `f` holds for the manager's metrics.
fn wait_metrics(rig: &Rig, what: &str, f: impl Fn(&str) -> bool) -> String {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let t = scrape_m(rig);
        if f(&t) {
            return t;
        }
        assert!(Instant::now() < end, "waiting for {what}:\n{t}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Three ways of speaking as agent "a" without a's key, from namespace B:
/// plaintext, a fleet certificate of another name (mallory's), and a
/// certificate naming "a" from another CA. Each is closed by the manager.
/// The TLS files of mallory, an agent with a valid certificate of the
/// fleet.
fn mallory(rig: &Rig) -> TlsFiles {
    let pki = |f: &str| rig.path(&format!("pki/{f}"));
    TlsFiles {
        cert: pki("agent-mallory.pem"),
        key: pki("agent-mallory.key"),
        ca: Some(pki("ca.pem")),
        pinned: vec![],
    }
}

fn attacks_as_a(rig: &Rig) {
    // 1. Plaintext HELLO as "a", then events: the TLS handshake fails.
    let mut plain = connect_from(&rig.b);
    let mut bytes = hello("a", None);
    bytes.extend(events(1600));
    let _ = plain.write_all(&bytes);
    assert!(closed_by_manager(&mut plain), "plaintext stays open");

    // 2. A valid certificate of the fleet (mallory's) claiming to be "a".
    let mallory = mallory(rig);
    let mut s = tls_from(&rig.b, &mallory, &hello("a", None));
    let _ = s.write_all(&events(1600));
    assert!(
        closed_by_manager(&mut s),
        "a certificate for another name got in"
    );

    // 3. A certificate from another CA, naming "a".
    let other = rig.path("other-pki");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xdprobe"))
        .args([
            "manager",
            "gen-certs",
            "--dir",
            other.to_str().unwrap(),
            "--agent",
            "a",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let forged = TlsFiles {
        cert: other.join("agent-a.pem"),
        key: other.join("agent-a.key"),
        ca: Some(rig.path("pki/ca.pem")),
        pinned: vec![],
    };
    let mut s = tls_from(&rig.b, &forged, &hello("a", None));
    assert!(closed_by_manager(&mut s), "another CA's certificate got in");
}

#[test]
fn impersonation_and_forged_events_need_the_agents_own_key() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let rig = Rig::new(Middle::Linux);
    let m = rig.manager(&format!("sync_interval = \"1s\"\n{}", metrics_section()));
    // Set up (socket bound, veth programs attached), the manager keeps
    // CAP_NET_ADMIN only (to detach them at exit).
    let caps = std::fs::read_to_string(format!("/proc/{}/status", m.pid())).unwrap();
    let eff = caps.lines().find(|l| l.starts_with("CapEff:")).unwrap();
    assert_eq!(
        u64::from_str_radix(eff.trim_start_matches("CapEff:").trim(), 16).unwrap(),
        1 << 12,
        "{eff}"
    );
    let a = rig.agent('a', M4, None, &["--port", "5498"]);
    let t = wait_metrics(&rig, "agent a synced", |t| {
        agent_metric(t, "xdprobe_manager_sync_rounds_total", "a").is_some_and(|v| v >= 1.0)
    });
    let connects_a = agent_metric(&t, "xdprobe_manager_agent_connects_total", "a");

    attacks_as_a(&rig);

    let t = wait_metrics(&rig, "the refusals counted", |t| {
        closed(t, "tls") >= 2.0 && closed(t, "cert_name") >= 1.0
    });
    eprintln!(
        "refused: tls {}, cert_name {}, taken over {}",
        closed(&t, "tls"),
        closed(&t, "cert_name"),
        closed(&t, "taken_over")
    );
    assert_eq!(
        closed(&t, "taken_over"),
        0.0,
        "the real agent was displaced"
    );
    assert_eq!(
        agent_metric(&t, "xdprobe_manager_agent_connects_total", "a"),
        connects_a,
        "an attacker's HELLO counted as a connection of a"
    );
    assert!(
        !t.contains("agent=\"mallory\""),
        "mallory's forged session reached the fleet"
    );
    // The real agent still streams: its events keep coming after the
    // attacks (its STATS say it stayed connected: one connect).
    let a_log = a.stop();
    assert!(
        a_log.contains("connects: 1"),
        "the real agent lost its connection:\n{a_log}"
    );

    // 4. An authenticated connection as "a" (a's own key, from B) while
    // a is connected: it takes the session over, the old one is closed.
    let own = TlsFiles {
        cert: rig.path("pki/agent-a.pem"),
        key: rig.path("pki/agent-a.key"),
        ca: Some(rig.path("pki/ca.pem")),
        pinned: vec![],
    };
    let a2 = rig.agent('a', M4, None, &["--port", "5498"]);
    wait_metrics(&rig, "a back", |t| {
        agent_metric(t, "xdprobe_manager_agent_connects_total", "a") > connects_a
    });
    let mut s = tls_from(&rig.b, &own, &hello("a", None));
    let t = wait_metrics(&rig, "the takeover", |t| {
        metric(t, "xdprobe_manager_takeovers_total") >= 1.0 && closed(t, "taken_over") >= 1.0
    });
    eprintln!(
        "takeover by an authenticated connection: takeovers {}, closed taken_over {}",
        metric(&t, "xdprobe_manager_takeovers_total"),
        closed(&t, "taken_over")
    );
    drop(s.write_all(&[]));
    a2.stop();
    let log = m.stop();
    assert!(log.contains("tls=true"), "{log}");
}

#[test]
fn a_hello_cannot_point_the_clock_probes_elsewhere() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let rig = Rig::new(Middle::Linux);
    let m = rig.manager(&format!("sync_interval = \"200ms\"\n{}", metrics_section()));
    let mallory = mallory(&rig);
    // A genuine agent of the fleet, naming a third party as its responder.
    let mut s = tls_from(&rig.b, &mallory, &hello("mallory", Some("192.0.2.77:7461")));
    let t = wait_metrics(&rig, "the redirect refused", |t| {
        metric(t, "xdprobe_manager_sync_redirects_total") >= 1.0
    });
    drop(t);
    std::thread::sleep(Duration::from_secs(2));
    let j = rig.manager_json();
    let targets: Vec<&str> = j
        .iter()
        .filter(|v| v["type"] == "clock_sync" && v["agent"] == "mallory")
        .filter_map(|v| v["target"].as_str())
        .collect();
    eprintln!(
        "clock rounds for mallory: {} targets {:?}",
        targets.len(),
        &targets[..targets.len().min(3)]
    );
    assert!(!targets.is_empty(), "no round at all");
    assert!(
        targets.iter().all(|t| *t == format!("{B4}:7461")),
        "probes went elsewhere than the connection's address: {targets:?}"
    );
    let _ = s.write_all(&[]);
    drop(s);
    m.stop();
}

#[test]
fn idle_sockets_and_bad_stats_cannot_lock_an_agent_out() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let rig = Rig::new(Middle::Linux);
    let m = rig.manager(&format!(
        "max_agents = 4\nhello_timeout = \"1s\"\nagent_timeout = \"3s\"\nuser = \"nobody\"\n{}",
        metrics_section()
    ));
    // `user`: set up as root, then nobody with CAP_NET_ADMIN alone (it
    // still detaches the veth programs when it stops, below).
    let status = std::fs::read_to_string(format!("/proc/{}/status", m.pid())).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid.split_whitespace().skip(1).all(|u| u == "65534"),
        "{uid}"
    );
    // 40 idle sockets: more than max_agents × 2 (the old connection cap)
    // and than the 16 allowed to wait for a HELLO.
    let idle: Vec<TcpStream> = (0..40).map(|_| connect_from(&rig.b)).collect();
    let started = Instant::now();
    let a = rig.agent('a', M4, None, &["--port", "5497"]);
    a.wait_log(&["connected to the manager"], Duration::from_secs(10));
    let t = wait_metrics(&rig, "agent a in", |t| {
        agent_metric(t, "xdprobe_manager_agent_connects_total", "a").is_some()
    });
    eprintln!(
        "agent in after {:?} with 40 idle sockets; evicted {}, hello timeouts {}",
        started.elapsed(),
        closed(&t, "evicted"),
        closed(&t, "hello_timeout")
    );
    let t = wait_metrics(&rig, "idle sockets timed out", |t| {
        closed(t, "evicted") + closed(t, "hello_timeout") >= 40.0
    });
    assert!(closed(&t, "evicted") >= 24.0, "{t}");
    drop(idle);

    // An authenticated agent sending impossible counters.
    let mallory = mallory(&rig);
    let mut bytes = hello("mallory", None);
    proto::encode_stats(
        &AgentStats {
            events: u64::MAX,
            sent: u64::MAX,
            buffered: u64::MAX,
            ..AgentStats::default()
        },
        &mut bytes,
    );
    let mut s = tls_from(&rig.b, &mallory, &bytes);
    let t = wait_metrics(&rig, "the STATS refused", |t| {
        metric(t, "xdprobe_manager_stats_invalid_total") >= 1.0
    });
    let buffered = agent_metric(&t, "xdprobe_agent_buffered_events", "mallory");
    assert_eq!(buffered, Some(0.0), "{t}");
    // A silent connection goes after agent_timeout (3 s).
    assert!(closed_by_manager(&mut s), "a silent agent was kept");
    let t = scrape_m(&rig);
    assert!(closed(&t, "idle") >= 1.0, "{t}");
    a.stop();
    m.stop();
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_thousand_hostile_connections_cost_bounded_memory_given_back() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let rig = Rig::new(Middle::Linux);
    // Plaintext: the attacker can say HELLO, the worst case for memory.
    let limit: u64 = 32 << 20;
    let m = rig.manager(&format!(
        "insecure = true\nmemory_limit = {limit}\nagent_timeout = \"60s\"\n{}",
        metrics_section()
    ));
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_kib(m.pid());
    // Each: a HELLO, then most of a 512 KiB EVENTS frame, never finished.
    let mut partial = Vec::new();
    let body = proto::MAX_EVENTS_PER_FRAME.min(7000) * proto::EVENT_LEN;
    partial.extend_from_slice(&(u32::try_from(524_000).unwrap()).to_be_bytes());
    partial.push(2);
    partial.extend(std::iter::repeat_n(0u8, body.min(500_000)));
    let conns: Vec<TcpStream> = std::thread::scope(|sc| {
        sc.spawn(|| {
            rig.b.enter_current_thread();
            (0..1000)
                .filter_map(|i| {
                    let mut c =
                        TcpStream::connect_timeout(&manager_addr(), Duration::from_secs(5)).ok()?;
                    c.set_write_timeout(Some(Duration::from_millis(200))).ok();
                    let mut b = hello(&format!("h{i}"), None);
                    b.extend_from_slice(&partial);
                    let _ = c.write_all(&b);
                    Some(c)
                })
                .collect()
        })
        .join()
        .unwrap()
    });
    std::thread::sleep(Duration::from_secs(2));
    let t = scrape_m(&rig);
    let peak = rss_kib(m.pid());
    let held = metric(&t, "xdprobe_manager_connection_bytes");
    let refused = closed(&t, "memory");
    drop(conns);
    let t = wait_metrics(&rig, "the connections gone", |t| {
        metric(t, "xdprobe_manager_connection_bytes") == 0.0
    });
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(m.pid());
    eprintln!(
        "manager RSS: before {} MiB, with 1,000 hostile connections {} MiB (held {:.1} MiB, limit {} MiB, refused for memory {refused}), after they closed {} MiB",
        before / 1024,
        peak / 1024,
        held / 1048576.0,
        limit >> 20,
        after / 1024
    );
    assert!(held <= limit as f64, "held {held} over the limit");
    assert!(
        refused > 0.0,
        "nothing refused: the test did not reach the limit"
    );
    assert!(
        peak.saturating_sub(before) <= (limit >> 10) + 48 * 1024,
        "RSS grew {} KiB (limit {} KiB)",
        peak - before,
        limit >> 10
    );
    assert!(
        after.saturating_sub(before) <= 16 * 1024,
        "RSS kept {} KiB after the connections closed",
        after - before
    );
    let _ = t;
    m.stop();
}
