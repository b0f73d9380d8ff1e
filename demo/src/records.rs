//! The probe's JSON records back into [`FlowRecord`]s, so the demo prints
//! them with the very table writer `xdprobe pcap --format table` uses, and
//! a few lines saying what to look at.

use std::{io::Write, net::IpAddr};

use serde_json::Value;
use xdprobe_dataplane::{
    EndReason, FlowRecord, Timestamp,
    flow::record::{DirStats, Npm, TsRttLeg, TsRttRecord},
    output::{Format, RecordWriter},
};

use super::traffic::{DNS_PORT, DOWNLOAD_PORT, HTTP_PORT, REFUSED_PORT, UPLOAD_PORT};

fn u64_of(v: &Value, k: &str) -> Option<u64> {
    v.get(k)?.as_u64()
}

fn u32_of(v: &Value, k: &str) -> Option<u32> {
    u32::try_from(u64_of(v, k)?).ok()
}

/// `null` (not measured) and absent are both `None`.
fn opt_u32(v: &Value, k: &str) -> Option<u32> {
    u32_of(v, k)
}

/// One timestamp-RTT leg object; `None` for `null` or a malformed one.
fn ts_leg(v: &Value) -> Option<TsRttLeg> {
    Some(TsRttLeg {
        count: u32_of(v, "count")?,
        min_us: opt_u32(v, "min_us"),
        mean_us: opt_u32(v, "mean_us"),
        max_us: opt_u32(v, "max_us"),
        p50_us: opt_u32(v, "p50_us"),
        p90_us: opt_u32(v, "p90_us"),
        missed: u32_of(v, "missed")?,
    })
}

/// Both legs, or `None` (the flow had no timestamp option).
fn ts_rtt(v: &Value) -> Option<TsRttRecord> {
    Some(TsRttRecord {
        server: ts_leg(v.get("ts_rtt_server")?)?,
        client: ts_leg(v.get("ts_rtt_client")?)?,
    })
}

fn dir(v: &Value) -> Option<DirStats> {
    Some(DirStats {
        packets: u64_of(v, "packets")?,
        bytes: u64_of(v, "bytes")?,
        tcp_flags: 0,
        retrans: u32_of(v, "retrans")?,
        retrans_fast: u32_of(v, "retrans_fast")?,
        retrans_spurious: u32_of(v, "retrans_spurious")?,
        retrans_other: u32_of(v, "retrans_other")?,
        ooo: u32_of(v, "ooo")?,
        keepalive: u32_of(v, "keepalive")?,
        dup_ack: u32_of(v, "dup_ack")?,
        zero_window: u32_of(v, "zero_window")?,
        window_full: u32_of(v, "window_full")?,
    })
}

fn end_reason(s: &str) -> Option<EndReason> {
    Some(match s {
        "idle" => EndReason::Idle,
        "active" => EndReason::Active,
        "end" => EndReason::End,
        "forced" => EndReason::Forced,
        "evicted" => EndReason::Evicted,
        _ => return None,
    })
}

/// One record of `xdprobe run --json` (the schema in README.md); `None`
/// when a key is missing or out of range.
pub fn from_json(v: &Value) -> Option<FlowRecord> {
    let addr = |k: &str| v.get(k)?.as_str()?.parse::<IpAddr>().ok();
    let port = |k: &str| u16::try_from(u64_of(v, k)?).ok();
    Some(FlowRecord {
        client_addr: addr("client_addr")?,
        client_port: port("client_port")?,
        server_addr: addr("server_addr")?,
        server_port: port("server_port")?,
        proto: u8::try_from(u64_of(v, "proto")?).ok()?,
        vlan: v
            .get("vlan")
            .and_then(Value::as_u64)
            .and_then(|x| u16::try_from(x).ok()),
        direction_guessed: v.get("direction_guessed")?.as_bool()?,
        start: Timestamp::from_micros(u64_of(v, "start_us")?),
        end: Timestamp::from_micros(u64_of(v, "end_us")?),
        end_reason: end_reason(v.get("end_reason")?.as_str()?)?,
        tos: u8::try_from(u64_of(v, "tos")?).ok()?,
        c2s: dir(v.get("c2s")?)?,
        s2c: dir(v.get("s2c")?)?,
        npm: Npm {
            rtt_us: opt_u32(v, "rtt_us"),
            server_net_us: opt_u32(v, "server_net_us"),
            client_net_us: opt_u32(v, "client_net_us"),
            srt_us: opt_u32(v, "srt_us"),
            srt_count: u32_of(v, "srt_count")?,
            srt_min_us: opt_u32(v, "srt_min_us"),
            srt_mean_us: opt_u32(v, "srt_mean_us"),
            srt_max_us: opt_u32(v, "srt_max_us"),
            tls: v.get("tls")?.as_bool()?,
            ts_rtt: ts_rtt(v),
        },
        seq_in_flow: u32_of(v, "record_seq")?,
        process: None,
    })
}

/// The records as the aligned table, in start order.
pub fn write_table(recs: &[FlowRecord], out: impl Write) -> std::io::Result<()> {
    let mut sorted: Vec<&FlowRecord> = recs.iter().collect();
    sorted.sort_by_key(|r| (r.start, r.client_port));
    let mut w = RecordWriter::new(out, Format::Table);
    for r in sorted {
        w.write(r)?;
    }
    w.flush()
}

/// What a flow is in the demo's traffic, by its server port.
pub fn role(r: &FlowRecord) -> &'static str {
    match (r.proto, r.server_port) {
        (6, HTTP_PORT) => "HTTP-like",
        (6, UPLOAD_PORT) => "bulk upload",
        (6, DOWNLOAD_PORT) => "bulk download",
        (6, REFUSED_PORT) => "refused",
        (17, DNS_PORT) => "DNS",
        _ => "other",
    }
}

fn ms(us: u32) -> String {
    format!("{:.2} ms", f64::from(us) / 1e3)
}

fn median(mut v: Vec<u32>) -> Option<u32> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// Settings the highlights compare the measurements with.
pub struct Expect {
    pub delay_ms: u64,
    pub think_ms: u64,
    pub dns_delay_ms: u64,
}

/// A few lines that point at the measurements and what they should be.
pub fn highlights(recs: &[FlowRecord], e: &Expect) -> Vec<String> {
    let mut out = Vec::new();
    let rtts: Vec<u32> = recs
        .iter()
        .filter(|r| r.proto == 6)
        .filter_map(|r| r.npm.rtt_us)
        .collect();
    if let Some(m) = median(rtts.clone()) {
        out.push(format!(
            "handshake RTT: median {} over {} TCP flows (the bridge delays {} ms each way: expect ≈ {} ms)",
            ms(m),
            rtts.len(),
            e.delay_ms,
            2 * e.delay_ms
        ));
    }
    let srt = |role_name: &str| -> Vec<u32> {
        recs.iter()
            .filter(|r| role(r) == role_name && r.npm.srt_count > 0)
            .filter_map(|r| r.npm.srt_us)
            .collect()
    };
    if let Some(m) = median(srt("HTTP-like")) {
        out.push(format!(
            "server response time, HTTP-like: median {} (the server thinks {} ms)",
            ms(m),
            e.think_ms
        ));
    }
    if let Some(m) = median(srt("DNS")) {
        out.push(format!(
            "server response time, DNS: median {} (the responder takes {} ms)",
            ms(m),
            e.dns_delay_ms
        ));
    }
    let rtx: u32 = recs.iter().map(|r| r.c2s.retrans + r.s2c.retrans).sum();
    let ooo: u32 = recs.iter().map(|r| r.c2s.ooo + r.s2c.ooo).sum();
    let bulk: Vec<String> = recs
        .iter()
        .filter(|r| matches!(role(r), "bulk upload" | "bulk download"))
        .map(|r| format!("{} {}", role(r), r.c2s.retrans + r.s2c.retrans))
        .collect();
    out.push(format!(
        "retransmissions: {rtx} in all ({}), out-of-order: {ooo}",
        bulk.join(", ")
    ));
    if let Some(r) = recs.iter().find(|r| role(r) == "refused") {
        out.push(format!(
            "refused connection: {}:{} -> {}:{}, {} packets, RTT {}",
            r.client_addr,
            r.client_port,
            r.server_addr,
            r.server_port,
            r.c2s.packets + r.s2c.packets,
            r.npm.rtt_us.map_or_else(|| "-".into(), ms)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_schema_round_trips_through_the_dataplane_writer() {
        // A record written by the dataplane's own JSON writer reads back
        // into the same record (tcp_flags is not in the JSON schema).
        let rec = FlowRecord {
            client_addr: "192.0.2.1".parse().unwrap(),
            client_port: 40000,
            server_addr: "192.0.2.2".parse().unwrap(),
            server_port: 80,
            proto: 6,
            vlan: Some(7),
            direction_guessed: false,
            start: Timestamp::from_micros(1_700_000_000_000_001),
            end: Timestamp::from_micros(1_700_000_000_500_000),
            end_reason: EndReason::End,
            tos: 0,
            c2s: DirStats {
                packets: 5,
                bytes: 400,
                retrans: 1,
                retrans_fast: 1,
                ..Default::default()
            },
            s2c: DirStats {
                packets: 4,
                bytes: 5000,
                ooo: 2,
                ..Default::default()
            },
            npm: Npm {
                rtt_us: Some(10_100),
                server_net_us: Some(100),
                client_net_us: Some(10_000),
                srt_us: Some(20_050),
                srt_count: 3,
                srt_min_us: Some(20_010),
                srt_mean_us: Some(20_040),
                srt_max_us: Some(20_080),
                tls: false,
                ts_rtt: Some(TsRttRecord {
                    server: TsRttLeg {
                        count: 5,
                        min_us: Some(80),
                        mean_us: Some(100),
                        max_us: Some(140),
                        p50_us: Some(95),
                        p90_us: Some(130),
                        missed: 1,
                    },
                    client: TsRttLeg::default(),
                }),
            },
            seq_in_flow: 0,
            process: None,
        };
        let mut w = RecordWriter::new(Vec::new(), Format::Json);
        w.write(&rec).unwrap();
        let line = String::from_utf8(w.into_inner()).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(from_json(&v), Some(rec));
        assert_eq!(from_json(&serde_json::json!({"proto": 6})), None);
    }
}
