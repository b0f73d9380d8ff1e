//! Synthetic captures of many flows, for tests that count records end to
//! end (a collector must receive every one): `n` one-packet UDP flows,
//! 198.51.100.0/24 → 203.0.113.1, each a distinct 5-tuple, stamped `gap`
//! apart (LINKTYPE_RAW IPv4, classic pcap, µs).

use std::io::{BufWriter, Write};
use std::path::Path;

/// 2023-11-14T22:13:20Z, the first packet's time.
const T0_US: u64 = 1_700_000_000_000_000;

/// The `i`-th flow's (source address, source port): 250 addresses × up
/// to 64,000 ports, 16 M distinct flows.
pub fn flow_src(i: u64) -> ([u8; 4], u16) {
    let host = (i % 250) as u8 + 1;
    let port = 1024 + ((i / 250) % 64_000) as u16;
    ([198, 51, 100, host], port)
}

/// Writes `n` flows, one packet each, `gap_us` apart.
pub fn write_udp_flows_pcap(path: &Path, n: u64, gap_us: u64) {
    let mut f = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut g = Vec::new();
    g.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    g.extend_from_slice(&2u16.to_le_bytes());
    g.extend_from_slice(&4u16.to_le_bytes());
    g.extend_from_slice(&[0; 8]);
    g.extend_from_slice(&65535u32.to_le_bytes());
    g.extend_from_slice(&101u32.to_le_bytes());
    f.write_all(&g).unwrap();
    let mut pkt = [0u8; 36];
    for i in 0..n {
        let (src, sport) = flow_src(i);
        pkt[..12].copy_from_slice(&[0x45, 0, 0, 36, 0, 0, 0x40, 0, 64, 17, 0, 0]);
        pkt[12..16].copy_from_slice(&src);
        pkt[16..20].copy_from_slice(&[203, 0, 113, 1]);
        pkt[10..12].copy_from_slice(&[0, 0]);
        let csum = checksum(&pkt[..20]);
        pkt[10..12].copy_from_slice(&csum.to_be_bytes());
        pkt[20..22].copy_from_slice(&sport.to_be_bytes());
        pkt[22..24].copy_from_slice(&4000u16.to_be_bytes());
        pkt[24..26].copy_from_slice(&16u16.to_be_bytes());
        pkt[26..28].copy_from_slice(&[0, 0]);
        pkt[28..36].copy_from_slice(&i.to_be_bytes());
        let t = T0_US + i * gap_us;
        f.write_all(&((t / 1_000_000) as u32).to_le_bytes())
            .unwrap();
        f.write_all(&((t % 1_000_000) as u32).to_le_bytes())
            .unwrap();
        f.write_all(&36u32.to_le_bytes()).unwrap();
        f.write_all(&36u32.to_le_bytes()).unwrap();
        f.write_all(&pkt).unwrap();
    }
    f.flush().unwrap();
}

fn checksum(h: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in h.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
