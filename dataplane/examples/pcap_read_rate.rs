//! How fast the capture reader alone goes: packets/s through
//! `PcapReader::next_packet` with the file already in memory (no disk I/O,
//! no parsing), then through the time-order stage `xdprobe pcap` reads
//! files with (`source::reorder`, batches of 16), then once more through a
//! memory map.
//!
//! `cargo run --release -p xdprobe-dataplane --example pcap_read_rate -- /tmp/bench.pcap [rounds]`

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use xdprobe_dataplane::source::reorder::TimeOrdered;
use xdprobe_dataplane::source::{
    Frame,
    pcap::{PcapError, PcapReader},
};

/// Reads every packet; returns (packets, captured bytes, timestamp checksum)
/// so that nothing can be optimised away.
fn drain<B: AsRef<[u8]>>(mut r: PcapReader<B>) -> Result<(u64, u64, u64), PcapError> {
    let (mut n, mut bytes, mut ts) = (0u64, 0u64, 0u64);
    while let Some(p) = r.next_packet()? {
        n += 1;
        bytes += p.data.len() as u64;
        ts = ts.wrapping_add(p.ts.as_nanos());
    }
    Ok((n, bytes, ts))
}

/// The same through [`TimeOrdered`], in the batches `xdprobe pcap` uses.
fn drain_ordered<B: AsRef<[u8]>>(r: PcapReader<B>) -> Result<(u64, u64, u64), PcapError> {
    let (mut n, mut bytes, mut ts) = (0u64, 0u64, 0u64);
    let mut t = TimeOrdered::new(r);
    loop {
        let mut batch = [Frame::default(); 16];
        let k = t.next_batch(&mut batch)?;
        if k == 0 {
            return Ok((n, bytes, ts));
        }
        for p in &batch[..k] {
            n += 1;
            bytes += p.data.len() as u64;
            ts = ts.wrapping_add(p.ts.as_nanos());
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().unwrap_or_else(|| "/tmp/bench.pcap".into()));
    let rounds: u32 = args.next().map_or(Ok(5), |s| s.parse())?;

    let buf = std::fs::read(&path)?;
    println!("{}: {} bytes in memory", path.display(), buf.len());
    let mut best = f64::MAX;
    let mut packets = 0;
    for round in 1..=rounds {
        let start = Instant::now();
        let (n, bytes, ts) = drain(PcapReader::from_bytes(black_box(&buf[..]))?)?;
        let secs = start.elapsed().as_secs_f64();
        best = best.min(secs);
        packets = n;
        println!(
            "round {round}: {n} packets, {bytes} captured bytes in {:.1} ms = {:.1} Mpps (ts sum {ts:x})",
            secs * 1e3,
            n as f64 / secs / 1e6
        );
    }
    println!(
        "in memory, best of {rounds}: {:.1} Mpps ({:.2} ns/packet)",
        packets as f64 / best / 1e6,
        best * 1e9 / packets as f64
    );

    let mut best_ordered = f64::MAX;
    for _ in 1..=rounds {
        let start = Instant::now();
        let (n, _, _) = drain_ordered(PcapReader::from_bytes(black_box(&buf[..]))?)?;
        best_ordered = best_ordered.min(start.elapsed().as_secs_f64());
        assert_eq!(n, packets);
    }
    println!(
        "in memory, time-ordered, best of {rounds}: {:.1} Mpps ({:.2} ns/packet, {:.2}x the plain reader's time)",
        packets as f64 / best_ordered / 1e6,
        best_ordered * 1e9 / packets as f64,
        best_ordered / best
    );

    let start = Instant::now();
    let (n, _, _) = drain(PcapReader::open(&path)?)?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "memory-mapped (page cache warm): {n} packets in {:.1} ms = {:.1} Mpps",
        secs * 1e3,
        n as f64 / secs / 1e6
    );
    Ok(())
}
