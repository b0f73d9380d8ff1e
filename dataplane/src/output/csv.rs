//! CSV with a header line; the columns of the JSON schema, flattened.

use std::fmt::Write;

use crate::record::{DirStats, FlowRecord, TsRttLeg};

const DIR_COLS: &str = "packets,bytes,retrans,retrans_fast,retrans_spurious,retrans_other,ooo,keepalive,dup_ack,zero_window,window_full";

pub(super) fn header(buf: &mut String) {
    let c2s: Vec<String> = DIR_COLS.split(',').map(|c| format!("c2s_{c}")).collect();
    let s2c: Vec<String> = DIR_COLS.split(',').map(|c| format!("s2c_{c}")).collect();
    let _ = writeln!(
        buf,
        "client_addr,client_port,server_addr,server_port,proto,vlan,direction_guessed,start_us,end_us,end_reason,{},{},rtt_us,server_net_us,client_net_us,srt_us,srt_count,srt_min_us,srt_mean_us,srt_max_us,tls,{},{}",
        c2s.join(","),
        s2c.join(","),
        leg_cols("ts_rtt_server"),
        leg_cols("ts_rtt_client")
    );
    buf.pop();
    let _ = writeln!(buf, ",{}", L7_COLS.join(","));
}

/// The L7 columns: the JSON keys (`json_l7`), ALPN lists joined by `;`.
const L7_COLS: [&str; 35] = [
    "app",
    "tls_sni",
    "tls_alpn",
    "tls_version",
    "tls_cipher",
    "tls_ja3",
    "tls_ja4",
    "tls_cert_cn",
    "quic_version",
    "quic_sni",
    "quic_alpn",
    "http_method",
    "http_host",
    "http_target",
    "http_user_agent",
    "http_status",
    "http_requests",
    "http_status_1xx",
    "http_status_2xx",
    "http_status_3xx",
    "http_status_4xx",
    "http_status_5xx",
    "http_srt_min_us",
    "http_srt_mean_us",
    "http_srt_max_us",
    "dns_qname",
    "dns_qtype",
    "dns_qclass",
    "dns_rcode",
    "dns_answers",
    "dns_answer_addr",
    "dns_rcode_noerror",
    "dns_rcode_nxdomain",
    "dns_rcode_servfail",
    "dns_rcode_other",
];

/// A CSV field: quoted (RFC 4180) when it holds a comma, quote or line
/// break.
fn field(buf: &mut String, v: &str) {
    if v.contains([',', '"', '\n', '\r']) {
        buf.push('"');
        buf.push_str(&v.replace('"', "\"\""));
        buf.push('"');
    } else {
        buf.push_str(v);
    }
}

fn l7(buf: &mut String, r: &FlowRecord) {
    if r.app.is_none() && r.l7.is_none() {
        buf.push_str(&",".repeat(L7_COLS.len()));
        return;
    }
    let j = super::JsonL7::of(r.app, r.l7.as_ref());
    let list = |l: &Option<Vec<String>>| l.as_ref().map(|v| v.join(";"));
    let vals: [Option<String>; 35] = [
        j.app.map(str::to_string),
        j.tls_sni,
        list(&j.tls_alpn),
        j.tls_version,
        j.tls_cipher,
        j.tls_ja3,
        j.tls_ja4,
        j.tls_cert_cn,
        j.quic_version,
        j.quic_sni,
        list(&j.quic_alpn),
        j.http_method,
        j.http_host,
        j.http_target,
        j.http_user_agent,
        j.http_status.map(|v| v.to_string()),
        j.http_requests.map(|v| v.to_string()),
        j.http_status_1xx.map(|v| v.to_string()),
        j.http_status_2xx.map(|v| v.to_string()),
        j.http_status_3xx.map(|v| v.to_string()),
        j.http_status_4xx.map(|v| v.to_string()),
        j.http_status_5xx.map(|v| v.to_string()),
        j.http_srt_min_us.map(|v| v.to_string()),
        j.http_srt_mean_us.map(|v| v.to_string()),
        j.http_srt_max_us.map(|v| v.to_string()),
        j.dns_qname,
        j.dns_qtype.map(|v| v.to_string()),
        j.dns_qclass.map(|v| v.to_string()),
        j.dns_rcode.map(|v| v.to_string()),
        j.dns_answers.map(|v| v.to_string()),
        j.dns_answer_addr.map(|v| v.to_string()),
        j.dns_rcode_noerror.map(|v| v.to_string()),
        j.dns_rcode_nxdomain.map(|v| v.to_string()),
        j.dns_rcode_servfail.map(|v| v.to_string()),
        j.dns_rcode_other.map(|v| v.to_string()),
    ];
    for v in vals {
        buf.push(',');
        if let Some(v) = v {
            field(buf, &v);
        }
    }
}

const LEG_COLS: [&str; 7] = [
    "count", "min_us", "mean_us", "max_us", "p50_us", "p90_us", "missed",
];

fn leg_cols(prefix: &str) -> String {
    LEG_COLS.map(|c| format!("{prefix}_{c}")).join(",")
}

/// A timestamp-RTT leg: all columns empty when the flow had no option.
fn leg(buf: &mut String, l: Option<&TsRttLeg>) {
    match l {
        None => buf.push_str(",,,,,,"),
        Some(l) => {
            let _ = write!(
                buf,
                "{},{},{},{},{},{},{}",
                l.count,
                o(l.min_us),
                o(l.mean_us),
                o(l.max_us),
                o(l.p50_us),
                o(l.p90_us),
                l.missed
            );
        }
    }
}

fn o<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(String::new, |x| x.to_string())
}

fn dir(buf: &mut String, d: &DirStats) {
    let _ = write!(
        buf,
        "{},{},{},{},{},{},{},{},{},{},{}",
        d.packets,
        d.bytes,
        d.retrans,
        d.retrans_fast,
        d.retrans_spurious,
        d.retrans_other,
        d.ooo,
        d.keepalive,
        d.dup_ack,
        d.zero_window,
        d.window_full
    );
}

pub(super) fn row(buf: &mut String, r: &FlowRecord) {
    let _ = write!(
        buf,
        "{},{},{},{},{},{},{},{},{},{},",
        r.client_addr,
        r.client_port,
        r.server_addr,
        r.server_port,
        super::proto_name(r.proto),
        o(r.vlan),
        r.direction_guessed,
        r.start.as_micros(),
        r.end.as_micros(),
        format!("{:?}", r.end_reason).to_lowercase()
    );
    dir(buf, &r.c2s);
    buf.push(',');
    dir(buf, &r.s2c);
    let n = &r.npm;
    let _ = write!(
        buf,
        ",{},{},{},{},{},{},{},{},{},",
        o(n.rtt_us),
        o(n.server_net_us),
        o(n.client_net_us),
        o(n.srt_us),
        n.srt_count,
        o(n.srt_min_us),
        o(n.srt_mean_us),
        o(n.srt_max_us),
        n.tls
    );
    leg(buf, n.ts_rtt.as_ref().map(|t| &t.server));
    buf.push(',');
    leg(buf, n.ts_rtt.as_ref().map(|t| &t.client));
    l7(buf, r);
    buf.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::EndReason;

    #[test]
    fn every_row_has_the_header_columns() {
        let a = std::net::IpAddr::from([192, 0, 2, 1]);
        let rec = FlowRecord {
            client_addr: a,
            client_port: 1,
            server_addr: a,
            server_port: 2,
            end_reason: EndReason::End,
            c2s: DirStats {
                zero_window: 3,
                window_full: 4,
                ..DirStats::default()
            },
            app: Some(xdprobe_l7::App::Dns),
            l7: Some(xdprobe_l7::L7Fields::Dns(Box::new(
                xdprobe_l7::fields::DnsInfo {
                    qname: Some(b"a,b.example"[..].into()),
                    qtype: Some(1),
                    ..Default::default()
                },
            ))),
            ..FlowRecord::blank(58)
        };
        let (mut h, mut r) = (String::new(), String::new());
        header(&mut h);
        row(&mut r, &rec);
        // The one quoted field holds the one comma not between columns.
        let unq = r.replace("\"a,b.example\"", "QNAME");
        let cols = |s: &str| s.trim_end().split(',').count();
        assert_eq!(cols(&h), cols(&unq));
        let names: Vec<&str> = h.trim_end().split(',').collect();
        let vals: Vec<&str> = unq.trim_end().split(',').collect();
        let at = |n: &str| vals[names.iter().position(|x| *x == n).unwrap()];
        assert_eq!((at("c2s_zero_window"), at("c2s_window_full")), ("3", "4"));
        assert_eq!(at("proto"), "icmpv6");
        assert_eq!(
            (at("app"), at("dns_qname"), at("dns_qtype")),
            ("dns", "QNAME", "1")
        );
        assert_eq!(
            (at("tls_sni"), at("http_requests"), at("dns_rcode_other")),
            ("", "", "0")
        );
    }
}
