//! Synthetic floods against ordinary traffic, for `benches/flood.rs`
//! (criterion, per packet) and `examples/flood_pcap.rs` (capture files for
//! the whole-process run, `benches/flood.sh`). Frames are Ethernet + IPv4
//! with addresses from the documentation ranges only (192.0.2.0/24,
//! 198.51.100.0/24, 203.0.113.0/24); packet `i` is stamped `i` µs after a
//! fixed start (1 Mpps, far inside every timeout).

#![allow(
    dead_code,
    reason = "the bench and the examples use different parts of this module"
)]

use std::hint::black_box;

use xdprobe_dataplane::parse::LinkType;
use xdprobe_dataplane::source::Frame;
use xdprobe_dataplane::worker::BATCH;
use xdprobe_dataplane::{Timestamp, Worker};

/// Frames with their capture times, built before anything is timed.
pub type Packets = Vec<(Vec<u8>, Timestamp)>;

/// The first `n` packets of `kind`.
pub fn packets(kind: Kind, n: u64) -> Packets {
    let mut buf = Vec::new();
    (0..n)
        .map(|i| {
            frame(kind, i, &mut buf);
            (buf.clone(), Timestamp::from_nanos(ts_ns(i)))
        })
        .collect()
}

/// Feeds `pkts` to `w` in batches, as the file reader and single-queue
/// live capture do; records are counted (their output is not measured).
pub fn feed(w: &mut Worker, pkts: &[(Vec<u8>, Timestamp)], records: &mut u64) {
    for chunk in pkts.chunks(BATCH) {
        let mut batch = [Frame::default(); BATCH];
        for (slot, (f, ts)) in batch.iter_mut().zip(chunk) {
            *slot = Frame {
                ts: *ts,
                link: Some(LinkType::Ethernet),
                linktype: 1,
                data: f,
                wire_len: f.len() as u32,
                interface: 0,
            };
        }
        w.on_batch(&batch[..chunk.len()], &mut |r| {
            black_box(&r);
            *records += 1;
        });
    }
}

/// What a packet stream is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// TCP data segments (ACK|PSH, 100 bytes) round-robin over
    /// [`ORDINARY_FLOWS`] established connections.
    Ordinary,
    /// SYNs, every one from a new source endpoint (address, port): a new
    /// flow per packet, so a full table evicts one per packet.
    SynFlood,
    /// UDP first fragments (MF, offset 0), every one a new datagram ID.
    FirstFragments,
    /// Non-first fragments (offset 1480) of datagrams never seen.
    LaterFragments,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Ordinary,
        Kind::SynFlood,
        Kind::FirstFragments,
        Kind::LaterFragments,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Ordinary => "ordinary",
            Kind::SynFlood => "syn_flood",
            Kind::FirstFragments => "first_fragment_flood",
            Kind::LaterFragments => "later_fragment_flood",
        }
    }
}

/// Concurrent connections of the ordinary stream.
pub const ORDINARY_FLOWS: u64 = 50_000;

pub const START_NS: u64 = 1_700_000_000_000_000_000;

/// The `i`-th of 3 × 256 documentation addresses.
fn doc_addr(i: u64) -> [u8; 4] {
    let nets = [[192, 0, 2], [198, 51, 100], [203, 0, 113]];
    let n = nets[(i / 256 % 3) as usize];
    [n[0], n[1], n[2], (i % 256) as u8]
}

fn ipv4(out: &mut Vec<u8>, proto: u8, src: [u8; 4], dst: [u8; 4], id: u16, frag: u16, len: u16) {
    out.extend_from_slice(&[0x45, 0]);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&frag.to_be_bytes());
    out.extend_from_slice(&[64, proto, 0, 0]);
    out.extend_from_slice(&src);
    out.extend_from_slice(&dst);
}

/// Packet `i` of `kind`, written into `out` (cleared first).
pub fn frame(kind: Kind, i: u64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]);
    let server = [203, 0, 113, 250];
    match kind {
        Kind::Ordinary => {
            let f = i % ORDINARY_FLOWS;
            let src = doc_addr(f % 700);
            let sport = 10_000 + (f / 700) as u16;
            let seq = 1 + (i / ORDINARY_FLOWS) as u32 * 100;
            ipv4(out, 6, src, server, 1, 0, 20 + 20 + 100);
            tcp(out, sport, 443, seq, 0x18);
            out.extend_from_slice(&[0xab; 100]);
        }
        Kind::SynFlood => {
            let src = doc_addr(i % 700);
            let sport = 1024 + (i / 700 % 64_000) as u16;
            ipv4(out, 6, src, server, 1, 0, 40);
            tcp(out, sport, 80, i as u32, 0x02);
        }
        Kind::FirstFragments => {
            let src = doc_addr(i / 65_536 % 700);
            ipv4(out, 17, src, server, i as u16, 0x2000, 20 + 8 + 64);
            out.extend_from_slice(&[0x13, 0x88, 0, 53, 0, 200, 0, 0]);
            out.extend_from_slice(&[0; 64]);
        }
        Kind::LaterFragments => {
            let src = doc_addr(i / 65_536 % 700);
            ipv4(out, 17, src, server, i as u16, 185, 20 + 64);
            out.extend_from_slice(&[0; 64]);
        }
    }
}

fn tcp(out: &mut Vec<u8>, sport: u16, dport: u16, seq: u32, flags: u8) {
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&dport.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&1u32.to_be_bytes());
    out.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
}

pub fn ts_ns(i: u64) -> u64 {
    START_NS + i * 1_000
}
