//! L7 fields of the real `xdprobe` binary against tshark (Wireshark 4.0)
//! on every capture of `tests/corpus` and `tests/corpus/l7` (and the
//! optional `$XDPROBE_SHARED/corpus`): per flow, the TLS server name, JA3,
//! ALPN offered, negotiated version and cipher, certificate name; QUIC's
//! version, server name and ALPN; HTTP's first request, last status,
//! request count and responses by class, and the per-transaction response
//! times; DNS's first question, first response code, answer count and
//! address, and responses by code. A flow `xdprobe` labels with a
//! protocol tshark does not see is a difference too.
//!
//! Every difference is named by a rule (`Rule`, docs/l7.md "Where tshark
//! and xdprobe differ") and listed exactly: a listed difference that does
//! not happen fails, so does one not listed.

mod common;
#[path = "l7_support/tshark.rs"]
mod tshark;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;
use tshark::{FlowKey, Want};

/// Why `xdprobe` and tshark differ on a field (docs/l7.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// The probe does not reassemble IP fragments: a DNS response in
    /// fragments is read from its first fragment, whose answers are cut.
    DnsFragmentedResponse,
    /// A response counts from its head; tshark reports it only once its
    /// body reassembles, which a lost body segment prevents.
    HttpResponseBodyLost,
    /// An HTTP/0.9 request (`GET /` without a version) is not HTTP/1.x:
    /// no label, no fields; tshark decodes it.
    Http09,
    /// `dns_answer_addr` is the first A/AAAA of the answer section;
    /// tshark's `dns.a` also lists those of the additional section (an MX
    /// answer's glue).
    DnsAddressInAdditionalSection,
}

/// Every difference in the corpus: (capture, a port of the flow, field
/// prefix, rule).
const EXCEPTIONS: &[(&str, u16, &str, Rule)] = &[
    // Query and answer for AAAA records in 3 IPv6 fragments (frames 6-8
    // and 11-13): the first fragment ends before the answers.
    (
        "zeek_ipv6-fragmented-dns.pcap",
        51850,
        "dns_answer_addr",
        Rule::DnsFragmentedResponse,
    ),
    (
        "zeek_ipv6-fragmented-dns.pcap",
        51851,
        "dns_answer_addr",
        Rule::DnsFragmentedResponse,
    ),
    // The first response's body lost a segment (frame 179: "previous
    // segment not captured"): tshark never completes it.
    (
        "zeek_http-bro.org.pcap",
        55081,
        "http_classes",
        Rule::HttpResponseBodyLost,
    ),
    // An MX query (in three VLANs): A records only as glue.
    (
        "ipfixprobe_vlan.pcap",
        32795,
        "dns_answer_addr",
        Rule::DnsAddressInAdditionalSection,
    ),
    // "GET /\r\n" and a bare body.
    ("zeek_mixed-vlan-mpls.pcap", 50343, "http_", Rule::Http09),
];

#[derive(Clone, Debug)]
struct Diff {
    capture: String,
    flow: FlowKey,
    field: &'static str,
    want: String,
    got: String,
}

fn s(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

/// Text as tshark writes it: bytes that are not UTF-8 (`\xNN` here) are
/// U+FFFD there (rule: `docs/l7.md`, "Names").
fn as_tshark(v: Option<String>) -> Option<String> {
    let v = v?;
    let mut out = String::new();
    let mut rest = v.as_str();
    while let Some(i) = rest.find("\\x") {
        out.push_str(&rest[..i]);
        let hex = rest.get(i + 2..i + 4).unwrap_or("");
        if hex.len() == 2 && u8::from_str_radix(hex, 16).is_ok_and(|b| b >= 0x80) {
            out.push('\u{fffd}');
        } else {
            out.push_str(&rest[i..i + 4.min(rest.len() - i)]);
        }
        rest = rest.get(i + 4..).unwrap_or("");
    }
    out.push_str(rest);
    Some(out)
}

fn list(v: &Value) -> Option<Vec<String>> {
    v.as_array()
        .map(|a| a.iter().filter_map(|x| as_tshark(s(x))).collect())
}

fn hexnum(v: &Value) -> Option<u64> {
    v.as_u64()
}

fn flow_key(r: &Value) -> FlowKey {
    let ep = |a: &str, p: &str| {
        (
            s(&r[a]).unwrap_or_default(),
            r[p].as_u64().unwrap_or(0) as u16,
        )
    };
    let vlan = r["vlan"].as_u64().map(|v| v as u16);
    let proto = r["proto"].as_u64().unwrap_or(0) as u8;
    tshark::key(
        proto,
        vlan,
        ep("client_addr", "client_port"),
        ep("server_addr", "server_port"),
    )
}

/// Field by field, what differs for one flow.
fn compare(w: &Want, r: &Value, out: &mut Vec<(&'static str, String, String)>) {
    let mut cmp = |field: &'static str, want: String, got: String| {
        if want != got {
            out.push((field, want, got));
        }
    };
    let d = |v: &dyn std::fmt::Debug| format!("{v:?}");
    if w.hello {
        if let Some(v) = &w.quic_version {
            cmp(
                "quic_version",
                d(&Some(v)),
                d(&s(&r["quic_version"]).as_ref()),
            );
            cmp("quic_sni", d(&w.sni), d(&as_tshark(s(&r["quic_sni"]))));
            cmp("quic_alpn", d(&w.alpn), d(&list(&r["quic_alpn"])));
        } else {
            cmp("tls_sni", d(&w.sni), d(&as_tshark(s(&r["tls_sni"]))));
            cmp("tls_ja3", d(&w.ja3), d(&s(&r["tls_ja3"])));
            cmp("tls_alpn", d(&w.alpn), d(&list(&r["tls_alpn"])));
        }
    }
    if w.server_hello && w.quic_version.is_none() {
        cmp("tls_version", d(&w.version), d(&s(&r["tls_version"])));
        cmp("tls_cipher", d(&w.cipher), d(&s(&r["tls_cipher"])));
    }
    if w.cert {
        cmp(
            "tls_cert_cn",
            d(&w.cert_cn),
            d(&as_tshark(s(&r["tls_cert_cn"]))),
        );
    }
    if w.http {
        cmp(
            "http_requests",
            d(&Some(w.requests)),
            d(&r["http_requests"].as_u64()),
        );
        cmp("http_method", d(&w.method), d(&s(&r["http_method"])));
        cmp("http_host", d(&w.host), d(&as_tshark(s(&r["http_host"]))));
        let cut = w
            .target
            .as_ref()
            .map(|t| t.chars().take(256).collect::<String>());
        cmp("http_target", d(&cut), d(&as_tshark(s(&r["http_target"]))));
        cmp("http_status", d(&w.status), d(&r["http_status"].as_u64()));
        let classes: Vec<Option<u64>> = (1..=5)
            .map(|c| r[format!("http_status_{c}xx")].as_u64())
            .collect();
        cmp("http_classes", d(&w.classes.map(Some)), d(&classes));
    }
    if w.dns {
        cmp("dns_qname", d(&w.qname), d(&as_tshark(s(&r["dns_qname"]))));
        cmp("dns_qtype", d(&w.qtype), d(&hexnum(&r["dns_qtype"])));
        cmp("dns_qclass", d(&w.qclass), d(&hexnum(&r["dns_qclass"])));
        cmp("dns_rcode", d(&w.rcode), d(&r["dns_rcode"].as_u64()));
        cmp("dns_answers", d(&w.answers), d(&r["dns_answers"].as_u64()));
        cmp("dns_answer_addr", d(&w.addr), d(&s(&r["dns_answer_addr"])));
        let rc: Vec<Option<u64>> = ["noerror", "nxdomain", "servfail", "other"]
            .iter()
            .map(|c| r[format!("dns_rcode_{c}")].as_u64())
            .collect();
        cmp("dns_rcodes", d(&w.rcodes.map(Some)), d(&rc));
    }
}

/// The response-time check: each HTTP flow's min and max per-transaction
/// SRT equal tshark's `http.time` (messages at their first segment) less
/// the handshake's server network time, floored at 0, within 1 µs.
fn compare_srt(w: &Want, r: &Value, out: &mut Vec<(&'static str, String, String)>) {
    if !w.http || w.times.is_empty() || r["http_requests"].is_null() {
        return;
    }
    let snt = r["server_net_us"].as_f64().unwrap_or(0.0);
    let us: Vec<f64> = w.times.iter().map(|t| (t * 1e6 - snt).max(0.0)).collect();
    let min = us.iter().copied().fold(f64::MAX, f64::min);
    let max = us.iter().copied().fold(0.0, f64::max);
    let (gmin, gmax) = (r["http_srt_min_us"].as_f64(), r["http_srt_max_us"].as_f64());
    let close = |a: f64, b: Option<f64>| b.is_some_and(|b| (a - b).abs() <= 1.0);
    if !close(min, gmin) || !close(max, gmax) {
        out.push((
            "http_srt",
            format!("{min:.0}..{max:.0}"),
            format!("{gmin:?}..{gmax:?}"),
        ));
    }
}

fn run_capture(cap: &Path) -> (usize, Vec<Diff>) {
    let name = cap.file_name().unwrap().to_string_lossy().into_owned();
    let mut want = tshark::want(cap);
    tshark::srt_times(cap, &mut want);
    let recs = xdprobe_json(
        cap,
        &[
            "--idle-timeout",
            "24h",
            "--active-timeout",
            "24h",
            "--workers",
            "1",
            "--no-progress",
        ],
    );
    let mut got: BTreeMap<FlowKey, &Value> = BTreeMap::new();
    for r in &recs {
        got.entry(flow_key(r)).or_insert(r);
    }
    let mut diffs = Vec::new();
    let mut push = |flow: &FlowKey, field, want: String, got: String| {
        diffs.push(Diff {
            capture: name.clone(),
            flow: flow.clone(),
            field,
            want,
            got,
        });
    };
    for (k, w) in &want {
        let Some(r) = got.get(k) else {
            push(k, "record", "a record".into(), "none".into());
            continue;
        };
        let mut fd = Vec::new();
        compare(w, r, &mut fd);
        compare_srt(w, r, &mut fd);
        for (f, a, b) in fd {
            push(k, f, a, b);
        }
    }
    for (k, r) in &got {
        let app = r["app"].as_str().unwrap_or("");
        let l7 = ["tls", "quic", "http", "dns"]
            .iter()
            .any(|p| app == *p || app.starts_with(&format!("{p}/")));
        if l7 && !want.contains_key(k) {
            push(k, "app", "nothing".into(), app.to_string());
        }
    }
    (want.len(), diffs)
}

fn captures() -> Vec<PathBuf> {
    let mut v = corpus_captures();
    let l7 = corpus_dir().join("l7");
    let mut more: Vec<PathBuf> = std::fs::read_dir(&l7)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    more.retain(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"));
    more.sort();
    v.extend(more);
    v.extend(extra_captures());
    v
}

fn listed(d: &Diff) -> Option<Rule> {
    EXCEPTIONS.iter().find_map(|(cap, port, field, rule)| {
        let port_in = d.flow.2.1 == *port || d.flow.3.1 == *port;
        (d.capture == *cap && port_in && d.field.starts_with(field)).then_some(*rule)
    })
}

#[test]
fn l7_fields_equal_tshark_on_the_corpus() {
    if !require(have("tshark"), "tshark (the L7 oracle)") {
        return;
    }
    let mut unexplained = Vec::new();
    let mut hit = vec![false; EXCEPTIONS.len()];
    let mut flows = 0;
    for cap in captures() {
        let (n, diffs) = run_capture(&cap);
        flows += n;
        eprintln!(
            "{}: {n} flows with L7, {} differences",
            cap.display(),
            diffs.len()
        );
        for d in diffs {
            match listed(&d) {
                Some(_) => {
                    let i = EXCEPTIONS.iter().position(|(c, p, f, _)| {
                        d.capture == *c
                            && (d.flow.2.1 == *p || d.flow.3.1 == *p)
                            && d.field.starts_with(f)
                    });
                    if let Some(i) = i {
                        hit[i] = true;
                    }
                }
                None => unexplained.push(d),
            }
        }
    }
    assert!(flows > 100, "the corpus has L7 flows to compare ({flows})");
    for d in &unexplained {
        eprintln!(
            "UNEXPLAINED {} {:?} {}: tshark {} xdprobe {}",
            d.capture, d.flow, d.field, d.want, d.got
        );
    }
    let stale: Vec<_> = EXCEPTIONS
        .iter()
        .zip(&hit)
        .filter(|(_, h)| !**h)
        .map(|(e, _)| e)
        .collect();
    assert!(
        stale.is_empty(),
        "listed differences that did not happen: {stale:?}"
    );
    assert!(
        unexplained.is_empty(),
        "{} differences no rule names",
        unexplained.len()
    );
}

#[test]
fn l7_non_utf8_names_are_escaped_where_tshark_replaces() {
    assert_eq!(
        as_tshark(Some("\\xba\\xad".into())),
        Some("\u{fffd}\u{fffd}".into())
    );
    assert_eq!(
        as_tshark(Some("a\\x01b".into())),
        Some("a\\x01b".into()),
        "controls stay escaped"
    );
    assert_eq!(as_tshark(Some("plain".into())), Some("plain".into()));
}
