//! The whole offline pipeline from memory: `PcapReader::from_bytes` →
//! `Worker` (parse → flow table → NPM) → records discarded, over the first
//! million packets of the benchmark capture; NPM on and off, one frame at a
//! time (`on_frame`, as the live path runs) and batched (`on_batch`, as
//! `xdprobe pcap` runs).
//!
//! `pipeline_ts` runs the same packets with the TCP timestamp option on
//! every segment (`support/tcp_ts.rs`): NPM with timestamp RTT, NPM
//! without it (`FlowConfig::ts_rtt` off) and NPM off, side by side in one
//! run, so their ratio is the feature's cost per packet. `pipeline_real`
//! does the same on real kernel traffic (the captures in
//! `tests/corpus/ts_rtt/`, and `$XDPROBE_BENCH_REAL_PCAP` when set): bulk
//! flows, where most segments repeat the last TSval and echo.
//!
//! The capture prefix is read into one `Vec` before anything is timed, so
//! no disk I/O and no page-cache faults are measured. Each pass starts a
//! fresh worker (not timed) and ends with its flush (timed: a file run ends
//! that way too). Throughput is packets per second on one core.
//!
//! `cargo bench -p xdprobe --bench pipeline`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use xdprobe_dataplane::source::{Frame, pcap::PcapReader};
use xdprobe_dataplane::worker::BATCH;
use xdprobe_dataplane::{FlowConfig, FlowRecord, Worker};

#[path = "support/data.rs"]
mod data;
#[path = "support/tcp_ts.rs"]
mod tcp_ts;

/// Packets per pass: the first million of the bench capture.
const PACKETS: usize = 1_000_000;

/// How a pass drives the worker.
#[derive(Clone, Copy)]
enum Drive {
    /// `next_packet` → `Worker::on_frame`, one frame at a time (the live
    /// AF_XDP path).
    PerFrame,
    /// `next_batch` → `Worker::on_batch` in batches of `BATCH` (what
    /// `xdprobe pcap` does).
    Batched,
}

/// One pass over the in-memory capture; returns the time of reading,
/// parsing, flow accounting and the final flush.
fn pass(cfg: &FlowConfig, capture: &[u8], drive: Drive) -> Duration {
    let mut worker = Worker::new(cfg);
    let mut records = 0u64;
    let mut out = |r: FlowRecord| {
        records += 1;
        black_box(&r);
    };
    let start = Instant::now();
    let mut reader = PcapReader::from_bytes(black_box(capture)).expect("capture header");
    match drive {
        Drive::PerFrame => {
            while let Ok(Some(p)) = reader.next_packet() {
                worker.on_frame(p.link, p.data, p.wire_len, p.ts, &mut out);
            }
        }
        Drive::Batched => loop {
            let mut batch = [Frame::default(); BATCH];
            match reader.next_batch(&mut batch) {
                Ok(0) | Err(_) => break,
                Ok(n) => worker.on_batch(&batch[..n], &mut out),
            }
        },
    }
    worker.flush(&mut out);
    let t = start.elapsed();
    black_box(records);
    drop(worker);
    t
}

fn pipeline(c: &mut Criterion) {
    let pcap = data::bench_pcap(env!("CARGO_TARGET_TMPDIR"));
    let (capture, n) = data::pcap_prefix(&pcap, PACKETS);
    // A sanity pass: every packet must reach the flow table, or the figure
    // would flatter a pipeline that drops.
    {
        let mut w = Worker::new(&FlowConfig::default());
        let mut r = PcapReader::from_bytes(&capture[..]).expect("capture header");
        while let Ok(Some(p)) = r.next_packet() {
            w.on_frame(p.link, p.data, p.wire_len, p.ts, &mut |_| {});
        }
        let s = w.stats();
        assert_eq!(s.frames, n as u64);
        assert_eq!(
            s.table.packets, n as u64,
            "parse drops in the bench capture"
        );
    }
    eprintln!(
        "pipeline input: {n} packets, {} bytes in memory",
        capture.len()
    );

    let mut g = c.benchmark_group("pipeline");
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(n as u64));
    for (drive, drive_name) in [(Drive::PerFrame, "per_frame"), (Drive::Batched, "batched")] {
        for (npm, npm_name) in [(true, "npm_on"), (false, "npm_off")] {
            let cfg = FlowConfig {
                npm,
                ..FlowConfig::default()
            };
            g.bench_function(format!("{drive_name}/{npm_name}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| pass(&cfg, &capture, drive)).sum())
            });
        }
    }
    g.finish();

    let (with_ts, added) = tcp_ts::add_tcp_timestamps(&capture);
    eprintln!("pipeline_ts input: timestamp option on {added} TCP segments");
    let mut g = c.benchmark_group("pipeline_ts");
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(n as u64));
    for (drive, drive_name) in [(Drive::Batched, "batched"), (Drive::PerFrame, "per_frame")] {
        for (npm, ts_rtt, name) in [
            (true, true, "npm_ts_rtt"),
            (true, false, "npm_no_ts_rtt"),
            (false, false, "npm_off"),
        ] {
            let cfg = FlowConfig {
                npm,
                ts_rtt,
                ..FlowConfig::default()
            };
            g.bench_function(format!("{drive_name}/{name}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| pass(&cfg, &with_ts, drive)).sum())
            });
        }
    }
    g.finish();
}

/// One pass over each capture of `caps` (a fresh worker each: they come
/// from different times), batched.
fn pass_each(cfg: &FlowConfig, caps: &[Vec<u8>]) -> Duration {
    caps.iter().map(|c| pass(cfg, c, Drive::Batched)).sum()
}

fn pipeline_real(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/ts_rtt");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "pcap"));
    files.extend(std::env::var_os("XDPROBE_BENCH_REAL_PCAP").map(std::path::PathBuf::from));
    files.sort();
    let caps: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display())))
        .collect();
    let n: u64 = caps
        .iter()
        .map(|c| {
            let mut r = PcapReader::from_bytes(&c[..]).expect("capture header");
            let mut k = 0;
            while let Ok(Some(_)) = r.next_packet() {
                k += 1;
            }
            k
        })
        .sum();
    eprintln!(
        "pipeline_real input: {n} packets in {} captures",
        caps.len()
    );
    let mut g = c.benchmark_group("pipeline_real");
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(n));
    for (npm, ts_rtt, name) in [
        (true, true, "batched/npm_ts_rtt"),
        (true, false, "batched/npm_no_ts_rtt"),
        (false, false, "batched/npm_off"),
    ] {
        let cfg = FlowConfig {
            npm,
            ts_rtt,
            // The captures hold a few hundred flows: a small table, as a
            // probe on a quiet link would have.
            capacity: 4096,
            ..FlowConfig::default()
        };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| pass_each(&cfg, &caps)).sum())
        });
    }
    g.finish();
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .configure_from_args();
    pipeline(&mut c);
    pipeline_real(&mut c);
    c.final_summary();
}
