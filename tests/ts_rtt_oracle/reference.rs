//! The independent reference for timestamp RTT: one tshark pass over a
//! capture (`tcp.options.timestamp.tsval` / `tsecr`, frame times, flags),
//! and a brute-force count per TCP stream and direction of every distinct
//! TSval that the other side echoed afterwards (RFC 7323: TSecr is read on
//! segments with ACK set), with the time from its first sighting to its
//! first echo. No ring, no bound, no shared code with the probe.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use crate::oracle::tshark::ts_ns;

const FIELDS: &[&str] = &[
    "frame.time_epoch",
    "tcp.stream",
    "ip.src",
    "ipv6.src",
    "ip.dst",
    "ipv6.dst",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.flags.ack",
    "tcp.flags.syn",
    "tcp.options.timestamp.tsval",
    "tcp.options.timestamp.tsecr",
    "vlan.id",
    "ieee8021ad.id",
];

// Column of each field above.
const C_ACK: usize = 8;
const C_SYN: usize = 9;
const C_TSVAL: usize = 10;
const C_TSECR: usize = 11;
const C_VLAN: usize = 12;
const C_SVLAN: usize = 13;

/// One echoed TSval: when its echo was captured and how long after the
/// TSval's first sighting (ns).
#[derive(Clone, Copy, Debug)]
pub struct Echo {
    pub at_ns: u64,
    pub rtt_ns: u64,
}

/// One direction of a stream: the TSvals its sender sent, as echoed.
#[derive(Clone, Debug, Default)]
pub struct RefDir {
    /// Segments carrying the option.
    pub with_option: u64,
    /// First echo of each distinct TSval, in echo order.
    pub echoes: Vec<Echo>,
    /// First echoes that arrived after the first echo of a newer TSval
    /// (modulo 2^32), or echo a TSval older than the first one this side
    /// sent: the probe documents that it may not count these
    /// (`metrics::tsrtt`, "while echoes arrive in order").
    pub out_of_order: u64,
}

/// One TCP stream as tshark numbers it.
#[derive(Clone, Debug)]
pub struct RefStream {
    /// `addr:port` of the side that sent the stream's first frame.
    pub first_src: String,
    pub other: String,
    /// Outermost VLAN ID (802.1ad S-tag, else the first 802.1Q tag).
    pub vlan: Option<u16>,
    /// By sender: `first_src`'s TSvals at 0, `other`'s at 1.
    pub dirs: [RefDir; 2],
    /// A SYN was captured: the handshake can be measured.
    pub saw_syn: bool,
}

fn modular_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[derive(Default)]
struct Work {
    /// By sender index: TSval → first sighting (ns).
    seen: [HashMap<u32, u64>; 2],
    first_val: [Option<u32>; 2],
    newest_first_echo: [Option<u32>; 2],
    echoed: [HashMap<u32, ()>; 2],
}

/// Every TCP stream of `pcap`, by tshark's stream index.
///
/// Read in time order as the probe reads files (`oracle::as_the_probe_reads`):
/// a capture from two taps holds echoes stored before their TSvals.
pub fn streams(pcap: &Path) -> BTreeMap<u64, RefStream> {
    let sorted = crate::oracle::as_the_probe_reads(pcap);
    let pcap = sorted.as_ref().map_or(pcap, |t| t.0.as_path());
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"])
        .arg(pcap)
        .args(["-Y", "tcp", "-T", "fields", "-E", "occurrence=f"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark {}: {}",
        pcap.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut streams: BTreeMap<u64, RefStream> = BTreeMap::new();
    let mut work: BTreeMap<u64, Work> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let c: Vec<&str> = line.split('\t').collect();
        let get = |i: usize| c.get(i).copied().unwrap_or("");
        let Ok(stream) = get(1).parse::<u64>() else {
            continue;
        };
        let t = ts_ns(get(0));
        let src_ip = if get(2).is_empty() { get(3) } else { get(2) };
        let dst_ip = if get(4).is_empty() { get(5) } else { get(4) };
        let src = format!("{src_ip}:{}", get(6));
        let dst = format!("{dst_ip}:{}", get(7));
        let vlan = get(C_SVLAN)
            .parse()
            .ok()
            .or_else(|| get(C_VLAN).parse().ok());
        let s = streams.entry(stream).or_insert_with(|| RefStream {
            first_src: src.clone(),
            other: dst.clone(),
            vlan,
            dirs: Default::default(),
            saw_syn: false,
        });
        s.saw_syn |= get(C_SYN) == "1";
        let i = usize::from(src != s.first_src);
        let w = work.entry(stream).or_default();
        let (Ok(tsval), Ok(tsecr)) = (get(C_TSVAL).parse::<u32>(), get(C_TSECR).parse::<u32>())
        else {
            continue;
        };
        s.dirs[i].with_option += 1;
        // The first sighting of this TSval.
        w.seen[i].entry(tsval).or_insert(t);
        w.first_val[i].get_or_insert(tsval);
        // An echo of the other side's TSval (ACK set), the first one.
        let r = 1 - i;
        if get(C_ACK) != "1" {
            continue;
        }
        let Some(&first_seen) = w.seen[r].get(&tsecr) else {
            continue;
        };
        if w.echoed[r].insert(tsecr, ()).is_some() {
            continue;
        }
        s.dirs[r].echoes.push(Echo {
            at_ns: t,
            rtt_ns: t.saturating_sub(first_seen),
        });
        let older_than_first = w.first_val[r].is_some_and(|f| modular_before(tsecr, f));
        let behind = w.newest_first_echo[r].is_some_and(|n| modular_before(tsecr, n));
        if older_than_first || behind {
            s.dirs[r].out_of_order += 1;
        } else {
            w.newest_first_echo[r] = Some(tsecr);
        }
    }
    streams
}

/// numpy's default quantile of sorted `v`.
pub fn quantile(v: &[f64], p: f64) -> f64 {
    let h = p * (v.len() - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}
