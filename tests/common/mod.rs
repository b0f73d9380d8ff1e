//! Helpers shared by the integration tests: the test corpus, running the
//! real `xdprobe` binary, skipping privileged tests loudly (never under
//! CI=true).
#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses a different subset"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub use xdprobe_test_support::{TempDir, have, in_ci, is_root, require};

pub fn xdprobe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xdprobe"))
}

/// `xdprobe pcap FILE --format json ARGS…` → one JSON object per record.
pub fn xdprobe_json(file: &Path, args: &[&str]) -> Vec<Value> {
    parse_lines(&xdprobe_pcap_json(file, args))
}

/// `xdprobe pcap FILE --format json ARGS…`, which must succeed: its
/// output.
pub fn xdprobe_pcap_json(file: &Path, args: &[&str]) -> Vec<u8> {
    let out = xdprobe()
        .arg("pcap")
        .arg(file)
        .args(["--format", "json"])
        .args(args)
        .output()
        .expect("run xdprobe");
    assert!(
        out.status.success(),
        "xdprobe pcap {} {args:?} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub fn parse_lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// The test captures kept in the repository (`tests/corpus/`, provenance
/// and licence of each in `tests/corpus/SOURCES.tsv`).
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Every capture in `tests/corpus`, sorted by name.
pub fn corpus_captures() -> Vec<PathBuf> {
    captures_in(&corpus_dir())
}

/// Captures of an optional extra corpus: `$XDPROBE_SHARED/corpus` when that
/// variable is set (the workplace's shared folder), less those of the same
/// name `tests/corpus` holds already. Nothing when unset: the suite needs
/// only what the repository holds.
pub fn extra_captures() -> Vec<PathBuf> {
    let ours: Vec<std::ffi::OsString> = corpus_captures()
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_owned()))
        .collect();
    std::env::var_os("XDPROBE_SHARED")
        .map(|d| captures_in(&PathBuf::from(d).join("corpus")))
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.file_name().is_none_or(|n| !ours.iter().any(|o| o == n)))
        .collect()
}

pub fn captures_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
        .collect();
    v.sort();
    v
}

/// A JSON endpoint as `addr:port` with port 0 for none.
pub fn endpoint(addr: &Value, port: &Value) -> String {
    format!(
        "{}:{}",
        addr.as_str().unwrap_or("?"),
        port.as_u64().unwrap_or(0)
    )
}
