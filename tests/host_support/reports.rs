//! Reading the probe's output: reports by flow, segment figures, the raw
//! `--samples` file, and pairing samples with the applications' own
//! timings.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::Timed;

/// Median of `v` (sorted copy), nearest rank.
pub fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[s.len().div_ceil(2) - 1]
}

/// The report of the flow `src:sport → dst:dport` (any sport when 0).
pub fn flow<'a>(reports: &'a [Value], dst_port: u16, src: &str) -> Vec<&'a Value> {
    reports
        .iter()
        .filter(|r| r["dport"] == dst_port && r["src"] == src)
        .collect()
}

/// The only report of the client's flow to `port`.
pub fn the_report(reports: &[Value], port: u16) -> Value {
    let f = flow(reports, port, "192.0.2.1");
    assert_eq!(f.len(), 1, "one report for the flow: {reports:#?}");
    f[0].clone()
}

/// The JSON lines of `p` that parse (none if it does not exist yet).
pub fn read_json(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A segment's figure in a report, µs.
pub fn seg(r: &Value, name: &str, what: &str) -> f64 {
    r["segments"][name][what]
        .as_f64()
        .unwrap_or_else(|| panic!("no segments.{name}.{what} in {r}"))
}

/// Reads the `--samples` file: per timed byte of the flow to `dport`, its
/// stream position and layer → time (ns).
pub fn raw_samples(path: &Path, dport: u16) -> Vec<(u64, Vec<(String, u64)>)> {
    std::fs::read_to_string(path)
        .expect("samples file")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|v| v["dport"] == dport)
        .map(|v| {
            let times = v["times"]
                .as_array()
                .expect("times")
                .iter()
                .map(|t| (t[0].as_str().unwrap().to_owned(), t[1].as_u64().unwrap()))
                .collect();
            (v["pos"].as_u64().unwrap(), times)
        })
        .collect()
}

/// Pairs the probe's T8 of each message's last byte with the message's
/// own timing: (application T8, probe T8) in ns, for every message the
/// probe timed. Messages are `size` bytes back to back, so the k-th one
/// ends at `first_end + k·size`.
pub fn paired_t8(
    samples: &[(u64, Vec<(String, u64)>)],
    timed: &[Timed],
    size: usize,
) -> Vec<(u64, u64)> {
    let t8 = |times: &[(String, u64)]| {
        let get = |n: &str| times.iter().find(|(l, _)| l == n).map(|(_, t)| *t);
        get("sock_rx")?.checked_sub(get("sock_tx")?)
    };
    let Some(first) = samples.iter().map(|s| s.0).min() else {
        return Vec::new();
    };
    let mut by_index = std::collections::HashMap::new();
    for (pos, times) in samples {
        let off = pos - first;
        if off % size as u64 == 0
            && let Some(v) = t8(times)
        {
            by_index.insert((off / size as u64) as u32, v);
        }
    }
    let first_index = timed.iter().map(|t| t.index).min().unwrap_or(0);
    timed
        .iter()
        .filter_map(|t| {
            by_index
                .get(&(t.index - first_index))
                .map(|&p| (t.t8_ns(), p))
        })
        .collect()
}

/// Pairs samples with messages by time, for a probe that did not see the
/// stream from its start (time sampling): a sample's socket-layer send
/// time is the entry of the write(2) that carried it, a few µs after the
/// sender read its clock for the message. Messages `gap` apart pair
/// unambiguously within `gap / 4`. Returns (application T8, probe T8).
pub fn paired_t8_by_time(
    samples: &[(u64, Vec<(String, u64)>)],
    timed: &[Timed],
    gap: Duration,
) -> Vec<(u64, u64)> {
    let mut sent: Vec<&Timed> = timed.iter().collect();
    sent.sort_by_key(|t| t.sent_ns);
    let near = gap.as_nanos() as u64 / 4;
    samples
        .iter()
        .filter_map(|(_, times)| {
            let get = |n: &str| times.iter().find(|(l, _)| l == n).map(|(_, t)| *t);
            let (tx, rx) = (get("sock_tx")?, get("sock_rx")?);
            let i = sent.partition_point(|t| t.sent_ns <= tx).checked_sub(1)?;
            let m = sent[i];
            let probe = rx.checked_sub(tx)?;
            (tx - m.sent_ns <= near).then_some((m.t8_ns(), probe))
        })
        .collect()
}
