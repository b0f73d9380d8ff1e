//! The user-space interpreter against libpcap's own (`pcap_offline_filter`)
//! on filters libpcap compiled: same verdict for every expression, packet
//! and capture length, including truncated captures.

use xdprobe_filter::{LinkType, Program, compile, libpcap::reference_run};

fn ipv4(proto: u8, src: [u8; 4], dst: [u8; 4], l4: &[u8], frag_off: u16, ihl_words: u8) -> Vec<u8> {
    let hl = usize::from(ihl_words) * 4;
    let total = hl + l4.len();
    let mut p = vec![0u8; hl];
    p[0] = 0x40 | ihl_words;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    p[6..8].copy_from_slice(&frag_off.to_be_bytes());
    p[8] = 64;
    p[9] = proto;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p.extend_from_slice(l4);
    p
}

fn ipv6(next: u8, src: [u8; 16], dst: [u8; 16], l4: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    p[6] = next;
    p[7] = 64;
    p[8..24].copy_from_slice(&src);
    p[24..40].copy_from_slice(&dst);
    p.extend_from_slice(l4);
    p
}

fn ports(sport: u16, dport: u16, rest: usize) -> Vec<u8> {
    let mut l4 = Vec::new();
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.resize(4 + rest, 0xab);
    l4
}

fn v6(last: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[15] = last;
    a
}

fn packets() -> Vec<(&'static str, Vec<u8>)> {
    let a = [192, 0, 2, 1];
    let b = [198, 51, 100, 7];
    let mut hop_by_hop = vec![17u8, 0, 0, 0, 0, 0, 0, 0];
    hop_by_hop.extend_from_slice(&ports(5000, 7, 12));
    vec![
        ("udp4 a→b:7", ipv4(17, a, b, &ports(40000, 7, 12), 0, 5)),
        ("udp4 b:7→a", ipv4(17, b, a, &ports(7, 40000, 12), 0, 5)),
        ("udp4 a→b:9", ipv4(17, a, b, &ports(40000, 9, 12), 0, 5)),
        ("udp4 options", ipv4(17, a, b, &ports(40000, 7, 12), 0, 7)),
        (
            "udp4 later fragment",
            ipv4(17, a, b, &ports(40000, 7, 12), 0x0010, 5),
        ),
        (
            "udp4 first fragment",
            ipv4(17, a, b, &ports(40000, 7, 12), 0x2000, 5),
        ),
        (
            "tcp4 a→b:80",
            ipv4(6, a, b, &ports(40001, 80, 16), 0x4000, 5),
        ),
        ("icmp4", ipv4(1, a, b, &[8, 0, 0, 0, 0, 1, 0, 1], 0, 5)),
        ("udp6 →:7", ipv6(17, v6(1), v6(2), &ports(40000, 7, 12))),
        ("tcp6 →:80", ipv6(6, v6(1), v6(2), &ports(40001, 80, 16))),
        ("udp6 behind hop-by-hop", ipv6(0, v6(1), v6(2), &hop_by_hop)),
        ("not ip", vec![0x00; 40]),
    ]
}

const EXPRS: &[&str] = &[
    "",
    "udp dst port 7",
    "udp port 7",
    "udp and host 192.0.2.1",
    "src host 192.0.2.1 and dst net 198.51.100.0/24",
    "tcp dst port 80",
    "ip6 and udp",
    "ip6 host 2001:db8::2",
    "portrange 1-100",
    "icmp",
    "ip[8] = 64",
    "udp[8:4] = 0xabababab",
    "ip[6:2] & 0x1fff != 0",
    "less 40",
    "greater 100",
    "not udp",
    "ip proto 17 or ip6 proto 17",
];

#[test]
fn same_verdicts_as_libpcap_on_every_packet_and_capture_length() {
    let mut checked = 0;
    for expr in EXPRS {
        let prog = compile(expr, LinkType::Raw, 262144).unwrap();
        prog.check(usize::MAX)
            .unwrap_or_else(|e| panic!("{expr:?}: {e}"));
        for (name, pkt) in packets() {
            for cap in 0..=pkt.len() {
                let ours = prog.run(&pkt[..cap], pkt.len() as u32);
                let theirs = reference_run(&prog, &pkt[..cap], pkt.len() as u32).unwrap();
                assert_eq!(ours, theirs, "{expr:?} on {name} captured to {cap}");
                checked += 1;
            }
        }
    }
    assert!(checked > 1000);
}

#[test]
fn verdicts_are_the_expected_ones() {
    let prog = compile("udp dst port 7", LinkType::Raw, 65535).unwrap();
    let got: Vec<(&str, bool)> = packets()
        .into_iter()
        .map(|(n, p)| (n, prog.matches(&p, p.len() as u32)))
        .collect();
    let want = [
        ("udp4 a→b:7", true),
        ("udp4 b:7→a", false),
        ("udp4 a→b:9", false),
        ("udp4 options", true),
        ("udp4 later fragment", false),
        ("udp4 first fragment", true),
        ("tcp4 a→b:80", false),
        ("icmp4", false),
        ("udp6 →:7", true),
        ("tcp6 →:80", false),
        // libpcap does not walk IPv6 extension headers for ports.
        ("udp6 behind hop-by-hop", false),
        ("not ip", false),
    ];
    assert_eq!(got, want);
}

#[test]
fn empty_expression_accepts_and_bad_ones_say_why() {
    let all = compile("", LinkType::Raw, 65535).unwrap();
    assert!(all.matches(&[0x45], 1));
    let e = compile("udp dst port", LinkType::Raw, 65535)
        .unwrap_err()
        .to_string();
    assert!(e.contains("udp dst port") && e.contains("syntax"), "{e}");
    let e = compile("ether host 00:11:22:33:44:55", LinkType::Raw, 65535)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ether"), "{e}");
    assert!(compile("a\0b", LinkType::Raw, 65535).is_err());
}

#[test]
fn ethernet_programs_offset_by_the_link_header() {
    let prog = compile("udp dst port 7", LinkType::Ethernet, 65535).unwrap();
    let (_, ip) = &packets()[0];
    let mut frame = vec![0u8; 12];
    frame.extend_from_slice(&[0x08, 0x00]);
    frame.extend_from_slice(ip);
    assert!(prog.matches(&frame, frame.len() as u32));
    assert!(!prog.matches(ip, ip.len() as u32));
}

#[test]
fn typical_filters_fit_the_kernel_interpreter() {
    for expr in [
        "udp dst port 7",
        "host 192.0.2.1 and udp port 7",
        "tcp port 443 or udp port 53",
    ] {
        let p: Program = compile(expr, LinkType::Raw, 65535).unwrap();
        p.check(64).unwrap_or_else(|e| panic!("{expr:?}: {e}"));
    }
}
