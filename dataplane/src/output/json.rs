//! JSON lines: the probe's record schema.
//!
//! Durations are microseconds; absent measurements are `null`, never a fake
//! 0 (see `flow::record::Npm`).

use std::io;
use std::net::IpAddr;

use serde::Serialize;

use crate::flow::record::{DirStats, EndReason, FlowRecord, TsRttLeg};

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
            process: r.process.as_ref().map(|p| JsonProcess {
                pid: p.pid,
                comm: p.comm(),
                connect_us: p.connect_us,
            }),
        }
    }
}

pub(super) fn line(buf: &mut String, rec: &FlowRecord) -> io::Result<()> {
    let s = serde_json::to_string(&JsonRecord::from(rec)).map_err(io::Error::other)?;
    buf.push_str(&s);
    buf.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::record::Npm;
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
        };
        let mut s = String::new();
        line(&mut s, &rec).unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
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
        let mut with = rec;
        with.process = Some(crate::flow::record::Process::new(
            4242,
            "curl-with-a-long-name",
            10_250,
        ));
        s.clear();
        line(&mut s, &with).unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["process"]["pid"], 4242);
        assert_eq!(
            v["process"]["comm"], "curl-with-a-lon",
            "15 bytes, as the kernel keeps"
        );
        assert_eq!(v["process"]["connect_us"], 10_250);
    }

    #[test]
    fn ts_rtt_legs_are_objects_with_nulls_for_no_sample() {
        use crate::flow::record::{TsRttLeg, TsRttRecord};
        let mut rec = FlowRecord {
            client_addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
            client_port: 1,
            server_addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
            server_port: 2,
            proto: 6,
            vlan: None,
            direction_guessed: true,
            start: Timestamp(0),
            end: Timestamp(0),
            end_reason: EndReason::Active,
            tos: 0,
            c2s: DirStats::default(),
            s2c: DirStats::default(),
            npm: Npm::default(),
            seq_in_flow: 3,
            process: None,
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
        let mut s = String::new();
        line(&mut s, &rec).unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
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
}
