//! The project's correctness oracle: Wireshark's own analysis (tshark) of a
//! capture, as per-frame facts (`tshark`) and per-flow reference values
//! (`flows`), plus the named rules where the NPM spec and Wireshark differ
//! on a packet (`rules`, see `docs/npm-vs-wireshark.md`). Expected values
//! are always computed from tshark at test time, never typed in.
#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod flows;
pub mod rules;
pub mod tshark;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

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
pub fn run(file: &Path, fast: bool) -> Oracle {
    let pkts = tshark::packets(file, fast);
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
