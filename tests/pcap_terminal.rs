//! `xdprobe pcap FILE` as a person types it at a terminal, on a real
//! pseudo-terminal (util-linux `script`): the records come as the table,
//! without a progress bar drawn over them; redirected to a file, the same
//! command writes JSON lines and draws the bar on the terminal. The table's
//! columns are exactly as wide as their widest cell or header, aligned on
//! every row; its rows are the records the JSON lines hold.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;
use xdprobe_test_support::{TempDir, have, require};

fn corpus(name: &str) -> PathBuf {
    corpus_dir().join(name)
}

/// Runs the shell command `cmd` on a pseudo-terminal (stdin, stdout and
/// stderr); what the terminal showed, carriage returns dropped.
fn on_a_terminal(cmd: &str) -> String {
    let out = Command::new("script")
        .args(["-q", "-e", "-c", cmd, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(out.status.success(), "{cmd}: {text}");
    text
}

/// `xdprobe pcap FILE` with stdout a pipe: the JSON lines.
fn json_lines(file: &PathBuf) -> Vec<Value> {
    let out = xdprobe().arg("pcap").arg(file).output().expect("run");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn endpoint(v: &Value, side: &str) -> String {
    let a = v[format!("{side}_addr")].as_str().expect("addr");
    let p = &v[format!("{side}_port")];
    if a.contains(':') {
        format!("[{a}]:{p}")
    } else {
        format!("{a}:{p}")
    }
}

/// One column's extent on every line: (first char, last char + 1).
struct Extent {
    start: usize,
    end: usize,
}

/// Checks the table and returns its cells: every line has the header's
/// fields (the last, `name`, may be empty: a flow without a server name
/// or host has none); text columns start at one place, numeric ones end
/// at one place; each column is as wide as its widest field and one blank
/// from the next.
fn check_table(text: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines[0].starts_with("proto "), "no table header: {text:?}");
    // (start, end) of every field of every line.
    let fields: Vec<Vec<(usize, usize)>> = lines
        .iter()
        .map(|l| {
            let mut f = Vec::new();
            let mut start = None;
            for (i, c) in l.chars().chain(std::iter::once(' ')).enumerate() {
                match (c == ' ', start) {
                    (false, None) => start = Some(i),
                    (true, Some(s)) => {
                        f.push((s, i));
                        start = None;
                    }
                    _ => {}
                }
            }
            f
        })
        .collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    let n = header.len();
    assert_eq!(header.last(), Some(&"name"), "{text}");
    // The name is the rest of the line (an HTTP host and its status).
    let fields: Vec<Vec<(usize, usize)>> = fields
        .into_iter()
        .map(|mut f| {
            if f.len() > n {
                let end = f.last().expect("field").1;
                f.truncate(n);
                f[n - 1].1 = end;
            }
            f
        })
        .collect();
    for (l, f) in lines.iter().zip(&fields) {
        assert!(f.len() == n || f.len() == n - 1, "{n} fields: {l:?}");
    }
    let text_col = |j: usize| {
        matches!(
            header[j],
            "proto" | "client" | "server" | "end" | "app" | "name"
        )
    };
    let mut extents = Vec::new();
    for (j, col) in header.iter().enumerate() {
        let present = || fields.iter().filter_map(|f| f.get(j));
        let width = present().map(|x| x.1 - x.0).max().unwrap_or(0);
        let anchor: BTreeSet<usize> = present()
            .map(|x| if text_col(j) { x.0 } else { x.1 })
            .collect();
        assert_eq!(
            anchor.len(),
            1,
            "column {} not aligned: {anchor:?}\n{text}",
            col
        );
        let a = *anchor.first().expect("anchor");
        extents.push(if text_col(j) {
            Extent {
                start: a,
                end: a + width,
            }
        } else {
            Extent {
                start: a - width,
                end: a,
            }
        });
    }
    for j in 1..n {
        assert_eq!(
            extents[j].start,
            extents[j - 1].end + 1,
            "column {} is wider than its content\n{text}",
            header[j - 1]
        );
    }
    lines[1..]
        .iter()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn at_a_terminal_the_records_are_a_table_without_a_bar() {
    if !require(have("script"), "script (util-linux) is not installed") {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_xdprobe");
    for file in ["zeek_http-bro.org.pcap", "ipfixprobe_mixed.pcap"] {
        let path = corpus(file);
        let tty = on_a_terminal(&format!("{bin} pcap {}", path.display()));
        assert!(
            !tty.contains("ETA") && !tty.contains('\u{1b}'),
            "a bar drawn over the table: {tty:?}"
        );
        let rows = check_table(&tty);
        // The rows are the records: the same endpoints, as many.
        let json = json_lines(&path);
        assert_eq!(rows.len(), json.len(), "{file}");
        let from_json: BTreeSet<(String, String)> = json
            .iter()
            .map(|v| {
                let guessed = if v["direction_guessed"] == true {
                    "?"
                } else {
                    ""
                };
                (
                    format!("{}{guessed}", endpoint(v, "client")),
                    endpoint(v, "server"),
                )
            })
            .collect();
        let from_table: BTreeSet<(String, String)> =
            rows.iter().map(|r| (r[1].clone(), r[2].clone())).collect();
        assert_eq!(from_table, from_json, "{file}");
        let client_width = rows.iter().map(|r| r[1].len()).max().unwrap_or(0);
        eprintln!(
            "{file}: {} rows, client column {client_width} wide",
            rows.len()
        );
    }
    // IPv4 only: the endpoint columns fit "255.255.255.255:65535?" (22).
    let tty = on_a_terminal(&format!(
        "{bin} pcap {}",
        corpus("zeek_http-bro.org.pcap").display()
    ));
    let header = tty.lines().next().expect("header");
    assert!(header.find("server").expect("server") <= 6 + 23, "{header}");
    // Asked for JSON at the terminal: JSON, still no bar over it.
    let tty = on_a_terminal(&format!(
        "{bin} pcap --format json {}",
        corpus("zeek_http-bro.org.pcap").display()
    ));
    assert!(
        tty.lines()
            .all(|l| l.trim().is_empty() || l.starts_with('{')),
        "{tty:?}"
    );
    assert!(!tty.contains("ETA"));
}

#[test]
fn redirected_the_records_are_json_and_the_bar_is_on_the_terminal() {
    if !require(have("script"), "script (util-linux) is not installed") {
        return;
    }
    let tmp = TempDir::new("pcap-terminal");
    let file = corpus("zeek_http-bro.org.pcap");
    let out = tmp.path().join("records.json");
    let tty = on_a_terminal(&format!(
        "{} pcap {} > {}",
        env!("CARGO_BIN_EXE_xdprobe"),
        file.display(),
        out.display()
    ));
    assert!(
        tty.contains("ETA") && tty.contains("494.66 KiB"),
        "no progress bar: {tty:?}"
    );
    let written: Vec<Value> = std::fs::read_to_string(&out)
        .expect("records")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(written, json_lines(&file));
}
