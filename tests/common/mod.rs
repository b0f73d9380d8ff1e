//! Helpers shared by the integration tests: the test corpus, running the
//! real `xdprobe` binary, skipping privileged tests loudly (never under
//! CI=true).
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Returns false (and says so loudly) when a test cannot run here; panics
/// instead under CI, where every test must run.
pub fn require(cond: bool, what: &str) -> bool {
    if cond {
        return true;
    }
    if in_ci() {
        panic!("CI=true but {what}: this test must not skip in CI");
    }
    eprintln!("\n!!!! SKIPPED: {what} !!!!\n");
    false
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc_geteuid() == 0 }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn xdprobe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xdprobe"))
}

/// `xdprobe pcap FILE --format json ARGS…` → one JSON object per record.
pub fn xdprobe_json(file: &Path, args: &[&str]) -> Vec<Value> {
    let out = xdprobe()
        .arg("pcap")
        .arg(file)
        .args(["--format", "json"])
        .args(args)
        .output()
        .expect("run xdprobe");
    assert!(
        out.status.success(),
        "xdprobe pcap {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_lines(&out.stdout)
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

fn captures_in(dir: &Path) -> Vec<PathBuf> {
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

/// A scratch directory removed when dropped, even when the test fails
/// (kept when `XDPROBE_KEEP` is set, for debugging).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("xdprobe-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("XDPROBE_KEEP").is_some() {
            eprintln!("kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
