//! Helpers shared by the integration tests: locating ../shared, running the
//! real `xdprobe` binary and the tshark oracle, skipping privileged tests
//! loudly (never under CI=true).
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// `$XDPROBE_SHARED`, else `../shared` beside the checkout.
pub fn shared_dir() -> Option<PathBuf> {
    let p = std::env::var_os("XDPROBE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    p.join("tools/oracle.py").is_file().then_some(p)
}

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

pub fn shared_or_skip() -> Option<PathBuf> {
    let d = shared_dir();
    require(
        d.is_some(),
        "../shared (or $XDPROBE_SHARED) with tools/oracle.py is not present",
    )
    .then_some(())?;
    d
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

/// tshark's per-flow values via `shared/tools/oracle.py --format jsonl`.
pub fn oracle(shared: &Path, file: &Path, fast: bool) -> Vec<Value> {
    let mut cmd = Command::new("python3");
    cmd.arg(shared.join("tools/oracle.py"))
        .arg(file)
        .args(["--format", "jsonl"]);
    if fast {
        cmd.arg("--fast");
    }
    let out = cmd.output().expect("run oracle.py");
    assert!(
        out.status.success(),
        "oracle.py {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_lines(&out.stdout)
}

/// The oracle file checked in beside a corpus capture (made by tshark).
pub fn corpus_oracle(capture: &Path) -> Option<Vec<Value>> {
    let name = capture.file_name()?.to_str()?;
    let stem = name
        .strip_suffix(".pcapng")
        .or_else(|| name.strip_suffix(".pcap"))?;
    let p = capture.with_file_name(format!("{stem}.oracle.jsonl"));
    let text = std::fs::read(p).ok()?;
    Some(parse_lines(&text))
}

/// Every capture in shared/corpus.
pub fn corpus_captures(shared: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(shared.join("corpus"))
        .expect("read corpus")
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

/// Whether `shared/tools/make_capture.sh` can run here (root for its
/// network namespaces, and the traffic tools it drives); skips loudly.
pub fn can_make_captures() -> bool {
    if !require(
        is_root(),
        "not root: make_capture.sh needs network namespaces",
    ) {
        return false;
    }
    ["tshark", "tcpdump", "iperf3", "curl", "openssl", "ethtool"]
        .iter()
        .all(|tool| require(have(tool), &format!("{tool} is not installed")))
}

/// Real kernel traffic through the impairing bridge, captured by tcpdump:
/// `make_capture.sh ARGS -o OUT`; returns the pcap's path.
pub fn make_capture(shared: &Path, args: &[&str], out: &Path) -> PathBuf {
    let st = Command::new(shared.join("tools/make_capture.sh"))
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run make_capture.sh");
    assert!(
        st.status.success(),
        "make_capture.sh {args:?}: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    out.with_extension("pcap")
}
