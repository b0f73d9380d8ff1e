//! `xdprobe pcap --workers N`: the same records as one worker.
//!
//! Every capture of the corpus (and of `$XDPROBE_SHARED/corpus` when set) is
//! run with 1, 2 and 3 workers (3: an odd count, more workers than this
//! machine's 2 cores), with the default timeouts and with short ones that
//! make idle, active and TCP-close expiry happen inside the captures; the
//! sorted JSON lines must be equal. Only the order of the records may
//! differ (workers finish flows concurrently); every field, `record_seq`
//! and `end_reason` included, must match. A generated capture keeps one
//! worker without packets for a long stretch of capture time and checks
//! that its flow still ends idle, when one worker would end it, and is
//! emitted while the file is still being read, not at the end. The workers
//! take turns at reading: a stream of large frames must not stall the one
//! reading, and a capture cut mid-record ends alike on every count.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use common::*;
use serde_json::Value;

fn sorted_lines(file: &Path, args: &[&str]) -> Vec<String> {
    let out = xdprobe_pcap_json(file, args);
    let mut v: Vec<String> = String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

const SHORT: [&str; 6] = [
    "--idle-timeout",
    "1s",
    "--active-timeout",
    "2s",
    "--tcp-linger",
    "100ms",
];

/// Per flow key and direction: packets, bytes, first and last time.
fn totals(lines: &[String]) -> BTreeMap<String, [u64; 6]> {
    let mut m = BTreeMap::new();
    for r in parse_lines(lines.join("\n").as_bytes()) {
        let key = format!(
            "{}|{}|{}|{}|{}|{}",
            r["client_addr"],
            r["client_port"],
            r["server_addr"],
            r["server_port"],
            r["proto"],
            r["vlan"]
        );
        let e = m.entry(key).or_insert([0, 0, 0, 0, u64::MAX, 0]);
        let n = |d: &str, f: &str| r[d][f].as_u64().unwrap_or(0);
        e[0] += n("c2s", "packets");
        e[1] += n("c2s", "bytes");
        e[2] += n("s2c", "packets");
        e[3] += n("s2c", "bytes");
        e[4] = e[4].min(r["start_us"].as_u64().unwrap_or(u64::MAX));
        e[5] = e[5].max(r["end_us"].as_u64().unwrap_or(0));
    }
    m
}

fn check_same(f: &Path, one: &[String], many: &[String], what: &str) {
    if one != many {
        let missing: Vec<&String> = one.iter().filter(|l| !many.contains(l)).take(3).collect();
        let extra: Vec<&String> = many.iter().filter(|l| !one.contains(l)).take(3).collect();
        panic!(
            "{}: {what}: {} records vs {} with one worker; first only with one: {missing:#?}; first only with several: {extra:#?}",
            f.display(),
            many.len(),
            one.len()
        );
    }
}

#[test]
fn every_corpus_capture_gives_the_same_records_on_1_2_and_3_workers() {
    let mut files = corpus_captures();
    files.extend(extra_captures());
    assert!(files.len() >= 30, "corpus missing? {}", files.len());
    let mut records = 0;
    let mut short_identical = 0;
    for f in &files {
        let one = sorted_lines(f, &["--workers", "1"]);
        records += one.len();
        let one_short = sorted_lines(f, &[&["--workers", "1"][..], &SHORT[..]].concat());
        for n in ["2", "3"] {
            // Default timeouts: every record identical, every field.
            let many = sorted_lines(f, &["--workers", n]);
            check_same(f, &one, &many, &format!("--workers {n}"));
            // Short timeouts (expiry inside the captures): every packet and
            // byte in the same flow key and direction, and the same span;
            // where records are cut may differ (see `xdprobe_capture::worker::file`).
            let many_short = sorted_lines(f, &[&["--workers", n][..], &SHORT[..]].concat());
            assert_eq!(
                totals(&one_short),
                totals(&many_short),
                "{}: --workers {n} with short timeouts: per-flow totals differ",
                f.display()
            );
            short_identical += usize::from(one_short == many_short);
        }
    }
    assert!(records > 200, "only {records} records in the whole corpus?");
    eprintln!(
        "{} captures; with short timeouts {short_identical} of {} runs gave identical records",
        files.len(),
        2 * files.len()
    );
}

/// A stream (standard input) is copied into the batches instead of viewed
/// in the map: same records.
#[test]
fn streamed_input_gives_the_same_records() {
    let f = corpus_dir().join("zeek_mixed-vlan-mpls.pcap");
    let one = sorted_lines(&f, &["--workers", "1"]);
    let mut child = xdprobe()
        .args(["pcap", "-", "--format", "json", "--workers", "3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run xdprobe");
    let bytes = std::fs::read(&f).expect("read capture");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&bytes)
        .expect("feed");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let mut many: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    many.sort();
    assert!(!one.is_empty());
    assert_eq!(one, many);
}

/// `--stats` and the exporter count every worker's packets and records.
#[test]
fn summary_and_exporter_count_all_workers() {
    let f = corpus_dir().join("zeek_ssh.pcap");
    let dir = TempDir::new("pcap-workers");
    let run = |n: &str| {
        let ipfix = dir.0.join(format!("w{n}.ipfix"));
        let url = format!("file://{}", ipfix.display());
        let out = xdprobe()
            .arg("pcap")
            .arg(&f)
            .args([
                "--format",
                "none",
                "--stats",
                "--workers",
                n,
                "--export",
                &url,
            ])
            .output()
            .expect("run xdprobe");
        assert!(out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let first = err
            .lines()
            .find(|l| l.starts_with("frames "))
            .unwrap_or_else(|| panic!("no summary in {err}"));
        // "frames F  used U  flows N  records R  evicted E  in …": the
        // counts, not the time.
        let counts: String = first.split("  in ").next().unwrap_or("").to_owned();
        let export = err
            .lines()
            .find(|l| l.starts_with("export: "))
            .unwrap_or_else(|| panic!("no export line in {err}"))
            .split(';')
            .next()
            .unwrap_or("")
            .to_owned();
        let per_worker: Vec<u64> = err
            .lines()
            .filter_map(|l| l.trim().strip_prefix("worker "))
            .map(|l| {
                l.split("records ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|r| r.parse().ok())
                    .expect("worker records")
            })
            .collect();
        (
            counts,
            export,
            per_worker,
            std::fs::metadata(&ipfix).map(|m| m.len()),
        )
    };
    let (c1, e1, w1, _) = run("1");
    let (c2, e2, w2, size2) = run("2");
    assert_eq!(c1, c2, "summary counts");
    assert_eq!(e1, e2, "records the exporter received");
    assert!(e1.contains("25 records received"), "{e1}");
    assert!(w1.is_empty(), "no per-worker lines for one worker");
    assert_eq!(w2.len(), 2);
    assert_eq!(w2.iter().sum::<u64>(), 25);
    assert!(w2.iter().all(|&r| r > 0), "both workers had flows: {w2:?}");
    assert!(size2.is_ok_and(|s| s > 1000), "IPFIX file written");
}

/// Ethernet/IPv4/UDP frame.
fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let payload = [0u8; 18];
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&payload);
    f
}

fn write_pcap(path: &Path, frames: &[(u64, Vec<u8>)]) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&65535u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for (us, f) in frames {
        b.extend_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).expect("write capture");
}

#[test]
fn a_worker_without_packets_still_ends_its_flows_on_packet_time() {
    use xdprobe_capture::steer::owner;
    let quiet_a = [192, 0, 2, 10];
    let quiet_b = [198, 51, 100, 10];
    let quiet = udp(quiet_a, 5353, quiet_b, 53);
    let quiet_owner = owner(&quiet, 2).expect("placeable");
    // Busy flows: all on the other of two workers.
    let busy: Vec<Vec<u8>> = (0..=255u8)
        .map(|i| udp([203, 0, 113, i], 4000, [192, 0, 2, 200], 53))
        .filter(|f| owner(f, 2) != Some(quiet_owner))
        .take(100)
        .collect();
    assert!(busy.len() >= 50);
    // t = 0 s and 1 s: the quiet flow's two packets. Then 200 s of busy
    // traffic (one short flow per second, 100 packets each: 20 000 frames,
    // several clock rounds) on the other worker only.
    let t0 = 1_700_000_000_000_000u64;
    let mut frames = vec![(t0, quiet.clone()), (t0 + 1_000_000, quiet.clone())];
    for s in 0..200u64 {
        let f = &busy[s as usize % busy.len()];
        for k in 0..100u64 {
            frames.push((t0 + 2_000_000 + s * 1_000_000 + k * 1_000, f.clone()));
        }
    }
    let dir = TempDir::new("pcap-workers-idle");
    let file = dir.0.join("idle.pcap");
    write_pcap(&file, &frames);

    let one = sorted_lines(&file, &["--workers", "1"]);
    let two = sorted_lines(&file, &["--workers", "2"]);
    assert_eq!(one, two, "same records on one and two workers");

    let is_quiet = |r: &Value| r["client_port"] == 5353 || r["server_port"] == 5353;
    let recs = parse_lines(two.join("\n").as_bytes());
    let q = recs
        .iter()
        .find(|r| is_quiet(r))
        .expect("the quiet flow's record");
    assert_eq!(
        q["end_reason"], "idle",
        "ended idle, not at the end of input: {q}"
    );
    let pk = |d: &str| q[d]["packets"].as_u64().unwrap_or(0);
    assert_eq!(pk("c2s") + pk("s2c"), 2);

    // Mid-file: one worker ends the quiet flow when packet time passes 31 s.
    // Fed through a pipe, the first 100 s of the capture are written and
    // then the writer waits: the quiet flow's record must come out now,
    // from the reader's clock alone (its worker has no packet after 1 s),
    // not at the end of the input.
    let bytes = std::fs::read(&file).expect("read capture");
    let cut = 24 + (2 + 98 * 100) * (16 + quiet.len());
    quiet_record_before_the_rest(&bytes, cut, t0, &is_quiet);
}

/// `xdprobe pcap -` fed `bytes[..cut]` (its first 100 s after `t0`), then
/// held: the record `is_quiet` picks comes out before the rest is fed, and
/// only records of flows that ended in those 100 s came with it.
fn quiet_record_before_the_rest(
    bytes: &[u8],
    cut: usize,
    t0: u64,
    is_quiet: &dyn Fn(&Value) -> bool,
) {
    let mut child = xdprobe()
        .args(["pcap", "-", "--format", "json", "--workers", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run xdprobe");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(&bytes[..cut])
        .expect("feed the first 100 s");
    stdin.flush().expect("flush");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut early = Vec::new();
    let found = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                let v: Value = serde_json::from_str(&l).expect("JSON line");
                let quiet_rec = is_quiet(&v);
                early.push(v);
                if quiet_rec {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    // Let the rest through either way, so the process ends.
    stdin.write_all(&bytes[cut..]).expect("feed the rest");
    drop(stdin);
    let status = child.wait().expect("wait");
    drop(rx);
    let _ = lines.join();
    assert!(status.success());
    assert!(
        found,
        "the quiet flow's record did not come out before the input went on ({} records did)",
        early.len()
    );
    assert!(
        early
            .iter()
            .all(|r| r["end_us"].as_u64().is_some_and(|e| e < t0 + 100_000_000)),
        "only flows that ended in the first 100 s came out"
    );
}

/// A stream of large frames fills a worker's ring within one chunk of
/// reading (a slot's arena holds six 40 kB frames): the worker reading
/// must account its own batches to make room instead of waiting for
/// itself. Every worker owns a flow of large frames, so whichever reads
/// is in that case. Same records as one worker, within a deadline.
#[test]
fn a_stream_of_large_frames_does_not_stall_the_worker_reading_it() {
    use xdprobe_capture::steer::owner;
    let big = |host: u8| {
        let mut f = udp([192, 0, 2, host], 4000, [198, 51, 100, 7], 9);
        f.resize(40_000, 0xab);
        let ip_len = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&ip_len.to_be_bytes());
        f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
        f
    };
    let dir = TempDir::new("pcap-workers-big");
    for workers in [2usize, 3] {
        // One flow of large frames per worker, frames interleaved.
        let mut flows: Vec<Vec<u8>> = Vec::new();
        for host in 1..=255u8 {
            let f = big(host);
            let o = owner(&f, workers).expect("placeable");
            if flows.iter().all(|g| owner(g, workers) != Some(o)) {
                flows.push(f);
            }
        }
        assert_eq!(flows.len(), workers);
        let t0 = 1_700_000_000_000_000u64;
        let frames: Vec<(u64, Vec<u8>)> = (0..600u64)
            .map(|i| (t0 + i * 100, flows[i as usize % workers].clone()))
            .collect();
        let file = dir.0.join(format!("big{workers}.pcap"));
        write_pcap(&file, &frames);
        let one = sorted_lines(&file, &["--workers", "1"]);
        assert_eq!(one.len(), workers, "a record per flow: {one:?}");
        let mut child = xdprobe()
            .args([
                "pcap",
                "-",
                "--format",
                "json",
                "--workers",
                &workers.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run xdprobe");
        let mut stdin = child.stdin.take().expect("stdin");
        let bytes = std::fs::read(&file).expect("read capture");
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while child.try_wait().expect("wait").is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("xdprobe pcap - --workers {workers} stalled on large frames");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        feeder.join().expect("feeder");
        let out = child.wait_with_output().expect("output");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut many: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        many.sort();
        assert_eq!(one, many, "{workers} workers");
    }
}

/// A capture cut mid-record: every worker count emits the flows read
/// before the cut, the same records, and fails with the same error.
#[test]
fn a_truncated_capture_ends_the_same_on_every_worker_count() {
    let f = corpus_dir().join("ipfixprobe_mixed.pcap");
    let bytes = std::fs::read(&f).expect("read capture");
    let dir = TempDir::new("pcap-workers-cut");
    let cut = dir.0.join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("write the cut");
    let run = |workers: &str| {
        let out = xdprobe()
            .arg("pcap")
            .arg(&cut)
            .args(["--format", "json", "--workers", workers])
            .output()
            .expect("run xdprobe");
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), lines, err)
    };
    let (rc1, one, err1) = run("1");
    assert_eq!(rc1, Some(1), "{err1}");
    assert!(err1.contains("truncated packet record"), "{err1}");
    assert!(!one.is_empty(), "the flows before the cut are emitted");
    for workers in ["2", "3"] {
        let (rc, many, err) = run(workers);
        assert_eq!(rc, rc1, "{workers} workers: {err}");
        assert_eq!(many, one, "{workers} workers");
        assert_eq!(
            err.lines().last(),
            err1.lines().last(),
            "{workers} workers: the same error"
        );
    }
}
