//! JSON lines back into records: the reader of the schema `json` writes,
//! beside it so the two cannot drift apart (the test writes every key and
//! reads it back). The demo and tools that read `xdprobe run --json` use
//! it instead of a schema of their own.

use std::net::IpAddr;

use serde_json::Value;

use crate::record::{DirStats, EndReason, FlowRecord, Npm, Process, TsRttLeg, TsRttRecord};
use crate::time::Timestamp;
use xdprobe_l7::fields::{DnsInfo, HttpInfo, QuicInfo, SrtSummary, Str, TlsInfo};
use xdprobe_l7::{App, L7Fields};

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

/// One JSON-lines record (the schema in README.md) back into the record;
/// `None` when a key is missing or out of range. `tcp_flags` is not in
/// the schema and reads as 0.
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
        process: match v.get("process") {
            None => None,
            Some(p) => Some(Process::new(
                u32_of(p, "pid")?,
                p.get("comm")?.as_str()?,
                u32_of(p, "connect_us")?,
            )),
        },
        app: v
            .get("app")
            .and_then(Value::as_str)
            .and_then(|a| App::ALL.into_iter().find(|x| x.as_str() == a)),
        l7: l7_fields(v),
    })
}

/// A string key as its bytes (the text the writer made of them).
fn bytes(v: &Value, k: &str) -> Option<Str> {
    Some(v.get(k)?.as_str()?.as_bytes().into())
}

/// A hex key (`0x0304`).
fn hex(v: &Value, k: &str) -> Option<u32> {
    u32::from_str_radix(v.get(k)?.as_str()?.strip_prefix("0x")?, 16).ok()
}

/// A list of names back into ALPN wire form.
fn alpn(v: &Value, k: &str) -> Option<Str> {
    let mut w = Vec::new();
    for p in v.get(k)?.as_array()? {
        let p = p.as_str()?.as_bytes();
        w.push(u8::try_from(p.len()).ok()?);
        w.extend_from_slice(p);
    }
    Some(w.into())
}

fn fixed<const N: usize>(s: Option<&str>, hexed: bool) -> Option<[u8; N]> {
    let s = s?;
    let mut out = [0u8; N];
    if hexed {
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
    } else {
        out.copy_from_slice(s.as_bytes().get(..N)?);
    }
    Some(out)
}

/// The L7 fields of a JSON record: which set by which keys are not null.
fn l7_fields(v: &Value) -> Option<L7Fields> {
    let u16_of = |k: &str| u16::try_from(u64_of(v, k)?).ok();
    let ja4 = fixed::<36>(v.get("tls_ja4").and_then(Value::as_str), false);
    if let Some(version) = hex(v, "quic_version") {
        return Some(L7Fields::Quic(Box::new(QuicInfo {
            version,
            sni: bytes(v, "quic_sni"),
            alpn: alpn(v, "quic_alpn"),
            ja4,
        })));
    }
    if let Some(requests) = u32_of(v, "http_requests") {
        let class = |i: usize| u32_of(v, &format!("http_status_{i}xx")).unwrap_or(0);
        return Some(L7Fields::Http(Box::new(HttpInfo {
            method: bytes(v, "http_method"),
            host: bytes(v, "http_host"),
            target: bytes(v, "http_target"),
            user_agent: bytes(v, "http_user_agent"),
            status: u16_of("http_status"),
            requests,
            status_class: [1, 2, 3, 4, 5].map(class),
            srt: SrtSummary::default(),
        })));
    }
    if let Some(noerror) = u32_of(v, "dns_rcode_noerror") {
        let rc = |k: &str| u32_of(v, k).unwrap_or(0);
        return Some(L7Fields::Dns(Box::new(DnsInfo {
            qname: bytes(v, "dns_qname"),
            qtype: u16_of("dns_qtype"),
            qclass: u16_of("dns_qclass"),
            rcode: u64_of(v, "dns_rcode").and_then(|x| u8::try_from(x).ok()),
            answers: u16_of("dns_answers"),
            answer_addr: v
                .get("dns_answer_addr")?
                .as_str()
                .and_then(|a| a.parse().ok()),
            rcodes: [
                noerror,
                rc("dns_rcode_nxdomain"),
                rc("dns_rcode_servfail"),
                rc("dns_rcode_other"),
            ],
        })));
    }
    let tls = TlsInfo {
        sni: bytes(v, "tls_sni"),
        alpn: alpn(v, "tls_alpn"),
        version: hex(v, "tls_version").and_then(|x| u16::try_from(x).ok()),
        cipher: hex(v, "tls_cipher").and_then(|x| u16::try_from(x).ok()),
        ja3: fixed::<16>(v.get("tls_ja3").and_then(Value::as_str), true),
        ja4,
        cert_cn: bytes(v, "tls_cert_cn"),
    };
    (tls != TlsInfo::default()
        || v.get("app")
            .and_then(Value::as_str)
            .is_some_and(|a| a.starts_with("tls")))
    .then(|| L7Fields::Tls(Box::new(tls)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Format, RecordWriter};

    /// An HTTP record with every key the writer writes set, process and
    /// timestamp RTT included.
    fn full_record() -> FlowRecord {
        FlowRecord {
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
            process: Some(Process::new(4242, "curl", 10_250)),
            app: Some(App::Http),
            l7: Some(L7Fields::Http(Box::new(HttpInfo {
                method: Some(b"GET"[..].into()),
                host: Some(b"web.example"[..].into()),
                target: Some(b"/x"[..].into()),
                user_agent: None,
                status: Some(200),
                requests: 2,
                status_class: [0, 2, 0, 0, 0],
                srt: SrtSummary::default(),
            }))),
        }
    }

    /// The record as the JSON writer writes it, read back as a value.
    fn written(rec: &FlowRecord) -> Value {
        let mut w = RecordWriter::new(Vec::new(), Format::Json);
        w.write(rec).unwrap();
        serde_json::from_slice(&w.into_inner()).unwrap()
    }

    #[test]
    fn every_key_the_writer_writes_reads_back() {
        // A record written by the JSON writer reads back into the same
        // record (tcp_flags is not in the JSON schema), process included.
        let rec = full_record();
        let v = written(&rec);
        let back = from_json(&v).unwrap();
        // Response times are written as min/mean/max and read as none.
        assert_eq!(back, rec);
        let mut bare = rec;
        bare.process = None;
        bare.client_addr = "2001:db8::1".parse().unwrap();
        bare.vlan = None;
        bare.npm.ts_rtt = None;
        bare.app = Some(App::TlsH2);
        bare.l7 = Some(L7Fields::Tls(Box::new(TlsInfo {
            sni: Some(b"www.example.com"[..].into()),
            alpn: Some(b"\x02h2"[..].into()),
            version: Some(0x0304),
            cipher: Some(0x1301),
            ja3: Some([7; 16]),
            ja4: Some(*b"t13d1516h2_8daaf6152771_e5627efa2ab1"),
            cert_cn: None,
        })));
        let v = written(&bare);
        assert_eq!(from_json(&v), Some(bare.clone()));
        bare.app = Some(App::Dns);
        bare.l7 = Some(L7Fields::Dns(Box::new(DnsInfo {
            qname: Some(b"example.org"[..].into()),
            qtype: Some(1),
            qclass: Some(1),
            rcode: Some(0),
            answers: Some(1),
            answer_addr: Some("192.0.2.9".parse().unwrap()),
            rcodes: [1, 0, 0, 0],
        })));
        let v = written(&bare);
        assert_eq!(from_json(&v), Some(bare));
        assert_eq!(from_json(&serde_json::json!({"proto": 6})), None);
    }
}
