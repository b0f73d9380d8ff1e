//! The demo's collector: nfdump's `nfcapd` on loopback in the probe's
//! namespace, receiving the probe's IPFIX; read back with `nfdump` at the
//! end. Without nfdump installed, the probe exports to an IPFIX file
//! instead, and the demo says so.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::Context;
use serde_json::Value;

use super::{
    proc::{Child, Interrupt, in_path, run},
    topo::Netns,
};

/// IPFIX's port (RFC 7011 §10.3); the namespace is private, so no clash.
const PORT: u16 = 4739;
/// Where the probe writes IPFIX when nfcapd is not installed.
pub const FALLBACK_FILE: &str = "/tmp/xdprobe-demo.ipfix";
/// nfdump's columns for the demo: when, how long, who, flags, and both
/// directions' counters (nfdump reads the biflow's reverse counters as
/// "out").
const NFDUMP_FORMAT: &str = "fmt:%ts %td %pr %sap -> %dap %flg %ipkt %ibyt %opkt %obyt";

pub enum Collector {
    Nfcapd { child: Child, dir: PathBuf },
    File { path: PathBuf },
}

/// What the collector received.
pub struct Collected {
    /// Flow records in nfdump's JSON (`None` for the file fallback).
    pub flows: Option<usize>,
    /// Human-readable: nfdump's table, or where the file is.
    pub text: String,
}

impl Collector {
    /// Starts nfcapd in `ns` writing into `work/collector`, and waits until
    /// it listens.
    pub fn start(ns: &Netns, work: &Path, interrupt: &Interrupt) -> anyhow::Result<Collector> {
        if !(in_path("nfcapd") && in_path("nfdump")) {
            let _ = std::fs::remove_file(FALLBACK_FILE);
            return Ok(Collector::File {
                path: PathBuf::from(FALLBACK_FILE),
            });
        }
        let dir = work.join("collector");
        std::fs::create_dir_all(&dir).context("collector directory")?;
        let mut cmd = ns.command("nfcapd");
        cmd.args([
            "-b",
            "127.0.0.1",
            "-p",
            &PORT.to_string(),
            "-t",
            "3600",
            "-w",
        ])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(work.join("nfcapd.log")).context("nfcapd log")?);
        let mut child = Child::spawn("nfcapd", cmd)?;
        let pid = child.pid();
        interrupt.wait_for(Duration::from_secs(10), "nfcapd to listen", || {
            if let Some(st) = child.try_wait() {
                anyhow::bail!(
                    "nfcapd exited at start ({st}): {}",
                    std::fs::read_to_string(work.join("nfcapd.log")).unwrap_or_default()
                );
            }
            Ok(listens_udp(pid, PORT))
        })?;
        Ok(Collector::Nfcapd { child, dir })
    }

    /// The probe's `[export] collectors` entry.
    pub fn url(&self) -> String {
        match self {
            Collector::Nfcapd { .. } => format!("udp://127.0.0.1:{PORT}"),
            Collector::File { path } => format!("file://{}", path.display()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Collector::Nfcapd { .. } => {
                format!("nfcapd (nfdump) on 127.0.0.1:{PORT}/udp in the probe namespace, IPFIX")
            }
            Collector::File { path } => format!(
                "nfcapd is not installed (apt-get install nfdump): IPFIX goes to the file {}",
                path.display()
            ),
        }
    }

    /// Stops nfcapd (SIGINT: it closes its file) and reads what it got.
    pub fn finish(self) -> anyhow::Result<Collected> {
        match self {
            Collector::File { path } => {
                let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                Ok(Collected {
                    flows: None,
                    text: format!(
                        "no collector: the probe wrote IPFIX to {} ({size} bytes; decode it \
                         with libfixbuf's `ipfixDump --in FILE`). Install nfdump to see a \
                         collector's view.",
                        path.display()
                    ),
                })
            }
            Collector::Nfcapd { mut child, dir } => {
                if child.stop(libc::SIGINT, Duration::from_secs(10)).is_none() {
                    anyhow::bail!("nfcapd did not stop on SIGINT");
                }
                let json = run(&[
                    "nfdump".as_ref(),
                    "-R".as_ref(),
                    dir.as_os_str(),
                    "-o".as_ref(),
                    "json".as_ref(),
                ])?;
                let flows = count_flows(&json.stdout);
                let text = run(&[
                    "nfdump".as_ref(),
                    "-R".as_ref(),
                    dir.as_os_str(),
                    "-O".as_ref(),
                    "tstart".as_ref(),
                    "-o".as_ref(),
                    NFDUMP_FORMAT.as_ref(),
                ])?;
                Ok(Collected {
                    flows: Some(flows),
                    text: String::from_utf8_lossy(&text.stdout).trim_end().to_owned(),
                })
            }
        }
    }
}

/// Flow records in `nfdump -o json` output (an array of objects; other
/// record types, if any, are not flows).
fn count_flows(json: &[u8]) -> usize {
    match serde_json::from_slice::<Value>(json) {
        Ok(Value::Array(a)) => a
            .iter()
            .filter(|r| {
                r.get("type")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t == "FLOW")
            })
            .count(),
        _ => 0,
    }
}

/// True when process `pid`'s network namespace has a UDP socket bound to
/// `port` (`/proc/PID/net/udp` is that namespace's table).
fn listens_udp(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    std::fs::read_to_string(format!("/proc/{pid}/net/udp")).is_ok_and(|t| {
        t.lines().skip(1).any(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|local| local.ends_with(&want))
        })
    })
}
