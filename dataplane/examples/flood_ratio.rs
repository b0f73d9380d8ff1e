//! The flood figures on a noisy machine: every kind of `benches/flood.rs`
//! measured round-robin (one pass of each per round, so load from other
//! processes hits all alike), median ns/packet per kind and its ratio to
//! ordinary traffic. `cargo run --release -p xdprobe-dataplane --example
//! flood_ratio [ROUNDS]` (default 9).

use std::time::Instant;

use xdprobe_dataplane::{FlowConfig, Worker};

#[path = "../benches/support/flood.rs"]
mod flood;
use flood::{Kind, Packets, feed};

const WARMUP: u64 = 300_000;
const TIMED: u64 = 1_000_000;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(9);
    let cfg = FlowConfig::default();
    let inputs: Vec<(Kind, Packets)> = Kind::ALL
        .into_iter()
        .map(|k| (k, flood::packets(k, WARMUP + TIMED)))
        .collect();
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); inputs.len()];
    let mut evicted = vec![(0u64, 0u64); inputs.len()];
    for _ in 0..rounds {
        for (j, (_, pkts)) in inputs.iter().enumerate() {
            let (warm, timed) = pkts.split_at(WARMUP as usize);
            let mut w = Worker::new(&cfg);
            let mut records = 0;
            feed(&mut w, warm, &mut records);
            let before = w.stats();
            let t = Instant::now();
            feed(&mut w, timed, &mut records);
            ns[j].push(t.elapsed().as_nanos() as f64 / TIMED as f64);
            let after = w.stats();
            evicted[j] = (
                after.table.evicted - before.table.evicted,
                after.frags.evicted - before.frags.evicted,
            );
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base = median(&mut ns[0].clone());
    println!(
        "| stream | ns/packet (median of {rounds}) | × ordinary | flows evicted | fragments evicted |"
    );
    println!("|---|---|---|---|---|");
    for (j, (k, _)) in inputs.iter().enumerate() {
        let m = median(&mut ns[j]);
        println!(
            "| {} | {m:.0} | {:.2} | {} | {} |",
            k.name(),
            m / base,
            evicted[j].0,
            evicted[j].1
        );
    }
}
