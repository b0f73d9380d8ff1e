//! The collector side of export tests: free local ports, datagrams
//! received until quiet, IPFIX messages split from a stream, and a pcap of
//! datagrams for tshark (collectors run under a [`ChildGuard`]).

use std::io::Write;
use std::net::UdpSocket;
use std::path::Path;
use std::time::Duration;

/// The capture time of the first datagram `write_udp_pcap` writes
/// (2024-03-01 12:00:00 UTC), one second apart after it.
const T0: u64 = 1_709_294_400;

pub use crate::child::ChildGuard;

/// A free UDP port on 127.0.0.1 (bound then released).
pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Write datagrams (payloads) as IPv4/UDP packets 127.0.0.1:40000 → :port
/// in a pcap file, so tshark can decode what a collector received.
pub fn write_udp_pcap(path: &Path, port: u16, payloads: &[Vec<u8>]) {
    let mut f = std::fs::File::create(path).unwrap();
    // Global header: magic, v2.4, tz 0, sigfigs 0, snaplen, LINKTYPE_RAW (101).
    let mut g = Vec::new();
    g.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    g.extend_from_slice(&2u16.to_le_bytes());
    g.extend_from_slice(&4u16.to_le_bytes());
    g.extend_from_slice(&0i32.to_le_bytes());
    g.extend_from_slice(&0u32.to_le_bytes());
    g.extend_from_slice(&65535u32.to_le_bytes());
    g.extend_from_slice(&101u32.to_le_bytes());
    f.write_all(&g).unwrap();
    for (i, p) in payloads.iter().enumerate() {
        let total = 20 + 8 + p.len();
        let mut pkt = Vec::with_capacity(total);
        pkt.extend_from_slice(&[0x45, 0]);
        pkt.extend_from_slice(&(total as u16).to_be_bytes());
        pkt.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        let csum = ipv4_checksum(&pkt[..20]);
        pkt[10..12].copy_from_slice(&csum.to_be_bytes());
        pkt.extend_from_slice(&40000u16.to_be_bytes());
        pkt.extend_from_slice(&port.to_be_bytes());
        pkt.extend_from_slice(&((8 + p.len()) as u16).to_be_bytes());
        pkt.extend_from_slice(&[0, 0]);
        pkt.extend_from_slice(p);
        let mut rec = Vec::new();
        rec.extend_from_slice(&(T0 as u32 + i as u32).to_le_bytes());
        rec.extend_from_slice(&0u32.to_le_bytes());
        rec.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
        rec.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
        f.write_all(&rec).unwrap();
        f.write_all(&pkt).unwrap();
    }
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in h.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Split a byte stream (file or TCP) into IPFIX messages by their length.
pub fn split_ipfix(mut b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = u16::from_be_bytes([b[2], b[3]]) as usize;
        assert!(len >= 16 && len <= b.len(), "bad message length {len}");
        out.push(b[..len].to_vec());
        b = &b[len..];
    }
    assert!(b.is_empty(), "trailing bytes");
    out
}

/// Receive datagrams on `sock` until `quiet` passes without one.
pub fn recv_all(sock: &UdpSocket, quiet: Duration) -> Vec<Vec<u8>> {
    sock.set_read_timeout(Some(quiet)).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = sock.recv(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// Template ID of the observation-domain-name options template.
pub const DOMAIN_NAME_TEMPLATE: u16 = 259;

/// Remove the observation-domain-name sets from an IPFIX message: the
/// options template set announcing template 259 and every data set 259.
/// The `ipfix` crate panics on variable-length fields, so the other tests
/// hand it the message without them. The removed records are decoded here
/// (a small RFC 7011 §7 reader, independent of the encoder's code) and
/// returned as (observation domain ID, name) pairs.
pub fn strip_domain_name(m: &[u8]) -> (Vec<u8>, Vec<(u32, String)>) {
    assert!(m.len() >= 16, "short message");
    let mut out = m[..16].to_vec();
    let mut names = Vec::new();
    let mut off = 16;
    while off + 4 <= m.len() {
        let id = u16::from_be_bytes([m[off], m[off + 1]]);
        let len = usize::from(u16::from_be_bytes([m[off + 2], m[off + 3]]));
        assert!(len >= 4 && off + len <= m.len(), "bad set length {len}");
        let body = &m[off + 4..off + len];
        let announces_name = id == 3
            && body.len() >= 2
            && u16::from_be_bytes([body[0], body[1]]) == DOMAIN_NAME_TEMPLATE;
        if announces_name {
            // Exactly that template and nothing else may be dropped:
            // ID 259, 2 fields, 1 scope, 149/4, 300/65535.
            assert_eq!(
                body,
                &[1, 3, 0, 2, 0, 1, 0, 149, 0, 4, 1, 44, 0xFF, 0xFF][..],
                "domain-name template set"
            );
        } else if id == DOMAIN_NAME_TEMPLATE {
            let mut b = body;
            while b.len() >= 5 {
                let domain = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                let (n, skip) = match b[4] {
                    255 => (usize::from(u16::from_be_bytes([b[5], b[6]])), 7),
                    n => (usize::from(n), 5),
                };
                let s = std::str::from_utf8(&b[skip..skip + n]).expect("UTF-8 name");
                names.push((domain, s.to_string()));
                b = &b[skip + n..];
            }
            assert!(b.is_empty(), "trailing bytes in a name data set");
        } else {
            out.extend_from_slice(&m[off..off + len]);
        }
        off += len;
    }
    assert_eq!(off, m.len(), "sets fill the message");
    let total = u16::try_from(out.len()).unwrap();
    out[2..4].copy_from_slice(&total.to_be_bytes());
    (out, names)
}
