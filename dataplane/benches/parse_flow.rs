//! Per-stage costs: `parse::parse` over real frames, and
//! the flow table over packets parsed beforehand (NPM on and off; one
//! packet at a time, and in the prefetching batches `Worker::on_batch` uses).
//!
//! All inputs are loaded and parsed before the clock starts (`iter_custom`);
//! a timed pass touches only the stage under test. Throughput is packets
//! per second on one core.
//!
//! `cargo bench -p xdprobe-dataplane --bench parse_flow`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput, measurement::WallTime};
use xdprobe_dataplane::flow::table::Prepared;
use xdprobe_dataplane::flow::{FlowConfig, FlowTable};
use xdprobe_dataplane::parse::{self, PacketMeta};
use xdprobe_dataplane::worker::BATCH;
use xdprobe_dataplane::{FlowRecord, Timestamp};

#[path = "../../benches/support/data.rs"]
mod data;

use data::Frames;

/// Bench frames in the parse sets: enough to leave the caches, few enough
/// that a pass stays in milliseconds.
const PARSE_BENCH_FRAMES: usize = 100_000;
/// Packets through the flow table per pass: the first million of the bench
/// capture (≈ 80 k flows start in it, up to 50 k at once).
const FLOW_PACKETS: usize = 1_000_000;

/// Parses every frame of `frames` once per iteration.
fn bench_parse(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, frames: &Frames) {
    g.throughput(Throughput::Elements(frames.len() as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                for f in &frames.refs {
                    let _ = black_box(parse::parse(f.link, black_box(frames.frame(f)), f.wire_len));
                }
            }
            start.elapsed()
        })
    });
}

fn parse_benches(c: &mut Criterion) {
    let pcap = data::bench_pcap(env!("CARGO_TARGET_TMPDIR"));
    let (prefix, _) = data::pcap_prefix(&pcap, PARSE_BENCH_FRAMES);

    let mut bench = Frames::default();
    bench.add_capture(&prefix, PARSE_BENCH_FRAMES);
    let mut corpus = Frames::default();
    let n_corpus = corpus.add_dir(&data::corpus_dir());
    assert!(
        n_corpus > 0,
        "no corpus captures in {}",
        data::corpus_dir().display()
    );

    // Mixed: after every four bench frames (Ethernet/IPv4 TCP and UDP), the
    // next corpus frame in turn (VLAN, QinQ, MPLS, IPv6, fragments, DNS,
    // TLS, raw IP ...), so one frame in five comes from a real capture.
    let mut mixed = Frames::default();
    let mut next_corpus = corpus.refs.iter().cycle();
    for (i, f) in bench.refs.iter().enumerate() {
        mixed.push_from(&bench, f);
        if i % 4 == 3
            && let Some(c) = next_corpus.next()
        {
            mixed.push_from(&corpus, c);
        }
    }
    eprintln!(
        "parse sets: {} bench frames, {} corpus frames, {} mixed",
        bench.len(),
        corpus.len(),
        mixed.len()
    );

    let mut g = c.benchmark_group("parse");
    bench_parse(&mut g, "bench_frames", &bench);
    bench_parse(&mut g, "corpus_frames", &corpus);
    bench_parse(&mut g, "mixed", &mixed);
    g.finish();
}

/// How a pass feeds the table.
#[derive(Clone, Copy)]
enum Feed {
    /// `FlowTable::process`, one packet at a time.
    PerPacket,
    /// `key_of` for a batch, then `find_candidate` (index lookups with slab
    /// prefetch), then `process_prepared` in order: what `Worker::on_batch`
    /// does after parsing.
    Batched,
}

/// One pass of pre-parsed packets through a fresh table; only the feeding
/// is timed (creating the table, the final flush and freeing are not).
fn flow_pass(cfg: &FlowConfig, pkts: &[(PacketMeta<'_>, Timestamp)], feed: Feed) -> Duration {
    let mut table = FlowTable::new(cfg);
    let mut records = 0u64;
    let mut out = |r: FlowRecord| {
        records += 1;
        black_box(&r);
    };
    let start = Instant::now();
    match feed {
        Feed::PerPacket => {
            for (meta, ts) in pkts {
                table.process(meta, *ts, &mut out);
            }
        }
        Feed::Batched => {
            for chunk in pkts.chunks(BATCH) {
                let mut preps: [Option<Prepared>; BATCH] = [None; BATCH];
                for (slot, (meta, _)) in preps.iter_mut().zip(chunk) {
                    *slot = Some(table.key_of(meta));
                }
                for (slot, (meta, _)) in preps.iter_mut().zip(chunk) {
                    if let Some(p) = slot {
                        table.find_candidate(meta, p);
                    }
                }
                for (slot, (meta, ts)) in preps.iter().zip(chunk) {
                    if let Some(p) = slot {
                        table.process_prepared(meta, p, *ts, &mut out);
                    }
                }
            }
        }
    }
    let t = start.elapsed();
    table.flush(&mut out);
    black_box(records);
    drop(table);
    t
}

fn flow_benches(c: &mut Criterion) {
    let pcap = data::bench_pcap(env!("CARGO_TARGET_TMPDIR"));
    let (prefix, _) = data::pcap_prefix(&pcap, FLOW_PACKETS);
    let mut frames = Frames::default();
    frames.add_capture(&prefix, FLOW_PACKETS);
    let pkts: Vec<(PacketMeta<'_>, Timestamp)> = frames
        .refs
        .iter()
        .filter_map(|f| {
            Some((
                parse::parse(f.link, frames.frame(f), f.wire_len).ok()?,
                f.ts,
            ))
        })
        .collect();
    eprintln!("flow set: {} parsed packets", pkts.len());

    let mut g = c.benchmark_group("flow_update");
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(pkts.len() as u64));
    for (feed, feed_name) in [(Feed::PerPacket, "per_packet"), (Feed::Batched, "batched")] {
        for (npm, npm_name) in [(true, "npm_on"), (false, "npm_off")] {
            let cfg = FlowConfig {
                npm,
                ..FlowConfig::default()
            };
            g.bench_function(format!("{feed_name}/{npm_name}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| flow_pass(&cfg, &pkts, feed)).sum())
            });
        }
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args()
}

fn main() {
    let mut c = config();
    parse_benches(&mut c);
    flow_benches(&mut c);
    c.final_summary();
}
