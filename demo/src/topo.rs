//! The demo's network: four namespaces named after this process, removed
//! when the [`Topology`] drops (and swept at the next start if this process
//! died without dropping it).
//!
//! ```text
//!  client ns        middle ns                                    server ns
//!  c0 192.0.2.1 ── c1 [bridge leg A] m0 ═══ m1 [bridge leg B] s1 ── s0 192.0.2.2
//!                  delay both ways,   │ tap    loss client→server
//!                  loss server→client │ (tc mirred, ingress + egress of m0)
//!                                     p0 ── p1 (probe ns): XDP + AF_XDP, nfcapd
//! ```
//!
//! The tap sits at the server's edge, like a probe in front of a data
//! centre: clients are `delay` away each way, the server next door. The
//! bridge drops frames only *after* the tap in either direction, so the
//! probe sees every segment that is later retransmitted.

use std::path::PathBuf;

use anyhow::Context;

use super::proc::{run, run_quiet};

/// Every name this demo gives a namespace starts with this.
pub const PREFIX: &str = "xdpdemo-";

pub const CLIENT_IP: &str = "192.0.2.1";
pub const SERVER_IP: &str = "192.0.2.2";
/// The probe's capture interface (in the probe namespace).
pub const PROBE_IFACE: &str = "p1";
/// The bridge's legs in the middle namespace: (client side, server side).
pub const LEG_A: (&str, &str) = ("c1", "m0");
pub const LEG_B: (&str, &str) = ("m1", "s1");

/// A named network namespace, deleted on drop (with every interface in it).
pub struct Netns {
    pub name: String,
}

impl Netns {
    fn add(name: String) -> anyhow::Result<Netns> {
        run(&["ip", "netns", "add", &name])?;
        let ns = Netns { name };
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
    pub fn exec(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full).map(drop)
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        run_quiet(&["ip", "netns", "del", &self.name]);
    }
}

/// The four namespaces; dropping it deletes them all.
pub struct Topology {
    pub client: Netns,
    pub middle: Netns,
    pub server: Netns,
    pub probe: Netns,
}

impl Topology {
    /// Builds the network. A failure part-way deletes what was made.
    pub fn build() -> anyhow::Result<Topology> {
        let pid = std::process::id();
        let ns = |role: &str| Netns::add(format!("{PREFIX}{pid}-{role}"));
        let t = Topology {
            client: ns("client")?,
            middle: ns("middle")?,
            server: ns("server")?,
            probe: ns("probe")?,
        };
        t.links().context("building the demo network")?;
        Ok(t)
    }

    fn links(&self) -> anyhow::Result<()> {
        let (c, m, s, p) = (&self.client, &self.middle, &self.server, &self.probe);
        veth(c, "c0", m, LEG_A.0)?;
        veth(m, LEG_A.1, m, LEG_B.0)?;
        veth(s, "s0", m, LEG_B.1)?;
        veth(m, "p0", p, PROBE_IFACE)?;
        c.exec(&["ip", "addr", "add", &format!("{CLIENT_IP}/24"), "dev", "c0"])?;
        s.exec(&["ip", "addr", "add", &format!("{SERVER_IP}/24"), "dev", "s0"])?;
        // The bridge forwards frames as they are: the ends must know each
        // other's MAC without ARP through it (ARP would only add a first-
        // packet stall to the RTTs).
        neigh(c, "c0", SERVER_IP, &mac(s, "s0")?)?;
        neigh(s, "s0", CLIENT_IP, &mac(c, "c0")?)?;
        // The bridge's ports receive frames addressed to the far ends.
        for dev in [LEG_A.0, LEG_A.1, LEG_B.0, LEG_B.1] {
            m.exec(&["ip", "link", "set", dev, "promisc", "on"])?;
        }
        // The tap: both directions of m0 copied to p0, as a switch's SPAN
        // port would.
        m.exec(&["tc", "qdisc", "add", "dev", LEG_A.1, "clsact"])?;
        for dir in ["ingress", "egress"] {
            m.exec(&[
                "tc", "filter", "add", "dev", LEG_A.1, dir, "protocol", "all", "u32", "match",
                "u32", "0", "0", "action", "mirred", "egress", "mirror", "dev", "p0",
            ])?;
        }
        Ok(())
    }
}

/// A veth pair `a_dev` (in `a`) – `b_dev` (in `b`), offloads off and up.
/// Offloads off: the bridge reads and writes whole, checksummed frames of
/// at most the MTU, as a wire carries them.
fn veth(a: &Netns, a_dev: &str, b: &Netns, b_dev: &str) -> anyhow::Result<()> {
    run(&[
        "ip", "-n", &a.name, "link", "add", a_dev, "type", "veth", "peer", "name", b_dev, "netns",
        &b.name,
    ])?;
    for (ns, dev) in [(a, a_dev), (b, b_dev)] {
        ns.exec(&[
            "ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off",
        ])
        .with_context(|| format!("turning offloads off on {dev}"))?;
        ns.exec(&["ip", "link", "set", dev, "up"])?;
    }
    Ok(())
}

fn mac(ns: &Netns, dev: &str) -> anyhow::Result<String> {
    let out = run(&[
        "ip",
        "netns",
        "exec",
        &ns.name,
        "cat",
        &format!("/sys/class/net/{dev}/address"),
    ])?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn neigh(ns: &Netns, dev: &str, ip: &str, mac: &str) -> anyhow::Result<()> {
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
}

/// Deletes namespaces a previous demo left behind (it was killed before it
/// could clean up): ours by prefix, whose owner process is gone. Returns
/// their names.
pub fn sweep_stale() -> Vec<String> {
    let Ok(out) = run(&["ip", "netns", "list"]) else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(owner) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !process_alive(owner) {
            kill_all_in(name);
            run_quiet(&["ip", "netns", "del", name]);
            swept.push(name.to_owned());
        }
    }
    swept
}

/// Kills the processes still inside a stale namespace (they would keep
/// it alive after `ip netns del`).
fn kill_all_in(ns: &str) {
    let Ok(out) = run(&["ip", "netns", "pids", ns]) else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<libc::pid_t>().ok())
        .filter(|&p| p > 1)
    {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid was
        // just listed as a member of our own stale namespace.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// True when `pid` is a live `xdprobe` process (a reused pid of another
/// program does not keep a stale namespace alive).
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "xdprobe")
}
