//! Helpers for the cross-host tests: two "hosts" (namespaces A and B, each
//! watched by its own agent, which sees only its namespace), a manager
//! namespace M on a management network with both, and a middle namespace
//! R on the data path: a Linux bridge, or the project's impairing bridge
//! with a fixed one-way delay. Everything runs as the real binary.
//!
//! ```text
//!   A ─am──────┐                 ┌──────bm─ B      management 203.0.113.0/24,
//!              mbr (M) manager ──┘                 2001:db8:ff::/64
//!   A ─a0── ra (R) rb ──b0─ B                      data 198.51.100.0/24,
//!                                                  2001:db8:1::/64
//! ```
//!
//! The management veths keep the kernel's offloads (a sender's checksum
//! offload leaves partial checksums: the responder must cope); the data
//! veths have them off, because a user-space bridge forwards frames, not
//! 64 KB GSO packets.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::host_support::{HEADER, Timed, connect_one, mono_ns, realtime, serve_one};
use crate::live_support::topo::TempDir;
use crate::live_support::{NetNs, VethOpts, neigh, sh, veth};

mod pki;
mod proc;

pub use proc::Proc;

pub const M4: &str = "203.0.113.254";
pub const A4: &str = "203.0.113.1";
pub const B4: &str = "203.0.113.2";
pub const M6: &str = "2001:db8:ff::fe";
pub const DA4: &str = "198.51.100.1";
pub const DB4: &str = "198.51.100.2";
pub const DA6: &str = "2001:db8:1::1";
pub const DB6: &str = "2001:db8:1::2";
pub const MANAGER_PORT: u16 = 7460;
pub const METRICS_PORT: u16 = 9464;

/// The middle of the data path.
pub enum Middle {
    /// A Linux bridge: microseconds.
    Linux,
    /// The demo's user-space bridge, this delay each way.
    Delay(Duration),
}

pub struct Rig {
    pub a: NetNs,
    pub b: NetNs,
    pub m: NetNs,
    pub r: NetNs,
    pub dir: TempDir,
    bridge: Option<xdprobe_demo::bridge::Bridge>,
}

fn ipv6_on(ns: &NetNs) {
    ns.exec(&[
        "sysctl",
        "-qw",
        "net.ipv6.conf.all.disable_ipv6=0",
        "net.ipv6.conf.default.disable_ipv6=0",
    ]);
}

fn ip(ns: &NetNs, args: &[&str]) {
    let mut v = vec!["ip", "-n", ns.name.as_str()];
    v.extend_from_slice(args);
    sh(&v);
}

impl Rig {
    pub fn new(middle: Middle) -> Rig {
        let a = NetNs::new("xa");
        let b = NetNs::new("xb");
        let m = NetNs::new("xm");
        let r = NetNs::new("xr");
        for ns in [&a, &b, &m] {
            ipv6_on(ns);
        }
        // Management: a Linux bridge in M, default offloads.
        ip(&m, &["link", "add", "mbr", "type", "bridge"]);
        for (ns, dev, peer) in [(&a, "am", "ma"), (&b, "bm", "mb")] {
            ip(
                ns,
                &[
                    "link", "add", dev, "type", "veth", "peer", "name", peer, "netns", &m.name,
                ],
            );
            ip(&m, &["link", "set", "dev", peer, "master", "mbr"]);
            ip(&m, &["link", "set", "dev", peer, "up"]);
            ip(ns, &["link", "set", "dev", dev, "up"]);
        }
        ip(&m, &["link", "set", "dev", "mbr", "up"]);
        for (ns, dev, v4, v6) in [
            (&m, "mbr", M4, M6),
            (&a, "am", A4, "2001:db8:ff::1"),
            (&b, "bm", B4, "2001:db8:ff::2"),
        ] {
            ip(ns, &["addr", "add", &format!("{v4}/24"), "dev", dev]);
            ip(
                ns,
                &["addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"],
            );
        }
        // Data: A — R — B, offloads off.
        veth(&a, "a0", &r, "ra", VethOpts::default());
        veth(&b, "b0", &r, "rb", VethOpts::default());
        for (ns, dev, v4, v6) in [(&a, "a0", DA4, DA6), (&b, "b0", DB4, DB6)] {
            ip(ns, &["addr", "add", &format!("{v4}/24"), "dev", dev]);
            ip(
                ns,
                &["addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"],
            );
        }
        let (amac, bmac) = (a.mac("a0"), b.mac("b0"));
        for (ns, dev, peer4, peer6, mac) in
            [(&a, "a0", DB4, DB6, &bmac), (&b, "b0", DA4, DA6, &amac)]
        {
            for p in [peer4, peer6] {
                neigh(ns, dev, p, mac);
            }
        }
        let bridge = match middle {
            Middle::Linux => {
                ip(&r, &["link", "add", "rbr", "type", "bridge"]);
                for d in ["ra", "rb"] {
                    ip(&r, &["link", "set", "dev", d, "master", "rbr"]);
                }
                ip(&r, &["link", "set", "dev", "rbr", "up"]);
                None
            }
            Middle::Delay(d) => {
                for dev in ["ra", "rb"] {
                    ip(&r, &["link", "set", "dev", dev, "promisc", "on"]);
                }
                let imp = |seed| xdprobe_demo::bridge::Impair {
                    delay: d,
                    loss_pct: 0.0,
                    reorder_pct: 0.0,
                    dup_pct: 0.0,
                    seed,
                };
                let leg = xdprobe_demo::bridge::Leg {
                    a: "ra".into(),
                    b: "rb".into(),
                    a_to_b: imp(1),
                    b_to_a: imp(2),
                };
                let path = PathBuf::from(format!("/run/netns/{}", r.name));
                Some(
                    xdprobe_demo::bridge::Bridge::start(
                        Some(&path),
                        &[leg],
                        Duration::from_secs(600),
                    )
                    .expect("start the delaying bridge"),
                )
            }
        };
        let dir = TempDir::new("crosshost");
        pki::make(&dir.0.join("pki"));
        Rig {
            a,
            b,
            m,
            r,
            dir,
            bridge,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.0.join(name)
    }

    /// Starts `xdprobe manager` in M with `[manager]` keys `extra` (and
    /// any sections after them); waits until it listens.
    pub fn manager(&self, extra: &str) -> Proc {
        let cfg = self.path("manager.toml");
        // TLS unless the test asks for plaintext.
        let tls = if extra.contains("insecure") {
            String::new()
        } else {
            self.manager_tls()
        };
        let text = format!(
            "[manager]\nlisten = \"[::]:{MANAGER_PORT}\"\nsample_bytes = 0\nveth_xdp = [\"ma\", \"mb\"]\njson = \"{}\"\n{tls}{extra}\n",
            self.path("manager.jsonl").display()
        );
        let text = if text.contains("[metrics]") {
            text
        } else {
            format!("{text}\n[metrics]\nenabled = false\n")
        };
        std::fs::write(&cfg, text).expect("manager config");
        let p = Proc::spawn(
            &self.m,
            &["manager", "-c", cfg.to_str().unwrap(), "--stats"],
            &self.path(&format!("manager.{}.err", unique_n())),
        );
        p.wait_log(&["manager listening"], Duration::from_secs(30));
        p
    }

    /// Starts an agent in `ns` (`a` or `b`), streaming to the manager at
    /// `manager_ip`, clock-sync responder on its management interface;
    /// waits until its hooks and responder are attached.
    pub fn agent(
        &self,
        side: char,
        manager_ip: &str,
        offset_ns: Option<i64>,
        extra: &[&str],
    ) -> Proc {
        let (ns, iface) = match side {
            'a' => (&self.a, "am"),
            _ => (&self.b, "bm"),
        };
        let manager = if manager_ip.contains(':') {
            format!("[{manager_ip}]:{MANAGER_PORT}")
        } else {
            format!("{manager_ip}:{MANAGER_PORT}")
        };
        let name = side.to_string();
        let off = offset_ns.map(|o| o.to_string());
        let mut args = vec![
            "host",
            "--netns",
            ns.name.as_str(),
            "--manager",
            manager.as_str(),
            "--agent-name",
            name.as_str(),
            "--clock-sync",
            iface,
            "--stats",
        ];
        if let Some(o) = &off {
            args.push("--test-clock-offset-ns");
            args.push(o);
        }
        let tls = self.agent_tls(&name);
        if !extra.contains(&"--manager-insecure") {
            args.extend(tls.iter().map(String::as_str));
        }
        args.extend_from_slice(extra);
        let p = Proc::spawn(
            ns,
            &args,
            &self.path(&format!("agent-{side}.{}.err", unique_n())),
        );
        p.wait_log(
            &["sock_rx", "attached", "clock-sync responder attached"],
            Duration::from_secs(30),
        );
        p
    }

    /// The manager's JSON lines so far.
    pub fn manager_json(&self) -> Vec<Value> {
        read_json(&self.path("manager.jsonl"))
    }

    /// Waits until the manager has `n` clock rounds with an estimate for
    /// each of `agents`.
    pub fn wait_rounds(&self, agents: &[&str], n: usize, limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            let j = self.manager_json();
            let ok = agents.iter().all(|a| rounds(&j, a).len() >= n);
            if ok {
                return;
            }
            assert!(
                Instant::now() < end,
                "fewer than {n} clock rounds for {agents:?}: {:?}",
                j.iter()
                    .filter(|v| v["type"] == "clock_sync")
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Forwarding counters of the delaying bridge, stopping it.
    pub fn stop_bridge(&mut self) -> Option<Vec<xdprobe_demo::bridge::LegStats>> {
        self.bridge
            .as_mut()
            .map(|b| b.stop().expect("bridge stats"))
    }
}

fn unique_n() -> u32 {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

pub fn read_json(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The clock rounds of `agent` that gave an estimate: (offset, bound) ns.
pub fn rounds(j: &[Value], agent: &str) -> Vec<(i64, u64)> {
    j.iter()
        .filter(|v| v["type"] == "clock_sync" && v["agent"] == agent)
        .filter_map(|v| {
            let e = &v["estimate"];
            Some((e["offset_ns"].as_i64()?, e["uncertainty_ns"].as_u64()?))
        })
        .collect()
}

/// Both directions of one connection timed by the application itself:
/// the client in `c` and the server in `s` each send `count` messages of
/// `size` bytes, one every `gap`, each with its own send time; each side
/// records when its read completed the other's. Returns (client → server,
/// server → client) timings, parsed from the streams.
pub fn timed_duplex(
    c: &NetNs,
    s: &NetNs,
    server: SocketAddr,
    count: u32,
    size: usize,
    gap: Duration,
) -> (Vec<Timed>, Vec<Timed>) {
    assert!(size >= HEADER);
    std::thread::scope(|sc| {
        let srv = serve_one(sc, s, server, |conn| duplex_end(conn, count, size, gap));
        let cli = connect_one(sc, c, server, |conn| duplex_end(conn, count, size, gap));
        let to_server = srv.join().expect("server");
        let to_client = cli.join().expect("client");
        (to_server, to_client)
    })
}

/// One end: a writer thread sends, this thread reads what the other end
/// sends. Returns the other end's messages as read here.
fn duplex_end(conn: TcpStream, count: u32, size: usize, gap: Duration) -> Vec<Timed> {
    conn.set_nodelay(true).ok();
    conn.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut w = conn.try_clone().expect("clone");
    std::thread::scope(|sc| {
        sc.spawn(move || {
            realtime();
            let mut msg = vec![0x5au8; size];
            for i in 0..count {
                let t = mono_ns();
                msg[0..8].copy_from_slice(&t.to_le_bytes());
                msg[8..12].copy_from_slice(&i.to_le_bytes());
                msg[12..16].copy_from_slice(&(size as u32).to_le_bytes());
                w.write_all(&msg).expect("write");
                std::thread::sleep(gap);
            }
            // Half-close: the other side's reads end after our last byte.
            let _ = w.shutdown(std::net::Shutdown::Write);
        });
        let mut r = conn;
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let read_ns = mono_ns();
            pending.extend_from_slice(&buf[..n]);
            while pending.len() >= size {
                let sent_ns = u64::from_le_bytes(pending[0..8].try_into().unwrap());
                let index = u32::from_le_bytes(pending[8..12].try_into().unwrap());
                out.push(Timed {
                    index,
                    sent_ns,
                    read_ns,
                    held_ns: 0,
                });
                pending.drain(..size);
            }
        }
        out
    })
}

/// The manager's flow reports (`host_stack`) of the data flow whose
/// destination port is `dport` (or source port `sport`, for the reverse).
pub fn reports(j: &[Value], sport: Option<u16>, dport: Option<u16>) -> Vec<&Value> {
    j.iter()
        .filter(|v| v["type"] == "host_stack")
        .filter(|v| sport.is_none_or(|p| v["sport"] == p))
        .filter(|v| dport.is_none_or(|p| v["dport"] == p))
        .filter(|v| v["complete"].as_u64().unwrap_or(0) > 0)
        .collect()
}

/// The one report of the flow (several if it was reported in parts: the
/// one that timed most).
pub fn flow(j: &[Value], sport: Option<u16>, dport: Option<u16>) -> &Value {
    let r = reports(j, sport, dport);
    r.into_iter()
        .max_by_key(|v| v["complete"].as_u64().unwrap_or(0))
        .unwrap_or_else(|| panic!("no report for {sport:?} -> {dport:?}: {j:#?}"))
}

/// GET /metrics from inside `ns`.
pub fn scrape(ns: &NetNs, addr: &str) -> String {
    let out = ns.exec(&[
        "curl",
        "-sf",
        "--max-time",
        "5",
        &format!("http://{addr}/metrics"),
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the first sample line starting with `prefix`.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
}

/// The clock-sync programs loaded now (responders and the manager's
/// pass-throughs; the kernel keeps 15 bytes of a program's name), as
/// `name#id` (bpftool): a test compares them with the list it took when
/// it started, so another user's programs (a second session, a
/// benchmark) are never counted as ours.
pub fn clocksync_programs() -> Vec<String> {
    let out = std::process::Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]));
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p["name"].as_str()?, p["id"].as_u64()?)))
                .filter(|(n, _)| n.starts_with("xdprobe_clock"))
                .map(|(n, id)| format!("{n}#{id}"))
                .collect()
        })
        .unwrap_or_default()
}

/// The clock-sync programs loaded since `before` that are still loaded,
/// waiting up to 30 s for the kernel to free those of processes that
/// just exited (it frees a program after a grace period, which a loaded
/// machine can stretch past a few seconds).
pub fn clocksync_left(before: &[String]) -> Vec<String> {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let new: Vec<String> = clocksync_programs()
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        if new.is_empty() || std::time::Instant::now() > until {
            return new;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Each data frame's time in the bridge (ns), A→B and B→A, from captures
/// of both its ports: frames matched by (source, sequence number).
fn transit_samples(ra: &Path, rb: &Path, a_src: &str) -> (Vec<u64>, Vec<u64>) {
    let frames = |p: &std::path::Path| -> std::collections::HashMap<(String, u64), f64> {
        let o = std::process::Command::new("tshark")
            .args([
                "-n",
                "-r",
                p.to_str().unwrap(),
                "-Y",
                "tcp.len > 0",
                "-T",
                "fields",
            ])
            .args([
                "-e",
                "frame.time_epoch",
                "-e",
                "ip.src",
                "-e",
                "ipv6.src",
                "-e",
                "tcp.seq_raw",
            ])
            .output()
            .expect("tshark");
        let mut m = std::collections::HashMap::new();
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() < 4 {
                continue;
            }
            let src = if f[1].is_empty() { f[2] } else { f[1] };
            if let (Ok(t), Ok(seq)) = (f[0].parse::<f64>(), f[3].parse::<u64>()) {
                // The first sighting: a retransmission is not the frame.
                m.entry((src.to_owned(), seq)).or_insert(t);
            }
        }
        m
    };
    let (at_a, at_b) = (frames(ra), frames(rb));
    let (mut ab, mut ba) = (Vec::new(), Vec::new());
    for (k, &ta) in &at_a {
        if let Some(&tb) = at_b.get(k) {
            let d = ((tb - ta) * 1e9) as i64;
            if k.0 == a_src {
                ab.push(d as u64);
            } else {
                ba.push((-d) as u64);
            }
        }
    }
    (ab, ba)
}

/// Per direction, the median time a data frame spent in the bridge, from
/// captures of both its ports: frames matched by (source, sequence
/// number). `(A→B, B→A)` in µs.
pub fn bridge_transit_us(ra: &Path, rb: &Path, a_src: &str) -> (f64, f64) {
    let (ab, ba) = transit_samples(ra, rb, a_src);
    assert!(
        ab.len() > 50 && ba.len() > 50,
        "frames matched: {} {}",
        ab.len(),
        ba.len()
    );
    let us = |v: &[u64]| crate::host_support::median(v) as f64 / 1000.0;
    (us(&ab), us(&ba))
}

/// The median A→B transit of data frames through the bridge, in µs, for
/// traffic that carries data one way only.
pub fn bridge_transit_a_to_b_us(ra: &Path, rb: &Path, a_src: &str) -> f64 {
    let (ab, _) = transit_samples(ra, rb, a_src);
    assert!(ab.len() > 50, "frames matched A→B: {}", ab.len());
    crate::host_support::median(&ab) as f64 / 1000.0
}

/// tcpdump on `iface` in `ns`, writing every packet as it comes.
pub fn tcpdump(ns: &NetNs, iface: &str, filter: &str, out: &Path) -> Proc {
    let p = Proc::spawn_cmd(
        ns,
        "tcpdump",
        &[
            "-i",
            iface,
            // Every packet written as it comes: a stopped tcpdump must not
            // leave the last ones in its ring buffer.
            "--immediate-mode",
            "-U",
            "-s",
            "0",
            "-w",
            out.to_str().unwrap(),
            filter,
        ],
        &out.with_extension("err"),
    );
    p.wait_log(&["listening on"], Duration::from_secs(10));
    p
}
