//! Network namespaces removed even when a test fails (a drop guard), veth
//! pairs without offloads or ARP, and running code or commands inside a
//! namespace.

use std::{
    fs::File,
    os::fd::AsRawFd,
    process::{Command, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
};

/// Runs a command, panicking with its stderr when it fails.
pub fn sh(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("spawning {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a command, ignoring failure (clean-up paths, optional tuning).
pub fn sh_quiet(args: &[&str]) {
    let _ = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A short name unique to this process and call (interface names have 15
/// bytes at most).
pub fn unique(prefix: &str) -> String {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}{n}", std::process::id() % 100_000)
}

/// A network namespace, deleted on drop (which also deletes every veth
/// end inside it).
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    pub fn new(prefix: &str) -> NetNs {
        let name = unique(prefix);
        sh(&["ip", "netns", "add", &name]);
        let ns = NetNs { name };
        ns.exec(&[
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Runs a command inside the namespace; panics on failure.
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        sh(&full)
    }

    pub fn exec_quiet(&self, args: &[&str]) {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        sh_quiet(&full)
    }

    /// A `Command` that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `f` on a thread that has joined this namespace (network
    /// namespaces are per thread), so sockets, interface lookups and XDP
    /// attachment made by `f` happen inside it.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                enter(&path);
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Moves the current thread into the namespace for good (used by
    /// threads that live as long as the namespace).
    pub fn enter_current_thread(&self) {
        enter(&format!("/var/run/netns/{}", self.name));
    }

    pub fn mac(&self, dev: &str) -> String {
        let out = self.exec(&["cat", &format!("/sys/class/net/{dev}/address")]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        sh_quiet(&["ip", "netns", "del", &self.name]);
    }
}

/// Moves the calling thread into the namespace named `name` (for threads
/// that cannot borrow the [`NetNs`]).
pub fn enter_netns(name: &str) {
    enter(&format!("/var/run/netns/{name}"));
}

fn enter(path: &str) {
    let f = File::open(path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
    // SAFETY: a valid namespace fd; setns only changes this thread's
    // network namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
}

/// Options for a veth pair.
#[derive(Clone, Copy)]
pub struct VethOpts {
    /// RX/TX queues on each end.
    pub queues: u32,
}

impl Default for VethOpts {
    fn default() -> Self {
        VethOpts { queues: 1 }
    }
}

/// Creates veth `a_dev` in `a` and `b_dev` in `b`, offloads off (real
/// frames, as a NIC would deliver them), both up.
pub fn veth(a: &NetNs, a_dev: &str, b: &NetNs, b_dev: &str, opts: VethOpts) {
    let q = opts.queues.to_string();
    sh(&[
        "ip",
        "-n",
        &a.name,
        "link",
        "add",
        a_dev,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
        "type",
        "veth",
        "peer",
        "name",
        b_dev,
        "netns",
        &b.name,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
    ]);
    for (ns, dev) in [(a, a_dev), (b, b_dev)] {
        ns.exec_quiet(&[
            "ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off",
        ]);
        ns.exec(&["ip", "link", "set", dev, "up"]);
    }
}

/// Assigns `addr` (with prefix length) to `dev` in `ns`.
pub fn addr(ns: &NetNs, dev: &str, cidr: &str) {
    ns.exec(&["ip", "addr", "add", cidr, "dev", dev]);
}

/// Static neighbour entry: AF_XDP sockets swallow ARP, and a first-packet
/// ARP stall would disturb RTTs.
pub fn neigh(ns: &NetNs, dev: &str, ip: &str, mac: &str) {
    ns.exec(&[
        "ip",
        "neigh",
        "replace",
        ip,
        "lladdr",
        mac,
        "dev",
        dev,
        "nud",
        "permanent",
    ]);
}

/// `rx_packets` of `dev` as the kernel counts it.
pub fn rx_packets(ns: &NetNs, dev: &str) -> u64 {
    let out = ns.exec(&[
        "cat",
        &format!("/sys/class/net/{dev}/statistics/rx_packets"),
    ]);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}
