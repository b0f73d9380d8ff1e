//! The benchmark capture with the TCP timestamp option (RFC 7323) on every
//! TCP segment, as Linux, macOS, iOS and Android send it: the same packets
//! 12 bytes longer (NOP, NOP, TS). TSval is each side's 1 ms clock (capture
//! time plus a per-side offset), TSecr the latest TSval the capture carried
//! the other way (what TS.Recent holds at an endpoint next to the probe); a
//! SYN echoes 0. So the timestamp-RTT tracker does its real work: a new
//! TSval most milliseconds, echoes matched, samples taken.
//!
//! Shared by `benches/pipeline.rs` and the `add_tcp_timestamps` example
//! (which `benches/compare.sh` runs to write the file it times).

#![allow(
    dead_code,
    reason = "each includer uses a different part of this module"
)]

use std::collections::HashMap;

const TS_LEN: usize = 12;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// RFC 1071 checksum of an IPv4 header.
fn ip_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// A side's clock offset, from its address and port (stable per run).
fn offset(ip: &[u8], port: u16) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in ip.iter().chain(&port.to_be_bytes()) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h
}

/// `capture` (classic pcap, µs, Ethernet) with the option inserted into
/// every IPv4 TCP segment whose header has no options yet; other frames
/// are copied as they are. Returns the new capture and how many segments
/// got the option.
pub fn add_tcp_timestamps(capture: &[u8]) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(capture.len() + capture.len() / 6);
    let Some(hdr) = capture.get(..24) else {
        return (capture.to_vec(), 0);
    };
    assert_eq!(&hdr[..4], &0xa1b2_c3d4u32.to_le_bytes(), "classic µs pcap");
    out.extend_from_slice(hdr);
    // Snaplen: room for the longer headers.
    let snap =
        u32::from_le_bytes([hdr[16], hdr[17], hdr[18], hdr[19]]).saturating_add(TS_LEN as u32);
    out[16..20].copy_from_slice(&snap.to_le_bytes());
    // Latest TSval per (flow, sender): the flow is the sorted endpoint pair.
    let mut latest: HashMap<([u8; 6], [u8; 6]), u32> = HashMap::new();
    let mut pos = 24;
    let mut added = 0;
    while let Some(rec) = capture.get(pos..pos + 16) {
        let caplen = u32::from_le_bytes([rec[8], rec[9], rec[10], rec[11]]) as usize;
        let wire = u32::from_le_bytes([rec[12], rec[13], rec[14], rec[15]]);
        let Some(f) = capture.get(pos + 16..pos + 16 + caplen) else {
            break;
        };
        let (secs, usec) = (
            u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]),
            u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]),
        );
        pos += 16 + caplen;
        let tcp_plain = f.len() >= 54
            && be16(f, 12) == 0x0800
            && f[14] == 0x45
            && f[23] == 6
            && f[46] >> 4 == 5;
        if !tcp_plain {
            out.extend_from_slice(rec);
            out.extend_from_slice(f);
            continue;
        }
        let src: [u8; 6] = [f[26], f[27], f[28], f[29], f[34], f[35]];
        let dst: [u8; 6] = [f[30], f[31], f[32], f[33], f[36], f[37]];
        let ms = u64::from(secs) * 1000 + u64::from(usec) / 1000;
        let tsval = (ms as u32).wrapping_add(offset(&src[..4], be16(f, 34)));
        let flags = f[47];
        let syn_only = flags & 0x12 == 0x02;
        let tsecr = if syn_only {
            0
        } else {
            latest.get(&(dst, src)).copied().unwrap_or(0)
        };
        if syn_only {
            // A new connection on this tuple: forget the old one's clock.
            latest.remove(&(dst, src));
        }
        latest.insert((src, dst), tsval);
        let mut g = Vec::with_capacity(f.len() + TS_LEN);
        g.extend_from_slice(&f[..54]);
        g.extend_from_slice(&[1, 1, 8, 10]);
        g.extend_from_slice(&tsval.to_be_bytes());
        g.extend_from_slice(&tsecr.to_be_bytes());
        g.extend_from_slice(&f[54..]);
        let ip_len = be16(f, 16).saturating_add(TS_LEN as u16);
        g[16..18].copy_from_slice(&ip_len.to_be_bytes());
        g[24..26].copy_from_slice(&[0, 0]);
        let c = ip_checksum(&g[14..34]);
        g[24..26].copy_from_slice(&c.to_be_bytes());
        g[46] = 8 << 4; // data offset: 32 bytes
        out.extend_from_slice(&rec[..8]);
        out.extend_from_slice(&(g.len() as u32).to_le_bytes());
        out.extend_from_slice(&wire.saturating_add(TS_LEN as u32).to_le_bytes());
        out.extend_from_slice(&g);
        added += 1;
    }
    (out, added)
}
