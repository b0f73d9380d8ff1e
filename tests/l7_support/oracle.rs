//! The comparison of the probe's L7 fields with tshark's view of a
//! capture (`tshark`), field by field per flow, for `tests/l7_oracle.rs`
//! (the corpus) and `tests/l7_live.rs` (fresh captures).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::tshark::{self, FlowKey, Want};

#[derive(Clone, Debug)]
pub struct Diff {
    pub capture: String,
    pub flow: FlowKey,
    pub field: &'static str,
    pub want: String,
    pub got: String,
}

fn s(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

/// Text as tshark writes it: bytes that are not UTF-8 (`\xNN` here) are
/// U+FFFD there (rule: `docs/l7.md`, "Names").
pub fn as_tshark(v: Option<String>) -> Option<String> {
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

/// The differences between tshark's view of `cap` and `recs`, the
/// probe's records of it; and how many flows tshark has L7 content in.
pub fn diffs(cap: &Path, recs: &[Value]) -> (usize, Vec<Diff>) {
    let name = cap.file_name().unwrap().to_string_lossy().into_owned();
    let mut want = tshark::want(cap);
    tshark::srt_times(cap, &mut want);
    let mut got: BTreeMap<FlowKey, &Value> = BTreeMap::new();
    for r in recs {
        got.entry(tshark::key_of_record(r)).or_insert(r);
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
