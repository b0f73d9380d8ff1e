//! The project's correctness oracle: Wireshark's own analysis (tshark) of a
//! capture, as per-frame facts (`tshark`) and per-flow reference values
//! (`flows`), plus the named rules where the NPM spec and Wireshark differ
//! on a packet (`rules`, see `docs/npm-vs-wireshark.md`). Expected values
//! are always computed from tshark at test time, never typed in.
#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod flows;
pub mod rules;
pub mod tshark;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One capture as tshark sees it.
pub struct Oracle {
    /// Per flow, `oracle.py`'s shape (see [`flows::summarize`]).
    pub flows: Vec<Value>,
    /// Frames per flow name (`tcp:N`, `udp:N`, …), in frame order.
    pub packets: BTreeMap<String, Vec<tshark::Pkt>>,
    /// Some frame is an ICMP error.
    pub icmp_errors: bool,
}

/// Runs tshark once over `file`. `fast`: no TCP reassembly (long bulk
/// captures; analysis flags are the same).
///
/// A file with timestamp inversions within 2 ms is analysed in time
/// order: the probe reads files so (`dataplane/src/source/reorder.rs`), and
/// Wireshark's analysis of the file order would disagree with it on those
/// packets for that reason alone. `reordercap` (Wireshark's own tool) makes
/// the time-ordered copy tshark reads; frame numbers are then those of the
/// copy.
pub fn run(file: &Path, fast: bool) -> Oracle {
    let sorted = match time_order(file) {
        TimeOrder::InOrder | TimeOrder::LateOnly => None,
        TimeOrder::WithinWindow => Some(reordered_copy(file)),
        TimeOrder::Mixed => panic!(
            "{}: timestamp inversions both within and beyond 2 ms; the probe sorts only \
             the first kind and reordercap would sort both, so the oracle cannot mirror it",
            file.display()
        ),
    };
    let pkts = tshark::packets(sorted.as_ref().map_or(file, |t| &t.0), fast);
    let flows = flows::summarize(&pkts);
    let icmp_errors = pkts.iter().any(|p| p.icmp_error);
    let mut packets: BTreeMap<String, Vec<tshark::Pkt>> = BTreeMap::new();
    for p in pkts {
        packets.entry(p.flow.clone()).or_default().push(p);
    }
    Oracle {
        flows,
        packets,
        icmp_errors,
    }
}

/// How a file's timestamps run, in the terms of the probe's time-order
/// stage: packets stamped before one read earlier, by at most the window
/// (put in order) or by more (late, left in file order).
#[derive(Debug, PartialEq, Eq)]
pub enum TimeOrder {
    InOrder,
    WithinWindow,
    LateOnly,
    Mixed,
}

pub fn time_order(file: &Path) -> TimeOrder {
    match crate::live_support::order::inversions(file).unwrap_or_else(|e| panic!("{e}")) {
        (false, false) => TimeOrder::InOrder,
        (true, false) => TimeOrder::WithinWindow,
        (false, true) => TimeOrder::LateOnly,
        (true, true) => TimeOrder::Mixed,
    }
}

/// A temporary file, removed on drop.
pub struct Temp(pub PathBuf);

/// The file as the probe reads it: a time-ordered copy when it has
/// inversions within 2 ms (see [`run`]), else the file itself (`None`).
pub fn as_the_probe_reads(file: &Path) -> Option<Temp> {
    match time_order(file) {
        TimeOrder::InOrder | TimeOrder::LateOnly => None,
        TimeOrder::WithinWindow => Some(reordered_copy(file)),
        TimeOrder::Mixed => panic!(
            "{}: timestamp inversions both within and beyond 2 ms",
            file.display()
        ),
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn reordered_copy(file: &Path) -> Temp {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = Temp(
        std::env::temp_dir().join(format!("xdprobe-oracle-{}-{n}.pcapng", std::process::id())),
    );
    let st = Command::new("reordercap")
        .arg(file)
        .arg(&out.0)
        .output()
        .expect("run reordercap");
    assert!(
        st.status.success(),
        "reordercap {}: {}",
        file.display(),
        String::from_utf8_lossy(&st.stderr)
    );
    out
}
