//! Helpers of the package test: dpkg/apt on the running system (one test
//! at a time per machine), what the file system holds of the package, and
//! running a unit's commands as systemd would (`unit`, `sandbox`,
//! `seccomp`).
#![allow(dead_code, reason = "not every test binary uses every helper")]

pub mod sandbox;
pub mod seccomp;
pub mod services;
pub mod unit;

use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};

pub const PACKAGE: &str = "xdprobe";

/// Holds an exclusive lock on the machine's package state for the test's
/// life: two checkouts testing at once would install over each other.
pub struct MachineLock(File);

pub fn lock() -> MachineLock {
    let f = File::create("/run/lock/xdprobe-package-test.lock").expect("lock file");
    // SAFETY: flock on a file descriptor we own; blocks until granted.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    MachineLock(f)
}

/// Runs a command; its output, or a panic with both streams on failure.
pub fn run(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("spawning {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn stdout(args: &[&str]) -> String {
    String::from_utf8_lossy(&run(args).stdout).into_owned()
}

/// apt-get with the lock wait other package tools on this machine need.
pub fn apt(args: &[&str]) -> Output {
    let mut full = vec![
        "apt-get",
        "-y",
        "-q",
        "-o",
        "DPkg::Lock::Timeout=300",
        "--no-install-recommends",
    ];
    full.extend_from_slice(args);
    run(&full)
}

/// dpkg's view of the package: `None` when dpkg knows nothing of it,
/// else its status word (`installed`, `config-files`, ...).
pub fn dpkg_status() -> Option<String> {
    let o = Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Status}", PACKAGE])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    (o.status.success() && !s.is_empty() && s != "not-installed").then_some(s)
}

/// Purges the package if dpkg knows it (a previous run's leftovers).
pub fn purge_if_present() {
    if dpkg_status().is_some() {
        eprintln!("purging an xdprobe package left installed before this test");
        apt(&["purge", PACKAGE]);
    }
}

/// The package installed for the test's duration: purged on drop, also
/// when the test fails half way.
pub struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        if dpkg_status().is_some() {
            let _ = Command::new("apt-get")
                .args([
                    "-y",
                    "-q",
                    "-o",
                    "DPkg::Lock::Timeout=300",
                    "purge",
                    PACKAGE,
                ])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdin(Stdio::null())
                .status();
        }
    }
}

/// Every path named like the package under the system's directories
/// (not /tmp, /run, /proc, /sys: scratch and other tests' business).
pub fn named_paths() -> BTreeSet<String> {
    find(&[
        "/etc",
        "/usr",
        "/var",
        "/opt",
        "/srv",
        "-xdev",
        "-path",
        "/var/tmp",
        "-prune",
        "-o",
        "-name",
        "*xdprobe*",
        "-print",
    ])
}

/// The paths find(1) prints for `args`.
fn find<T: FromIterator<String>>(args: &[&str]) -> T {
    let out = Command::new("find").args(args).output().expect("find");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Paths owned by `uid` under the system's directories.
pub fn owned_by(uid: u32) -> Vec<String> {
    let uid = uid.to_string();
    find(&[
        "/etc", "/usr", "/var", "/opt", "/srv", "/run", "-xdev", "-uid", &uid, "-print",
    ])
}

/// (mode & 0o7777, owner name, group name) of `path`.
pub fn stat(path: &str) -> (u32, String, String) {
    let s = stdout(&["stat", "-c", "%a %U %G", path]);
    let mut w = s.split_whitespace();
    let mode = u32::from_str_radix(w.next().expect("mode"), 8).expect("octal");
    (
        mode,
        w.next().expect("user").to_owned(),
        w.next().expect("group").to_owned(),
    )
}

/// A field of /proc/PID/status (`CapEff`, `Uid`, `Seccomp`, ...).
pub fn proc_status(pid: u32, field: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("{field} not in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

/// The capability mask of names like `CAP_BPF`.
pub fn cap_mask(names: &[String]) -> u64 {
    names.iter().fold(0, |m, n| {
        let bit = match n.as_str() {
            "CAP_NET_ADMIN" => 12,
            "CAP_NET_RAW" => 13,
            "CAP_PERFMON" => 38,
            "CAP_BPF" => 39,
            other => panic!("capability {other} not known to the test"),
        };
        m | (1u64 << bit)
    })
}

/// Replaces `from` by `to` in `path`, which must contain it exactly once
/// (an edit that no longer applies fails the test).
pub fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("read config");
    assert_eq!(
        text.matches(from).count(),
        1,
        "{}: expected one {from:?}",
        path.display()
    );
    std::fs::write(path, text.replace(from, to)).expect("write config");
}
