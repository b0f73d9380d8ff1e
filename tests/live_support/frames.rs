//! Crafted frames of every encapsulation the header policy walks
//! (`xdprobe_common::headers`), one UDP flow each between documentation
//! addresses, and the means to send them (AF_PACKET) or write them to a
//! pcap file: for the tests that check the XDP program and the parser
//! treat them alike.

use std::{
    ffi::CString,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    time::Duration,
};

use xdprobe_common::headers::{MAX_IPV6_EXT, MAX_MPLS_DEPTH, MAX_VLAN_DEPTH};

pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// An IP version with the documentation addresses of one flow.
#[derive(Clone, Copy)]
pub enum Ip {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

/// The framing wrapped around each IP packet (both directions alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encap {
    Plain,
    Vlan,
    QinQ,
    ThreeTags,
    Mpls1,
    Mpls3,
    VlanMpls,
    PppoeV4,
    PppoeV6,
    Ipv6Ext,
    /// MPLS, control word, inner Ethernet frame (RFC 4448): the XDP walk
    /// leaves it to the parser.
    Pseudowire,
}

pub const ALL: [Encap; 11] = [
    Encap::Plain,
    Encap::Vlan,
    Encap::QinQ,
    Encap::ThreeTags,
    Encap::Mpls1,
    Encap::Mpls3,
    Encap::VlanMpls,
    Encap::PppoeV4,
    Encap::PppoeV6,
    Encap::Ipv6Ext,
    Encap::Pseudowire,
];

fn v6(last: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[15] = last;
    a
}

impl Encap {
    pub fn ip(self, i: u8) -> Ip {
        match self {
            Encap::PppoeV6 | Encap::Ipv6Ext | Encap::Mpls3 => Ip::V6(v6(0x10 + i), v6(0x80 + i)),
            _ => Ip::V4([192, 0, 2, 10 + i], [198, 51, 100, 10 + i]),
        }
    }

    fn vlan_tags(self) -> &'static [(u16, u16)] {
        match self {
            Encap::Vlan => &[(0x8100, 100)],
            Encap::QinQ => &[(0x88a8, 200), (0x8100, 300)],
            Encap::ThreeTags => &[(0x9100, 10), (0x88a8, 20), (0x8100, 30)],
            Encap::VlanMpls => &[(0x8100, 400)],
            _ => &[],
        }
    }
}

fn be16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_be_bytes());
}

fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The IP packet (UDP, `payload` bytes) from `src` to `dst`; an IPv6
/// packet carries `ext` extension headers: hop-by-hop, routing, then
/// destination options.
fn ip_packet(ip: Ip, fwd: bool, ports: (u16, u16), payload: usize, ext: usize) -> Vec<u8> {
    let (sp, dp) = if fwd { ports } else { (ports.1, ports.0) };
    let mut udp = Vec::new();
    be16(&mut udp, sp);
    be16(&mut udp, dp);
    be16(&mut udp, (8 + payload) as u16);
    be16(&mut udp, 0);
    udp.extend((0..payload).map(|i| i as u8));
    match ip {
        Ip::V4(a, b) => {
            let (s, d) = if fwd { (a, b) } else { (b, a) };
            let mut h = vec![0x45, 0];
            be16(&mut h, (20 + udp.len()) as u16);
            h.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0]);
            h.extend_from_slice(&s);
            h.extend_from_slice(&d);
            let c = checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h.extend_from_slice(&udp);
            h
        }
        Ip::V6(a, b) => {
            let (s, d) = if fwd { (a, b) } else { (b, a) };
            // Hop-by-hop (PadN), routing (type 0, segments left 0),
            // destination options (PadN): 8 bytes each.
            let kinds: Vec<u8> = (0..ext)
                .map(|k| [0, 43][..].get(k).copied().unwrap_or(60))
                .collect();
            let mut exts: Vec<u8> = Vec::new();
            for (k, kind) in kinds.iter().enumerate() {
                let next = kinds.get(k + 1).copied().unwrap_or(17);
                if *kind == 43 {
                    exts.extend_from_slice(&[next, 0, 0, 0, 0, 0, 0, 0]);
                } else {
                    exts.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
                }
            }
            let first = kinds.first().copied().unwrap_or(17);
            let mut h = vec![0x60, 0, 0, 0];
            be16(&mut h, (exts.len() + udp.len()) as u16);
            h.extend_from_slice(&[first, 64]);
            h.extend_from_slice(&s);
            h.extend_from_slice(&d);
            h.extend_from_slice(&exts);
            h.extend_from_slice(&udp);
            h
        }
    }
}

fn mpls_labels(f: &mut Vec<u8>, labels: &[u32]) {
    for (i, l) in labels.iter().enumerate() {
        let bos = u32::from(i + 1 == labels.len());
        f.extend_from_slice(&((l << 12) | (bos << 8) | 64).to_be_bytes());
    }
}

/// One frame of flow `i` in `encap`, client → server when `fwd`.
pub fn frame(encap: Encap, i: u8, fwd: bool, payload: usize) -> Vec<u8> {
    let ip = encap.ip(i);
    let ports = (40_000 + u16::from(i), 5_000 + u16::from(i));
    let ext = if encap == Encap::Ipv6Ext { 3 } else { 0 };
    let pkt = ip_packet(ip, fwd, ports, payload, ext);
    let (src, dst) = if fwd {
        (CLIENT_MAC, SERVER_MAC)
    } else {
        (SERVER_MAC, CLIENT_MAC)
    };
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    for &(tpid, vid) in encap.vlan_tags() {
        be16(&mut f, tpid);
        be16(&mut f, vid);
    }
    let ip_type = match ip {
        Ip::V4(..) => 0x0800,
        Ip::V6(..) => 0x86dd,
    };
    match encap {
        Encap::Mpls1 => {
            be16(&mut f, 0x8847);
            mpls_labels(&mut f, &[1000]);
        }
        Encap::Mpls3 => {
            be16(&mut f, 0x8847);
            mpls_labels(&mut f, &[16, 17, 18]);
        }
        Encap::VlanMpls => {
            be16(&mut f, 0x8847);
            mpls_labels(&mut f, &[100, 200]);
        }
        Encap::PppoeV4 | Encap::PppoeV6 => {
            be16(&mut f, 0x8864);
            f.extend_from_slice(&[0x11, 0x00, 0x12, 0x34]);
            be16(&mut f, (pkt.len() + 2) as u16);
            be16(&mut f, if ip_type == 0x0800 { 0x0021 } else { 0x0057 });
        }
        Encap::Pseudowire => {
            be16(&mut f, 0x8847);
            mpls_labels(&mut f, &[3000]);
            f.extend_from_slice(&[0, 0, 0, 0]); // control word
            f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x12]);
            f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x11]);
            be16(&mut f, ip_type);
        }
        _ => be16(&mut f, ip_type),
    }
    f.extend_from_slice(&pkt);
    f
}

/// An ARP request: not IP for the XDP program and the parser alike.
pub fn arp() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&CLIENT_MAC);
    be16(&mut f, 0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&CLIENT_MAC);
    f.extend_from_slice(&[192, 0, 2, 10]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[192, 0, 2, 11]);
    f
}

/// Per flow: 3 requests and 2 answers, sizes differing per packet.
pub const C2S: usize = 3;
pub const S2C: usize = 2;

/// The frames of one flow in `encap`: `C2S` requests, `S2C` answers.
pub fn flow_frames(encap: Encap) -> Vec<Vec<u8>> {
    let i = ALL.iter().position(|&e| e == encap).unwrap_or(0) as u8;
    let mut frames = Vec::new();
    for k in 0..C2S {
        frames.push(frame(encap, i, true, 20 + 7 * k));
        if k < S2C {
            frames.push(frame(encap, i, false, 100 + 13 * k));
        }
    }
    frames
}

/// The server port of `encap`'s flow.
pub fn server_port(encap: Encap) -> u16 {
    5_000 + ALL.iter().position(|&e| e == encap).unwrap_or(0) as u16
}

/// An ARP frame, then every flow of `ALL`.
pub fn all_frames() -> Vec<Vec<u8>> {
    let mut frames = vec![arp()];
    for e in ALL {
        frames.extend(flow_frames(e));
    }
    frames
}

/// One frame just past each limit of the header policy, with the drop
/// reason the parser gives it (the XDP program passes all three on: the
/// first two unclassified, the third as IP, since without a filter it does
/// not walk the extension headers).
pub fn beyond_limits() -> Vec<(&'static str, Vec<u8>)> {
    let v4 = Ip::V4([203, 0, 113, 1], [203, 0, 113, 2]);
    let v6 = Ip::V6(v6(0x31), v6(0x32));
    let eth = |tags: usize, labels: usize, ip: Ip, ext: usize| {
        let mut f = Vec::new();
        f.extend_from_slice(&SERVER_MAC);
        f.extend_from_slice(&CLIENT_MAC);
        for k in 0..tags {
            be16(&mut f, 0x8100);
            be16(&mut f, 500 + k as u16);
        }
        if labels > 0 {
            be16(&mut f, 0x8847);
            mpls_labels(&mut f, &(1..=labels as u32).collect::<Vec<_>>());
        } else {
            be16(
                &mut f,
                if matches!(ip, Ip::V4(..)) {
                    0x0800
                } else {
                    0x86dd
                },
            );
        }
        f.extend_from_slice(&ip_packet(ip, true, (41_000, 6_000), 10, ext));
        f
    };
    vec![
        ("vlan_too_deep", eth(MAX_VLAN_DEPTH + 1, 0, v4, 0)),
        ("mpls_too_deep", eth(0, MAX_MPLS_DEPTH + 1, v4, 0)),
        ("ipv6_ext_too_deep", eth(0, 0, v6, MAX_IPV6_EXT + 1)),
    ]
}

pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    // Magic, version 2.4 (two u16), zone, sigfigs, snaplen, Ethernet.
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 1] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for (n, f) in frames.iter().enumerate() {
        let us = 1_000 * n as u32;
        for w in [1_700_000_000u32, us, f.len() as u32, f.len() as u32] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).expect("write pcap");
}

/// An AF_PACKET raw socket bound to `dev`, closed on drop.
pub fn packet_socket(dev: &str) -> OwnedFd {
    // SAFETY: plain socket(2) call.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(
        raw >= 0,
        "packet socket: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `raw` was just returned by socket(2) and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let cname = CString::new(dev).expect("name");
    // SAFETY: a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    assert_ne!(ifindex, 0, "{dev}: {}", std::io::Error::last_os_error());
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid start.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: binds our own socket to a valid sockaddr_ll of its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
    fd
}

/// Sends every frame out of `dev` through an AF_PACKET socket, 1 ms apart.
pub fn send_raw(dev: &str, frames: &[Vec<u8>]) {
    let fd = packet_socket(dev);
    for f in frames {
        // SAFETY: `f` is valid for reads of `f.len()` bytes.
        let n = unsafe { libc::send(fd.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
        assert_eq!(
            n,
            f.len() as isize,
            "send: {}",
            std::io::Error::last_os_error()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
