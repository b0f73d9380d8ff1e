//! Helpers for the host-side tests: two namespaces joined by a veth pair
//! with the kernel's default offloads (TSO/GSO on, as the issue demands),
//! the real `xdprobe` binary as the probe, and applications that time
//! themselves (the independent reference).
#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses a different subset"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::live_support::{NetNs, neigh, sh, topo::ChildGuard};

mod apps;
mod loaded;
pub mod probed;
mod reports;

pub use apps::*;
pub use loaded::*;
pub use reports::*;

pub const CLIENT_IP: &str = "192.0.2.1";
pub const SERVER_IP: &str = "192.0.2.2";
pub const CLIENT_IP6: &str = "2001:db8::1";
pub const SERVER_IP6: &str = "2001:db8::2";

/// Host tests run one at a time: they count the programs loaded on the
/// whole kernel, and each probe watches every flow of its ports.
pub use xdprobe_test_support::serial;

/// `CLOCK_MONOTONIC` in ns: the clock the kernel programs stamp with.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Client namespace `c` (c0: 192.0.2.1, 2001:db8::1) and server namespace
/// `s` (s0: 192.0.2.2, 2001:db8::2), one veth pair, offloads as the kernel
/// sets them, static neighbours.
pub struct Pair {
    pub c: NetNs,
    pub s: NetNs,
}

impl Pair {
    pub fn new() -> Pair {
        let c = NetNs::new("hsc");
        let s = NetNs::new("hss");
        sh(&[
            "ip", "-n", &c.name, "link", "add", "c0", "type", "veth", "peer", "name", "s0",
            "netns", &s.name,
        ]);
        for (ns, dev, v4, v6) in [
            (&c, "c0", CLIENT_IP, CLIENT_IP6),
            (&s, "s0", SERVER_IP, SERVER_IP6),
        ] {
            ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0"]);
            ns.exec(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{dev}.disable_ipv6=0"),
            ]);
            ns.exec(&["ip", "addr", "add", &format!("{v4}/24"), "dev", dev]);
            ns.exec(&[
                "ip",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            ns.exec(&["ip", "link", "set", dev, "up"]);
        }
        let cmac = c.mac("c0");
        let smac = s.mac("s0");
        for (ns, dev, ip, mac) in [
            (&c, "c0", SERVER_IP, &smac),
            (&c, "c0", SERVER_IP6, &smac),
            (&s, "s0", CLIENT_IP, &cmac),
            (&s, "s0", CLIENT_IP6, &cmac),
        ] {
            neigh(ns, dev, ip, mac);
        }
        Pair { c, s }
    }

    /// The namespace's inode (what the probe reports as `netns`).
    pub fn inode(ns: &NetNs) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/run/netns/{}", ns.name))
            .expect("netns file")
            .ino()
    }
}

/// A running `xdprobe host`, stopped with SIGTERM on [`HostProbe::stop`]
/// (killed on drop if a test fails first).
pub struct HostProbe {
    child: ChildGuard,
    pub json: PathBuf,
    stderr: PathBuf,
}

impl HostProbe {
    /// Starts `xdprobe host ARGS --json FILE` and waits until every layer
    /// is attached.
    pub fn start(dir: &Path, args: &[&str]) -> HostProbe {
        let json = dir.join("host.jsonl");
        let stderr = dir.join("host.err");
        let child = Command::new(env!("CARGO_BIN_EXE_xdprobe"))
            .arg("host")
            .args(args)
            .arg("--json")
            .arg(&json)
            .env("XDPROBE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("spawn xdprobe host");
        let mut p = HostProbe {
            child: ChildGuard::new(child),
            json,
            stderr,
        };
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let err = std::fs::read_to_string(&p.stderr).unwrap_or_default();
            if err.contains("sock_rx") && err.contains("attached") {
                break;
            }
            if let Some(st) = p.child.child().try_wait().ok().flatten() {
                panic!("xdprobe host exited early ({st}): {err}");
            }
            assert!(Instant::now() < end, "xdprobe host not attached: {err}");
            std::thread::sleep(Duration::from_millis(20));
        }
        p
    }

    /// [`HostProbe::start`] watching `port`, timing one byte in
    /// `sample_bytes` (0: every message's last byte), with `extra` args.
    pub fn on_port(dir: &Path, port: u16, sample_bytes: &str, extra: &[&str]) -> HostProbe {
        let p = port.to_string();
        let head = ["--port", p.as_str(), "--sample-bytes", sample_bytes];
        HostProbe::start(dir, &[&head[..], extra].concat())
    }

    /// SIGTERM, wait, and the reports it wrote.
    pub fn stop(self) -> Vec<Value> {
        self.stop_with_stderr().0
    }

    /// As [`HostProbe::stop`], with what it printed on stderr.
    pub fn stop_with_stderr(mut self) -> (Vec<Value>, String) {
        self.child.signal(libc::SIGTERM);
        let st = self.child.wait(Duration::from_secs(60), "xdprobe host");
        let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(st.success(), "xdprobe host failed ({st}): {err}");
        let reports = std::fs::read_to_string(&self.json)
            .expect("json output")
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        (reports, err)
    }

    /// The probe's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}
