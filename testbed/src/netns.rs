//! Network namespaces deleted on drop (with every interface in them), veth
//! pairs without offloads, addresses, static neighbours, and threads that
//! join a namespace.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::cmd::{CmdError, run, run_quiet};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A short name unique to this process and call (interface names have 15
/// bytes at most).
pub fn unique(prefix: &str) -> String {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}{n}", std::process::id() % 100_000)
}

/// A named network namespace, deleted on drop (which also deletes every
/// interface inside it).
#[derive(Debug)]
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    /// Creates the namespace `name`: IPv6 off (no router solicitations or
    /// DAD on the links: only the traffic a run makes), loopback up.
    pub fn add(name: String) -> Result<NetNs, CmdError> {
        run(&["ip", "netns", "add", &name])?;
        // From here on a failure deletes it again.
        let ns = NetNs { name };
        ns.exec(&[
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])?;
        ns.exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `/var/run/netns/NAME`, for setns(2).
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// Runs a command inside the namespace to completion.
    pub fn exec(&self, args: &[&str]) -> Result<Output, CmdError> {
        run(&self.full(args))
    }

    /// Runs a command inside the namespace, ignoring its outcome.
    pub fn exec_quiet(&self, args: &[&str]) {
        run_quiet(&self.full(args))
    }

    fn full<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        full
    }

    /// A `Command` that runs `program` inside the namespace.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `f` on a thread that has joined this namespace (network
    /// namespaces are per thread), so sockets, interface lookups and XDP
    /// attachment made by `f` happen inside it.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, CmdError> {
        let path = self.path();
        std::thread::scope(|s| {
            s.spawn(|| {
                enter(&path)?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Moves the current thread into the namespace for good (threads that
    /// live as long as the namespace).
    pub fn enter_current_thread(&self) -> Result<(), CmdError> {
        enter(&self.path())
    }

    /// The MAC address of `dev` in this namespace.
    pub fn mac(&self, dev: &str) -> Result<String, CmdError> {
        let out = self.exec(&["cat", &format!("/sys/class/net/{dev}/address")])?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        run_quiet(&["ip", "netns", "del", &self.name]);
    }
}

/// Moves the calling thread into the namespace named `name` (threads that
/// cannot borrow the [`NetNs`]).
pub fn enter_netns(name: &str) -> Result<(), CmdError> {
    enter(&PathBuf::from("/var/run/netns").join(name))
}

fn enter(path: &std::path::Path) -> Result<(), CmdError> {
    let err = |source| CmdError::Setns {
        path: path.display().to_string(),
        source,
    };
    let f = File::open(path).map_err(err)?;
    // SAFETY: a valid namespace fd, open for the call; setns only changes
    // this thread's network namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Options for a veth pair.
#[derive(Clone, Copy, Debug)]
pub struct VethOpts {
    /// RX/TX queues on each end.
    pub queues: u32,
}

impl Default for VethOpts {
    fn default() -> Self {
        VethOpts { queues: 1 }
    }
}

/// Creates veth `a_dev` in `a` and `b_dev` in `b`, both up, offloads off:
/// whole, checksummed frames of at most the MTU, as a wire and a NIC
/// deliver them (a bridge reads and writes them as they are; XDP sees what
/// a NIC would give it).
pub fn veth(
    a: &NetNs,
    a_dev: &str,
    b: &NetNs,
    b_dev: &str,
    opts: VethOpts,
) -> Result<(), CmdError> {
    let q = opts.queues.to_string();
    run(&[
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
    ])?;
    for (ns, dev) in [(a, a_dev), (b, b_dev)] {
        ns.exec(&[
            "ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off",
        ])?;
        ns.exec(&["ip", "link", "set", dev, "up"])?;
    }
    Ok(())
}

/// Assigns `cidr` (address with prefix length) to `dev` in `ns`.
pub fn addr(ns: &NetNs, dev: &str, cidr: &str) -> Result<(), CmdError> {
    ns.exec(&["ip", "addr", "add", cidr, "dev", dev]).map(drop)
}

/// A permanent neighbour entry: frames cross a user-space bridge or reach
/// an AF_XDP socket, neither of which answers ARP, and a first-packet ARP
/// stall would disturb the RTTs measured.
pub fn neigh(ns: &NetNs, dev: &str, ip: &str, mac: &str) -> Result<(), CmdError> {
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
    ])
    .map(drop)
}

/// The MAC address of `dev` in `ns`.
pub fn mac(ns: &NetNs, dev: &str) -> Result<String, CmdError> {
    ns.mac(dev)
}

/// `rx_packets` of `dev` as the kernel counts it.
pub fn rx_packets(ns: &NetNs, dev: &str) -> Result<u64, CmdError> {
    let out = ns.exec(&[
        "cat",
        &format!("/sys/class/net/{dev}/statistics/rx_packets"),
    ])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0))
}
