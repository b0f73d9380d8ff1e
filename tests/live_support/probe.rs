//! Runs the real `xdprobe run` binary inside the probe namespace, as
//! systemd would run it, and talks to it only from outside: its metrics
//! endpoint, its JSON records, signals, its exit status.

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use serde_json::Value;

use super::{
    NetNs,
    topo::{ChildGuard, wait_for},
};

pub struct ProbeOpts<'a> {
    pub iface: &'a str,
    pub queues: u32,
    pub collectors: Vec<String>,
    pub metrics_port: u16,
    pub extra_args: Vec<&'a str>,
    pub idle_timeout: &'a str,
    /// `[flow] active_timeout`: interval records of long flows.
    pub active_timeout: &'a str,
    /// `[probe] user`: switch to this account after setup.
    pub user: Option<&'a str>,
    /// More config sections, appended as they are (e.g. `[host]`).
    pub extra_config: &'a str,
    /// More keys of the `[[interface]]` table (e.g. `handoff = "off"`).
    pub interface_extra: &'a str,
}

/// The usual run: interface `p1`, one queue, no collector, 300 s
/// timeouts, as root, nothing extra; a test sets what it changes (and
/// always its own `metrics_port`).
impl Default for ProbeOpts<'_> {
    fn default() -> Self {
        ProbeOpts {
            iface: "p1",
            queues: 1,
            collectors: Vec::new(),
            metrics_port: 0,
            extra_args: Vec::new(),
            idle_timeout: "300s",
            active_timeout: "300s",
            user: None,
            extra_config: "",
            interface_extra: "",
        }
    }
}

pub struct Probe {
    pub child: ChildGuard,
    pub json: PathBuf,
    pub log: PathBuf,
    pub metrics_port: u16,
}

pub fn config_text(o: &ProbeOpts<'_>) -> String {
    let queues: Vec<String> = (0..o.queues)
        .map(|q| format!("{{ queue = {q}, core = {} }}", q % 2))
        .collect();
    let collectors: Vec<String> = o.collectors.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        r#"[probe]
mode = "appliance"
log_interval = "1s"
{user}

[[interface]]
name = "{iface}"
xdp_mode = "native"
xsk_bind = "copy"
queues = [{queues}]
umem_frames = 16384
frame_size = 4096
rx_ring = 8192
fill_ring = 8192
completion_ring = 64
poll_timeout = "10ms"
{iface_extra}

[flow]
capacity = 65536
idle_timeout = "{idle}"
active_timeout = "{active}"
tcp_end_linger = "1s"

[export]
collectors = [{collectors}]

[metrics]
enabled = true
listen = "127.0.0.1:{port}"

{extra}
"#,
        iface = o.iface,
        queues = queues.join(", "),
        idle = o.idle_timeout,
        active = o.active_timeout,
        user = o
            .user
            .map(|u| format!("user = \"{u}\""))
            .unwrap_or_default(),
        collectors = collectors.join(", "),
        port = o.metrics_port,
        extra = o.extra_config,
        iface_extra = o.interface_extra,
    )
}

impl Probe {
    /// Starts the probe in `ns` and waits until it runs.
    pub fn start(ns: &NetNs, dir: &Path, o: &ProbeOpts<'_>) -> Probe {
        let cfg = dir.join("probe.toml");
        std::fs::write(&cfg, config_text(o)).expect("write config");
        let json = dir.join("records.jsonl");
        let log = dir.join("probe.log");
        let child = ns
            .command(env!("CARGO_BIN_EXE_xdprobe"))
            .arg("run")
            .arg("-c")
            .arg(&cfg)
            .arg("--json")
            .arg(&json)
            .args(&o.extra_args)
            .env("XDPROBE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("probe log"))
            .spawn()
            .expect("spawn xdprobe run");
        let mut p = Probe {
            child: ChildGuard::new(child),
            json,
            log,
            metrics_port: o.metrics_port,
        };
        let log = p.log.clone();
        wait_for(Duration::from_secs(20), "xdprobe running", || {
            if let Ok(Some(st)) = p.child.child().try_wait() {
                panic!(
                    "xdprobe run exited early ({st}):\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::fs::read_to_string(&log).is_ok_and(|s| s.contains("xdprobe running"))
        });
        p.child_check();
        p
    }

    fn child_check(&mut self) {
        if let Ok(Some(st)) = self.child.child().try_wait() {
            panic!("xdprobe exited: {st}\n{}", self.log_text());
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET /metrics from inside the probe's namespace.
    pub fn metrics(&self, ns: &NetNs) -> String {
        let port = self.metrics_port;
        ns.run(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect metrics");
            s.set_read_timeout(Some(Duration::from_secs(3)))
                .expect("timeout");
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
                .expect("request");
            let mut body = String::new();
            s.read_to_string(&mut body).expect("response");
            body
        })
    }

    /// SIGTERM, wait for a clean exit, return the JSON records.
    pub fn stop(mut self) -> (std::process::ExitStatus, Vec<Value>, String) {
        self.child.signal(libc::SIGTERM);
        let st = self.child.wait(Duration::from_secs(20), "xdprobe run");
        let recs = std::fs::read_to_string(&self.json)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (st, recs, self.log_text())
    }
}

/// Sum of a metric's samples whose label set contains `labels`.
pub fn metric(text: &str, name: &str, labels: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
