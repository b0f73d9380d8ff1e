//! Writes the flood captures `benches/flood.sh` runs the whole `xdprobe`
//! process on: `flood_pcap KIND PACKETS OUT.pcap` with KIND one of
//! ordinary, syn_flood, first_fragment_flood, later_fragment_flood (see
//! `benches/support/flood.rs`).

use std::io::{BufWriter, Write};

#[path = "../benches/support/flood.rs"]
mod flood;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, kind, n, out] = &args[..] else {
        eprintln!("usage: flood_pcap KIND PACKETS OUT.pcap");
        std::process::exit(2);
    };
    let Some(kind) = flood::Kind::ALL.into_iter().find(|k| k.name() == kind) else {
        eprintln!("unknown kind {kind}");
        std::process::exit(2);
    };
    let n: u64 = n.parse().expect("PACKETS is a number");
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    // Classic pcap, nanosecond timestamps, Ethernet.
    w.write_all(&0xa1b2_3c4du32.to_le_bytes())?;
    w.write_all(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0])?;
    w.write_all(&65535u32.to_le_bytes())?;
    w.write_all(&1u32.to_le_bytes())?;
    let mut f = Vec::new();
    for i in 0..n {
        flood::frame(kind, i, &mut f);
        let ts = flood::ts_ns(i);
        w.write_all(&((ts / 1_000_000_000) as u32).to_le_bytes())?;
        w.write_all(&((ts % 1_000_000_000) as u32).to_le_bytes())?;
        w.write_all(&(f.len() as u32).to_le_bytes())?;
        w.write_all(&(f.len() as u32).to_le_bytes())?;
        w.write_all(&f)?;
    }
    w.flush()
}
