//! The capture rig: real kernel traffic (`traffic`) between a client and a
//! server namespace through the project's own impairing bridge (the bench of
//! `topo`), recorded by tcpdump on the link between the bridge's two legs.
//! It replaces nothing of the probe: it makes the captures the oracle tests
//! compare `xdprobe pcap` on.
//!
//! ```text
//!  client 192.0.2.1 ── [client leg: delay, loss] ── tcpdump ── [server leg: delay, loss,
//!                                                               reordering, duplication] ── server 192.0.2.2
//! ```
//!
//! With the tap between the legs, the server network time is about twice
//! the server leg's delay and the client network time twice the client
//! leg's.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use super::{
    require_root, require_tool,
    topo::{Bench, Impair},
    traffic::{self, Plan},
};

/// One capture's settings (defaults: 10 ms / 2 ms one-way delays on the
/// server / client leg, no impairment, 6 s of traffic).
#[derive(Clone, Debug)]
pub struct Rig {
    pub seconds: u64,
    pub server_delay_ms: f64,
    pub client_delay_ms: f64,
    pub loss_pct: f64,
    pub client_loss_pct: f64,
    pub reorder_pct: f64,
    pub dup_pct: f64,
    pub bulk_kbit: u32,
    pub short_flows: usize,
    pub seed: u64,
    /// tcpdump's snapshot length.
    pub snaplen: u32,
}

impl Default for Rig {
    fn default() -> Self {
        Rig {
            seconds: 6,
            server_delay_ms: 10.0,
            client_delay_ms: 2.0,
            loss_pct: 0.0,
            client_loss_pct: 0.0,
            reorder_pct: 0.0,
            dup_pct: 0.0,
            bulk_kbit: 20_000,
            short_flows: 0,
            seed: 1,
            snaplen: 262_144,
        }
    }
}

/// Whether the rig can run here (root for namespaces; the tools it drives);
/// skips loudly, never under CI=true.
pub fn can_run() -> bool {
    if !require_root("capture rig") {
        return false;
    }
    [
        "tshark", "tcpdump", "curl", "openssl", "ethtool", "taskset", "ss",
    ]
    .iter()
    .all(|t| require_tool(t))
}

impl Rig {
    fn impair(&self) -> Impair {
        Impair {
            client_delay_ms: self.client_delay_ms,
            client_loss_pct: self.client_loss_pct,
            server_delay_ms: self.server_delay_ms,
            loss_pct: self.loss_pct,
            reorder_pct: self.reorder_pct,
            dup_pct: self.dup_pct,
            seed: self.seed,
        }
    }

    fn plan(&self) -> Plan {
        Plan {
            bulk: Duration::from_secs(self.seconds.saturating_sub(3).max(1)),
            bulk_kbit: self.bulk_kbit,
            dns_seed: self.seed,
            short_flows: self.short_flows,
            ..Plan::default()
        }
    }

    /// The mixed traffic of [`traffic`], captured into `dir/name.pcap`.
    pub fn capture(&self, dir: &Path, name: &str) -> PathBuf {
        self.capture_with(dir, name, |b, plan| {
            let servers = traffic::start_servers(&b.s, plan, &b.dir);
            traffic::run_clients(&b.c, plan);
            drop(servers);
        })
    }

    /// Builds the bench, starts tcpdump, runs `traffic`, lets the last
    /// FIN/ACKs cross the delayed legs and stops tcpdump.
    ///
    /// A capture whose timestamps go back both by less and by more than
    /// the probe's 2 ms time-order window is made again (at most twice):
    /// tcpdump stamps on whichever vCPU takes the frame, and on a busy
    /// machine one can be late by more than 2 ms; the probe puts only the
    /// first kind in order, which no oracle tool mirrors (`tests/oracle`).
    pub fn capture_with(
        &self,
        dir: &Path,
        name: &str,
        traffic: impl Fn(&mut Bench, &Plan),
    ) -> PathBuf {
        let out = dir.join(format!("{name}.pcap"));
        for attempt in 1..=3 {
            let mut b = self.bench(dir, &format!("{name}.{attempt}"));
            let td = b.start_tcpdump_snap(&out, self.snaplen);
            let plan = self.plan();
            traffic(&mut b, &plan);
            self.settle();
            b.stop_tcpdump(td);
            drop(b);
            let (within, late) = order::inversions(&out).unwrap_or((false, false));
            if !(within && late) || attempt == 3 {
                break;
            }
            eprintln!(
                "capture {name}: tcpdump's timestamps go back both within and beyond 2 ms \
                 (a frame stamped late on a busy vCPU); capturing again"
            );
        }
        out
    }

    /// The bench alone (its files in `dir/name.work`), for scenarios that
    /// start tcpdump themselves.
    pub fn bench(&self, dir: &Path, name: &str) -> Bench {
        let work = dir.join(format!("{name}.work"));
        std::fs::create_dir_all(&work).expect("rig work dir");
        Bench::new(1, Some(self.impair()), &work)
    }

    /// Waits until the last segments have crossed both delayed legs.
    pub fn settle(&self) {
        std::thread::sleep(Duration::from_millis(
            (4.0 * (self.server_delay_ms + self.client_delay_ms)) as u64 + 300,
        ));
    }
}

use super::order;
