//! The daemon's life cycle against a real collector (nfdump's nfcapd):
//! started without collectors, it picks one up on SIGHUP (no re-attach);
//! SIGTERM in the middle of traffic detaches XDP, flushes every active
//! flow, and exits 0, and every connection that was open arrives at
//! nfcapd. While running, the process holds only CAP_BPF and
//! CAP_NET_ADMIN, also after switching to a configured `[probe] user`.

mod common;
mod live_support;

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Command, ExitStatus, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use live_support::{
    probe::{Probe, ProbeOpts, config_text},
    require_root,
    topo::{Bench, ChildGuard, SERVER_IP, TempDir, signal, wait_exit, wait_for},
};
use serde_json::Value;

const CONNS: usize = 4;
const PORT: u16 = 9100;

fn cap_eff(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(u64::MAX)
}

#[test]
fn sighup_adds_a_collector_and_sigterm_flushes_every_active_flow() {
    if !require_root!() {
        return;
    }
    if !common::require(
        common::have("nfcapd") && common::have("nfdump"),
        "nfdump (nfcapd) is not installed",
    ) {
        return;
    }
    let tmp = TempDir::new("shutdown");
    let mut b = Bench::new(1, None, &tmp.0);
    let flows_dir = tmp.0.join("nfcapd");
    std::fs::create_dir_all(&flows_dir).expect("nfcapd dir");
    let nfcapd =
        b.p.command("nfcapd")
            .args(["-b", "127.0.0.1", "-p", "4739", "-t", "3600", "-w"])
            .arg(&flows_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nfcapd");
    let nfcapd_idx = b.children.len();
    b.children.push(ChildGuard::new(nfcapd));

    let mut opts = ProbeOpts {
        metrics_port: 19471,
        ..ProbeOpts::default()
    };
    let probe = Probe::start(&b.p, &tmp.0, &opts);
    let pid = probe.child.id();
    let caps = cap_eff(pid);
    assert_eq!(
        caps,
        (1 << 12) | (1 << 39),
        "running daemon keeps exactly CAP_NET_ADMIN and CAP_BPF, got {caps:#x}"
    );

    // Reload: add the collector and change the idle timeout.
    opts.collectors = vec!["udp://127.0.0.1:4739".into()];
    opts.idle_timeout = "200s";
    std::fs::write(tmp.0.join("probe.toml"), config_text(&opts)).expect("rewrite config");
    signal(pid, libc::SIGHUP);
    wait_for(Duration::from_secs(10), "reload applied", || {
        let log = probe.log_text();
        log.contains("reload: collectors applied")
            && log.contains("reload: flow timeouts applied")
            && log.contains("flow timeouts reloaded")
    });

    // Long-lived connections, still open when SIGTERM comes.
    let (client_ports, (status, records, log)) = open_connections_at_stop(&b, probe);
    assert!(status.success(), "SIGTERM must exit 0: {status}\n{log}");
    assert!(log.contains("XDP program detached"), "{log}");

    // nfcapd writes its file on SIGTERM.
    signal(b.children[nfcapd_idx].id(), libc::SIGTERM);
    let _ = wait_exit(
        b.children[nfcapd_idx].child(),
        Duration::from_secs(10),
        "nfcapd",
    );
    collector_has_every_connection(&flows_dir, &records, &client_ports);
}

/// `CONNS` connections to the server, ten writes each, still open when the
/// probe is stopped: their client ports, and what `Probe::stop` returns.
fn open_connections_at_stop(
    b: &Bench,
    probe: Probe,
) -> (Vec<u16>, (ExitStatus, Vec<Value>, String)) {
    let listener =
        b.s.run(|| TcpListener::bind((SERVER_IP, PORT)).expect("listen"));
    let stop = AtomicBool::new(false);
    let mut client_ports = Vec::new();
    let stopped = std::thread::scope(|sc| {
        sc.spawn(|| {
            listener.set_nonblocking(true).expect("nonblocking");
            let mut conns = Vec::new();
            let end = Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Acquire) && Instant::now() < end {
                if let Ok((c, _)) = listener.accept() {
                    conns.push(c);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let streams: Vec<TcpStream> = b.c.run(|| {
            (0..CONNS)
                .map(|_| {
                    TcpStream::connect_timeout(
                        &format!("{SERVER_IP}:{PORT}").parse().expect("addr"),
                        Duration::from_secs(5),
                    )
                    .expect("connect")
                })
                .collect()
        });
        client_ports = streams
            .iter()
            .map(|s| s.local_addr().expect("addr").port())
            .collect();
        for round in 0..10 {
            for mut s in &streams {
                s.write_all(format!("round {round}\n").as_bytes())
                    .expect("write");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let r = probe.stop();
        stop.store(true, Ordering::Release);
        drop(streams);
        r
    });
    (client_ports, stopped)
}

/// What nfcapd wrote to `flows_dir` (read by nfdump) has every connection
/// of `client_ports` with the packets of the probe's JSON record of it.
fn collector_has_every_connection(flows_dir: &Path, records: &[Value], client_ports: &[u16]) {
    let out = Command::new("nfdump")
        .arg("-R")
        .arg(flows_dir)
        .args(["-o", "json"])
        .output()
        .expect("nfdump");
    assert!(
        out.status.success(),
        "nfdump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let collected: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let ours: Vec<&Value> = records
        .iter()
        .filter(|r| r["server_port"] == PORT)
        .collect();
    assert_eq!(
        ours.len(),
        CONNS,
        "one record per open connection in the JSON output"
    );
    for port in client_ports {
        let hit = collected.iter().find(|r| {
            r["proto"] == 6
                && ((r["src_port"] == *port && r["dst_port"] == PORT)
                    || (r["dst_port"] == *port && r["src_port"] == PORT))
        });
        let Some(hit) = hit else {
            panic!("connection from port {port} missing at the collector: {collected:#?}");
        };
        let pkts =
            hit["in_packets"].as_u64().unwrap_or(0) + hit["out_packets"].as_u64().unwrap_or(0);
        let want: u64 = ours
            .iter()
            .filter(|r| r["client_port"] == *port)
            .map(|r| {
                r["c2s"]["packets"].as_u64().unwrap_or(0)
                    + r["s2c"]["packets"].as_u64().unwrap_or(0)
            })
            .sum();
        assert_eq!(
            pkts, want,
            "collector's packet count for port {port}: {hit}"
        );
        assert!(pkts >= 10 + 3, "handshake and ten writes at least");
    }
}

#[test]
fn runs_as_the_configured_user_and_still_captures() {
    if !require_root!() {
        return;
    }
    let tmp = TempDir::new("as-user");
    // The config and the JSON output stay readable/writable: the daemon
    // opens its output before it switches user, and reads the config again
    // only on SIGHUP.
    let b = Bench::new(1, None, &tmp.0);
    let opts = ProbeOpts {
        metrics_port: 19472,
        user: Some("nobody"),
        ..ProbeOpts::default()
    };
    let probe = Probe::start(&b.p, &tmp.0, &opts);
    let pid = probe.child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let ids = |key: &str| -> Vec<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(ids("Uid:"), [65534; 4], "runs as nobody:\n{status}");
    assert_eq!(
        ids("Gid:"),
        [65534; 4],
        "primary group of nobody:\n{status}"
    );
    assert_eq!(
        cap_eff(pid),
        (1 << 12) | (1 << 39),
        "keeps exactly CAP_NET_ADMIN and CAP_BPF after the switch"
    );

    // It still captures after the switch: one connection with data.
    let listener =
        b.s.run(|| TcpListener::bind((SERVER_IP, PORT)).expect("listen"));
    let client_port = std::thread::scope(|sc| {
        sc.spawn(|| {
            // Bounded: never waits past 5 s for the client.
            listener.set_nonblocking(true).expect("nonblocking");
            let end = Instant::now() + Duration::from_secs(5);
            while Instant::now() < end {
                if let Ok((mut c, _)) = listener.accept() {
                    let _ = c.write_all(b"hello back\n");
                    // Open until the client has its answer and closes.
                    let _ = c.set_nonblocking(false);
                    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                    let _ = c.read_to_end(&mut Vec::new());
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let mut s = b.c.run(|| {
            TcpStream::connect_timeout(
                &format!("{SERVER_IP}:{PORT}").parse().expect("addr"),
                Duration::from_secs(5),
            )
            .expect("connect")
        });
        s.write_all(b"hello\n").expect("write");
        // The answer back: the data went both ways past the probe.
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut back = [0u8; 11];
        s.read_exact(&mut back).expect("the server's answer");
        assert_eq!(&back, b"hello back\n");
        s.local_addr().expect("addr").port()
    });
    let (status, records, log) = probe.stop();
    assert!(status.success(), "SIGTERM must exit 0: {status}\n{log}");
    let rec = records
        .iter()
        .find(|r| r["server_port"] == PORT && r["client_port"] == client_port)
        .unwrap_or_else(|| panic!("no record of the connection: {records:#?}\n{log}"));
    assert!(
        rec["rtt_us"].as_u64().is_some(),
        "handshake measured: {rec}"
    );
    assert!(
        rec["c2s"]["packets"].as_u64().unwrap_or(0) >= 3,
        "SYN, ACK and data at least: {rec}"
    );
}
