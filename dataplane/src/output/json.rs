//! JSON lines: the probe's record schema.
//!
//! Durations are microseconds; absent measurements are `null`, never a fake
//! 0 (see `record::Npm`).

use std::net::IpAddr;

use serde::Serialize;

use super::json_l7::{self, JsonL7};
use super::json_text::{addr, string};
use crate::record::{DirStats, EndReason, FlowRecord, TsRttLeg};

/// The serialised shape of one record (borrowing, no copies of the record).
#[derive(Serialize)]
pub struct JsonRecord<'a> {
    pub client_addr: IpAddr,
    pub client_port: u16,
    pub server_addr: IpAddr,
    pub server_port: u16,
    pub proto: u8,
    pub vlan: Option<u16>,
    pub direction_guessed: bool,
    pub start_us: u64,
    pub end_us: u64,
    pub end_reason: EndReason,
    pub record_seq: u32,
    pub tos: u8,
    pub c2s: &'a DirStats,
    pub s2c: &'a DirStats,
    pub rtt_us: Option<u32>,
    pub server_net_us: Option<u32>,
    pub client_net_us: Option<u32>,
    pub srt_us: Option<u32>,
    pub srt_count: u32,
    pub srt_min_us: Option<u32>,
    pub srt_mean_us: Option<u32>,
    pub srt_max_us: Option<u32>,
    pub tls: bool,
    /// Timestamp RTT per leg over the record's interval; `null` when no
    /// segment of the flow carried the option.
    pub ts_rtt_server: Option<TsRttLeg>,
    pub ts_rtt_client: Option<TsRttLeg>,
    /// What the flow is (`json_l7`).
    #[serde(flatten)]
    pub l7: JsonL7,
    /// The local process that opened the connection (`xdprobe run` with
    /// `[host] connlat`); the key is left out where that is not known, so
    /// file output keeps its schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<JsonProcess<'a>>,
}

/// `process`: PID, task name and connect latency of the local client.
#[derive(Serialize)]
pub struct JsonProcess<'a> {
    pub pid: u32,
    pub comm: &'a str,
    pub connect_us: u32,
}

impl<'a> From<&'a FlowRecord> for JsonRecord<'a> {
    fn from(r: &'a FlowRecord) -> Self {
        JsonRecord {
            client_addr: r.client_addr,
            client_port: r.client_port,
            server_addr: r.server_addr,
            server_port: r.server_port,
            proto: r.proto,
            vlan: r.vlan,
            direction_guessed: r.direction_guessed,
            start_us: r.start.as_micros(),
            end_us: r.end.as_micros(),
            end_reason: r.end_reason,
            record_seq: r.seq_in_flow,
            tos: r.tos,
            c2s: &r.c2s,
            s2c: &r.s2c,
            rtt_us: r.npm.rtt_us,
            server_net_us: r.npm.server_net_us,
            client_net_us: r.npm.client_net_us,
            srt_us: r.npm.srt_us,
            srt_count: r.npm.srt_count,
            srt_min_us: r.npm.srt_min_us,
            srt_mean_us: r.npm.srt_mean_us,
            srt_max_us: r.npm.srt_max_us,
            tls: r.npm.tls,
            ts_rtt_server: r.npm.ts_rtt.map(|t| t.server),
            ts_rtt_client: r.npm.ts_rtt.map(|t| t.client),
            l7: JsonL7::of(r.app, r.l7.as_ref()),
            process: r.process.as_ref().map(|p| JsonProcess {
                pid: p.pid,
                comm: p.comm(),
                connect_us: p.connect_us,
            }),
        }
    }
}

/// Appends one record as a JSON line to `buf`, byte for byte what
/// serde_json makes of [`JsonRecord`] (the tests hold it to that), but
/// written directly: the keys are constant text, numbers go through `itoa`
/// on the stack, addresses through their `Display` into the same buffer.
/// serde_json's `to_string` allocated and grew a fresh `String` per record;
/// at 400 k records a second that was a third of a file run.
pub(super) fn line(buf: &mut Vec<u8>, r: &FlowRecord) {
    let mut n = itoa::Buffer::new();
    buf.extend_from_slice(b"{\"client_addr\":\"");
    addr(buf, r.client_addr);
    buf.extend_from_slice(b"\",\"client_port\":");
    buf.extend_from_slice(n.format(r.client_port).as_bytes());
    buf.extend_from_slice(b",\"server_addr\":\"");
    addr(buf, r.server_addr);
    buf.extend_from_slice(b"\",\"server_port\":");
    buf.extend_from_slice(n.format(r.server_port).as_bytes());
    buf.extend_from_slice(b",\"proto\":");
    buf.extend_from_slice(n.format(r.proto).as_bytes());
    buf.extend_from_slice(b",\"vlan\":");
    opt(buf, &mut n, r.vlan);
    buf.extend_from_slice(b",\"direction_guessed\":");
    boolean(buf, r.direction_guessed);
    buf.extend_from_slice(b",\"start_us\":");
    buf.extend_from_slice(n.format(r.start.as_micros()).as_bytes());
    buf.extend_from_slice(b",\"end_us\":");
    buf.extend_from_slice(n.format(r.end.as_micros()).as_bytes());
    buf.extend_from_slice(b",\"end_reason\":\"");
    buf.extend_from_slice(end_reason(r.end_reason).as_bytes());
    buf.extend_from_slice(b"\",\"record_seq\":");
    buf.extend_from_slice(n.format(r.seq_in_flow).as_bytes());
    buf.extend_from_slice(b",\"tos\":");
    buf.extend_from_slice(n.format(r.tos).as_bytes());
    buf.extend_from_slice(b",\"c2s\":");
    dir(buf, &mut n, &r.c2s);
    buf.extend_from_slice(b",\"s2c\":");
    dir(buf, &mut n, &r.s2c);
    let m = &r.npm;
    buf.extend_from_slice(b",\"rtt_us\":");
    opt(buf, &mut n, m.rtt_us);
    buf.extend_from_slice(b",\"server_net_us\":");
    opt(buf, &mut n, m.server_net_us);
    buf.extend_from_slice(b",\"client_net_us\":");
    opt(buf, &mut n, m.client_net_us);
    buf.extend_from_slice(b",\"srt_us\":");
    opt(buf, &mut n, m.srt_us);
    buf.extend_from_slice(b",\"srt_count\":");
    buf.extend_from_slice(n.format(m.srt_count).as_bytes());
    buf.extend_from_slice(b",\"srt_min_us\":");
    opt(buf, &mut n, m.srt_min_us);
    buf.extend_from_slice(b",\"srt_mean_us\":");
    opt(buf, &mut n, m.srt_mean_us);
    buf.extend_from_slice(b",\"srt_max_us\":");
    opt(buf, &mut n, m.srt_max_us);
    buf.extend_from_slice(b",\"tls\":");
    boolean(buf, m.tls);
    buf.extend_from_slice(b",\"ts_rtt_server\":");
    leg(buf, &mut n, m.ts_rtt.as_ref().map(|t| &t.server));
    buf.extend_from_slice(b",\"ts_rtt_client\":");
    leg(buf, &mut n, m.ts_rtt.as_ref().map(|t| &t.client));
    json_l7::keys(buf, &mut n, r.app, r.l7.as_ref());
    if let Some(p) = &r.process {
        buf.extend_from_slice(b",\"process\":{\"pid\":");
        buf.extend_from_slice(n.format(p.pid).as_bytes());
        buf.extend_from_slice(b",\"comm\":");
        string(buf, p.comm());
        buf.extend_from_slice(b",\"connect_us\":");
        buf.extend_from_slice(n.format(p.connect_us).as_bytes());
        buf.push(b'}');
    }
    buf.extend_from_slice(b"}\n");
}

/// The `rename_all = "snake_case"` names serde gives [`EndReason`].
fn end_reason(e: EndReason) -> &'static str {
    match e {
        EndReason::Idle => "idle",
        EndReason::Active => "active",
        EndReason::End => "end",
        EndReason::Forced => "forced",
        EndReason::Evicted => "evicted",
    }
}

fn boolean(buf: &mut Vec<u8>, b: bool) {
    buf.extend_from_slice(if b { b"true" } else { b"false" });
}

fn opt<I: itoa::Integer>(buf: &mut Vec<u8>, n: &mut itoa::Buffer, v: Option<I>) {
    match v {
        Some(v) => buf.extend_from_slice(n.format(v).as_bytes()),
        None => buf.extend_from_slice(b"null"),
    }
}

/// A counter: most are 0 in most records, which skips the formatter.
fn count<I: itoa::Integer + Default + PartialEq>(buf: &mut Vec<u8>, n: &mut itoa::Buffer, v: I) {
    if v == I::default() {
        buf.push(b'0');
    } else {
        buf.extend_from_slice(n.format(v).as_bytes());
    }
}

fn dir(buf: &mut Vec<u8>, n: &mut itoa::Buffer, d: &DirStats) {
    buf.extend_from_slice(b"{\"packets\":");
    count(buf, n, d.packets);
    buf.extend_from_slice(b",\"bytes\":");
    count(buf, n, d.bytes);
    buf.extend_from_slice(b",\"retrans\":");
    count(buf, n, d.retrans);
    buf.extend_from_slice(b",\"retrans_fast\":");
    count(buf, n, d.retrans_fast);
    buf.extend_from_slice(b",\"retrans_spurious\":");
    count(buf, n, d.retrans_spurious);
    buf.extend_from_slice(b",\"retrans_other\":");
    count(buf, n, d.retrans_other);
    buf.extend_from_slice(b",\"ooo\":");
    count(buf, n, d.ooo);
    buf.extend_from_slice(b",\"keepalive\":");
    count(buf, n, d.keepalive);
    buf.extend_from_slice(b",\"dup_ack\":");
    count(buf, n, d.dup_ack);
    buf.extend_from_slice(b",\"zero_window\":");
    count(buf, n, d.zero_window);
    buf.extend_from_slice(b",\"window_full\":");
    count(buf, n, d.window_full);
    buf.push(b'}');
}

fn leg(buf: &mut Vec<u8>, n: &mut itoa::Buffer, l: Option<&TsRttLeg>) {
    let Some(l) = l else {
        buf.extend_from_slice(b"null");
        return;
    };
    buf.extend_from_slice(b"{\"count\":");
    count(buf, n, l.count);
    buf.extend_from_slice(b",\"min_us\":");
    opt(buf, n, l.min_us);
    buf.extend_from_slice(b",\"mean_us\":");
    opt(buf, n, l.mean_us);
    buf.extend_from_slice(b",\"max_us\":");
    opt(buf, n, l.max_us);
    buf.extend_from_slice(b",\"p50_us\":");
    opt(buf, n, l.p50_us);
    buf.extend_from_slice(b",\"p90_us\":");
    opt(buf, n, l.p90_us);
    buf.extend_from_slice(b",\"missed\":");
    count(buf, n, l.missed);
    buf.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Npm;
    use crate::time::Timestamp;
    use std::net::Ipv6Addr;

    #[test]
    fn schema_keys_and_nulls() {
        let rec = FlowRecord {
            client_addr: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            client_port: 40000,
            server_addr: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
            server_port: 443,
            proto: 6,
            vlan: None,
            direction_guessed: false,
            start: Timestamp(1_700_000_000_123_456_789),
            end: Timestamp(1_700_000_001_000_000_499),
            end_reason: EndReason::Idle,
            tos: 0,
            c2s: DirStats {
                packets: 3,
                bytes: 180,
                ..Default::default()
            },
            s2c: DirStats::default(),
            npm: Npm {
                rtt_us: Some(15000),
                srt_us: Some(0),
                ..Default::default()
            },
            seq_in_flow: 0,
            process: None,
            app: None,
            l7: None,
        };
        let mut s = Vec::new();
        line(&mut s, &rec);
        let v: serde_json::Value = serde_json::from_slice(&s).unwrap();
        assert_eq!(v["client_addr"], "2001:db8::1");
        assert_eq!(v["start_us"], 1_700_000_000_123_457u64);
        assert_eq!(v["end_us"], 1_700_000_001_000_000u64);
        assert_eq!(v["end_reason"], "idle");
        assert_eq!(v["vlan"], serde_json::Value::Null);
        assert_eq!(v["server_net_us"], serde_json::Value::Null);
        assert_eq!(v["rtt_us"], 15000);
        assert_eq!(v["c2s"]["packets"], 3);
        assert_eq!(v["c2s"]["bytes"], 180);
        assert_eq!(v["c2s"]["retrans"], 0);
        assert!(v["c2s"].get("tcp_flags").is_none());
        assert_eq!(v["ts_rtt_server"], serde_json::Value::Null);
        assert_eq!(v["ts_rtt_client"], serde_json::Value::Null);
        assert!(
            v.get("process").is_none(),
            "no process key from packets alone"
        );
        let mut with = rec.clone();
        with.process = Some(crate::record::Process::new(
            4242,
            "curl-with-a-long-name",
            10_250,
        ));
        s.clear();
        line(&mut s, &with);
        let v: serde_json::Value = serde_json::from_slice(&s).unwrap();
        assert_eq!(v["process"]["pid"], 4242);
        assert_eq!(
            v["process"]["comm"], "curl-with-a-lon",
            "15 bytes, as the kernel keeps"
        );
        assert_eq!(v["process"]["connect_us"], 10_250);
    }

    #[test]
    fn ts_rtt_legs_are_objects_with_nulls_for_no_sample() {
        let mut rec = FlowRecord {
            client_addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
            client_port: 1,
            server_addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
            server_port: 2,
            direction_guessed: true,
            end_reason: EndReason::Active,
            seq_in_flow: 3,
            ..FlowRecord::blank(6)
        };
        rec.npm.ts_rtt = Some(TsRttRecord {
            server: TsRttLeg {
                count: 3,
                min_us: Some(10),
                mean_us: Some(20),
                max_us: Some(30),
                p50_us: Some(20),
                p90_us: Some(28),
                missed: 1,
            },
            client: TsRttLeg::default(),
        });
        let mut s = Vec::new();
        line(&mut s, &rec);
        let v: serde_json::Value = serde_json::from_slice(&s).unwrap();
        let srv = &v["ts_rtt_server"];
        assert_eq!(
            [
                &srv["count"],
                &srv["min_us"],
                &srv["mean_us"],
                &srv["max_us"],
                &srv["p50_us"],
                &srv["p90_us"],
                &srv["missed"]
            ],
            [3, 10, 20, 30, 20, 28, 1]
                .map(serde_json::Value::from)
                .each_ref()
        );
        assert_eq!(v["ts_rtt_client"]["count"], 0);
        assert_eq!(v["ts_rtt_client"]["p50_us"], serde_json::Value::Null);
    }

    use crate::record::{Process, TsRttLeg, TsRttRecord};
    use std::net::Ipv4Addr;

    /// Both families, with the IPv6 text forms that compress or embed IPv4.
    fn addrs() -> [IpAddr; 8] {
        [
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            IpAddr::V4(Ipv4Addr::new(0, 0, 0, 0)),
            IpAddr::V4(Ipv4Addr::new(255, 255, 255, 255)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 1, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv4Addr::new(198, 51, 100, 7).to_ipv6_mapped()),
            IpAddr::V6(Ipv6Addr::new(
                0x2001, 0xdb8, 0xffff, 0xabcd, 0, 0, 0xffff, 0,
            )),
        ]
    }

    const REASONS: [EndReason; 5] = [
        EndReason::Idle,
        EndReason::Active,
        EndReason::End,
        EndReason::Forced,
        EndReason::Evicted,
    ];

    /// Process names, some of which need escaping.
    const NAMES: [&str; 5] = [
        "curl",
        "quote\"back\\slash",
        "tab\tnl\ncr\r\u{1}\u{1f}",
        "\u{8}\u{c}\u{7f}é",
        "",
    ];

    /// An all-zero direction and one with extreme counters.
    fn dirs() -> [DirStats; 2] {
        [
            DirStats::default(),
            DirStats {
                packets: u64::MAX,
                bytes: 1_234_567_890_123,
                tcp_flags: 0x1b,
                retrans: 9,
                retrans_fast: 2,
                retrans_spurious: 3,
                retrans_other: 4,
                ooo: 5,
                keepalive: 6,
                dup_ack: 7,
                zero_window: 8,
                window_full: u32::MAX,
            },
        ]
    }

    /// No timestamp RTT, a full leg, a partial one, both empty.
    fn ts_rtt(i: usize) -> Option<TsRttRecord> {
        let full_leg = TsRttLeg {
            count: u32::MAX,
            min_us: Some(0),
            mean_us: Some(12_345),
            max_us: Some(u32::MAX),
            p50_us: Some(7),
            p90_us: Some(99_999),
            missed: 3,
        };
        let partial_leg = TsRttLeg {
            count: 1,
            min_us: Some(10),
            mean_us: None,
            max_us: Some(10),
            p50_us: None,
            p90_us: None,
            missed: 0,
        };
        match i % 4 {
            0 => None,
            1 => Some(TsRttRecord {
                server: full_leg,
                client: TsRttLeg::default(),
            }),
            2 => Some(TsRttRecord {
                server: partial_leg,
                client: full_leg,
            }),
            _ => Some(TsRttRecord::default()),
        }
    }

    /// Record `i` of the 40 that between them take every optional field
    /// both ways.
    fn varied(i: usize) -> FlowRecord {
        let addrs = addrs();
        let dirs = dirs();
        let some = |v: u32| (!i.is_multiple_of(3)).then_some(v);
        FlowRecord {
            client_addr: addrs[i % addrs.len()],
            client_port: [0, 1, 443, u16::MAX][i % 4],
            server_addr: addrs[(i * 3 + 1) % addrs.len()],
            server_port: [53, u16::MAX, 0][i % 3],
            proto: [6, 17, 1, 58, 132, 255, 0][i % 7],
            vlan: [None, Some(0), Some(4095), Some(100)][i % 4],
            direction_guessed: i % 2 == 1,
            start: Timestamp(i as u64 * 1_000_000_007 + 499),
            end: Timestamp(u64::MAX - i as u64),
            end_reason: REASONS[i % REASONS.len()],
            tos: [0, 0xb8, 0xff][i % 3],
            c2s: dirs[i % 2],
            s2c: dirs[(i / 2) % 2],
            npm: Npm {
                rtt_us: some(15_000),
                server_net_us: some(u32::MAX),
                client_net_us: i.is_multiple_of(5).then_some(0),
                srt_us: [None, Some(0), Some(250)][i % 3],
                srt_count: [0, 1, u32::MAX][i % 3],
                srt_min_us: some(1),
                srt_mean_us: (i % 4 == 1).then_some(2),
                srt_max_us: some(3),
                tls: i % 4 == 2,
                ts_rtt: ts_rtt(i),
            },
            seq_in_flow: [0, 1, u32::MAX][i % 3],
            process: (!i.is_multiple_of(6))
                .then(|| Process::new(i as u32 * 1000, NAMES[i % NAMES.len()], 10_250)),
            app: super::super::json_l7::tests::app(i),
            l7: super::super::json_l7::tests::fields(i),
        }
    }

    /// The hand-written lines are byte for byte serde_json's rendering of
    /// [`JsonRecord`], over records that between them take every optional
    /// field both ways, every end reason, both address families (with the
    /// IPv6 text forms that compress or embed IPv4), extreme counters and a
    /// process name that needs escaping.
    #[test]
    fn same_bytes_as_serde_json() {
        let recs: Vec<FlowRecord> = (0..40usize).map(varied).collect();
        let mut got = Vec::new();
        let mut want = Vec::new();
        for r in &recs {
            got.clear();
            line(&mut got, r);
            want.clear();
            serde_json::to_writer(&mut want, &JsonRecord::from(r)).unwrap();
            want.push(b'\n');
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{r:?}"
            );
        }
        // The escapes were exercised, not skipped.
        let all: Vec<u8> = recs
            .iter()
            .flat_map(|r| {
                let mut b = Vec::new();
                line(&mut b, r);
                b
            })
            .collect();
        let text = String::from_utf8(all).unwrap();
        for needle in [
            "\\\"",
            "\\\\",
            "\\t",
            "\\u0001",
            "\\u001f",
            "\\b",
            "\\f",
            "\"vlan\":4095",
            "\"process\"",
        ] {
            assert!(text.contains(needle), "{needle} not in the output");
        }
    }
}
