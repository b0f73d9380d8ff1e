//! The live-capture test bench: a client and a server talking through a
//! monitored link, with the link mirrored (as a switch's SPAN port would)
//! to the probe's own interface.
//!
//! ```text
//!  ns C            ns M                                               ns S
//!  c0 192.0.2.1 -- c1 [leg A] m0 ===== m1 [leg B] s1 -------------- s0 192.0.2.2
//!                             |  tcpdump here (the reference capture)
//!                             | tc mirred (ingress + egress)
//!                             p0 ---------------- p1 (ns P): XDP + AF_XDP, xdprobe run
//! ```
//!
//! Leg A/B are the project's own impairing bridge (`xdprobe demo bridge`,
//! `demo/src/bridge.rs`: seeded delay, loss, reordering, duplication) or,
//! without impairment, Linux bridges. Leg A runs on CPU 0 and
//! leg B on CPU 1, and XPS maps p0's TX queue i to CPU i: client→server
//! frames (sent on m0 by leg A) land on p1's RX queue 0 and server→client
//! frames (received on m0 from leg B's CPU) on queue 1, so with two queues
//! the two directions of every connection meet different workers.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::{NetNs, VethOpts, addr, neigh, veth};

pub const CLIENT_IP: &str = "192.0.2.1";
pub const SERVER_IP: &str = "192.0.2.2";

/// Impairment of the two legs, each applied to both directions: the
/// client leg (client ↔ tap) delays and drops, the server leg (tap ↔
/// server) delays, drops, reorders and duplicates.
#[derive(Clone, Copy, Debug, Default)]
pub struct Impair {
    pub client_delay_ms: f64,
    pub client_loss_pct: f64,
    pub server_delay_ms: f64,
    pub loss_pct: f64,
    pub reorder_pct: f64,
    pub dup_pct: f64,
    pub seed: u64,
}

pub struct Bench {
    pub c: NetNs,
    pub m: NetNs,
    pub s: NetNs,
    pub p: NetNs,
    pub dir: PathBuf,
    /// Background processes, killed (then reaped) on drop, the last
    /// started first.
    pub children: Vec<ChildGuard>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        while self.children.pop().is_some() {}
        // Namespaces go when their NetNs fields drop, after this.
    }
}

impl Bench {
    /// Builds the topology; `queues` RX queues on the probe's interface.
    pub fn new(queues: u32, impair: Option<Impair>, dir: &Path) -> Bench {
        let mut b = Bench::unbridged(queues, dir);
        match impair {
            Some(i) => b.start_impair(i),
            None => {
                for (br, a, z) in [("bra", "c1", "m0"), ("brb", "m1", "s1")] {
                    b.m.exec(&["ip", "link", "add", br, "type", "bridge"]);
                    b.m.exec(&["ip", "link", "set", a, "master", br]);
                    b.m.exec(&["ip", "link", "set", z, "master", br]);
                    b.m.exec(&["ip", "link", "set", br, "up"]);
                }
            }
        }
        b
    }

    /// The topology with legs A (c1–m0) and B (m1–s1) left open, for a
    /// bridge the caller runs in `m` (their ports are promiscuous).
    pub fn unbridged(queues: u32, dir: &Path) -> Bench {
        let c = NetNs::new("lvc");
        let m = NetNs::new("lvm");
        let s = NetNs::new("lvs");
        let p = NetNs::new("lvp");
        veth(&c, "c0", &m, "c1", VethOpts::default());
        veth(&s, "s0", &m, "s1", VethOpts::default());
        veth(&m, "m0", &m, "m1", VethOpts::default());
        veth(&m, "p0", &p, "p1", VethOpts { queues });
        addr(&c, "c0", "192.0.2.1/24");
        addr(&s, "s0", "192.0.2.2/24");
        neigh(&c, "c0", SERVER_IP, &s.mac("s0"));
        neigh(&s, "s0", CLIENT_IP, &c.mac("c0"));
        // Mirror both directions of m0 to p0, as a SPAN port would.
        m.exec(&["tc", "qdisc", "add", "dev", "m0", "clsact"]);
        for dir in ["ingress", "egress"] {
            m.exec(&[
                "tc", "filter", "add", "dev", "m0", dir, "protocol", "all", "u32", "match", "u32",
                "0", "0", "action", "mirred", "egress", "mirror", "dev", "p0",
            ]);
        }
        // XPS only exists on multi-queue devices.
        for q in (0..queues).filter(|_| queues > 1) {
            let mask = format!("{:x}", 1u32 << (q % 2));
            m.exec(&[
                "sh",
                "-c",
                &format!("echo {mask} > /sys/class/net/p0/queues/tx-{q}/xps_cpus"),
            ]);
        }
        // A user-space bridge's ports receive frames addressed to the far
        // ends (a Linux bridge sets this itself).
        for dev in ["c1", "m0", "m1", "s1"] {
            m.exec(&["ip", "link", "set", dev, "promisc", "on"]);
        }
        Bench {
            c,
            m,
            s,
            p,
            dir: dir.to_owned(),
            children: Vec::new(),
        }
    }

    /// One `xdprobe demo bridge` process per leg, leg A pinned to CPU 0 and
    /// leg B to CPU 1 (see the module doc); returns once both forward.
    fn start_impair(&mut self, i: Impair) {
        let legs = [
            (
                "0",
                "c1",
                "m0",
                "client_leg",
                i.client_delay_ms,
                i.client_loss_pct,
                0.0,
                0.0,
                i.seed * 10 + 1,
            ),
            (
                "1",
                "m1",
                "s1",
                "server_leg",
                i.server_delay_ms,
                i.loss_pct,
                i.reorder_pct,
                i.dup_pct,
                i.seed * 10 + 2,
            ),
        ];
        let mut ready = Vec::new();
        for (cpu, a, z, tag, delay, loss, reorder, dup, seed) in legs {
            let r = self.dir.join(format!("ready_{tag}"));
            let child = self
                .m
                .command("taskset")
                .args(["-c", cpu, env!("CARGO_BIN_EXE_xdprobe"), "demo", "bridge"])
                .args(["--a", a, "--b", z])
                .args(["--delay-ms", &delay.to_string()])
                .args(["--loss", &loss.to_string()])
                .args(["--reorder", &reorder.to_string()])
                .args(["--dup", &dup.to_string()])
                .args(["--seed", &seed.to_string(), "--seconds", "60"])
                .arg("--ready")
                .arg(&r)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(self.dir.join(format!("{tag}.log"))).expect("log"))
                .spawn()
                .expect("xdprobe demo bridge");
            self.children.push(ChildGuard::new(child));
            ready.push(r);
        }
        wait_for(Duration::from_secs(10), "bridge legs ready", || {
            ready.iter().all(|r| r.exists())
        });
    }

    /// Starts tcpdump on the monitored link; returns its index in
    /// `children` (stop it with [`Bench::stop_tcpdump`]).
    pub fn start_tcpdump(&mut self, out: &Path) -> usize {
        self.start_tcpdump_snap(out, 262_144)
    }

    /// The same with a snapshot length.
    pub fn start_tcpdump_snap(&mut self, out: &Path, snaplen: u32) -> usize {
        self.start_tcpdump_on("m0", &[], out, snaplen)
    }

    /// tcpdump on `dev` of the middle namespace with extra arguments (a
    /// direction, `-Q in`), writing `out`.
    pub fn start_tcpdump_on(
        &mut self,
        dev: &str,
        extra: &[&str],
        out: &Path,
        snaplen: u32,
    ) -> usize {
        let err = self.dir.join(format!(
            "tcpdump-{}.err",
            out.file_name().map_or("x".into(), |n| n.to_string_lossy())
        ));
        let child = self
            .m
            .command("tcpdump")
            .args([
                "-i",
                dev,
                "-n",
                "-s",
                &snaplen.to_string(),
                "-B",
                "32768",
                "-U",
                // Each packet written as it comes: a short capture stopped
                // by SIGINT would lose the buffer block not yet full.
                "--immediate-mode",
            ])
            .args(extra)
            .arg("-w")
            .arg(out)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).expect("tcpdump.err"))
            .spawn()
            .expect("tcpdump");
        self.children.push(ChildGuard::new(child));
        wait_for(Duration::from_secs(10), "tcpdump listening", || {
            std::fs::read_to_string(&err).is_ok_and(|s| s.contains("listening on"))
        });
        self.children.len() - 1
    }

    pub fn stop_tcpdump(&mut self, idx: usize) {
        if let Some(c) = self.children.get_mut(idx) {
            c.signal(libc::SIGINT);
            let _ = c.child().wait();
        }
    }
}

pub use xdprobe_test_support::{ChildGuard, TempDir, signal, wait_exit, wait_for};

/// Runs `ip netns exec NS cmd…` in the background.
pub fn spawn_in(ns: &NetNs, args: &[&str], log: &Path) -> Child {
    let mut c: Command = ns.command(args[0]);
    c.args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"));
    c.spawn()
        .unwrap_or_else(|e| panic!("spawning {args:?}: {e}"))
}
