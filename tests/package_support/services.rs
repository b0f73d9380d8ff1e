//! The installed units' commands started as systemd would start them
//! (`sandbox`), against real traffic: the daemon captures frames sent over
//! a veth in namespaces and writes its records where the unit lets it; the
//! manager serves its metrics with no capability at all.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::sandbox::Sandbox;
use super::unit::{self, Unit};
use super::{cap_mask, proc_status};
use crate::live_support::{NetNs, frames, probe::metric};
/// Polls until a condition or a limit (the test kit's).
pub use xdprobe_test_support::wait_for;

/// One started command: the child and its log (the journal's stand-in).
pub struct Started {
    pub child: Child,
    pub log: PathBuf,
}

impl Started {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to `limit` for `needle` in the log; panics with the log if
    /// the process exits first.
    pub fn wait_log(&mut self, needle: &str, limit: Duration) {
        let end = Instant::now() + limit;
        while !self.log_text().contains(needle) {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("exited ({st}) before {needle:?}:\n{}", self.log_text());
            }
            assert!(
                Instant::now() < end,
                "no {needle:?} within {limit:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends `sig` and waits up to `limit` for the exit.
    pub fn stop(mut self, sig: i32, limit: Duration) -> (ExitStatus, String) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
        let end = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return (st, self.log_text());
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                panic!("not stopped within {limit:?}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `argv` in the unit's sandbox, in `ns`, output appended to `log`.
pub fn start(sb: &Sandbox, argv: &[String], ns: &NetNs, log: &Path) -> Started {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log");
    let netns = PathBuf::from(format!("/run/netns/{}", ns.name));
    let child = sb
        .command(argv, Some(&netns))
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup"))
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "starting {argv:?} in the sandbox: {e} (ENOTRECOVERABLE: the mount script failed)\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        });
    Started {
        child,
        log: log.to_owned(),
    }
}

/// Runs every `key=` line of the unit (ExecStartPre, ExecReload) to the
/// end, in the sandbox; each must exit 0.
pub fn run_lines(u: &Unit, sb: &Sandbox, key: &str, mainpid: Option<u32>, ns: &NetNs, log: &Path) {
    for line in u.all(key) {
        let argv = unit::command(line, mainpid);
        let mut s = start(sb, &argv, ns, log);
        let st = s.child.wait().expect("wait");
        assert!(st.success(), "{key}={line}: {st}\n{}", s.log_text());
    }
}

/// GET /metrics on 127.0.0.1:`port` inside `ns`; the body.
pub fn scrape(ns: &NetNs, port: u16) -> String {
    ns.run(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect metrics");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
            .expect("request");
        let mut body = String::new();
        s.read_to_string(&mut body).expect("response");
        assert!(body.starts_with("HTTP/1.0 200"), "{body}");
        body
    })
}

/// What a process runs with, as the kernel shows it.
pub struct Creds {
    pub uid: u32,
    pub cap_eff: u64,
    pub cap_bnd: u64,
    pub no_new_privs: bool,
    pub seccomp: bool,
}

pub fn creds(pid: u32) -> Creds {
    let hex = |f: &str| u64::from_str_radix(&proc_status(pid, f), 16).expect("hex");
    Creds {
        uid: proc_status(pid, "Uid")
            .split_whitespace()
            .next()
            .and_then(|u| u.parse().ok())
            .expect("uid"),
        cap_eff: hex("CapEff"),
        cap_bnd: hex("CapBnd"),
        no_new_privs: proc_status(pid, "NoNewPrivs") == "1",
        seccomp: proc_status(pid, "Seccomp") == "2",
    }
}

/// The unit's bounding set as a mask.
pub fn bounding(u: &Unit) -> u64 {
    cap_mask(&u.words("CapabilityBoundingSet"))
}

/// Sends the crafted frames of every encapsulation from `tx_dev` in `tx`;
/// returns how many reach a worker (all but the ARP frame).
pub fn send_frames(tx: &NetNs, tx_dev: &str) -> u64 {
    let all = frames::all_frames();
    tx.run(|| frames::send_raw(tx_dev, &all));
    (all.len() - 1) as u64
}

/// The frames the daemon's workers read, from its endpoint.
pub fn rx_frames(ns: &NetNs, port: u16) -> u64 {
    metric(&scrape(ns, port), "xdprobe_worker_rx_frames_total", "")
}
