//! The pcap/pcapng reader against tshark, an independent implementation:
//! for every capture in the shared corpus, and for hand-built files that
//! exercise what the corpus lacks (big-endian sections, several sections,
//! `if_tsresol` powers of 2, `if_tsoffset`, obsolete and simple packet
//! blocks), the packet count and each packet's timestamp (ns), captured
//! length, original length and interface must equal what tshark prints.
//!
//! The corpus is the repository's `tests/corpus`, plus the optional extra
//! corpus `$XDPROBE_SHARED/corpus` when that variable is set. Skips with a
//! loud message when tshark is missing, except under `CI=true`, where that
//! is a failure.

#[path = "../src/source/pcap/testutil.rs"]
mod testutil;

use std::path::{Path, PathBuf};
use std::process::Command;

use testutil::{self as tu, Order};
use xdprobe_dataplane::source::pcap::PcapReader;

/// One packet as both sides describe it.
#[derive(Debug, PartialEq, Eq)]
struct Frame {
    /// `None`: tshark prints no time (a simple packet block has none).
    ts_ns: Option<u64>,
    cap_len: u32,
    len: u32,
    /// `None` where tshark prints no interface (classic pcap).
    interface: Option<u32>,
}

use xdprobe_test_support::{TempDir, require};

/// The corpus directories: the repository's, then the optional extra one.
fn corpus_dirs() -> Vec<PathBuf> {
    let mut v = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus")];
    if let Some(d) = std::env::var_os("XDPROBE_SHARED") {
        v.push(PathBuf::from(d).join("corpus"));
    }
    v
}

fn have_tshark() -> bool {
    Command::new("tshark")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// "1477674021.971095000" → ns, exactly (no floating point).
fn parse_epoch(s: &str) -> u64 {
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    assert!(frac.len() <= 9, "more than ns precision: {s}");
    let bad = |_| panic!("odd tshark time {s:?}");
    let frac_ns: u64 = format!("{frac:0<9}").parse().unwrap_or_else(bad);
    secs.parse::<u64>().unwrap_or_else(bad) * 1_000_000_000 + frac_ns
}

fn tshark_frames(path: &Path) -> Vec<Frame> {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args(["-T", "fields", "-E", "separator=/t"])
        .args(["-e", "frame.time_epoch", "-e", "frame.cap_len"])
        .args(["-e", "frame.len", "-e", "frame.interface_id"])
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert!(f.len() >= 3, "odd tshark line {line:?}");
            Frame {
                ts_ns: (!f[0].is_empty()).then(|| parse_epoch(f[0])),
                cap_len: f[1].parse().unwrap(),
                len: f[2].parse().unwrap(),
                interface: f
                    .get(3)
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse().unwrap()),
            }
        })
        .collect()
}

fn our_frames(path: &Path, with_interface: bool) -> Vec<Frame> {
    let mut r = PcapReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    while let Some(p) = r
        .next_packet()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    {
        out.push(Frame {
            ts_ns: Some(p.ts.as_nanos()),
            cap_len: p.data.len() as u32,
            len: p.wire_len,
            interface: with_interface.then_some(p.interface),
        });
    }
    out
}

/// Compares both readings; returns the packet count. Where the file has no
/// timestamp (tshark prints none), ours must be the previous packet's, as the
/// reader documents.
fn compare(path: &Path) -> usize {
    let mut theirs = tshark_frames(path);
    let pcapng = theirs.iter().any(|f| f.interface.is_some());
    if pcapng {
        // tshark 4 shows custom blocks as frames without an interface; they
        // are not packets, and the reader skips them.
        theirs.retain(|f| f.interface.is_some());
    }
    let mut ours = our_frames(path, pcapng);
    assert_eq!(
        ours.len(),
        theirs.len(),
        "{}: packet count differs",
        path.display()
    );
    let mut previous = Some(0);
    for (i, (o, t)) in ours.iter_mut().zip(&theirs).enumerate() {
        if t.ts_ns.is_none() {
            assert_eq!(
                o.ts_ns,
                previous,
                "{}: packet {} has no time",
                path.display(),
                i + 1
            );
            o.ts_ns = None;
        }
        previous = o.ts_ns.or(previous);
        assert_eq!(
            o,
            t,
            "{}: packet {} (1-based) differs",
            path.display(),
            i + 1
        );
    }
    ours.len()
}

#[test]
fn pcap_corpus_matches_tshark() {
    if !require(have_tshark(), "tshark not found") {
        return;
    }
    let mut files: Vec<PathBuf> = corpus_dirs()
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap_or_else(|e| panic!("{}: {e}", d.display())))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "only {} corpus captures", files.len());
    let mut packets = 0;
    for f in &files {
        packets += compare(f);
    }
    eprintln!(
        "{} corpus files, {packets} packets agree with tshark",
        files.len()
    );
}

#[test]
fn pcap_synthetic_files_match_tshark() {
    if !require(have_tshark(), "tshark not found") {
        return;
    }
    let dir = TempDir::new("pcap-vs-tshark");
    let write = |name: &str, parts: &[Vec<u8>]| {
        let p = dir.0.join(name);
        std::fs::write(&p, parts.concat()).unwrap();
        p
    };
    let f = |seed, len| tu::frame(seed, len);
    const T: u64 = 1_700_000_000;

    for (order, nanos) in [(Order::Be, false), (Order::Be, true), (Order::Le, true)] {
        let p = write(
            &format!("classic-{order:?}-{nanos}.pcap"),
            &[
                tu::pcap_header(order, nanos, 65535, 1),
                tu::pcap_record(order, T as u32, 1, &f(1, 60), 60),
                tu::pcap_record(order, T as u32 + 1, 999_999, &f(2, 1514), 1514),
                tu::pcap_record(order, T as u32 + 2, 0, &f(3, 96), 1514),
            ],
        );
        compare(&p);
    }

    let (le, be) = (Order::Le, Order::Be);
    let p = write(
        "sections.pcapng",
        &[
            tu::shb(le),
            tu::idb(le, 1, 65535, None, None),
            tu::nrb(le),
            tu::idb(le, 113, 262144, Some(0x94), None), // 2^-20 s
            tu::epb(le, 0, T * 1_000_000 + 123_456, &f(4, 60), 60),
            tu::epb(le, 1, (T << 20) + 1, &f(5, 44), 44),
            tu::epb(le, 1, (T << 20) + 777_777, &f(5, 44), 44),
            tu::custom(le, b"opaque"),
            tu::isb(le, 0),
            tu::shb(be),
            tu::idb(be, 1, 65535, Some(9), None),
            tu::idb(be, 1, 65535, Some(3), Some(-3600)), // ms, an hour back
            tu::epb(be, 1, T * 1_000 + 250, &f(6, 70), 70),
            tu::epb(be, 0, T * 1_000_000_000 + 1, &f(7, 80), 1500),
            tu::obsolete_pb(be, 1, T * 1_000 + 999, &f(8, 64), 64),
            tu::shb(le),
            tu::idb(le, 1, 65535, Some(0x8a), Some(17)), // 2^-10 s
            tu::epb(le, 0, (T << 10) + 1023, &f(9, 54), 54),
        ],
    );
    compare(&p);

    // Simple packet blocks: lengths must agree; they have no timestamp.
    let p = write(
        "simple.pcapng",
        &[
            tu::shb(be),
            tu::idb(be, 1, 100, None, None),
            tu::epb(be, 0, T * 1_000_000, &f(10, 100), 1514),
            tu::spb(be, &f(11, 100), 1514),
            tu::spb(be, &f(12, 42), 42),
            tu::epb(be, 0, T * 1_000_000 + 5, &f(13, 60), 60),
        ],
    );
    compare(&p);
}
