//! One tshark pass per capture for the per-packet facts the exception rules
//! need (raw sequence numbers, flags, Wireshark's own analysis flags, DNS
//! transaction IDs and `dns.time`), grouped by tshark's stream index, which
//! is what `oracle.py` names flows by (`tcp:N`, `udp:N`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const FIELDS: &[&str] = &[
    "frame.number",
    "frame.time_epoch",
    "tcp.stream",
    "udp.stream",
    "ip.src",
    "ipv6.src",
    "tcp.srcport",
    "udp.srcport",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.len",
    "tcp.flags",
    "tcp.analysis.spurious_retransmission",
    "tcp.analysis.fast_retransmission",
    "tcp.analysis.out_of_order",
    "tcp.analysis.duplicate_ack",
    "tcp.analysis.keep_alive_ack",
    "tcp.analysis.initial_rtt",
    "dns.id",
    "dns.flags.response",
    "dns.time",
    "vlan.id",
    "ip.fragment",
    "ipv6.fragment",
];

pub const F_FIN: u16 = 0x01;
pub const F_SYN: u16 = 0x02;
pub const F_RST: u16 = 0x04;
pub const F_ACK: u16 = 0x10;

#[derive(Clone, Debug, Default)]
pub struct Pkt {
    pub frame: u64,
    pub ts_ns: u64,
    /// Source endpoint as `addr:port`.
    pub src: String,
    pub seq: u32,
    pub ack: u32,
    pub len: u32,
    pub flags: u16,
    pub spurious: bool,
    pub fast: bool,
    pub ooo: bool,
    pub dup_ack: bool,
    pub keep_alive_ack: bool,
    pub initial_rtt_ns: Option<u64>,
    pub dns: Option<Dns>,
    /// Outermost VLAN ID.
    pub vlan: Option<u16>,
    /// Capture time of the first IP fragment when tshark reassembled this
    /// packet from fragments (the packet's own time is the last one's).
    pub first_fragment: Option<(u64, u64)>,
}

#[derive(Clone, Copy, Debug)]
pub struct Dns {
    pub id: u16,
    pub response: bool,
    pub time_ns: Option<u64>,
}

/// "1700000000.123456789" (or "0.000214000") → ns, without float rounding.
pub fn ts_ns(s: &str) -> u64 {
    let (a, b) = s.split_once('.').unwrap_or((s, ""));
    let frac: String = b.chars().chain(std::iter::repeat('0')).take(9).collect();
    a.parse::<u64>().unwrap_or(0) * 1_000_000_000 + frac.parse::<u64>().unwrap_or(0)
}

/// Packets per flow name (`tcp:N` / `udp:N`), in frame order.
pub fn packets(file: &Path) -> BTreeMap<String, Vec<Pkt>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(file).args([
        "-n",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=f",
    ]);
    // Same analysis as with reassembly (oracle.py --fast says so), faster.
    cmd.args(["-o", "tcp.desegment_tcp_streams:FALSE"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m: BTreeMap<String, Vec<Pkt>> = BTreeMap::new();
    let mut frame_ts: BTreeMap<u64, u64> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let c: Vec<&str> = line.split('\t').collect();
        // A column by field name.
        let g = |name: &str| {
            let i = FIELDS
                .iter()
                .position(|f| *f == name)
                .expect("field in FIELDS");
            c.get(i).copied().unwrap_or("")
        };
        let num = |name: &str| g(name).parse::<u64>().unwrap_or(0);
        frame_ts.insert(num("frame.number"), ts_ns(g("frame.time_epoch")));
        let first_fragment = [g("ip.fragment"), g("ipv6.fragment")]
            .into_iter()
            .find_map(|f| f.parse::<u64>().ok())
            .and_then(|f| Some((f, *frame_ts.get(&f)?)));
        let flow = if !g("tcp.stream").is_empty() {
            format!("tcp:{}", g("tcp.stream"))
        } else if !g("udp.stream").is_empty() {
            format!("udp:{}", g("udp.stream"))
        } else {
            continue;
        };
        let addr = if g("ip.src").is_empty() {
            g("ipv6.src")
        } else {
            g("ip.src")
        };
        let port = if g("tcp.srcport").is_empty() {
            g("udp.srcport")
        } else {
            g("tcp.srcport")
        };
        let dns = (!g("dns.id").is_empty() && !g("dns.flags.response").is_empty()).then(|| Dns {
            id: u16::from_str_radix(g("dns.id").trim_start_matches("0x"), 16).unwrap_or(0),
            response: matches!(g("dns.flags.response"), "1" | "True"),
            time_ns: (!g("dns.time").is_empty()).then(|| ts_ns(g("dns.time"))),
        });
        m.entry(flow).or_default().push(Pkt {
            frame: num("frame.number"),
            ts_ns: ts_ns(g("frame.time_epoch")),
            src: format!("{addr}:{port}"),
            seq: num("tcp.seq_raw") as u32,
            ack: num("tcp.ack_raw") as u32,
            len: num("tcp.len") as u32,
            flags: u16::from_str_radix(g("tcp.flags").trim_start_matches("0x"), 16).unwrap_or(0),
            spurious: !g("tcp.analysis.spurious_retransmission").is_empty(),
            fast: !g("tcp.analysis.fast_retransmission").is_empty(),
            ooo: !g("tcp.analysis.out_of_order").is_empty(),
            dup_ack: !g("tcp.analysis.duplicate_ack").is_empty(),
            keep_alive_ack: !g("tcp.analysis.keep_alive_ack").is_empty(),
            initial_rtt_ns: (!g("tcp.analysis.initial_rtt").is_empty())
                .then(|| ts_ns(g("tcp.analysis.initial_rtt"))),
            dns,
            vlan: g("vlan.id").parse().ok(),
            first_fragment,
        });
    }
    m
}
