//! Information elements: what each exported field is (ID, enterprise number,
//! length) and which part of a [`FlowRecord`](xdprobe_dataplane::FlowRecord)
//! fills it.
//!
//! Standard IANA elements are used wherever one exists (RFC 7012 registry);
//! the NPM metrics have none, so they are enterprise elements under the
//! operator's PEN. Their IDs start at 1001 on purpose: RFC 5103 reverse
//! elements reuse the IANA ID under PEN 29305, and pmacct keys custom
//! primitives by ID alone within one template, so an enterprise element with
//! ID 1, 2 or 6 next to reverse octets/packets/flags would read as 0 there.
//! No IANA element in use has an ID above 1000, so none can ever collide.
//!
//! ID blocks: 1001–1031 handshake RTT, SRT and TCP counters; 1040–1059
//! timestamp RTT (1040–1051 in use); 1100–1199 reserved for the host-stack
//! latency fields.

use xdprobe_dataplane::Dir;

/// RFC 5103 reverse-element enterprise number.
pub const PEN_REVERSE: u32 = 29305;
/// ntop (nProbe, ntopng) enterprise number, for the compatibility profile.
pub const PEN_NTOP: u32 = 35632;
/// RFC 5612 documentation PEN: the default until the operator sets theirs.
pub const PEN_DOCUMENTATION: u32 = 32473;

/// RFC 7011 §7: a field length of 65535 announces a variable-length field.
pub const VARLEN: u16 = 65535;

/// Written for an NPM value that was not measured (`None`), since IPFIX has
/// no null. Collectors see 4294967295; the shipped definitions say so.
pub const NOT_MEASURED: u32 = u32::MAX;

/// IANA element IDs used by the templates (RFC 7012 registry names).
pub mod iana {
    pub const OCTET_DELTA_COUNT: u16 = 1;
    pub const PACKET_DELTA_COUNT: u16 = 2;
    pub const PROTOCOL_IDENTIFIER: u16 = 4;
    pub const IP_CLASS_OF_SERVICE: u16 = 5;
    pub const TCP_CONTROL_BITS: u16 = 6;
    pub const SOURCE_TRANSPORT_PORT: u16 = 7;
    pub const SOURCE_IPV4_ADDRESS: u16 = 8;
    pub const DESTINATION_TRANSPORT_PORT: u16 = 11;
    pub const DESTINATION_IPV4_ADDRESS: u16 = 12;
    /// NetFlow v9 OUT_BYTES / OUT_PKTS (RFC 3954), which nfdump reads as the
    /// reverse direction of a v9 biflow.
    pub const NF9_OUT_BYTES: u16 = 23;
    pub const NF9_OUT_PKTS: u16 = 24;
    pub const SOURCE_IPV6_ADDRESS: u16 = 27;
    pub const DESTINATION_IPV6_ADDRESS: u16 = 28;
    pub const EXPORTED_OCTET_TOTAL_COUNT: u16 = 40;
    pub const EXPORTED_MESSAGE_TOTAL_COUNT: u16 = 41;
    pub const EXPORTED_FLOW_RECORD_TOTAL_COUNT: u16 = 42;
    pub const VLAN_ID: u16 = 58;
    pub const FLOW_END_REASON: u16 = 136;
    pub const OBSERVATION_DOMAIN_ID: u16 = 149;
    pub const FLOW_START_MILLISECONDS: u16 = 152;
    pub const FLOW_END_MILLISECONDS: u16 = 153;
    pub const FLOW_START_MICROSECONDS: u16 = 154;
    pub const FLOW_END_MICROSECONDS: u16 = 155;
    pub const IGNORED_PACKET_TOTAL_COUNT: u16 = 164;
    pub const NOT_SENT_FLOW_TOTAL_COUNT: u16 = 166;
    pub const BIFLOW_DIRECTION: u16 = 239;
    /// string, variable length: a human-readable label of the domain.
    pub const OBSERVATION_DOMAIN_NAME: u16 = 300;
    /// NetFlow v9 options scope "System" (RFC 3954 §6.1).
    pub const NF9_SCOPE_SYSTEM: u16 = 1;
}

/// The probe's own counters in the exporter-statistics options record
/// (IPFIX only), enterprise elements under the configured PEN, unsigned64,
/// totals since start. IDs 1200+ (the NPM flow elements use 1001–1149).
pub mod probe {
    /// flowTableEvictedFlowTotalCount: flows ended early (flowEndReason 5,
    /// lack of resources) because a worker's flow table was full.
    pub const FLOW_TABLE_EVICTIONS: u16 = 1070;
    /// fragmentTableEvictedTotalCount: remembered first fragments pushed
    /// out of a full fragment table before their datagram ended.
    pub const FRAGMENT_TABLE_EVICTIONS: u16 = 1071;
}

/// NetFlow v9 has no enterprise numbers. The NPM elements it carries get
/// the v9 type `V9_PRIVATE_BASE + ` their IPFIX enterprise ID: at or above
/// 32768, where v9 exporters put their vendor-specific types (Cisco's NSEL
/// 33000–40005, nProbe's 57472 + n), clear of the IANA-numbered ones.
pub const V9_PRIVATE_BASE: u16 = 32768;

/// nProbe element IDs. In IPFIX they live under [`PEN_NTOP`] with these
/// IDs; in NetFlow v9 nProbe numbers them `57472 + id` (verified against
/// Wireshark's and scapy's nProbe tables, see `docs/exporter.md`).
pub mod ntop {
    pub const V9_BASE: u16 = 57472;
    pub const RETRANSMITTED_IN_PKTS: u16 = 109;
    pub const RETRANSMITTED_OUT_PKTS: u16 = 110;
    pub const OOORDER_IN_PKTS: u16 = 111;
    pub const OOORDER_OUT_PKTS: u16 = 112;
    pub const CLIENT_NW_LATENCY_MS: u16 = 123;
    pub const SERVER_NW_LATENCY_MS: u16 = 124;
    pub const APPL_LATENCY_MS: u16 = 125;
    /// The older nProbe latency pair (seconds + microseconds) that nfdump
    /// maps to its latency extension (`netflow_v9.h`: 57554..57559).
    pub const NF9_CLIENT_NW_DELAY_SEC: u16 = 57554;
    pub const NF9_CLIENT_NW_DELAY_USEC: u16 = 57555;
    pub const NF9_SERVER_NW_DELAY_SEC: u16 = 57556;
    pub const NF9_SERVER_NW_DELAY_USEC: u16 = 57557;
    pub const NF9_APPL_LATENCY_SEC: u16 = 57558;
    pub const NF9_APPL_LATENCY_USEC: u16 = 57559;
}

/// A direction relative to the record being written: `Fwd` is the record's
/// source → destination, `Rev` the opposite. In biflow mode the source is the
/// client; in uniflow mode each direction gets its own record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Fwd,
    Rev,
}

/// A leg of timestamp RTT (`xdprobe_dataplane::metrics::tsrtt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsLeg {
    /// Probe → server → probe: client TSvals echoed by the server.
    Server,
    /// Probe → client → probe.
    Client,
}

/// Which figure of a timestamp-RTT leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsStat {
    Count,
    Min,
    Mean,
    Max,
    P50,
    P90,
}

/// One NPM metric of the flow, always exported under the configured PEN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Npm {
    Rtt,
    ClientNet,
    ServerNet,
    Srt,
    SrtCount,
    SrtMin,
    SrtMean,
    SrtMax,
    Retrans(Dir),
    RetransFast(Dir),
    RetransSpurious(Dir),
    RetransOther(Dir),
    Ooo(Dir),
    Keepalive(Dir),
    DupAck(Dir),
    ZeroWindow(Dir),
    WindowFull(Dir),
    /// Bit 0: client/server roles were guessed; bit 1: TLS seen.
    Flags,
    SeqInFlow,
    TsRtt(TsLeg, TsStat),
}

/// What fills a field. The encoder matches on this once per field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    SrcV4,
    DstV4,
    SrcV6,
    DstV6,
    SrcPort,
    DstPort,
    Proto,
    Tos,
    Vlan,
    StartMs,
    EndMs,
    /// dateTimeMicroseconds, NTP format (RFC 7011 §6.1.9).
    StartUs,
    EndUs,
    Octets(Side),
    Packets(Side),
    TcpFlags(Side),
    EndReason,
    BiflowDirection,
    Npm(Npm),
    /// nProbe latency: half the segment's round trip, milliseconds.
    NtopClientNwMs,
    NtopServerNwMs,
    NtopApplMs,
    NtopRetrans(Side),
    NtopOoo(Side),
    /// nfdump's v9 latency pair: whole seconds, then the microsecond rest.
    Nf9ClientDelay {
        usec: bool,
    },
    Nf9ServerDelay {
        usec: bool,
    },
    Nf9ApplLatency {
        usec: bool,
    },
    /// What the flow is (`crate::ie_l7`).
    L7(crate::ie_l7::L7Value),
    /// The local process of the connection ([`process`]); 0 / empty /
    /// not measured where it is not known.
    ProcessId,
    ProcessName,
    ConnectUs,
}

/// The local process elements (block 1300–1309, under the configured PEN;
/// NetFlow v9 type 32768 + ID), in flow templates of a daemon that runs
/// `[host] connlat`: which process on this host opened the connection, and
/// how long its `connect()` took.
pub mod process {
    /// unsigned32: the PID; 0 when the connection was not opened here
    /// (or before the probe started).
    pub const PROCESS_ID: u16 = 1300;
    /// string, 16 bytes, NUL-padded: the kernel's task name (`comm`).
    pub const PROCESS_NAME: u16 = 1301;
    /// unsigned32 µs: `connect()` → ESTABLISHED; 4294967295 when unknown.
    pub const CONNECT_LATENCY_US: u16 = 1302;
}

/// One field of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub id: u16,
    /// 0 for an IANA element.
    pub pen: u32,
    pub len: u16,
    pub value: Value,
}

impl Field {
    pub const fn iana(id: u16, len: u16, value: Value) -> Field {
        Field {
            id,
            pen: 0,
            len,
            value,
        }
    }

    pub const fn enterprise(pen: u32, id: u16, len: u16, value: Value) -> Field {
        Field {
            id,
            pen,
            len,
            value,
        }
    }

    /// Bytes of this field's specifier in a template record.
    pub fn spec_len(&self) -> usize {
        if self.pen == 0 { 4 } else { 8 }
    }
}

/// One NPM enterprise element: the single source of the IDs that the
/// templates, `docs/exporter.md` and `deploy/collectors/` all use (a unit
/// test checks the shipped collector files against this table).
pub struct NpmElement {
    pub id: u16,
    pub name: &'static str,
    /// pmacct `aggregate_primitives` name.
    pub primitive: &'static str,
    /// IANA abstract data type (RFC 7012 §3.1).
    pub data_type: &'static str,
    pub len: u16,
    pub units: &'static str,
    pub value: Npm,
    pub description: &'static str,
}

const fn el(
    id: u16,
    name: &'static str,
    primitive: &'static str,
    data_type: &'static str,
    units: &'static str,
    value: Npm,
    description: &'static str,
) -> NpmElement {
    let len = match data_type.as_bytes()[data_type.len() - 1] {
        b'8' => 1,
        _ => 4,
    };
    NpmElement {
        id,
        name,
        primitive,
        data_type,
        len,
        units,
        value,
        description,
    }
}

use Dir::{C2S, S2C};
use TsLeg::{Client, Server};
use TsStat::{Count, Max, Mean, Min, P50, P90};

/// The NPM elements, in template order. 4294967295 = not measured.
pub const NPM_ELEMENTS: &[NpmElement] = &[
    el(
        1001,
        "tcpHandshakeRttMicroseconds",
        "rtt_us",
        "unsigned32",
        "microseconds",
        Npm::Rtt,
        "Handshake RTT = server + client network time",
    ),
    el(
        1002,
        "clientNetworkTimeMicroseconds",
        "cnt_us",
        "unsigned32",
        "microseconds",
        Npm::ClientNet,
        "SYN+ACK to the ACK completing the handshake (probe <-> client round trip)",
    ),
    el(
        1003,
        "serverNetworkTimeMicroseconds",
        "snt_us",
        "unsigned32",
        "microseconds",
        Npm::ServerNet,
        "SYN to SYN+ACK (probe <-> server round trip)",
    ),
    el(
        1004,
        "serverResponseTimeMicroseconds",
        "srt_us",
        "unsigned32",
        "microseconds",
        Npm::Srt,
        "Server response time of the first request/response pair",
    ),
    el(
        1005,
        "serverResponseCount",
        "srt_count",
        "unsigned32",
        "responses",
        Npm::SrtCount,
        "Request/response pairs measured",
    ),
    el(
        1006,
        "serverResponseTimeMinMicroseconds",
        "srt_min_us",
        "unsigned32",
        "microseconds",
        Npm::SrtMin,
        "Minimum server response time",
    ),
    el(
        1007,
        "serverResponseTimeMeanMicroseconds",
        "srt_mean_us",
        "unsigned32",
        "microseconds",
        Npm::SrtMean,
        "Mean server response time",
    ),
    el(
        1008,
        "serverResponseTimeMaxMicroseconds",
        "srt_max_us",
        "unsigned32",
        "microseconds",
        Npm::SrtMax,
        "Maximum server response time",
    ),
    el(
        1010,
        "c2sRetransmittedPackets",
        "retrans_c2s",
        "unsigned32",
        "packets",
        Npm::Retrans(C2S),
        "Client-to-server retransmissions of any kind",
    ),
    el(
        1011,
        "s2cRetransmittedPackets",
        "retrans_s2c",
        "unsigned32",
        "packets",
        Npm::Retrans(S2C),
        "Server-to-client retransmissions of any kind",
    ),
    el(
        1012,
        "c2sFastRetransmittedPackets",
        "retrans_fast_c2s",
        "unsigned32",
        "packets",
        Npm::RetransFast(C2S),
        "Client-to-server fast retransmissions",
    ),
    el(
        1013,
        "s2cFastRetransmittedPackets",
        "retrans_fast_s2c",
        "unsigned32",
        "packets",
        Npm::RetransFast(S2C),
        "Server-to-client fast retransmissions",
    ),
    el(
        1014,
        "c2sSpuriousRetransmittedPackets",
        "retrans_spurious_c2s",
        "unsigned32",
        "packets",
        Npm::RetransSpurious(C2S),
        "Client-to-server spurious retransmissions",
    ),
    el(
        1015,
        "s2cSpuriousRetransmittedPackets",
        "retrans_spurious_s2c",
        "unsigned32",
        "packets",
        Npm::RetransSpurious(S2C),
        "Server-to-client spurious retransmissions",
    ),
    el(
        1016,
        "c2sOtherRetransmittedPackets",
        "retrans_other_c2s",
        "unsigned32",
        "packets",
        Npm::RetransOther(C2S),
        "Client-to-server retransmissions, neither fast nor spurious",
    ),
    el(
        1017,
        "s2cOtherRetransmittedPackets",
        "retrans_other_s2c",
        "unsigned32",
        "packets",
        Npm::RetransOther(S2C),
        "Server-to-client retransmissions, neither fast nor spurious",
    ),
    el(
        1018,
        "c2sOutOfOrderPackets",
        "ooo_c2s",
        "unsigned32",
        "packets",
        Npm::Ooo(C2S),
        "Client-to-server out-of-order packets",
    ),
    el(
        1019,
        "s2cOutOfOrderPackets",
        "ooo_s2c",
        "unsigned32",
        "packets",
        Npm::Ooo(S2C),
        "Server-to-client out-of-order packets",
    ),
    el(
        1020,
        "c2sKeepalivePackets",
        "keepalive_c2s",
        "unsigned32",
        "packets",
        Npm::Keepalive(C2S),
        "Client-to-server TCP keep-alives",
    ),
    el(
        1021,
        "s2cKeepalivePackets",
        "keepalive_s2c",
        "unsigned32",
        "packets",
        Npm::Keepalive(S2C),
        "Server-to-client TCP keep-alives",
    ),
    el(
        1022,
        "c2sDuplicateAckPackets",
        "dup_ack_c2s",
        "unsigned32",
        "packets",
        Npm::DupAck(C2S),
        "Client-to-server duplicate ACKs",
    ),
    el(
        1023,
        "s2cDuplicateAckPackets",
        "dup_ack_s2c",
        "unsigned32",
        "packets",
        Npm::DupAck(S2C),
        "Server-to-client duplicate ACKs",
    ),
    // 1060–1069: receive-window events (Wireshark's definitions, see
    // `xdprobe_dataplane::metrics::retrans`).
    el(
        1060,
        "c2sZeroWindowPackets",
        "zero_window_c2s",
        "unsigned32",
        "packets",
        Npm::ZeroWindow(C2S),
        "Client-to-server segments advertising a zero window (the client stopped reading)",
    ),
    el(
        1061,
        "s2cZeroWindowPackets",
        "zero_window_s2c",
        "unsigned32",
        "packets",
        Npm::ZeroWindow(S2C),
        "Server-to-client segments advertising a zero window (the server stopped reading)",
    ),
    el(
        1062,
        "c2sWindowFullPackets",
        "window_full_c2s",
        "unsigned32",
        "packets",
        Npm::WindowFull(C2S),
        "Client-to-server segments that filled the server's advertised window",
    ),
    el(
        1063,
        "s2cWindowFullPackets",
        "window_full_s2c",
        "unsigned32",
        "packets",
        Npm::WindowFull(S2C),
        "Server-to-client segments that filled the client's advertised window",
    ),
    el(
        1030,
        "npmFlags",
        "npm_flags",
        "unsigned8",
        "none",
        Npm::Flags,
        "Bit 0: client/server roles guessed; bit 1: TLS",
    ),
    el(
        1031,
        "flowRecordSequence",
        "seq_in_flow",
        "unsigned32",
        "none",
        Npm::SeqInFlow,
        "Index of this record within its flow (active-timeout reports)",
    ),
    el(
        1040,
        "tcpTsServerRttSamples",
        "ts_snt_count",
        "unsigned32",
        "samples",
        Npm::TsRtt(Server, Count),
        "Timestamp-RTT samples of the server leg (client TSvals echoed by the server)",
    ),
    el(
        1041,
        "tcpTsServerRttMinMicroseconds",
        "ts_snt_min_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Server, Min),
        "Minimum probe -> server -> probe time from TCP timestamps",
    ),
    el(
        1042,
        "tcpTsServerRttMeanMicroseconds",
        "ts_snt_mean_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Server, Mean),
        "Mean probe -> server -> probe time from TCP timestamps",
    ),
    el(
        1043,
        "tcpTsServerRttMaxMicroseconds",
        "ts_snt_max_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Server, Max),
        "Maximum probe -> server -> probe time from TCP timestamps",
    ),
    el(
        1044,
        "tcpTsServerRttP50Microseconds",
        "ts_snt_p50_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Server, P50),
        "Median probe -> server -> probe time (P2 estimate beyond 7 samples)",
    ),
    el(
        1045,
        "tcpTsServerRttP90Microseconds",
        "ts_snt_p90_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Server, P90),
        "90th percentile probe -> server -> probe time (P2 estimate beyond 7 samples)",
    ),
    el(
        1046,
        "tcpTsClientRttSamples",
        "ts_cnt_count",
        "unsigned32",
        "samples",
        Npm::TsRtt(Client, Count),
        "Timestamp-RTT samples of the client leg (server TSvals echoed by the client)",
    ),
    el(
        1047,
        "tcpTsClientRttMinMicroseconds",
        "ts_cnt_min_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Client, Min),
        "Minimum probe -> client -> probe time from TCP timestamps",
    ),
    el(
        1048,
        "tcpTsClientRttMeanMicroseconds",
        "ts_cnt_mean_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Client, Mean),
        "Mean probe -> client -> probe time from TCP timestamps",
    ),
    el(
        1049,
        "tcpTsClientRttMaxMicroseconds",
        "ts_cnt_max_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Client, Max),
        "Maximum probe -> client -> probe time from TCP timestamps",
    ),
    el(
        1050,
        "tcpTsClientRttP50Microseconds",
        "ts_cnt_p50_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Client, P50),
        "Median probe -> client -> probe time (P2 estimate beyond 7 samples)",
    ),
    el(
        1051,
        "tcpTsClientRttP90Microseconds",
        "ts_cnt_p90_us",
        "unsigned32",
        "microseconds",
        Npm::TsRtt(Client, P90),
        "90th percentile probe -> client -> probe time (P2 estimate beyond 7 samples)",
    ),
];

/// Host stack-layer elements (block 1200–1299, under the configured PEN),
/// sent by `xdprobe manager` in its host-stack records: per segment `Tk`
/// (k = 1…8) five statistics at `1200 + 10·(k − 1) + stat` (stat 1…5;
/// every segment of a record has [`host::COMPLETE`] samples, so no count
/// per segment), then the record-wide elements from 1280. 55 fields in
/// all: under the 60 that Wireshark decodes by default. Durations are nanoseconds (host
/// segments are often a few µs), unsigned32, saturating at 4294967294;
/// [`NOT_MEASURED`] when the segment has no sample. A segment merged over
/// a layer without a hook (`T4+T5`) is sent under its first part and sets
/// bit 3 of [`host::FLAGS`].
pub mod host {
    /// Element ID of statistic `stat` of segment `Tk`, k in 1..=8.
    pub const fn segment(k: u8, stat: Stat) -> u16 {
        1200 + 10 * (k as u16 - 1) + stat as u16
    }

    /// The five statistics of a segment.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Stat {
        Min = 1,
        Mean = 2,
        P50 = 3,
        P99 = 4,
        Max = 5,
    }

    impl Stat {
        pub const ALL: [Stat; 5] = [Stat::Min, Stat::Mean, Stat::P50, Stat::P99, Stat::Max];

        pub fn name(self) -> &'static str {
            match self {
                Stat::Min => "MinNanoseconds",
                Stat::Mean => "MeanNanoseconds",
                Stat::P50 => "P50Nanoseconds",
                Stat::P99 => "P99Nanoseconds",
                Stat::Max => "MaxNanoseconds",
            }
        }
    }

    /// unsigned32: timed bytes that every layer saw (each segment's
    /// sample count; T8's when both socket layers are here).
    pub const COMPLETE: u16 = 1280;
    /// unsigned32: timed bytes some layer missed (retransmitted, lost).
    pub const INCOMPLETE: u16 = 1281;
    /// unsigned32 ns: half-width of the range the two hosts' clock
    /// alignment may have moved T4/T8 by (0 on one host).
    pub const CLOCK_UNCERTAINTY: u16 = 1282;
    /// unsigned8: bit 0 sender seen, bit 1 receiver seen, bit 2 the ends
    /// are on different hosts, bit 3 a segment is merged.
    pub const FLAGS: u16 = 1283;
    /// string: the sender's and the receiver's agent names.
    pub const SENDER_AGENT: u16 = 1290;
    pub const RECEIVER_AGENT: u16 = 1291;

    /// Name, abstract data type and description of every element, in
    /// template order (for `docs/host-crosshost.md` and collector files).
    pub fn elements() -> Vec<(u16, String, &'static str, String)> {
        let mut v = Vec::new();
        for k in 1..=8u8 {
            for s in Stat::ALL {
                let what = format!(
                    "{} ns",
                    s.name().trim_end_matches("Nanoseconds").to_lowercase()
                );
                v.push((
                    segment(k, s),
                    format!("hostT{k}{}", s.name()),
                    "unsigned32",
                    format!("segment T{k}: {what}"),
                ));
            }
        }
        v.push((
            COMPLETE,
            "hostTimedComplete".into(),
            "unsigned32",
            "bytes timed at every layer".into(),
        ));
        v.push((
            INCOMPLETE,
            "hostTimedIncomplete".into(),
            "unsigned32",
            "bytes some layer did not time".into(),
        ));
        v.push((
            CLOCK_UNCERTAINTY,
            "hostClockUncertaintyNanoseconds".into(),
            "unsigned32",
            "clock alignment bound on T4/T8".into(),
        ));
        v.push((
            FLAGS,
            "hostRecordFlags".into(),
            "unsigned8",
            "1 sender, 2 receiver, 4 two hosts, 8 merged segment".into(),
        ));
        v.push((
            SENDER_AGENT,
            "hostSenderAgent".into(),
            "string",
            "the sender's agent".into(),
        ));
        v.push((
            RECEIVER_AGENT,
            "hostReceiverAgent".into(),
            "string",
            "the receiver's agent".into(),
        ));
        v
    }
}
