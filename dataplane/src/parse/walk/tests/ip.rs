//! IP and transport: lengths, padding, options, fragments, extension chains.

use super::*;
use crate::parse::TcpFlags;

#[test]
fn ethernet_ipv4_tcp_syn() {
    let f = eth(0x0800, &ipv4(6, &[], &tcp(0x02, &SYN_OPTS, &[])));
    let m = eth_ok(&f);
    assert_eq!((m.vlan, m.src, m.dst, m.proto), (None, V4_SRC, V4_DST, 6));
    assert_eq!(
        (m.ip_len, m.tos, m.ttl, m.fragment),
        (60, 0xb8, 64, Fragment::None)
    );
    assert_eq!((m.src_port, m.dst_port), (40000, 443));
    let t = m.tcp().unwrap();
    assert_eq!((t.seq, t.ack, t.window), (0x0102_0304, 0xa0b0_c0d0, 0xfff0));
    assert_eq!(t.flags, TcpFlags::SYN);
    assert_eq!(t.options.mss, Some(1460));
    assert_eq!(t.options.window_scale, Some(9));
    assert_eq!(t.options.timestamp, Some((7, 0)));
    assert!(t.options.sack_permitted);
    assert_eq!((m.payload_len, m.payload), (0, &[][..]));
}

#[test]
fn ethernet_padding_is_not_payload() {
    // 14 + 20 + 20 + 2 = 56 bytes, padded to 60 with zeros.
    let f = padded(eth(0x0800, &ipv4(6, &[], &tcp(0x18, &[], b"ok"))));
    assert_eq!(f.len(), 60);
    let m = eth_ok(&f);
    assert_eq!((m.ip_len, m.payload_len, m.payload), (42, 2, &b"ok"[..]));

    let f = padded(eth(0x0800, &ipv4(17, &[], &udp(b"q"))));
    let m = eth_ok(&f);
    assert_eq!((m.l4, m.src_port, m.dst_port), (L4::Udp, 5353, 53));
    assert_eq!((m.ip_len, m.payload_len, m.payload), (29, 1, &b"q"[..]));

    // A pure ACK: all padding, no payload.
    let f = padded(eth(0x0800, &ipv4(6, &[], &tcp(0x10, &[], &[]))));
    let m = eth_ok(&f);
    assert_eq!((m.ip_len, m.payload_len, m.payload.len()), (40, 0, 0));
}

#[test]
fn snaplen_cut_counts_true_lengths() {
    let data = [0x55u8; 1000];
    let full = eth(0x0800, &ipv4(6, &[], &tcp(0x10, &[], &data)));
    let cut = &full[..100];
    let m = parse(LinkType::Ethernet, cut, full.len() as u32).unwrap();
    assert_eq!((m.ip_len, m.payload_len), (1040, 1000));
    assert_eq!(m.payload.len(), 100 - 54);
    // The same with timestamp options cut in the middle: the segment is kept.
    let full = eth(0x0800, &ipv4(6, &[], &tcp(0x10, &SYN_OPTS, &data)));
    let m = parse(LinkType::Ethernet, &full[..64], full.len() as u32).unwrap();
    let t = m.tcp().unwrap();
    assert_eq!((t.options.mss, t.options.timestamp), (Some(1460), None));
    assert_eq!((m.ip_len, m.payload_len, m.payload.len()), (1060, 1000, 0));
}

#[test]
fn ipv4_options_move_the_l4_header() {
    // Record-route-ish option: NOP NOP + 4-byte junk option + EOL padding.
    let opts = [1, 1, 0x44, 4, 0, 0, 0, 0];
    let f = eth(0x0800, &ipv4(17, &opts, &udp(b"abcd")));
    let m = eth_ok(&f);
    assert_eq!(
        (m.src_port, m.dst_port, m.ip_len, m.payload_len),
        (5353, 53, 40, 4)
    );
    assert_eq!(m.payload, b"abcd");
}

#[test]
fn ipv4_fragments() {
    // First fragment: 8 bytes of UDP header + 16 of data here, datagram says
    // UDP length 1008: inconsistent with this packet, so IP lengths count.
    let mut u = udp(&[7; 1000]);
    u.truncate(24);
    let mut ip = ipv4(17, &[], &u);
    ip[6..8].copy_from_slice(&0x2000u16.to_be_bytes());
    let m = eth_ok(&eth(0x0800, &ip));
    assert_eq!(m.fragment, Fragment::First { id: 0x1234 });
    assert_eq!((m.l4, m.src_port, m.dst_port), (L4::Udp, 5353, 53));
    assert_eq!((m.ip_len, m.payload_len, m.payload.len()), (44, 16, 16));

    // Middle fragment at byte 24: no L4 header.
    let mut ip = ipv4(17, &[], &[9; 24]);
    ip[6..8].copy_from_slice(&(0x2000u16 | 3).to_be_bytes());
    let m = eth_ok(&padded(eth(0x0800, &ip)));
    assert_eq!(
        m.fragment,
        Fragment::Later {
            id: 0x1234,
            offset: 24,
            more: true
        }
    );
    assert_eq!(
        (m.l4, m.src_port, m.dst_port, m.proto),
        (L4::Fragment, 0, 0, 17)
    );
    assert_eq!((m.ip_len, m.payload_len, m.payload), (44, 24, &[][..]));

    // Last fragment: garbage where a TCP header would be is not read.
    let mut ip = ipv4(6, &[], &[0xff; 4]);
    ip[6..8].copy_from_slice(&6u16.to_be_bytes());
    let m = eth_ok(&padded(eth(0x0800, &ip)));
    assert_eq!(
        m.fragment,
        Fragment::Later {
            id: 0x1234,
            offset: 48,
            more: false
        }
    );
    assert_eq!((m.l4, m.payload_len), (L4::Fragment, 4));

    // DF alone is not a fragment.
    let m = eth_ok(&eth(0x0800, &ipv4(17, &[], &udp(b""))));
    assert_eq!(m.fragment, Fragment::None);
}

#[test]
fn ipv6_extension_chain() {
    // HBH → routing (24 bytes) → dest opts → AH (16 bytes) → TCP.
    let mut chain = ext(43, 0);
    chain.extend(ext(60, 2));
    chain.extend(ext(51, 0));
    let mut ah = vec![6, 2];
    ah.resize(16, 0xaa);
    chain.extend(ah);
    chain.extend(tcp(0x12, &[], b"data"));
    let f = eth(0x86dd, &ipv6(0, &chain));
    let m = eth_ok(&f);
    assert_eq!((m.src, m.proto, m.tos, m.ttl), (V6_SRC, 6, 0xab, 57));
    assert_eq!(
        (m.ip_len, m.payload_len, m.payload),
        (40 + 8 + 24 + 8 + 16 + 24, 4, &b"data"[..])
    );
    assert!(m.tcp().unwrap().flags.is_syn_ack());
}

#[test]
fn ipv6_chain_depth_and_truncation() {
    let chain = |n: usize| {
        let mut c = Vec::new();
        for i in 0..n {
            c.extend(ext(if i + 1 == n { 17 } else { 60 }, 0));
        }
        c.extend(udp(b"u"));
        eth(0x86dd, &ipv6(60, &c))
    };
    assert_eq!(eth_ok(&chain(MAX_IPV6_EXT)).payload, b"u");
    assert_eq!(
        p(LinkType::Ethernet, &chain(MAX_IPV6_EXT + 1)).err(),
        Some(DropReason::Ipv6ExtTooDeep)
    );
    let f = chain(2);
    for n in 54..54 + 16 {
        assert_eq!(
            p(LinkType::Ethernet, &f[..n]).err(),
            Some(DropReason::TruncatedIpv6Ext),
            "{n}"
        );
    }
    for n in 70..78 {
        assert_eq!(
            p(LinkType::Ethernet, &f[..n]).err(),
            Some(DropReason::TruncatedUdp),
            "{n}"
        );
    }
    // An extension header that runs past the IPv6 payload length into padding.
    let mut ip = ipv6(43, &ext(17, 0)[..4]);
    ip.extend_from_slice(&[0; 12]);
    assert_eq!(
        p(LinkType::Ipv6, &ip).err(),
        Some(DropReason::TruncatedIpv6Ext)
    );
}

#[test]
fn ipv6_esp_and_no_next_header_end_the_walk() {
    let m = eth_ok(&eth(0x86dd, &ipv6(50, &[0, 0, 1, 0, 0, 0, 0, 1, 0xee])));
    assert_eq!(
        (m.proto, m.l4, m.src_port, m.payload_len, m.payload.len()),
        (50, L4::Other, 0, 9, 9)
    );
    let m = eth_ok(&padded(eth(0x86dd, &ipv6(59, &[]))));
    assert_eq!(
        (m.proto, m.l4, m.ip_len, m.payload_len),
        (59, L4::Other, 40, 0)
    );
    // Destination options then no-next-header.
    let m = eth_ok(&padded(eth(0x86dd, &ipv6(60, &ext(59, 0)))));
    assert_eq!((m.proto, m.ip_len, m.payload_len), (59, 48, 0));
}

#[test]
fn ipv6_fragments() {
    let mut first = frag6(17, 0, true, 0x8000_0001);
    first.extend(udp(&[1; 100]));
    first.truncate(8 + 8 + 40);
    let m = eth_ok(&eth(0x86dd, &ipv6(44, &first)));
    assert_eq!(m.fragment, Fragment::First { id: 0x8000_0001 });
    assert_eq!((m.l4, m.proto, m.src_port), (L4::Udp, 17, 5353));
    assert_eq!((m.ip_len, m.payload_len, m.payload.len()), (96, 40, 40));

    // Routing header before a later fragment.
    let mut later = ext(44, 0);
    later.extend(frag6(17, 48, false, 0x8000_0001));
    later.extend_from_slice(&[2; 60]);
    let m = eth_ok(&eth(0x86dd, &ipv6(43, &later)));
    assert_eq!(
        m.fragment,
        Fragment::Later {
            id: 0x8000_0001,
            offset: 48,
            more: false
        }
    );
    assert_eq!(
        (m.l4, m.proto, m.src_port, m.dst_port),
        (L4::Fragment, 17, 0, 0)
    );
    assert_eq!((m.ip_len, m.payload_len, m.payload.len()), (116, 60, 0));

    // Atomic fragment (RFC 6946).
    let mut atomic = frag6(6, 0, false, 5);
    atomic.extend(tcp(0x10, &[], b"a"));
    let m = eth_ok(&eth(0x86dd, &ipv6(44, &atomic)));
    assert_eq!((m.fragment, m.payload_len), (Fragment::None, 1));

    let f = eth(0x86dd, &ipv6(44, &frag6(17, 8, true, 1)));
    for n in 54..62 {
        assert_eq!(
            p(LinkType::Ethernet, &f[..n]).err(),
            Some(DropReason::TruncatedIpv6Ext)
        );
    }
}

#[test]
fn ipv6_jumbogram() {
    // Payload length 0, hop-by-hop Jumbo Payload 70000 (RFC 2675), UDP
    // length 0; capture cut at 200 bytes.
    let mut hbh = vec![17, 0, 0xc2, 4];
    hbh.extend_from_slice(&70_000u32.to_be_bytes());
    let mut u = udp(&[3; 100]);
    u[4..6].copy_from_slice(&[0, 0]);
    hbh.extend(u);
    let mut ip = ipv6(0, &hbh);
    ip[4..6].copy_from_slice(&[0, 0]);
    let m = parse(LinkType::Ipv6, &ip, 70_040).unwrap();
    assert_eq!(
        (m.ip_len, m.proto, m.payload_len),
        (70_040, 17, 70_000 - 8 - 8)
    );
    assert_eq!(m.payload.len(), 100);
}

#[test]
fn tso_zero_lengths_use_the_wire_length() {
    let data = [0u8; 200];
    let mut ip = ipv4(6, &[], &tcp(0x10, &[], &data));
    ip[2..4].copy_from_slice(&[0, 0]);
    let f = eth(0x0800, &ip);
    let m = parse(LinkType::Ethernet, &f[..96], 14 + 20 + 20 + 64_000).unwrap();
    assert_eq!(
        (m.ip_len, m.payload_len, m.payload.len()),
        (64_040, 64_000, 42)
    );

    let mut ip = ipv6(6, &tcp(0x10, &[], &data));
    ip[4..6].copy_from_slice(&[0, 0]);
    let f = vlan_frame(&[(0x8100, 3)], 0x86dd, &ip);
    let m = parse(LinkType::Ethernet, &f, f.len() as u32).unwrap();
    assert_eq!((m.ip_len, m.payload_len, m.payload.len()), (260, 200, 200));
}

#[test]
fn udp_length_field() {
    // Consistent and shorter than the IP payload: trailing junk excluded.
    let mut u = udp(b"abc");
    u.extend_from_slice(b"JUNK");
    let m = eth_ok(&eth(0x0800, &ipv4(17, &[], &u)));
    assert_eq!((m.ip_len, m.payload_len, m.payload), (35, 3, &b"abc"[..]));
    // Larger than the IP payload, or below 8: IP lengths win.
    for bad in [500u16, 7, 0] {
        let mut u = udp(b"abcdef");
        u[4..6].copy_from_slice(&bad.to_be_bytes());
        let m = eth_ok(&eth(0x0800, &ipv4(17, &[], &u)));
        assert_eq!(
            (m.payload_len, m.payload),
            (6, &b"abcdef"[..]),
            "udp length {bad}"
        );
    }
}

#[test]
fn icmp_and_other_protocols() {
    let f = eth(0x0800, &ipv4(1, &[], &[3, 4, 0, 0, 0, 0, 5, 0xdc, 0x45]));
    let m = eth_ok(&f);
    assert_eq!(
        (m.l4, m.src_port, m.payload_len),
        (
            L4::Icmp {
                icmp_type: 3,
                code: 4
            },
            0,
            1
        )
    );
    let f = eth(0x86dd, &ipv6(58, &[128, 0, 0, 0, 0, 1, 0, 1]));
    let m = eth_ok(&f);
    assert_eq!(
        (m.l4, m.payload_len),
        (
            L4::Icmpv6 {
                icmp_type: 128,
                code: 0
            },
            0
        )
    );
    // ICMPv6 number inside IPv4 (and ICMP inside IPv6) is just "other".
    let f = eth(0x0800, &ipv4(58, &[], &[128, 0, 0, 0, 0, 1, 0, 1]));
    assert_eq!(eth_ok(&f).l4, L4::Other);
    let f = eth(0x86dd, &ipv6(1, &[8, 0, 0, 0, 0, 1, 0, 1]));
    assert_eq!(eth_ok(&f).l4, L4::Other);
    // GRE.
    let f = padded(eth(0x0800, &ipv4(47, &[], &[0, 0, 0x08, 0x00])));
    let m = eth_ok(&f);
    assert_eq!(
        (m.proto, m.l4, m.dst_port, m.payload_len),
        (47, L4::Other, 0, 4)
    );
    assert_eq!(m.payload, &[0, 0, 8, 0]);
    // Truncated ICMP (padding does not count as header).
    let f = padded(eth(0x0800, &ipv4(1, &[], &[8, 0, 0, 0])));
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::TruncatedIcmp)
    );
}

#[test]
fn bad_tcp_headers() {
    for off in 0..5u8 {
        let mut t = tcp(0x10, &[], &[]);
        t[12] = off << 4;
        let f = eth(0x0800, &ipv4(6, &[], &t));
        assert_eq!(
            p(LinkType::Ethernet, &f).err(),
            Some(DropReason::BadTcpHeader)
        );
    }
    // Data offset 15 (60 bytes) in a 24-byte segment.
    let mut t = tcp(0x10, &[1, 1, 1, 1], &[]);
    t[12] = 0xf0;
    let f = eth(0x0800, &ipv4(6, &[], &t));
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::BadTcpHeader)
    );
    // TCP header within the frame but beyond the IP length (in padding).
    let mut ip = ipv4(6, &[], &tcp(0x10, &[], &[]));
    ip[2..4].copy_from_slice(&30u16.to_be_bytes());
    let f = eth(0x0800, &ip);
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::TruncatedTcp)
    );
}

/// Robustness finding 3: a length field may not make one frame count more
/// bytes than it held on the wire.
#[test]
fn lengths_beyond_the_frame_are_cut_to_it_and_flagged() {
    // A 54-byte frame whose IPv4 total length says 65535.
    let mut ip = ipv4(6, &[], &tcp(0x10, &[], &[]));
    ip[2..4].copy_from_slice(&65_535u16.to_be_bytes());
    let f = eth(0x0800, &ip);
    assert_eq!(f.len(), 54);
    let m = eth_ok(&f);
    assert_eq!((m.ip_len, m.payload_len, m.length_clamped), (40, 0, true));

    // An 82-byte IPv6 frame with a jumbo option of 0xFFFFFFFF.
    let mut hbh = vec![17, 0, 0xc2, 4];
    hbh.extend_from_slice(&u32::MAX.to_be_bytes());
    let mut u = udp(&[3; 12]);
    u[4..6].copy_from_slice(&[0, 0]);
    hbh.extend(u);
    let mut ip = ipv6(0, &hbh);
    ip[4..6].copy_from_slice(&[0, 0]);
    let f = eth(0x86dd, &ip);
    assert_eq!(f.len(), 82);
    let m = eth_ok(&f);
    assert_eq!((m.ip_len, m.payload_len, m.length_clamped), (68, 12, true));

    // An IPv6 payload length past the frame.
    let mut ip = ipv6(17, &udp(b"abcd"));
    ip[4..6].copy_from_slice(&9_000u16.to_be_bytes());
    let m = eth_ok(&eth(0x86dd, &ip));
    assert_eq!((m.ip_len, m.length_clamped), (52, true));

    // A snaplen cut is not a lie: the wire length covers the IP length.
    let data = [0x55u8; 1000];
    let full = eth(0x0800, &ipv4(6, &[], &tcp(0x10, &[], &data)));
    let m = parse(LinkType::Ethernet, &full[..100], full.len() as u32).unwrap();
    assert_eq!((m.ip_len, m.length_clamped), (1040, false));
    // Nor is Ethernet padding.
    let m = eth_ok(&padded(eth(0x0800, &ipv4(6, &[], &tcp(0x10, &[], &[])))));
    assert_eq!((m.ip_len, m.length_clamped), (40, false));
}
