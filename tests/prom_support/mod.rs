//! Talking to a real Prometheus from a test: plain HTTP GETs inside a
//! network namespace, its query API's JSON, and the metric names a PromQL
//! expression or an exposition text holds.
#![allow(dead_code, reason = "not every test binary uses every helper")]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;
use xdprobe_test_support::netns::NetNs;

/// GET `path` from 127.0.0.1:`port` inside `ns`: (status, body).
pub fn get(ns: &NetNs, port: u16, path: &str) -> (u16, String) {
    let path = path.to_owned();
    ns.run(move || {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            return (0, String::new());
        };
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        if s.write_all(req.as_bytes()).is_err() {
            return (0, String::new());
        }
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_owned();
        (status, body)
    })
}

/// Percent-encoding for a query-string value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `/api/v1/query?query=EXPR`'s JSON (any status: errors are answers).
pub fn query(ns: &NetNs, port: u16, expr: &str) -> Value {
    let (_, body) = get(ns, port, &format!("/api/v1/query?query={}", encode(expr)));
    serde_json::from_str(&body).unwrap_or(Value::Null)
}

/// An instant vector's samples: (labels, value).
pub fn samples(v: &Value) -> Vec<(Value, f64)> {
    v["data"]["result"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|s| {
                    let val = s["value"][1].as_str()?.parse().ok()?;
                    Some((s["metric"].clone(), val))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The one value of `expr`, when it has exactly one sample.
pub fn scalar(ns: &NetNs, port: u16, expr: &str) -> Option<f64> {
    match samples(&query(ns, port, expr)).as_slice() {
        [(_, v)] => Some(*v),
        _ => None,
    }
}

/// The series names an exposition declares (`# TYPE`) or samples, with
/// the suffixes its types give them (counters `_total`, histograms
/// `_bucket`/`_sum`/`_count`, summaries `_sum`/`_count`).
pub fn exposed_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut w = rest.split_whitespace();
            let (Some(name), Some(kind)) = (w.next(), w.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            for s in suffixes {
                out.insert(format!("{name}{s}"));
            }
        } else if !l.starts_with('#') && !l.trim().is_empty() {
            let name: String = l
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.insert(name);
        }
    }
    out
}

const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
];

/// Aggregations: `sum by (x) (...)` puts the grouping before the
/// parenthesis, so they are recognised by name, not by a following `(`.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
];

/// Metric names in a PromQL expression: identifiers that are not
/// functions, keywords, label names or inside strings, matchers, ranges.
pub fn promql_names(expr: &str) -> BTreeSet<String> {
    // Strings, label matchers and ranges out first.
    let mut plain = String::new();
    let (mut depth_brace, mut depth_bracket, mut in_str) = (0, 0, false);
    for c in expr.chars() {
        match c {
            '"' if depth_brace == 0 => in_str = !in_str,
            _ if in_str => {}
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            _ => plain.push(c),
        }
        if (c == '}' || c == ']') && depth_brace == 0 && depth_bracket == 0 {
            plain.push(' ');
        }
    }
    let chars: Vec<char> = plain.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if AGGREGATIONS.contains(&word.as_str()) {
                // `sum by (...)`: the grouping is a keyword's business.
            } else if KEYWORDS.contains(&word.to_lowercase().as_str()) {
                // `by (instance, iface)`: label names follow.
                skip_group = next == Some(&'(');
            } else if next != Some(&'(') {
                names.insert(word);
            }
        } else if c == '(' && skip_group {
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            skip_group = false;
            i += 1;
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn promql_names_skip_functions_labels_and_keywords() {
    let e = "histogram_quantile(0.5, sum by (le, segment) (rate(a_bucket{x=\"y\"}[5m]))) \
             + on(instance) group_left(job) b_total * 8 > bool 0 or up{job=~\"a|b\"}";
    let n: Vec<String> = promql_names(e).into_iter().collect();
    assert_eq!(n, ["a_bucket", "b_total", "up"]);
}
