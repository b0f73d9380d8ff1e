//! Records per second into JSON lines: the hand-written writer
//! (`RecordWriter`, what `xdprobe pcap --format json` uses) against
//! serde_json's rendering of the same `JsonRecord` schema, `to_string` per
//! record as the writer did before, and `to_writer` into a reused buffer.
//!
//! Input: the records of the bench capture's first 2 M packets (the demo
//! capture under `cargo test`), made before the clock starts; output goes
//! to a 64 KiB `BufWriter` in front of `io::sink()`, as `xdprobe pcap`
//! writes to a pipe or /dev/null.
//!
//! `cargo bench -p xdprobe-dataplane --bench json_lines`

use std::hint::black_box;
use std::io::{BufWriter, Sink, Write};
use std::time::Instant;

use criterion::{Criterion, Throughput};
use xdprobe_dataplane::output::{Format, JsonRecord, RecordWriter};
use xdprobe_dataplane::source::{Frame, pcap::PcapReader};
use xdprobe_dataplane::worker::BATCH;
use xdprobe_dataplane::{FlowConfig, FlowRecord, Worker};

#[path = "../../benches/support/data.rs"]
mod data;

const PACKETS: usize = 2_000_000;

fn records() -> Vec<FlowRecord> {
    let pcap = data::bench_pcap(env!("CARGO_TARGET_TMPDIR"));
    let (bytes, _) = data::pcap_prefix(&pcap, PACKETS);
    let mut reader = PcapReader::from_bytes(&bytes[..]).expect("capture");
    let mut worker = Worker::try_new(&FlowConfig::default()).expect("flow table");
    let mut out = Vec::new();
    let mut emit = |r: FlowRecord| out.push(r);
    loop {
        let mut batch = [Frame::default(); BATCH];
        let n = reader.next_batch(&mut batch).expect("clean capture");
        if n == 0 {
            break;
        }
        worker.on_batch(&batch[..n], &mut emit);
    }
    worker.flush(&mut emit);
    out
}

/// Where `xdprobe pcap` writes: a 64 KiB buffer, here in front of nothing.
fn out() -> BufWriter<Sink> {
    BufWriter::with_capacity(1 << 16, std::io::sink())
}

fn json_benches(c: &mut Criterion) {
    let recs = records();
    assert!(!recs.is_empty());
    let mut g = c.benchmark_group("json_lines");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.bench_function("record_writer", |b| {
        let mut w = RecordWriter::new(out(), Format::Json);
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                for r in &recs {
                    w.write(black_box(r)).unwrap();
                }
            }
            start.elapsed()
        })
    });
    g.bench_function("serde_to_string", |b| {
        let mut v = out();
        let mut line = String::with_capacity(512);
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                for r in &recs {
                    // What `RecordWriter` did before: a String per record,
                    // copied into the reused line buffer, then written.
                    let s = serde_json::to_string(&JsonRecord::from(black_box(r))).unwrap();
                    line.clear();
                    line.push_str(&s);
                    line.push('\n');
                    v.write_all(line.as_bytes()).unwrap();
                }
            }
            start.elapsed()
        })
    });
    g.bench_function("serde_to_writer", |b| {
        let mut v = out();
        let mut line: Vec<u8> = Vec::with_capacity(1024);
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                for r in &recs {
                    line.clear();
                    serde_json::to_writer(&mut line, &JsonRecord::from(black_box(r))).unwrap();
                    line.push(b'\n');
                    v.write_all(&line).unwrap();
                }
            }
            start.elapsed()
        })
    });
    g.finish();
}

fn main() {
    // 20 samples: a serde pass over the records takes ≈ 1 s on a busy core.
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_secs(2))
        .configure_from_args();
    json_benches(&mut c);
    c.final_summary();
}
