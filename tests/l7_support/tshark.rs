//! What tshark (Wireshark 4.0, default preferences: TCP reassembly on,
//! QUIC Initials decrypted) says each flow is: one pass over the frames
//! that carry a TLS handshake, HTTP, DNS or QUIC, and one over the
//! certificates' PDML for their subject names. Per flow, in frame order,
//! the values `xdprobe`'s L7 fields are defined to equal (docs/l7.md).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const FIELDS: &[&str] = &[
    "frame.number",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "vlan.id",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "icmp.type",
    "icmpv6.type",
    "tls.handshake.type",
    "tls.handshake.extensions_server_name",
    "tls.handshake.ja3",
    "tls.handshake.extensions_alpn_str",
    "tls.handshake.extensions.supported_version",
    "tls.handshake.version",
    "tls.handshake.ciphersuite",
    "x509ce.dNSName",
    "quic.version",
    "http.request",
    "http.response",
    "http.request.method",
    "http.host",
    "http.request.uri",
    "http.response.code",
    "http.time",
    "dns.flags.response",
    "dns.qry.name",
    "dns.qry.type",
    "dns.qry.class",
    "dns.flags.rcode",
    "dns.count.answers",
    "dns.a",
    "dns.aaaa",
];

/// A flow as both sides key it: protocol, VLAN, and its two endpoints in
/// sorted order (addresses as Rust writes them).
pub type FlowKey = (u8, Option<u16>, (String, u16), (String, u16));

pub fn key(proto: u8, vlan: Option<u16>, a: (String, u16), b: (String, u16)) -> FlowKey {
    let norm = |(ip, p): (String, u16)| {
        let ip = ip.parse::<std::net::IpAddr>().map_or(ip, |a| a.to_string());
        (ip, p)
    };
    let (a, b) = (norm(a), norm(b));
    if a <= b {
        (proto, vlan, a, b)
    } else {
        (proto, vlan, b, a)
    }
}

/// The key of one of the probe's JSON records.
pub fn key_of_record(r: &serde_json::Value) -> FlowKey {
    let ep = |a: &str, p: &str| {
        (
            r[a].as_str().unwrap_or_default().to_string(),
            r[p].as_u64().unwrap_or(0) as u16,
        )
    };
    let vlan = r["vlan"].as_u64().map(|v| v as u16);
    let proto = r["proto"].as_u64().unwrap_or(0) as u8;
    key(
        proto,
        vlan,
        ep("client_addr", "client_port"),
        ep("server_addr", "server_port"),
    )
}

/// tshark's view of one flow's application.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Want {
    pub hello: bool,
    pub quic_version: Option<String>,
    pub sni: Option<String>,
    pub ja3: Option<String>,
    pub alpn: Option<Vec<String>>,
    pub server_hello: bool,
    pub version: Option<String>,
    pub cipher: Option<String>,
    pub cert: bool,
    pub cert_cn: Option<String>,
    pub http: bool,
    pub requests: u64,
    pub method: Option<String>,
    pub host: Option<String>,
    pub target: Option<String>,
    pub status: Option<u64>,
    pub classes: [u64; 5],
    /// `http.time` of each response, seconds, with HTTP head and body
    /// reassembly off (each message at its first segment): see
    /// [`srt_times`].
    pub times: Vec<f64>,
    pub dns: bool,
    pub qname: Option<String>,
    pub qtype: Option<u64>,
    pub qclass: Option<u64>,
    pub rcode: Option<u64>,
    pub answers: Option<u64>,
    pub addr: Option<String>,
    pub rcodes: [u64; 4],
}

type Row = BTreeMap<&'static str, Vec<String>>;

fn rows(file: &Path) -> Vec<Row> {
    rows_with(file, &[], "tls.handshake.type or http or dns or quic")
}

fn rows_with(file: &Path, prefs: &[&str], filter: &str) -> Vec<Row> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(file).arg("-n").args(prefs).args([
        "-Y",
        filter,
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=/s",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            FIELDS
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let v = cols.get(i).copied().unwrap_or("");
                    let vals = if v.is_empty() {
                        vec![]
                    } else {
                        v.split(' ').map(str::to_string).collect()
                    };
                    (*f, vals)
                })
                .collect()
        })
        .collect()
}

/// Subject CN of the first certificate of each frame with a Certificate
/// message: tshark's summary of it in PDML, `(id-at-commonName=…,…)`.
fn cert_cns(file: &Path) -> BTreeMap<u64, Option<String>> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-n", "-Y", "tls.handshake.type == 11", "-T", "pdml"])
        .output()
        .expect("run tshark");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut res = BTreeMap::new();
    let mut frame = 0u64;
    for line in text.lines() {
        if let Some(n) = attr(line, "<field name=\"num\" pos=\"0\" show=\"") {
            frame = n.parse().unwrap_or(0);
        } else if let Some(show) = attr(
            line,
            "<field name=\"tls.handshake.certificate\" showname=\"",
        ) {
            res.entry(frame).or_insert_with(|| {
                let show = show
                    .replace("&quot;", "\"")
                    .replace("&amp;", "&")
                    .replace("&lt;", "<")
                    .replace("&gt;", ">");
                let subj = show
                    .rsplit_once(" (")
                    .map(|(_, s)| s.trim_end_matches(')').to_string())?;
                let cn = subj
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("id-at-commonName="))?;
                Some(cn.to_string())
            });
        }
    }
    res
}

fn attr<'a>(line: &'a str, start: &str) -> Option<&'a str> {
    let i = line.find(start)? + start.len();
    let rest = &line[i..];
    Some(&rest[..rest.find('"')?])
}

fn first(r: &Row, f: &str) -> Option<String> {
    r.get(f).and_then(|v| v.first().cloned())
}

fn flow_of(r: &Row) -> Option<FlowKey> {
    if first(r, "icmp.type").is_some() || first(r, "icmpv6.type").is_some() {
        return None; // an ICMP error quoting a datagram: not that flow
    }
    let src = first(r, "ip.src").or_else(|| first(r, "ipv6.src"))?;
    let dst = first(r, "ip.dst").or_else(|| first(r, "ipv6.dst"))?;
    let port = |f: &str| first(r, f).and_then(|p| p.parse::<u16>().ok());
    let (proto, sp, dp) = match (port("tcp.srcport"), port("tcp.dstport")) {
        (Some(s), Some(d)) => (6, s, d),
        _ => (17, port("udp.srcport")?, port("udp.dstport")?),
    };
    let vlan = first(r, "vlan.id").and_then(|v| v.parse().ok());
    Some(key(proto, vlan, (src, sp), (dst, dp)))
}

/// Per flow, what tshark says, for every flow with L7 content.
pub fn want(file: &Path) -> BTreeMap<FlowKey, Want> {
    let rows = rows(file);
    // The PDML pass only where there are certificates (tshark's start-up
    // is most of a pass on these small files).
    let certs = rows.iter().any(|r| {
        r.get("tls.handshake.type")
            .is_some_and(|t| t.iter().any(|x| x == "11"))
    });
    let cns = if certs {
        cert_cns(file)
    } else {
        BTreeMap::new()
    };
    let mut flows: BTreeMap<FlowKey, Want> = BTreeMap::new();
    for r in rows {
        let Some(k) = flow_of(&r) else { continue };
        let w = flows.entry(k).or_default();
        let hs = r.get("tls.handshake.type").cloned().unwrap_or_default();
        let has = |t: &str| hs.iter().any(|x| x == t);
        if has("1") && !w.hello {
            w.hello = true;
            w.quic_version = first(&r, "quic.version");
            w.sni = first(&r, "tls.handshake.extensions_server_name");
            w.ja3 = first(&r, "tls.handshake.ja3");
            w.alpn = r
                .get("tls.handshake.extensions_alpn_str")
                .filter(|v| !v.is_empty())
                .cloned();
        }
        if has("2") && !has("1") {
            w.server_hello = true;
            w.version = first(&r, "tls.handshake.extensions.supported_version")
                .or_else(|| first(&r, "tls.handshake.version"));
            w.cipher = first(&r, "tls.handshake.ciphersuite");
        }
        if has("11") && !w.cert {
            w.cert = true;
            let frame: u64 = first(&r, "frame.number")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            w.cert_cn = cns
                .get(&frame)
                .cloned()
                .flatten()
                .or_else(|| first(&r, "x509ce.dNSName"));
        }
        http_row(w, &r);
        dns_row(w, &r);
    }
    flows.retain(|_, w| w.hello || w.server_hello || w.http || w.dns);
    flows
}

/// One frame's HTTP messages: a frame may hold several (pipelined
/// requests, responses after a body), each field once per message.
fn http_row(w: &mut Want, r: &Row) {
    let all = |f: &str| r.get(f).cloned().unwrap_or_default();
    let requests = all("http.request").len() as u64;
    if requests > 0 {
        w.http = true;
        w.requests += requests;
        if w.method.is_none() {
            w.method = first(r, "http.request.method");
            w.host = first(r, "http.host");
            w.target = first(r, "http.request.uri");
        }
    }
    if first(r, "http.response").is_some() {
        for code in all("http.response.code")
            .iter()
            .filter_map(|c| c.parse::<u64>().ok())
        {
            w.http = true;
            w.status = Some(code);
            if (1..=5).contains(&(code / 100)) {
                w.classes[(code / 100 - 1) as usize] += 1;
            }
        }
    }
}

/// Adds each flow's response times: `http.time` with head and body
/// reassembly off, so a response counts from its first segment and a
/// request (whose head fits one segment) from its only one — the probe's
/// Δt_rr (docs/l7.md "HTTP response time").
pub fn srt_times(file: &Path, flows: &mut BTreeMap<FlowKey, Want>) {
    if !flows.values().any(|w| w.http) {
        return;
    }
    let prefs = [
        "-o",
        "http.desegment_headers:FALSE",
        "-o",
        "http.desegment_body:FALSE",
    ];
    for r in rows_with(file, &prefs, "http.response") {
        let Some(k) = flow_of(&r) else { continue };
        if let (Some(w), Some(t)) = (
            flows.get_mut(&k),
            first(&r, "http.time").and_then(|t| t.parse().ok()),
        ) {
            w.times.push(t);
        }
    }
}

fn dns_row(w: &mut Want, r: &Row) {
    let Some(resp) = first(r, "dns.flags.response") else {
        return;
    };
    w.dns = true;
    let num = |f: &str| {
        first(r, f).and_then(|v| {
            v.parse::<u64>()
                .ok()
                .or_else(|| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        })
    };
    if w.qname.is_none()
        && let Some(n) = first(r, "dns.qry.name")
    {
        w.qname = Some(n);
        w.qtype = num("dns.qry.type");
        w.qclass = num("dns.qry.class");
    }
    if resp == "1" {
        let rc = num("dns.flags.rcode").unwrap_or(0);
        w.rcodes[match rc {
            0 => 0,
            3 => 1,
            2 => 2,
            _ => 3,
        }] += 1;
        if w.rcode.is_none() {
            w.rcode = Some(rc);
            w.answers = num("dns.count.answers");
            w.addr = first(r, "dns.a").or_else(|| first(r, "dns.aaaa"));
        }
    }
}
