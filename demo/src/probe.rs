//! The probe itself: the real `xdprobe run` (this same binary) started in
//! the probe namespace on the mirror port, as systemd would start it, with
//! a config written for the demo. Stopped with SIGTERM, which detaches XDP,
//! flushes every flow to the exporter and the JSON file, and exits 0.

use std::{
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    time::Duration,
};

use anyhow::{Context, bail};

use super::{
    proc::{Child, Interrupt},
    topo::{Netns, PROBE_IFACE},
};

/// The demo's config: appliance mode on the mirror port, one queue, XDP in
/// native mode (veth has it) and AF_XDP in copy mode (veth has no
/// zero-copy). Idle timeout longer than the demo, so every flow is reported
/// at its TCP end or at shutdown, whole.
pub fn config_text(collector: &str, host: Option<&HostWatch>) -> String {
    let mut text = format!(
        r#"# Written by `xdprobe demo`.
[probe]
mode = "appliance"
log_interval = "60s"

[[interface]]
name = "{PROBE_IFACE}"
xdp_mode = "native"
xsk_bind = "copy"
queues = [{{ queue = 0, core = 0 }}]
umem_frames = 16384
frame_size = 2048
rx_ring = 8192
fill_ring = 8192
completion_ring = 64
poll_timeout = "10ms"

[flow]
capacity = 65536
idle_timeout = "300s"
active_timeout = "300s"
tcp_end_linger = "1s"

[export]
collectors = ["{collector}"]
template_refresh = "10s"

[metrics]
enabled = false
"#
    );
    if let Some(h) = host {
        text.push_str(&h.config());
    }
    text
}

/// The `[host]` section: stack layers and connect latency of the demo's
/// TCP flows in the client and server namespaces (the bridge's namespace
/// only forwards).
pub struct HostWatch {
    netns: Vec<String>,
}

impl HostWatch {
    pub fn new(netns: &[&str]) -> Self {
        HostWatch {
            netns: netns.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    fn config(&self) -> String {
        let ns: Vec<String> = self.netns.iter().map(|n| format!("{n:?}")).collect();
        format!(
            "\n[host]\nstack = true\nconnlat = true\n# One timed byte per 10 full segments.\nsample_bytes = 14480\n\n[host.filter]\nports = [{}, {}, {}]\nnetns = [{}]\n",
            super::traffic::HTTP_PORT,
            super::traffic::UPLOAD_PORT,
            super::traffic::DOWNLOAD_PORT,
            ns.join(", ")
        )
    }
}

pub struct Probe {
    child: Child,
    pub log: PathBuf,
    pub json: PathBuf,
}

/// What the stopped probe left.
pub struct Outcome {
    /// `None` when it had to be killed.
    pub status: Option<ExitStatus>,
    /// Its JSON records, one per line, as written.
    pub lines: Vec<String>,
    /// Its last counters (`key=value …`) and its exporter's.
    pub capture_stats: Option<String>,
    pub exporter_stats: Option<String>,
    pub log: String,
}

impl Probe {
    /// Starts the probe and waits until it captures (XDP attached).
    pub fn start(
        ns: &Netns,
        exe: &Path,
        dir: &Path,
        collector: &str,
        host: Option<&HostWatch>,
        interrupt: &Interrupt,
    ) -> anyhow::Result<Probe> {
        let cfg = dir.join("probe.toml");
        std::fs::write(&cfg, config_text(collector, host)).context("writing probe.toml")?;
        let json = dir.join("records.jsonl");
        let log = dir.join("probe.log");
        let mut cmd = ns.command(exe);
        cmd.arg("run")
            .arg("-c")
            .arg(&cfg)
            .arg("--json")
            .arg(&json)
            .env("XDPROBE_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).context("probe log")?);
        let mut p = Probe {
            child: Child::spawn("xdprobe run", cmd)?,
            log,
            json,
        };
        let res = interrupt.wait_for(Duration::from_secs(30), "the probe to start", || {
            if let Some(st) = p.child.try_wait() {
                let hint = if host.is_some() {
                    "\n(if it names a missing kernel hook, `xdprobe demo --no-host` runs without the host agent)"
                } else {
                    ""
                };
                bail!(
                    "xdprobe run exited at start ({st}):\n{}{hint}",
                    tail(&p.log_text(), 20)
                );
            }
            Ok(p.log_text().contains("xdprobe running"))
        });
        res?;
        Ok(p)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait for the flush and exit (killed after 30 s).
    pub fn stop(mut self) -> Outcome {
        let status = self.child.stop(libc::SIGTERM, Duration::from_secs(30));
        let lines = std::fs::read_to_string(&self.json)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect();
        let log = self.log_text();
        Outcome {
            status,
            lines,
            capture_stats: last_after(&log, "capture stats"),
            exporter_stats: last_after(&log, "exporter stopped"),
            log,
        }
    }
}

/// The text after `marker` on the last log line containing it.
fn last_after(log: &str, marker: &str) -> Option<String> {
    log.lines()
        .rev()
        .find_map(|l| l.split_once(marker).map(|(_, rest)| rest.trim().to_owned()))
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines
        .get(lines.len().saturating_sub(n)..)
        .unwrap_or_default()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_config_is_valid() {
        let dir = std::env::temp_dir().join(format!("xdpdemo-cfg-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("probe.toml");
        std::fs::write(&p, config_text("udp://127.0.0.1:4739", None)).unwrap();
        let cfg = xdprobe_config::load(&p);
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = cfg.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.interfaces.len(), 1);
        assert_eq!(
            cfg.export.collectors,
            vec!["udp://127.0.0.1:4739".to_string()]
        );
    }

    #[test]
    fn log_helpers() {
        let log = "a capture stats x=1\nb\nc capture stats x=2 y=3\n";
        assert_eq!(last_after(log, "capture stats").as_deref(), Some("x=2 y=3"));
        assert_eq!(tail(log, 2), "b\nc capture stats x=2 y=3");
        assert_eq!(last_after(log, "nope"), None);
    }
}
