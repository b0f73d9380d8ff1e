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

use anyhow::Context;
use xdprobe_testbed::{VethOpts, mac, neigh, run, run_quiet};

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
pub use xdprobe_testbed::NetNs as Netns;

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
        let ns =
            |role: &str| Netns::add(format!("{PREFIX}{pid}-{role}")).map_err(anyhow::Error::from);
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

/// A veth pair `a_dev` (in `a`) – `b_dev` (in `b`), one queue, offloads
/// off and up: the bridge reads and writes whole, checksummed frames of at
/// most the MTU, as a wire carries them.
fn veth(a: &Netns, a_dev: &str, b: &Netns, b_dev: &str) -> anyhow::Result<()> {
    xdprobe_testbed::veth(a, a_dev, b, b_dev, VethOpts::default())
        .with_context(|| format!("the veth pair {a_dev}-{b_dev}"))
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
