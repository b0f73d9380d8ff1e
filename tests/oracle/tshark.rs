//! One tshark pass over a capture: every frame's fields that the oracle
//! needs (addresses, lengths, TCP header and Wireshark's own analysis
//! flags, DNS transaction fields), in frame order, named by tshark's stream
//! index (`tcp:N`, `udp:N`) or by protocol and address pair for other IP.
//!
//! Wireshark's defaults stay in place (TCP sequence analysis, relative
//! sequence numbers off only where raw ones are read, IP defragmentation);
//! `fast` turns TCP reassembly off, which leaves every analysis flag as it
//! is but does not decode DNS/TLS messages that span segments (needed on
//! long bulk captures: reassembly there is super-linear).

use std::path::Path;
use std::process::Command;

/// The fields asked of tshark, in column order. `occurrence=f`: the first
/// occurrence of a field in a frame, i.e. the outer header for ICMP errors
/// and tunnels.
const FIELDS: &[&str] = &[
    "frame.number",
    "frame.time_epoch",
    "frame.len",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "ip.proto",
    "ipv6.nxt",
    "ip.len",
    "ipv6.plen",
    "vlan.id",
    "ip.flags.mf",
    "ip.frag_offset",
    "ip.fragment",
    "ipv6.fragment",
    "tcp.stream",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.flags",
    "tcp.len",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.window_size_value",
    "tcp.analysis.retransmission",
    "tcp.analysis.fast_retransmission",
    "tcp.analysis.spurious_retransmission",
    "tcp.analysis.out_of_order",
    "tcp.analysis.keep_alive",
    "tcp.analysis.keep_alive_ack",
    "tcp.analysis.duplicate_ack",
    "tcp.analysis.lost_segment",
    "tcp.analysis.zero_window",
    "tcp.analysis.window_full",
    "tcp.analysis.initial_rtt",
    "tls.record.content_type",
    "udp.stream",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "dns.id",
    "dns.flags.response",
    "dns.time",
    "dns.response_to",
    "dns.flags.rcode",
    "icmp.type",
    "icmpv6.type",
];

pub const F_FIN: u16 = 0x01;
pub const F_SYN: u16 = 0x02;
pub const F_RST: u16 = 0x04;
pub const F_ACK: u16 = 0x10;

/// Transport of a frame, as tshark decoded it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum L4 {
    Tcp,
    Udp,
    /// IP without a TCP/UDP header tshark decoded (ICMP, fragments …).
    #[default]
    Other,
}

/// Wireshark's TCP analysis flags on one segment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Analysis {
    /// `tcp.analysis.retransmission` (also set on fast and spurious ones).
    pub retrans: bool,
    pub fast: bool,
    pub spurious: bool,
    pub ooo: bool,
    pub keep_alive: bool,
    pub keep_alive_ack: bool,
    pub dup_ack: bool,
    pub lost_segment: bool,
    pub zero_window: bool,
    pub window_full: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Dns {
    pub id: u16,
    pub response: bool,
    pub time_ns: Option<u64>,
    /// The query frame a response answers (`dns.response_to`).
    pub response_to: Option<u64>,
    pub rcode: Option<u8>,
}

/// One IP frame.
#[derive(Clone, Debug, Default)]
pub struct Pkt {
    pub frame: u64,
    pub ts_ns: u64,
    pub frame_len: u64,
    /// `tcp:N`, `udp:N`, or `ip:PROTO:A-B` (addresses sorted).
    pub flow: String,
    pub l4: L4,
    pub src_addr: String,
    pub dst_addr: String,
    /// 0 without ports.
    pub src_port: u16,
    pub dst_port: u16,
    /// Source endpoint as `addr:port`.
    pub src: String,
    pub ip_proto: Option<u8>,
    /// IPv4 total length, or IPv6 payload length + 40.
    pub ip_len: u64,
    /// Outermost VLAN ID.
    pub vlan: Option<u16>,
    /// An IPv4 fragment (MF set or offset > 0).
    pub ip_fragment: bool,
    /// Frame number and capture time of the first IP fragment when tshark
    /// reassembled this packet from fragments (the packet's own time is
    /// the last one's).
    pub first_fragment: Option<(u64, u64)>,
    // TCP
    pub seq: u32,
    pub ack: u32,
    pub len: u32,
    pub flags: u16,
    pub window: u16,
    pub a: Analysis,
    pub initial_rtt_ns: Option<u64>,
    /// Content type of the first TLS record tshark decoded in the segment.
    pub tls_content_type: Option<u8>,
    // UDP
    pub udp_len: u64,
    pub dns: Option<Dns>,
    /// An ICMP/ICMPv6 error message (destination unreachable, time
    /// exceeded, …), which quotes the header of the packet it is about.
    pub icmp_error: bool,
}

/// Column of a field in [`FIELDS`], found at compile time.
const fn col(name: &str) -> usize {
    let mut i = 0;
    while i < FIELDS.len() {
        let f = FIELDS[i].as_bytes();
        let n = name.as_bytes();
        if f.len() == n.len() {
            let mut j = 0;
            while j < f.len() && f[j] == n[j] {
                j += 1;
            }
            if j == f.len() {
                return i;
            }
        }
        i += 1;
    }
    panic!("field not in FIELDS")
}

macro_rules! field {
    ($name:literal) => {
        const { col($name) }
    };
}

/// "1700000000.123456789" (or "0.000214000") → ns, without float rounding.
pub fn ts_ns(s: &str) -> u64 {
    let (a, b) = s.split_once('.').unwrap_or((s, ""));
    let frac: String = b.chars().chain(std::iter::repeat('0')).take(9).collect();
    a.parse::<u64>().unwrap_or(0) * 1_000_000_000 + frac.parse::<u64>().unwrap_or(0)
}

fn hex_u16(s: &str) -> u16 {
    u16::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(0)
}

/// Every IP frame of `file`, in frame order (non-IP frames are left out).
pub fn packets(file: &Path, fast: bool) -> Vec<Pkt> {
    let text = run_tshark(file, fast);
    let mut v = Vec::new();
    let mut frame_ts: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for line in text.lines() {
        let row = Row(line.split('\t').collect());
        let frame = row.num(field!("frame.number"));
        let ts = ts_ns(row.g(field!("frame.time_epoch")));
        frame_ts.insert(frame, ts);
        v.extend(row.packet(frame, ts, &frame_ts));
    }
    v
}

/// tshark's `FIELDS` of every frame of `file`, one line each.
fn run_tshark(file: &Path, fast: bool) -> String {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(file).args([
        "-n",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=f",
        "-E",
        "header=n",
        "-E",
        "quote=n",
    ]);
    if fast {
        cmd.args(["-o", "tcp.desegment_tcp_streams:FALSE"]);
    }
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark -r {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One line of [`run_tshark`]'s output, by column.
struct Row<'a>(Vec<&'a str>);

impl Row<'_> {
    fn g(&self, i: usize) -> &str {
        self.0.get(i).copied().unwrap_or("")
    }

    fn set(&self, i: usize) -> bool {
        !self.g(i).is_empty()
    }

    fn num(&self, i: usize) -> u64 {
        self.g(i).parse::<u64>().unwrap_or(0)
    }

    /// The frame as a packet; `None` if it is not IP (ARP, LLDP …).
    fn packet(
        &self,
        frame: u64,
        ts: u64,
        frame_ts: &std::collections::HashMap<u64, u64>,
    ) -> Option<Pkt> {
        let (g, set, num) = (|i| self.g(i), |i| self.set(i), |i| self.num(i));
        let (src_addr, dst_addr) = if set(field!("ip.src")) {
            (g(field!("ip.src")), g(field!("ip.dst")))
        } else {
            (g(field!("ipv6.src")), g(field!("ipv6.dst")))
        };
        if src_addr.is_empty() {
            return None;
        }
        let ip_len = if set(field!("ip.len")) {
            num(field!("ip.len"))
        } else if set(field!("ipv6.plen")) {
            num(field!("ipv6.plen")) + 40
        } else {
            0
        };
        let ip_proto = [g(field!("ip.proto")), g(field!("ipv6.nxt"))]
            .into_iter()
            .find(|s| !s.is_empty())
            .and_then(|s| s.parse::<u8>().ok());
        let (l4, flow, src_port, dst_port) = self.transport(src_addr, dst_addr, ip_proto);
        let first_fragment = [g(field!("ip.fragment")), g(field!("ipv6.fragment"))]
            .into_iter()
            .find_map(|f| f.parse::<u64>().ok())
            .and_then(|f| Some((f, *frame_ts.get(&f)?)));
        Some(Pkt {
            frame,
            ts_ns: ts,
            frame_len: num(field!("frame.len")),
            flow,
            l4,
            src: format!("{src_addr}:{src_port}"),
            src_addr: src_addr.to_string(),
            dst_addr: dst_addr.to_string(),
            src_port,
            dst_port,
            ip_proto,
            ip_len,
            vlan: g(field!("vlan.id")).parse().ok(),
            ip_fragment: matches!(g(field!("ip.flags.mf")), "1" | "True")
                || !matches!(g(field!("ip.frag_offset")), "" | "0"),
            first_fragment,
            seq: num(field!("tcp.seq_raw")) as u32,
            ack: num(field!("tcp.ack_raw")) as u32,
            len: num(field!("tcp.len")) as u32,
            flags: hex_u16(g(field!("tcp.flags"))),
            window: num(field!("tcp.window_size_value")) as u16,
            a: self.analysis(),
            dns: self.dns(),
            initial_rtt_ns: set(field!("tcp.analysis.initial_rtt"))
                .then(|| ts_ns(g(field!("tcp.analysis.initial_rtt")))),
            tls_content_type: g(field!("tls.record.content_type")).parse().ok(),
            udp_len: num(field!("udp.length")),
            icmp_error: matches!(g(field!("icmp.type")), "3" | "4" | "5" | "11" | "12")
                || matches!(g(field!("icmpv6.type")), "1" | "2" | "3" | "4"),
        })
    }

    /// (transport, tshark's stream, source port, destination port); a
    /// non-TCP/UDP packet's "stream" is its protocol and address pair.
    fn transport(
        &self,
        src_addr: &str,
        dst_addr: &str,
        ip_proto: Option<u8>,
    ) -> (L4, String, u16, u16) {
        let (g, set, num) = (|i| self.g(i), |i| self.set(i), |i| self.num(i));
        if set(field!("tcp.stream")) {
            let (sp, dp) = (
                num(field!("tcp.srcport")) as u16,
                num(field!("tcp.dstport")) as u16,
            );
            (L4::Tcp, format!("tcp:{}", g(field!("tcp.stream"))), sp, dp)
        } else if set(field!("udp.stream")) {
            let (sp, dp) = (
                num(field!("udp.srcport")) as u16,
                num(field!("udp.dstport")) as u16,
            );
            (L4::Udp, format!("udp:{}", g(field!("udp.stream"))), sp, dp)
        } else {
            let (a, b) = if src_addr <= dst_addr {
                (src_addr, dst_addr)
            } else {
                (dst_addr, src_addr)
            };
            let proto = ip_proto.map_or(String::new(), |p| p.to_string());
            (L4::Other, format!("ip:{proto}:{a}-{b}"), 0, 0)
        }
    }

    /// tshark's TCP analysis flags.
    fn analysis(&self) -> Analysis {
        let set = |i| self.set(i);
        Analysis {
            retrans: set(field!("tcp.analysis.retransmission")),
            fast: set(field!("tcp.analysis.fast_retransmission")),
            spurious: set(field!("tcp.analysis.spurious_retransmission")),
            ooo: set(field!("tcp.analysis.out_of_order")),
            keep_alive: set(field!("tcp.analysis.keep_alive")),
            keep_alive_ack: set(field!("tcp.analysis.keep_alive_ack")),
            dup_ack: set(field!("tcp.analysis.duplicate_ack")),
            lost_segment: set(field!("tcp.analysis.lost_segment")),
            zero_window: set(field!("tcp.analysis.zero_window")),
            window_full: set(field!("tcp.analysis.window_full")),
        }
    }

    /// The DNS message, if the packet carries one.
    fn dns(&self) -> Option<Dns> {
        let (g, set) = (|i| self.g(i), |i| self.set(i));
        (set(field!("dns.id")) && set(field!("dns.flags.response"))).then(|| Dns {
            id: hex_u16(g(field!("dns.id"))),
            response: matches!(g(field!("dns.flags.response")), "1" | "True"),
            time_ns: set(field!("dns.time")).then(|| ts_ns(g(field!("dns.time")))),
            response_to: g(field!("dns.response_to")).parse().ok(),
            rcode: g(field!("dns.flags.rcode")).parse().ok(),
        })
    }
}
