//! Floods against ordinary traffic, per packet, in the steady state (issue
//! 12): a SYN flood (a new source endpoint per packet, so once the flow
//! table is full every packet evicts a flow and emits its record), a
//! first-fragment flood (every packet a new datagram: once the fragment
//! table is full every packet pushes out the oldest) and a non-first
//! fragment flood (datagrams never seen), each against the same number of
//! ordinary packets (data on 50 k established connections). The goal is at
//! most 2× ordinary per packet; BENCHMARKS.md has the figures.
//!
//! Each iteration builds a worker with the default capacities (262 144
//! flows, 4 096 datagrams), feeds it `WARMUP` packets untimed (the tables
//! fill), then times `TIMED` more through the batched path the file reader
//! and single-queue live capture use. Records go to a counting closure:
//! the cost of writing or exporting them comes on top (a SYN flood emits a
//! record per packet).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use xdprobe_dataplane::{FlowConfig, Worker};

#[path = "support/flood.rs"]
mod flood;
use flood::{Kind, feed};

const WARMUP: u64 = 300_000;
const TIMED: u64 = 1_000_000;

fn floods(c: &mut Criterion) {
    let cfg = FlowConfig::default();
    let mut g = c.benchmark_group("flood");
    g.throughput(Throughput::Elements(TIMED));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    for kind in Kind::ALL {
        let pkts = flood::packets(kind, WARMUP + TIMED);
        let (warm, timed) = pkts.split_at(WARMUP as usize);
        g.bench_function(kind.name(), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut w = Worker::new(&cfg);
                    let mut records = 0;
                    feed(&mut w, warm, &mut records);
                    let t = Instant::now();
                    feed(&mut w, timed, &mut records);
                    total += t.elapsed();
                    black_box(records);
                }
                total
            })
        });
    }
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    floods(&mut c);
    c.final_summary();
}
