//! Whole-pipeline rate from a capture, one core: every packet goes through
//! `Worker::on_batch` (parse → flow table → NPM); records are counted and
//! dropped. By default the file is read into memory first (the per-core
//! figure); `--mmap` maps it per round as `xdprobe pcap` does. Each round
//! runs twice, straight from the reader and through the time-order stage
//! `xdprobe pcap` uses (`source::reorder`), so the stage's cost is a ratio
//! measured in the same run.
//!
//! `cargo run --release -p xdprobe-dataplane --example pipeline_rate -- FILE [--no-npm] [--capacity N] [--mmap]`

use std::path::Path;
use std::time::Instant;

use xdprobe_dataplane::source::reorder::TimeOrdered;
use xdprobe_dataplane::source::{Frame, pcap::PcapReader};
use xdprobe_dataplane::worker::BATCH;
use xdprobe_dataplane::{FlowConfig, Worker};

fn run<B: AsRef<[u8]>>(mut reader: PcapReader<B>, cfg: &FlowConfig) -> (u64, u64) {
    let mut worker = Worker::new(cfg);
    let mut records = 0u64;
    let mut emit = |_r| records += 1;
    loop {
        let mut batch = [Frame::default(); BATCH];
        match reader.next_batch(&mut batch) {
            Ok(0) => break,
            Ok(n) => worker.on_batch(&batch[..n], &mut emit),
            Err(e) => panic!("{e}"),
        }
    }
    worker.flush(&mut emit);
    (worker.stats().frames, records)
}

fn run_ordered<B: AsRef<[u8]>>(reader: PcapReader<B>, cfg: &FlowConfig) -> (u64, u64) {
    let mut worker = Worker::new(cfg);
    let mut records = 0u64;
    let mut emit = |_r| records += 1;
    let mut reader = TimeOrdered::new(reader);
    loop {
        let mut batch = [Frame::default(); BATCH];
        match reader.next_batch(&mut batch) {
            Ok(0) => break,
            Ok(n) => worker.on_batch(&batch[..n], &mut emit),
            Err(e) => panic!("{e}"),
        }
    }
    worker.flush(&mut emit);
    (worker.stats().frames, records)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: pipeline_rate FILE [--no-npm] [--capacity N] [--mmap]");
        std::process::exit(2);
    };
    let flag = |f: &str| args.iter().any(|a| a == f);
    let capacity = args
        .iter()
        .position(|a| a == "--capacity")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(FlowConfig::default().capacity);
    let cfg = FlowConfig {
        npm: !flag("--no-npm"),
        capacity,
        ..FlowConfig::default()
    };
    let bytes = if flag("--mmap") {
        Vec::new()
    } else {
        std::fs::read(path).expect("read capture")
    };
    let mut best = [f64::MAX; 2];
    for round in 0..3 {
        for (i, ordered) in [false, true].into_iter().enumerate() {
            let t0 = Instant::now();
            let (frames, records) = match (flag("--mmap"), ordered) {
                (true, false) => run(PcapReader::open(Path::new(path)).expect("open"), &cfg),
                (true, true) => run_ordered(PcapReader::open(Path::new(path)).expect("open"), &cfg),
                (false, false) => run(
                    PcapReader::from_bytes(bytes.as_slice()).expect("header"),
                    &cfg,
                ),
                (false, true) => run_ordered(
                    PcapReader::from_bytes(bytes.as_slice()).expect("header"),
                    &cfg,
                ),
            };
            let secs = t0.elapsed().as_secs_f64();
            best[i] = best[i].min(secs);
            println!(
                "round {round}{}: {frames} packets, {records} records, npm={}, {secs:.3} s, {:.2} Mpps",
                if ordered { " time-ordered" } else { "" },
                cfg.npm,
                frames as f64 / secs / 1e6
            );
        }
    }
    println!(
        "best: time-ordered {:.3} s / plain {:.3} s = {:.3}",
        best[1],
        best[0],
        best[1] / best[0]
    );
}
