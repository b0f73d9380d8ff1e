//! The project's oracle (`tests/oracle/`) against the workplace's
//! `oracle.py`, which it replaces, on every test capture: the same flows,
//! keys and values, except where `oracle::flows::summarize` documents a
//! deliberate difference. A development check, run only where that script
//! is: with `XDPROBE_SHARED` set to the folder holding `tools/oracle.py`
//! (the suite itself never needs it). Without it this test does nothing.

mod common;
// The oracle reads a capture's time order with the rig's scan.
mod live_support;
mod oracle;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

/// Keys only this oracle has (difference 3).
const EXTRA: &[&str] = &["window_full", "tls_client_hello", "first_us", "last_us"];

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-6 * x.abs().max(1.0),
            _ => x == y,
        },
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x
                .keys()
                .chain(y.keys())
                .filter(|k| !EXTRA.contains(&k.as_str()))
                .collect();
            keys.into_iter().all(|k| match (x.get(k), y.get(k)) {
                (Some(a), Some(b)) => same(a, b),
                _ => false,
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

fn oracle_py(script: &Path, file: &Path) -> Vec<Value> {
    let out = Command::new("python3")
        .arg(script)
        .arg(file)
        .args(["--format", "jsonl"])
        .output()
        .expect("run oracle.py");
    assert!(
        out.status.success(),
        "oracle.py {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_lines(&out.stdout)
}

#[test]
fn oracle_agrees_with_oracle_py() {
    let Some(shared) = std::env::var_os("XDPROBE_SHARED") else {
        return;
    };
    let script = Path::new(&shared).join("tools/oracle.py");
    if !script.is_file() || !require(have("tshark"), "tshark is not installed") {
        eprintln!("no {}: nothing to cross-check", script.display());
        return;
    }
    let (mut flows, mut explained) = (0, 0);
    let mut diffs = Vec::new();
    for file in corpus_captures().into_iter().chain(extra_captures()) {
        if oracle::time_order(&file) == oracle::TimeOrder::WithinWindow {
            // Read in time order here (difference 1), in file order there.
            continue;
        }
        let ours = oracle::run(&file, false).flows;
        let theirs = oracle_py(&script, &file);
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if ours.len() != theirs.len() {
            diffs.push(format!("{name}: {} flows vs {}", ours.len(), theirs.len()));
            continue;
        }
        for (a, b) in ours.iter().zip(&theirs) {
            flows += 1;
            if same(a, b) {
                continue;
            }
            // Difference 2: a DNS query gave the roles; only the turns
            // may differ, and only by that first turn.
            let mut a2 = a.clone();
            let mut b2 = b.clone();
            let dns_roles = a["dns"]["queries"].as_u64() > Some(0)
                && a["handshake"]["syn_count"] == 0
                && a["handshake"]["synack_count"] == 0;
            if dns_roles && let (Some(x), Some(y)) = (a2.as_object_mut(), b2.as_object_mut()) {
                x.remove("srt");
                y.remove("srt");
                if same(&a2, &b2) {
                    explained += 1;
                    continue;
                }
            }
            diffs.push(format!("{name} {}:\n  ours   {a}\n  theirs {b}", a["flow"]));
        }
    }
    eprintln!("{flows} flows compared, {explained} differ only by the DNS-roles turn");
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}
