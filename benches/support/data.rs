//! Benchmark inputs, loaded once before anything is timed.
//!
//! Shared by `benches/pipeline.rs` (root package) and
//! `dataplane/benches/parse_flow.rs` (included there by `#[path]`), so both
//! measure the same packets.
//!
//! The main input is the synthetic benchmark capture from `mkbench.py`
//! (5.29 M packets, 400 k flows, 50 k at once). Where it is looked for:
//! `$XDPROBE_BENCH_PCAP`, else `/tmp/bench.pcap`, else it is generated into
//! cargo's per-target temporary directory (minutes, once).
//!
//! `cargo test` also runs every bench target, once, as a smoke test
//! (criterion's test mode: no `--bench` argument). Those runs read the
//! small real capture the repository bundles (`assets/demo.pcap`) instead,
//! so a test run needs neither the generator nor minutes.

#![allow(
    dead_code,
    reason = "each bench binary uses a different part of this module"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use xdprobe_dataplane::Timestamp;
use xdprobe_dataplane::parse::LinkType;
use xdprobe_dataplane::source::pcap::PcapReader;

/// Arguments that make the reference capture; BENCHMARKS.md quotes them.
const MKBENCH_ARGS: [&str; 6] = ["--flows", "400000", "--concurrent", "50000", "--seed", "7"];

/// The generator script, outside the repository (shared tooling).
fn mkbench_script() -> PathBuf {
    std::env::var_os("XDPROBE_MKBENCH").map_or_else(
        || PathBuf::from("/work/shared/tools/mkbench.py"),
        PathBuf::from,
    )
}

/// True under `cargo test` (criterion's test mode), false under `cargo
/// bench`, which passes `--bench`.
pub fn smoke_run() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// A file of the repository, from either crate that includes this module
/// (the root package or `dataplane/`).
fn repo_file(rel: &str) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    [here.join(rel), here.join("..").join(rel)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{rel} not found from {}", here.display()))
}

/// Path of the benchmark capture, generating it when it exists nowhere.
/// `tmpdir` is the bench's `CARGO_TARGET_TMPDIR`.
pub fn bench_pcap(tmpdir: &str) -> PathBuf {
    if let Some(p) = std::env::var_os("XDPROBE_BENCH_PCAP") {
        return PathBuf::from(p);
    }
    if smoke_run() {
        return repo_file("assets/demo.pcap");
    }
    let tmp = PathBuf::from("/tmp/bench.pcap");
    if tmp.is_file() {
        return tmp;
    }
    let out = Path::new(tmpdir).join("bench.pcap");
    if !out.is_file() {
        eprintln!(
            "generating {} with mkbench.py (takes minutes) ...",
            out.display()
        );
        let partial = out.with_extension("pcap.part");
        let status = Command::new("python3")
            .arg(mkbench_script())
            .arg(&partial)
            .args(MKBENCH_ARGS)
            .status()
            .expect("python3 runs");
        assert!(status.success(), "mkbench.py failed: {status}");
        std::fs::rename(&partial, &out).expect("rename generated capture");
    }
    out
}

/// The first `max_packets` records of a capture as a self-contained capture
/// in memory (file header included), so `PcapReader::from_bytes` reads it
/// exactly as it would the file.
pub fn pcap_prefix(path: &Path, max_packets: usize) -> (Vec<u8>, usize) {
    let mut buf = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let (end, n) = {
        let mut r = PcapReader::from_bytes(&buf[..]).expect("capture header");
        let mut n = 0;
        while n < max_packets && r.next_packet().expect("clean capture").is_some() {
            n += 1;
        }
        (r.offset() as usize, n)
    };
    buf.truncate(end);
    buf.shrink_to_fit();
    (buf, n)
}

/// One captured frame, by position in [`Frames::bytes`].
#[derive(Clone, Copy, Debug)]
pub struct FrameRef {
    pub link: LinkType,
    pub start: usize,
    pub len: usize,
    pub wire_len: u32,
    pub ts: Timestamp,
}

/// Frames copied back to back into one buffer, as a capture ring would hold
/// them; setup cost only.
#[derive(Default)]
pub struct Frames {
    pub bytes: Vec<u8>,
    pub refs: Vec<FrameRef>,
}

impl Frames {
    /// Appends up to `max` frames of a capture (unknown link types skipped).
    pub fn add_capture(&mut self, capture: &[u8], max: usize) {
        let mut r = PcapReader::from_bytes(capture).expect("capture header");
        let mut added = 0;
        while added < max {
            let Some(p) = r.next_packet().expect("clean capture") else {
                break;
            };
            let Some(link) = p.link else { continue };
            self.refs.push(FrameRef {
                link,
                start: self.bytes.len(),
                len: p.data.len(),
                wire_len: p.wire_len,
                ts: p.ts,
            });
            self.bytes.extend_from_slice(p.data);
            added += 1;
        }
    }

    /// Every frame of every capture in `dir` (`*.pcap`, `*.pcapng`).
    pub fn add_dir(&mut self, dir: &Path) -> usize {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.retain(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"));
        files.sort();
        let before = self.refs.len();
        for f in &files {
            let buf = std::fs::read(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
            self.add_capture(&buf, usize::MAX);
        }
        self.refs.len() - before
    }

    /// Appends a copy of frame `f` of `other`.
    pub fn push_from(&mut self, other: &Frames, f: &FrameRef) {
        self.refs.push(FrameRef {
            start: self.bytes.len(),
            ..*f
        });
        self.bytes.extend_from_slice(other.frame(f));
    }

    pub fn frame(&self, f: &FrameRef) -> &[u8] {
        &self.bytes[f.start..f.start + f.len]
    }

    pub fn len(&self) -> usize {
        self.refs.len()
    }
}

/// Directory of the real-capture corpus: `$XDPROBE_CORPUS`, else the
/// repository's `tests/corpus`.
pub fn corpus_dir() -> PathBuf {
    std::env::var_os("XDPROBE_CORPUS").map_or_else(|| repo_file("tests/corpus"), PathBuf::from)
}
