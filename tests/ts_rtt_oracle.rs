//! Timestamp RTT of the real `xdprobe` binary against an independent
//! reference computed from tshark's `tcp.options.timestamp.tsval/tsecr`
//! (`ts_rtt_oracle/reference.rs`: every distinct TSval echoed, first
//! sighting to first echo, no bound), on the shared corpus, on the small
//! captures checked in under `tests/corpus/ts_rtt/` (see its SOURCES.md),
//! on fresh captures of real kernel traffic made at test time, and on
//! hand-made bad input.
//!
//! Per TCP flow and leg (whole-flow records): `count + missed` equals the
//! number of distinct TSvals echoed, less at most the echoes the reference
//! finds out of order (the probe's documented limit); with nothing missed
//! and nothing out of order the count, min, mean and max equal the
//! reference's (1 µs: each time is rounded to µs once), and the median and
//! p90 are exact up to 13 samples and within the sketch's tolerance beyond.
//! With samples missed (more TSvals in flight than the ring holds) the
//! samples are a subset: min and max stay inside the reference's. Flows
//! without the option have `null` legs. With 1 s active timeouts every
//! interval holds exactly the echoes captured within it. A flow seen
//! mid-stream has timestamp RTT and no handshake RTT.

mod common;
#[path = "ts_rtt_oracle/craft.rs"]
mod craft;
mod live_support;
mod oracle;
#[path = "ts_rtt_oracle/reference.rs"]
mod reference;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use reference::{RefDir, RefStream};
use serde_json::Value;

const WHOLE: &[&str] = &["--idle-timeout", "86400s", "--active-timeout", "86400s"];
const INTERVALS: &[&str] = &["--idle-timeout", "86400s", "--active-timeout", "1s"];

#[derive(Default)]
struct Report {
    failures: Vec<String>,
    /// Legs compared value by value (nothing missed).
    exact_legs: usize,
    /// Legs compared as a subset (samples missed).
    subset_legs: usize,
    samples: u64,
    mid_stream: usize,
    no_option_flows: usize,
}

impl Report {
    fn fail(&mut self, m: String) {
        self.failures.push(m);
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Endpoints in sorted order with the VLAN: how a flow is matched.
type Key = (String, String, Option<u16>);

fn key(a: String, b: String, vlan: Option<u16>) -> Key {
    if a <= b { (a, b, vlan) } else { (b, a, vlan) }
}

fn tcp_records(recs: Vec<Value>) -> BTreeMap<Key, Vec<Value>> {
    let mut m: BTreeMap<Key, Vec<Value>> = BTreeMap::new();
    for r in recs.into_iter().filter(|r| u(&r["proto"]) == 6) {
        let k = key(
            endpoint(&r["client_addr"], &r["client_port"]),
            endpoint(&r["server_addr"], &r["server_port"]),
            r["vlan"].as_u64().map(|v| v as u16),
        );
        m.entry(k).or_default().push(r);
    }
    for v in m.values_mut() {
        v.sort_by_key(|r| u(&r["start_us"]));
    }
    m
}

/// One leg of a whole-flow record against the reference direction.
fn check_leg(tag: &str, got: &Value, r: &RefDir, rep: &mut Report) {
    let (count, missed) = (u(&got["count"]), u(&got["missed"]));
    let n = r.echoes.len() as u64;
    rep.samples += count;
    if count + missed > n || count + missed + r.out_of_order < n {
        rep.fail(format!(
            "{tag}: count {count} + missed {missed} vs {n} distinct TSvals echoed ({} out of order)",
            r.out_of_order
        ));
        return;
    }
    let mut rtts: Vec<f64> = r.echoes.iter().map(|e| e.rtt_ns as f64 / 1e3).collect();
    rtts.sort_by(f64::total_cmp);
    let us = |k: &str| got[k].as_f64();
    if count == 0 {
        if us("min_us").is_some() || us("p50_us").is_some() {
            rep.fail(format!("{tag}: values without samples: {got}"));
        }
        return;
    }
    let (lo, hi) = (rtts[0], rtts[rtts.len() - 1]);
    let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() <= 1.0);
    if missed == 0 && r.out_of_order == 0 {
        rep.exact_legs += 1;
        let mean = rtts.iter().sum::<f64>() / rtts.len() as f64;
        for (k, want) in [("min_us", lo), ("max_us", hi), ("mean_us", mean)] {
            if !near(us(k), want) {
                rep.fail(format!("{tag}: {k} {:?}, reference {want:.1}", us(k)));
            }
        }
        for (k, p) in [("p50_us", 0.5), ("p90_us", 0.9)] {
            // The sketch's documented accuracy (`metrics/sketch.rs`): exact
            // up to 13 samples, then within 15 / 10 / 5 rank percent from
            // 14 / 100 / 1000 samples.
            let tol: f64 = match rtts.len() {
                0..=13 => 0.0,
                14..=99 => 0.15,
                100..=999 => 0.10,
                _ => 0.05,
            };
            let a = reference::quantile(&rtts, (p - tol).max(0.0)) - 1.0;
            let b = reference::quantile(&rtts, (p + tol).min(1.0)) + 1.0;
            if !us(k).is_some_and(|v| v >= a && v <= b) {
                rep.fail(format!(
                    "{tag}: {k} {:?} outside [{a:.1}, {b:.1}] ({} samples)",
                    us(k),
                    rtts.len()
                ));
            }
        }
    } else {
        rep.subset_legs += 1;
        let (min, max) = (us("min_us").unwrap_or(-1.0), us("max_us").unwrap_or(-1.0));
        if min < lo - 1.0 || max > hi + 1.0 {
            rep.fail(format!(
                "{tag}: samples [{min}, {max}] outside the reference's [{lo:.1}, {hi:.1}]"
            ));
        }
    }
}

/// The interval records of one flow: each holds what was echoed within it.
fn check_intervals(tag: &str, recs: &[Value], legs: [(&str, &RefDir); 2], rep: &mut Report) {
    for (leg, r) in legs {
        for rec in recs {
            let (start, end) = (u(&rec["start_us"]), u(&rec["end_us"]));
            // Record times are capture times rounded to µs, as here.
            let within = r
                .echoes
                .iter()
                .filter(|e| (start..=end).contains(&((e.at_ns + 500) / 1000)))
                .count() as u64;
            let l = &rec[leg];
            let got = u(&l["count"]) + u(&l["missed"]);
            if got > within || got + r.out_of_order < within {
                rep.fail(format!(
                    "{tag} {leg} interval {}: count + missed {got}, echoed within it {within}",
                    rec["record_seq"]
                ));
            }
        }
    }
}

fn check_stream(
    name: &str,
    s: &RefStream,
    whole: &[Value],
    intervals: Option<&Vec<Value>>,
    rep: &mut Report,
) {
    let tag = format!("{name} {} <-> {}", s.first_src, s.other);
    let [rec] = whole else {
        rep.fail(format!("{tag}: {} whole-flow records", whole.len()));
        return;
    };
    let client = endpoint(&rec["client_addr"], &rec["client_port"]);
    // The reference's directions by sender: client's TSvals → server leg.
    let (c, sv) = if s.first_src == client {
        (0, 1)
    } else {
        (1, 0)
    };
    let any_option = s.dirs.iter().any(|d| d.with_option > 0);
    for leg in ["ts_rtt_server", "ts_rtt_client"] {
        if rec[leg].is_null() == any_option {
            rep.fail(format!(
                "{tag}: {leg} is {} but the flow {} the option",
                rec[leg],
                if any_option {
                    "carries"
                } else {
                    "never carries"
                }
            ));
            return;
        }
    }
    if !any_option {
        rep.no_option_flows += 1;
        return;
    }
    check_leg(
        &format!("{tag} server leg"),
        &rec["ts_rtt_server"],
        &s.dirs[c],
        rep,
    );
    check_leg(
        &format!("{tag} client leg"),
        &rec["ts_rtt_client"],
        &s.dirs[sv],
        rep,
    );
    if !s.saw_syn {
        rep.mid_stream += 1;
        if !rec["rtt_us"].is_null() {
            rep.fail(format!("{tag}: mid-stream flow with a handshake RTT"));
        }
    }
    if let Some(iv) = intervals {
        check_intervals(
            &tag,
            iv,
            [
                ("ts_rtt_server", &s.dirs[c]),
                ("ts_rtt_client", &s.dirs[sv]),
            ],
            rep,
        );
        for leg in ["ts_rtt_server", "ts_rtt_client"] {
            let sum = |recs: &[Value]| -> u64 {
                recs.iter()
                    .map(|r| u(&r[leg]["count"]) + u(&r[leg]["missed"]))
                    .sum()
            };
            if sum(iv) != sum(whole) {
                rep.fail(format!(
                    "{tag} {leg}: intervals add up to {}, the whole flow has {}",
                    sum(iv),
                    sum(whole)
                ));
            }
        }
    }
}

fn check_capture(name: &str, file: &Path, rep: &mut Report) {
    let refs = reference::streams(file);
    let whole = tcp_records(xdprobe_json(file, WHOLE));
    let intervals = tcp_records(xdprobe_json(file, INTERVALS));
    // Streams sharing a 5-tuple (port reuse) are one xdprobe key: skip.
    let mut per_key: BTreeMap<Key, Vec<&RefStream>> = BTreeMap::new();
    for s in refs.values() {
        per_key
            .entry(key(s.first_src.clone(), s.other.clone(), s.vlan))
            .or_default()
            .push(s);
    }
    for (k, ss) in per_key {
        let [s] = ss[..] else { continue };
        let Some(w) = whole.get(&k) else {
            rep.fail(format!("{name}: no xdprobe record for {k:?}"));
            continue;
        };
        check_stream(name, s, w, intervals.get(&k), rep);
    }
}

fn finish(rep: &Report) {
    eprintln!(
        "legs compared exactly {}, as subsets {}; {} samples; {} mid-stream flows; {} flows without the option",
        rep.exact_legs, rep.subset_legs, rep.samples, rep.mid_stream, rep.no_option_flows
    );
    assert!(
        rep.failures.is_empty(),
        "{} mismatches:\n{}",
        rep.failures.len(),
        rep.failures.join("\n")
    );
}

fn repo_captures() -> Vec<PathBuf> {
    captures_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/ts_rtt"))
}

#[test]
fn ts_rtt_matches_tshark_on_corpus_and_checked_in_captures() {
    if !require(have("tshark"), "tshark is not installed") {
        return;
    }
    let mut rep = Report::default();
    let repo = repo_captures();
    assert!(repo.len() >= 3, "tests/corpus/ts_rtt holds the captures");
    for file in &repo {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        check_capture(&name, file, &mut rep);
    }
    for file in corpus_captures().into_iter().chain(extra_captures()) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        check_capture(&name, &file, &mut rep);
    }
    assert!(rep.exact_legs >= 20, "too few legs compared exactly");
    assert!(rep.subset_legs >= 2, "no leg overflowed the ring");
    assert!(rep.mid_stream >= 2, "no mid-stream flow");
    assert!(rep.no_option_flows >= 1, "no flow without the option");
    finish(&rep);
}

#[test]
fn ts_rtt_matches_tshark_on_fresh_captures() {
    if !live_support::rig::can_run() {
        return;
    }
    let dir = TempDir::new("ts-rtt-oracle");
    let mut rep = Report::default();
    // Short legs (1 ms each way: few TSvals in flight, compared exactly)
    // and the default 10 / 2 ms with 20 Mbit/s bulk both ways (more in
    // flight than the ring holds).
    let settings = [("short", 1.0, 1.0, 2000), ("long", 10.0, 2.0, 20_000)];
    for (name, server_delay_ms, client_delay_ms, bulk_kbit) in settings {
        let rig = live_support::rig::Rig {
            seconds: 4,
            server_delay_ms,
            client_delay_ms,
            bulk_kbit,
            snaplen: 96,
            seed: 5,
            ..Default::default()
        };
        let pcap = rig.capture(&dir.0, name);
        check_capture(&format!("fresh {name}"), &pcap, &mut rep);
        // The same traffic picked up 1.5 s in: every bulk flow mid-stream.
        let cut = dir.0.join(format!("{name}-cut.pcap"));
        let first = first_time(&pcap);
        let st = Command::new("editcap")
            .arg("-A")
            .arg(format!("{:.6}", first + 1.5))
            .arg(&pcap)
            .arg(&cut)
            .status()
            .expect("editcap");
        assert!(st.success());
        check_capture(&format!("fresh {name}, cut"), &cut, &mut rep);
    }
    assert!(rep.exact_legs >= 10 && rep.subset_legs >= 1 && rep.mid_stream >= 2);
    finish(&rep);
}

fn first_time(pcap: &Path) -> f64 {
    let o = Command::new("tshark")
        .args(["-r"])
        .arg(pcap)
        .args(["-c", "1", "-T", "fields", "-e", "frame.time_epoch"])
        .output()
        .expect("tshark");
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("a first frame")
}

/// `xdprobe pcap --stats` on a crafted capture: records and the counter line.
fn run_stats(file: &Path) -> (Vec<Value>, String) {
    let out = xdprobe()
        .arg("pcap")
        .arg(file)
        .args(["--format", "json", "--stats"])
        .output()
        .expect("run xdprobe");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        parse_lines(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn ts_rtt_bad_input_is_counted_and_never_sampled() {
    use craft::{ACK, PSH, SYN, Seg};
    let seg = |from_client, cport, flags, ts, payload, at_us| Seg {
        from_client,
        cport,
        flags,
        ts,
        raw_opts: None,
        payload,
        at_us,
    };
    let t0 = 1_700_000_000_000_000u64;
    let mut segs = vec![
        // 40001: the server echoes values the client never sent.
        seg(true, 40001, SYN, Some((100, 0)), 0, t0),
        seg(false, 40001, SYN | ACK, Some((900, 777_777)), 0, t0 + 1_000),
        seg(true, 40001, ACK, Some((101, 900)), 0, t0 + 2_000),
        seg(false, 40001, ACK, Some((901, 888_888)), 0, t0 + 3_000),
        // 40002: TSval going backwards, then an echo stamped before its
        // TSval: 5 ms before, beyond the 2 ms the file reader puts back in
        // time order (closer, it would come first and echo nothing seen).
        seg(true, 40002, ACK | PSH, Some((5_000, 0)), 10, t0 + 10_000),
        seg(true, 40002, ACK | PSH, Some((4_000, 0)), 10, t0 + 11_000),
        seg(true, 40002, ACK | PSH, Some((6_000, 0)), 10, t0 + 20_000),
        seg(false, 40002, ACK, Some((70, 6_000)), 0, t0 + 15_000),
        // 40003: the option on the client side only.
        seg(true, 40003, SYN, Some((300, 0)), 0, t0 + 30_000),
        seg(false, 40003, SYN | ACK, None, 0, t0 + 31_000),
        seg(true, 40003, ACK, Some((301, 0)), 0, t0 + 32_000),
        seg(false, 40003, ACK | PSH, None, 100, t0 + 33_000),
    ];
    // 40004: malformed options (a TS option of length 9, then one cut by
    // the header end): parsed as no option, nothing breaks.
    for (i, raw) in [
        vec![1, 1, 8, 9, 0, 0, 0, 1, 0, 0, 0],
        vec![1, 8, 10, 0, 0, 0, 1],
    ]
    .into_iter()
    .enumerate()
    {
        segs.push(Seg {
            raw_opts: Some(raw),
            ..seg(i == 0, 40004, ACK, None, 0, t0 + 40_000 + i as u64)
        });
    }
    let tmp = TempDir::new("ts-rtt-bad");
    let file = tmp.0.join("bad.pcap");
    craft::write(&file, &segs);
    let (recs, stderr) = run_stats(&file);
    let by_port = |p: u64| {
        recs.iter()
            .find(|r| u(&r["client_port"]) == p)
            .unwrap_or_else(|| panic!("no record for {p}: {recs:?}"))
    };
    // No bad case gives a server-leg sample (40001's SYN+ACK echoes a
    // bogus value instead of the SYN's TSval).
    for p in [40001, 40002, 40003] {
        let r = by_port(p);
        assert_eq!(u(&r["ts_rtt_server"]["count"]), 0, "{p}: {r}");
    }
    // 40001's client leg is good: 900 echoed 1 ms later.
    assert_eq!(u(&by_port(40001)["ts_rtt_client"]["count"]), 1);
    assert_eq!(u(&by_port(40001)["ts_rtt_client"]["min_us"]), 1_000);
    assert!(by_port(40004)["ts_rtt_server"].is_null());
    let line = stderr
        .lines()
        .find(|l| l.contains("ts_rtt samples"))
        .unwrap_or_else(|| panic!("no ts_rtt line in:\n{stderr}"));
    for want in [
        "server leg 0",
        "client leg 1",
        // 777777 and 888888, and 40002's TSecr 0 before the server spoke.
        "echo_unseen 3",
        "tsval_backwards 1",
        "time_backwards 1",
        "one_sided_flows 1",
    ] {
        assert!(line.contains(want), "{want:?} not in {line:?}");
    }
    // The reference agrees that nothing else was echoed.
    if have("tshark") {
        let refs = reference::streams(&file);
        let echoed: usize = refs
            .values()
            .flat_map(|s| s.dirs.iter())
            .map(|d| d.echoes.len())
            .sum();
        assert_eq!(echoed, 2, "tshark: 900, and 6000 captured before its TSval");
    }
}
