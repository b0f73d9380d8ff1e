//! A finished (or periodically reported) flow: what the table hands to the
//! outputs and the exporter.

use std::net::IpAddr;

use serde::Serialize;
use xdprobe_l7::{App, L7Fields};

use crate::time::Timestamp;

/// Which way a packet travels within its flow. Client = the SYN sender (or
/// the guessed initiator, see `FlowRecord::direction_guessed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    C2S,
    S2C,
}

impl Dir {
    pub fn reverse(self) -> Dir {
        match self {
            Dir::C2S => Dir::S2C,
            Dir::S2C => Dir::C2S,
        }
    }

    pub fn index(self) -> usize {
        match self {
            Dir::C2S => 0,
            Dir::S2C => 1,
        }
    }
}

/// Why a record was emitted. Values follow IPFIX `flowEndReason` (IE 136)
/// where one exists, so the exporter maps them 1:1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// No packet for the inactive timeout (IE 136 value 1).
    Idle,
    /// Active timeout: the flow goes on, this is a periodic report (2).
    Active,
    /// TCP FIN both ways or RST, after the linger time (3).
    End,
    /// End of input or shutdown (4, "forced end").
    Forced,
    /// Evicted because the table was full (5, "lack of resources").
    Evicted,
}

impl EndReason {
    /// IPFIX flowEndReason (IE 136) code.
    pub fn ipfix_code(self) -> u8 {
        match self {
            EndReason::Idle => 1,
            EndReason::Active => 2,
            EndReason::End => 3,
            EndReason::Forced => 4,
            EndReason::Evicted => 5,
        }
    }
}

/// Per-direction counters of one record (for its own interval when the flow
/// is reported periodically).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DirStats {
    pub packets: u64,
    /// IP bytes (IPv4 total length, IPv6 payload length + 40).
    pub bytes: u64,
    /// OR of the TCP flags seen in this direction (IPFIX tcpControlBits).
    #[serde(skip)]
    pub tcp_flags: u8,
    /// Retransmissions of any kind (= fast + spurious + other).
    pub retrans: u32,
    pub retrans_fast: u32,
    pub retrans_spurious: u32,
    pub retrans_other: u32,
    pub ooo: u32,
    pub keepalive: u32,
    pub dup_ack: u32,
    /// Segments advertising a zero window (Wireshark's
    /// `tcp.analysis.zero_window`): this side's application stopped
    /// reading.
    pub zero_window: u32,
    /// Segments that filled the other side's advertised window (Wireshark's
    /// `tcp.analysis.window_full`): this side's sending was limited by the
    /// receiver.
    pub window_full: u32,
}

/// Network performance metrics of one record, microseconds. `None` = not
/// measured (exported as null / absent), never a fake 0, except where
/// `docs/spec/npm-metrics.md` says 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Npm {
    pub rtt_us: Option<u32>,
    pub server_net_us: Option<u32>,
    pub client_net_us: Option<u32>,
    /// SRT per spec §2 (`max(0, Δt_rr − t_snt)` of the first request/response
    /// pair for TCP; `Δt_rr` for DNS); `Some(0)` for TCP/DNS flows with no
    /// measurement, `None` for flows SRT does not apply to.
    pub srt_us: Option<u32>,
    pub srt_count: u32,
    pub srt_min_us: Option<u32>,
    pub srt_mean_us: Option<u32>,
    pub srt_max_us: Option<u32>,
    pub tls: bool,
    /// RTT from TCP timestamps (`metrics::tsrtt`) over this record's
    /// interval; `None` when no segment of the flow carried the option.
    pub ts_rtt: Option<TsRttRecord>,
}

/// One leg of timestamp RTT over a record's interval, µs: `None` values
/// when the leg had no sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TsRttLeg {
    /// Samples: TSvals of the leg's near side echoed for the first time.
    pub count: u32,
    pub min_us: Option<u32>,
    pub mean_us: Option<u32>,
    pub max_us: Option<u32>,
    /// Median and 90th percentile (exact up to 13 samples, estimates from
    /// a fixed-size merge summary beyond: `metrics::sketch`).
    pub p50_us: Option<u32>,
    pub p90_us: Option<u32>,
    /// Echoes of TSvals the probe saw but had no room to remember
    /// (`count + missed` = distinct TSvals echoed, when echoes are in order).
    pub missed: u32,
}

/// Timestamp RTT of a record, by leg: `server` = probe → server → probe
/// (client TSvals echoed by the server), `client` = probe → client → probe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TsRttRecord {
    pub server: TsRttLeg,
    pub client: TsRttLeg,
}

/// One flow record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    pub client_addr: IpAddr,
    pub client_port: u16,
    pub server_addr: IpAddr,
    pub server_port: u16,
    pub proto: u8,
    pub vlan: Option<u16>,
    /// True when the client/server roles were inferred (no SYN/SYN+ACK or DNS
    /// port seen), see `flow::key`.
    pub direction_guessed: bool,
    /// First and last packet of this record's interval.
    pub start: Timestamp,
    pub end: Timestamp,
    pub end_reason: EndReason,
    /// First packet's TOS/traffic class.
    pub tos: u8,
    pub c2s: DirStats,
    pub s2c: DirStats,
    pub npm: Npm,
    /// Which record of this flow this is (0 for the first; active-timeout
    /// reports increase it), so collectors can stitch long flows.
    pub seq_in_flow: u32,
    /// The process on this host that opened the connection, when the daemon
    /// watches its own kernel (`[host] connlat`) and saw the `connect()`;
    /// never from packets.
    pub process: Option<Process>,
    /// What the flow is, from its payload (`[l7]` on; `None` when off).
    pub app: Option<App>,
    /// What the flow's application said: TLS/QUIC names, HTTP requests,
    /// DNS questions (boxed: a record without them costs a null pointer).
    pub l7: Option<L7Fields>,
}

/// A local process behind a connection (`xdprobe run` with `[host]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// The kernel's task name (`comm`, at most 15 bytes), NUL-padded.
    pub comm: [u8; 16],
    /// `connect()` to ESTABLISHED, µs.
    pub connect_us: u32,
}

impl Process {
    pub fn new(pid: u32, comm: &str, connect_us: u32) -> Self {
        let mut c = [0u8; 16];
        // At most 15 bytes, cut on a character boundary.
        let mut n = comm.len().min(15);
        while !comm.is_char_boundary(n) {
            n -= 1;
        }
        c[..n].copy_from_slice(&comm.as_bytes()[..n]);
        Process {
            pid,
            comm: c,
            connect_us,
        }
    }

    /// The name as text (up to the first NUL).
    pub fn comm(&self) -> &str {
        let n = self.comm.iter().position(|b| *b == 0).unwrap_or(16);
        std::str::from_utf8(&self.comm[..n]).unwrap_or("")
    }
}

impl FlowRecord {
    /// A record of protocol `proto` between 192.0.2.1 and 192.0.2.2 (the
    /// documentation prefix), ports 0, no packets, no metrics, at time 0:
    /// what tests, benches and fuzz targets fill in the fields they need of
    /// (`FlowRecord { client_port: 40000, ..FlowRecord::blank(6) }`), so a
    /// new field does not mean editing every record they build.
    pub fn blank(proto: u8) -> FlowRecord {
        FlowRecord {
            client_addr: IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)),
            client_port: 0,
            server_addr: IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2)),
            server_port: 0,
            proto,
            vlan: None,
            direction_guessed: false,
            start: Timestamp::ZERO,
            end: Timestamp::ZERO,
            end_reason: EndReason::Forced,
            tos: 0,
            c2s: DirStats::default(),
            s2c: DirStats::default(),
            npm: Npm::default(),
            seq_in_flow: 0,
            process: None,
            app: None,
            l7: None,
        }
    }

    pub fn dir(&self, d: Dir) -> &DirStats {
        match d {
            Dir::C2S => &self.c2s,
            Dir::S2C => &self.s2c,
        }
    }

    pub fn is_ipv6(&self) -> bool {
        self.client_addr.is_ipv6()
    }
}
