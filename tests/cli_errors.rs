//! Bad input at the command line: a capture cut short or corrupt still
//! yields the flows seen up to the fault (with an error naming the byte
//! offset and exit code 1), and garbage or missing files give a clear error.

mod common;

use std::path::Path;

use common::*;

fn demo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo.pcap")
}

fn total_packets(recs: &[serde_json::Value]) -> u64 {
    recs.iter()
        .map(|r| r["c2s"]["packets"].as_u64().unwrap() + r["s2c"]["packets"].as_u64().unwrap())
        .sum()
}

/// Packets tshark reads from a (possibly cut) file.
fn tshark_ip_packets(file: &Path) -> u64 {
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(file)
        .args(["-Y", "ip or ipv6", "-T", "fields", "-e", "frame.number"])
        .output()
        .expect("run tshark");
    String::from_utf8_lossy(&out.stdout).lines().count() as u64
}

#[test]
fn truncated_capture_emits_flows_so_far_and_names_the_offset() {
    if !require(have("tshark"), "tshark is not installed") {
        return;
    }
    let bytes = std::fs::read(demo()).unwrap();
    let dir = std::env::temp_dir().join(format!("xdprobe-cli-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("cut.pcap");
    // Cut in the middle of a packet record, well into the file.
    let at = bytes.len() / 3 + 7;
    std::fs::write(&cut, &bytes[..at]).unwrap();

    let out = xdprobe()
        .arg("pcap")
        .arg(&cut)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("byte"), "no offset in: {stderr}");
    let recs = parse_lines(&out.stdout);
    assert!(!recs.is_empty());
    assert_eq!(total_packets(&recs), tshark_ip_packets(&cut));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn garbage_and_missing_files_fail_clearly() {
    let dir = std::env::temp_dir().join(format!("xdprobe-cli-garbage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").unwrap();
    for (file, want) in [
        (junk.as_path(), "magic"),
        (Path::new("/nonexistent/x.pcap"), "x.pcap"),
    ] {
        let out = xdprobe().arg("pcap").arg(file).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", file.display());
        assert!(stderr.contains(want), "{}: {stderr}", file.display());
        assert!(out.stdout.is_empty());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_format_writes_every_record() {
    let json = xdprobe_json(&demo(), &[]);
    for (fmt, header_lines) in [("csv", 1), ("table", 1)] {
        let out = xdprobe()
            .arg("pcap")
            .arg(demo())
            .args(["--format", fmt])
            .output()
            .unwrap();
        assert!(out.status.success());
        let lines = String::from_utf8_lossy(&out.stdout).lines().count();
        assert_eq!(lines, json.len() + header_lines, "{fmt}");
    }
}
