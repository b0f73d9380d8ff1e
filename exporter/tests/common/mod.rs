//! Shared test support: sample records, process guards, pcap wrapping.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::io::Write;
use std::net::{IpAddr, UdpSocket};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use xdprobe_dataplane::flow::record::{DirStats, Npm, TsRttLeg, TsRttRecord};
use xdprobe_dataplane::{EndReason, FlowRecord, Timestamp};

/// 2024-03-01T12:00:00Z in Unix seconds.
pub const T0: u64 = 1_709_294_400;

/// A TCP record with every NPM field set; `i` varies ports, times, counts.
pub fn tcp_record(i: u32) -> FlowRecord {
    let start_ns = (T0 + u64::from(i)) * 1_000_000_000 + 123_456_789 + u64::from(i) * 1_000;
    FlowRecord {
        client_addr: IpAddr::from([192, 0, 2, 10]),
        client_port: 40_000 + (i % 20_000) as u16,
        server_addr: IpAddr::from([198, 51, 100, 20]),
        server_port: 443,
        proto: 6,
        vlan: Some(100),
        direction_guessed: false,
        start: Timestamp::from_nanos(start_ns),
        end: Timestamp::from_nanos(start_ns + 2_345_678_000),
        end_reason: EndReason::End,
        tos: 0x28,
        c2s: DirStats {
            packets: 10 + u64::from(i),
            bytes: 1_000 + u64::from(i) * 7,
            tcp_flags: 0x1b,
            retrans: 3,
            retrans_fast: 1,
            retrans_spurious: 1,
            retrans_other: 1,
            ooo: 2,
            keepalive: 1,
            dup_ack: 4,
            zero_window: 7,
            window_full: 2,
        },
        s2c: DirStats {
            packets: 20 + u64::from(i),
            bytes: 30_000 + u64::from(i) * 11,
            tcp_flags: 0x1a,
            retrans: 5,
            retrans_fast: 2,
            retrans_spurious: 0,
            retrans_other: 3,
            ooo: 1,
            keepalive: 0,
            dup_ack: 6,
            zero_window: 0,
            window_full: 9 + i % 3,
        },
        npm: Npm {
            rtt_us: Some(15_300 + i),
            server_net_us: Some(10_100 + i),
            client_net_us: Some(5_200),
            srt_us: Some(2_500_123),
            srt_count: 3,
            srt_min_us: Some(1_000),
            srt_mean_us: Some(2_000),
            srt_max_us: Some(3_000),
            tls: true,
            ts_rtt: Some(TsRttRecord {
                server: TsRttLeg {
                    count: 40 + i,
                    min_us: Some(90),
                    mean_us: Some(120 + i),
                    max_us: Some(400),
                    p50_us: Some(110),
                    p90_us: Some(300),
                    missed: 2,
                },
                // A leg with no sample this interval: count 0, values absent.
                client: TsRttLeg::default(),
            }),
        },
        seq_in_flow: i % 3,
        process: None,
    }
}

/// A UDP (DNS) record over IPv6 with no RTT (absent, not 0).
pub fn dns_v6_record(i: u32) -> FlowRecord {
    let start_ns = (T0 + 100 + u64::from(i)) * 1_000_000_000 + 999_999_000;
    FlowRecord {
        client_addr: "2001:db8::1".parse().unwrap(),
        client_port: 53_000 + (i % 1000) as u16,
        server_addr: "2001:db8::53".parse().unwrap(),
        server_port: 53,
        proto: 17,
        vlan: None,
        direction_guessed: true,
        start: Timestamp::from_nanos(start_ns),
        end: Timestamp::from_nanos(start_ns + 1_500_000),
        end_reason: EndReason::Idle,
        tos: 0,
        c2s: DirStats {
            packets: 1,
            bytes: 71,
            ..DirStats::default()
        },
        s2c: DirStats {
            packets: 1,
            bytes: 187,
            ..DirStats::default()
        },
        npm: Npm {
            srt_us: Some(1_400),
            srt_count: 1,
            srt_min_us: Some(1_400),
            srt_mean_us: Some(1_400),
            srt_max_us: Some(1_400),
            ..Npm::default()
        },
        seq_in_flow: 0,
        process: None,
    }
}

/// `n` records mixing both kinds.
pub fn mixed_records(n: u32) -> Vec<FlowRecord> {
    (0..n)
        .map(|i| {
            if i % 4 == 3 {
                dns_v6_record(i)
            } else {
                tcp_record(i)
            }
        })
        .collect()
}

/// Kills and reaps a child process on drop, whatever the test outcome.
pub struct ChildGuard(pub Option<Child>, pub &'static str);

impl ChildGuard {
    /// SIGINT (pmacct flushes only on SIGINT), then a bounded wait, then kill.
    pub fn interrupt_and_wait(&mut self, max: Duration) {
        if let Some(c) = &mut self.0 {
            // SAFETY: kill(2) on the pid of a child we spawned and have not
            // reaped yet; no memory is involved.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGINT);
            }
            let deadline = Instant::now() + max;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    self.0 = None;
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

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

/// Is `tool` on PATH? If not: skip loudly, or fail under CI=true.
pub fn require(tool: &str) -> bool {
    let found = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{tool} is required under CI=true");
        }
        eprintln!("\n*** SKIPPED: {tool} not installed ***\n");
    }
    found
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
