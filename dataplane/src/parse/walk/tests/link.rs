//! Framings below IP: VLAN, MPLS and pseudowires, PPPoE, cooked, loopback, raw.

use super::*;

#[test]
fn vlan_tags_report_the_outermost_id() {
    let inner = ipv4(17, &[], &udp(b"x"));
    let m = eth_ok(&vlan_frame(&[(0x8100, 10)], 0x0800, &inner)).vlan;
    assert_eq!(m, Some(10));
    for outer in [0x88a8, 0x9100, 0x8100] {
        let f = vlan_frame(&[(outer, 100), (0x8100, 200)], 0x0800, &inner);
        assert_eq!(eth_ok(&f).vlan, Some(100), "outer TPID {outer:#x}");
    }
    // PCP bits do not leak into the VID; priority tag is VID 0.
    let f = vlan_frame(&[(0x8100, 0xe000 | 7)], 0x0800, &inner);
    assert_eq!(eth_ok(&f).vlan, Some(7));
    let f = vlan_frame(&[(0x8100, 0xa000)], 0x86dd, &ipv6(17, &udp(b"")));
    assert_eq!(eth_ok(&f).vlan, Some(0));
}

#[test]
fn vlan_depth_is_bounded() {
    let inner = ipv4(17, &[], &udp(b"x"));
    let tags: Vec<(u16, u16)> = (1..=5).map(|i| (0x8100, i)).collect();
    let f = vlan_frame(&tags[..MAX_VLAN_DEPTH], 0x0800, &inner);
    assert_eq!(eth_ok(&f).vlan, Some(1));
    let f = vlan_frame(&tags, 0x0800, &inner);
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::VlanTooDeep)
    );
    // A tag cut short.
    let f = vlan_frame(&[(0x8100, 5)], 0x0800, &inner);
    for n in 14..18 {
        assert_eq!(
            p(LinkType::Ethernet, &f[..n]).err(),
            Some(DropReason::TruncatedVlan)
        );
    }
}

#[test]
fn not_ip_ethertypes() {
    for t in [0x0806, 0x88cc, 0x8863, 0x0026, 0x88e5, 0x0000, 0xffff] {
        let f = padded(eth(t, &[0; 28]));
        assert_eq!(
            p(LinkType::Ethernet, &f).err(),
            Some(DropReason::NotIp),
            "{t:#x}"
        );
    }
    // A version mismatch under a correct EtherType.
    let f = eth(0x0800, &ipv6(17, &udp(b"")));
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::BadIpVersion)
    );
    let f = eth(0x86dd, &ipv4(17, &[], &udp(b"")));
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::BadIpVersion)
    );
}

#[test]
fn mpls_label_stacks() {
    let v4 = ipv4(6, &[], &tcp(0x10, &[], b"zz"));
    let m = eth_ok(&mpls_frame(&[29], &v4));
    assert_eq!((m.src, m.payload), (V4_SRC, &b"zz"[..]));
    let v6 = ipv6(17, &udp(b"six"));
    let labels: Vec<u32> = (16..16 + MAX_MPLS_DEPTH as u32).collect();
    let m = eth_ok(&mpls_frame(&labels, &v6));
    assert_eq!((m.src, m.payload), (V6_SRC, &b"six"[..]));
    // Multicast EtherType, inside a VLAN.
    let mut body = mpls_entry(100, true).to_vec();
    body.extend_from_slice(&v4);
    let m = eth_ok(&vlan_frame(&[(0x8100, 42)], 0x8848, &body));
    assert_eq!((m.vlan, m.proto), (Some(42), 6));
}

#[test]
fn mpls_malformed() {
    let v4 = ipv4(6, &[], &tcp(0x10, &[], &[]));
    let labels: Vec<u32> = (16..17 + MAX_MPLS_DEPTH as u32).collect();
    let f = mpls_frame(&labels, &v4);
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::MplsTooDeep)
    );
    let f = mpls_frame(&[16, 17], &v4);
    for n in 14..22 {
        assert_eq!(
            p(LinkType::Ethernet, &f[..n]).err(),
            Some(DropReason::TruncatedMpls),
            "{n}"
        );
    }
    // Bottom of stack followed by nothing, and by a PW associated channel.
    assert_eq!(
        p(LinkType::Ethernet, &mpls_frame(&[16], &[])).err(),
        Some(DropReason::TruncatedMpls)
    );
    let f = mpls_frame(&[16], &[0x10, 0, 0, 0x21, 0, 0, 0, 0]);
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::UnsupportedMplsPayload)
    );
}

#[test]
fn mpls_ethernet_pseudowire_with_control_word() {
    let inner = vlan_frame(&[(0x8100, 300)], 0x0800, &ipv4(17, &[], &udp(b"pw")));
    let mut pw = vec![0, 0, 0x12, 0x34]; // control word, sequence 0x1234
    pw.extend_from_slice(&inner);
    let m = eth_ok(&mpls_frame(&[1000, 2000], &pw));
    assert_eq!((m.vlan, m.src, m.payload), (Some(300), V4_SRC, &b"pw"[..]));
    // The outer tag wins over the pseudowire's.
    let mut body = mpls_entry(1000, true).to_vec();
    body.extend_from_slice(&pw);
    let m = eth_ok(&vlan_frame(&[(0x8100, 7)], 0x8847, &body));
    assert_eq!(m.vlan, Some(7));
    // Cut inside the control word / inner header: until the EtherType at
    // offset 16 (with CW) or 12 (without) is captured nothing can be decided.
    let f = mpls_frame(&[1000], &pw);
    for n in 18..32 {
        assert_eq!(
            p(LinkType::Ethernet, &f[..n]).err(),
            Some(DropReason::TruncatedMpls),
            "{n}"
        );
    }
    for n in 32..36 {
        assert_eq!(
            p(LinkType::Ethernet, &f[..n]).err(),
            Some(DropReason::UnsupportedMplsPayload),
            "{n}"
        );
    }
    for n in 36..40 {
        assert_eq!(
            p(LinkType::Ethernet, &f[..n]).err(),
            Some(DropReason::TruncatedVlan),
            "{n}"
        );
    }
    // A pseudowire inside a pseudowire.
    let mut nested = vec![0, 0, 0, 0];
    nested.extend_from_slice(&mpls_frame(&[3000], &pw));
    let f = mpls_frame(&[1000], &nested);
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::UnsupportedMplsPayload)
    );
    // VLAN tags inside the pseudowire share the depth bound.
    let tags: Vec<(u16, u16)> = (1..=3).map(|i| (0x8100, i)).collect();
    let mut pw = vec![0, 0, 0, 0];
    pw.extend_from_slice(&vlan_frame(&tags, 0x0800, &ipv4(17, &[], &udp(b""))));
    let mut body = mpls_entry(1000, true).to_vec();
    body.extend_from_slice(&pw);
    let f = vlan_frame(&[(0x88a8, 9), (0x8100, 8)], 0x8847, &body);
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::VlanTooDeep)
    );
}

#[test]
fn mpls_ethernet_pseudowire_without_control_word() {
    // Inner destination MACs starting with nibble 0 (a Cisco OUI) and 2.
    for dst in [[0x00, 0x30, 0x96, 0xe6, 0xfc, 0x39], [0x2a, 0, 0, 0, 0, 1]] {
        let mut inner = dst.to_vec();
        inner.extend_from_slice(&[0x00, 0x30, 0x96, 0x05, 0x28, 0x38, 0x86, 0xdd]);
        inner.extend(ipv6(6, &tcp(0x10, &[], b"nocw")));
        let m = eth_ok(&mpls_frame(&[77], &inner));
        assert_eq!((m.src, m.payload, m.vlan), (V6_SRC, &b"nocw"[..], None));
    }
    // ARP over a pseudowire, with and without control word.
    let arp = [
        &[
            0x00, 0x30, 0x96, 0, 0, 1, 0x00, 0x30, 0x96, 0, 0, 2, 0x08, 0x06,
        ][..],
        &[0; 28],
    ]
    .concat();
    let f = mpls_frame(&[77], &arp);
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::UnsupportedMplsPayload)
    );
    let f = mpls_frame(&[77], &[&[0u8; 4][..], &arp].concat());
    assert_eq!(
        p(LinkType::Ethernet, &f).err(),
        Some(DropReason::UnsupportedMplsPayload)
    );
}

#[test]
fn pppoe_sessions() {
    let m = eth_ok(&pppoe(0x0021, &ipv4(17, &[], &udp(b"p4"))));
    assert_eq!((m.src, m.payload), (V4_SRC, &b"p4"[..]));
    let m = eth_ok(&pppoe(0x0057, &ipv6(17, &udp(b"p6"))));
    assert_eq!((m.src, m.payload), (V6_SRC, &b"p6"[..]));
    let lcp = pppoe(0xc021, &[1, 1, 0, 4]);
    assert_eq!(p(LinkType::Ethernet, &lcp).err(), Some(DropReason::NotIp));
    let mut bad_ver = pppoe(0x0021, &ipv4(17, &[], &udp(b"")));
    bad_ver[14] = 0x21;
    assert_eq!(
        p(LinkType::Ethernet, &bad_ver).err(),
        Some(DropReason::NotIp)
    );
    let f = pppoe(0x0021, &[]);
    for n in 14..22 {
        assert_eq!(
            p(LinkType::Ethernet, &f[..n]).err(),
            Some(DropReason::TruncatedPppoe)
        );
    }
}

fn sll(proto: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 4, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
    v.extend_from_slice(&proto.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn sll2(proto: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = proto.to_be_bytes().to_vec();
    v.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
    v.extend_from_slice(payload);
    v
}

#[test]
fn linux_cooked_framings() {
    use DropReason::*;
    let v4 = ipv4(6, &[], &tcp(0x10, &[], b"s"));
    let m = p(LinkType::LinuxSll, &sll(0x0800, &v4)).unwrap();
    assert_eq!((m.src, m.payload), (V4_SRC, &b"s"[..]));
    let m = p(
        LinkType::LinuxSll2,
        &sll2(0x86dd, &ipv6(6, &tcp(0x10, &[], b"t"))),
    )
    .unwrap();
    assert_eq!((m.src, m.payload), (V6_SRC, &b"t"[..]));
    // libpcap puts a VLAN tag back into the payload with protocol 0x8100.
    let mut tagged = vec![0x00, 0x0c, 0x08, 0x00];
    tagged.extend_from_slice(&v4);
    assert_eq!(
        p(LinkType::LinuxSll, &sll(0x8100, &tagged)).unwrap().vlan,
        Some(12)
    );
    assert_eq!(
        p(LinkType::LinuxSll2, &sll2(0x8100, &tagged)).unwrap().vlan,
        Some(12)
    );
    // ETH_P_802_2 and ARP are not IP.
    assert_eq!(
        p(LinkType::LinuxSll, &sll(0x0004, &[0; 40])).err(),
        Some(NotIp)
    );
    assert_eq!(
        p(LinkType::LinuxSll2, &sll2(0x0806, &[0; 28])).err(),
        Some(NotIp)
    );
    assert_cuts(
        LinkType::LinuxSll,
        &sll(0x0800, &v4),
        &[(16, TruncatedSll), (36, TruncatedIpv4), (56, TruncatedTcp)],
    );
    assert_cuts(
        LinkType::LinuxSll2,
        &sll2(0x0800, &v4),
        &[(20, TruncatedSll), (40, TruncatedIpv4), (60, TruncatedTcp)],
    );
}

#[test]
fn null_loopback_either_byte_order() {
    let v4 = ipv4(17, &[], &udp(b"n"));
    let v6 = ipv6(17, &udp(b"n6"));
    for fam in [2u32.to_le_bytes(), 2u32.to_be_bytes()] {
        let f = [&fam[..], &v4].concat();
        assert_eq!(p(LinkType::Null, &f).unwrap().src, V4_SRC);
    }
    for af in [24u32, 28, 30] {
        for fam in [af.to_le_bytes(), af.to_be_bytes()] {
            let f = [&fam[..], &v6].concat();
            assert_eq!(p(LinkType::Null, &f).unwrap().payload, b"n6");
        }
    }
    let f = [&23u32.to_le_bytes()[..], &v6].concat();
    assert_eq!(p(LinkType::Null, &f).err(), Some(DropReason::NotIp));
    for n in 0..4 {
        assert_eq!(
            p(LinkType::Null, &f[..n]).err(),
            Some(DropReason::TruncatedNull)
        );
    }
}

#[test]
fn raw_ip_link_types() {
    let v4 = ipv4(17, &[], &udp(b"r"));
    let v6 = ipv6(17, &udp(b"r"));
    assert_eq!(p(LinkType::RawIp, &v4).unwrap().src, V4_SRC);
    assert_eq!(p(LinkType::RawIp, &v6).unwrap().src, V6_SRC);
    assert_eq!(p(LinkType::Ipv4, &v4).unwrap().ip_len, 29);
    assert_eq!(p(LinkType::Ipv6, &v6).unwrap().ip_len, 49);
    assert_eq!(p(LinkType::Ipv4, &v6).err(), Some(DropReason::BadIpVersion));
    assert_eq!(p(LinkType::Ipv6, &v4).err(), Some(DropReason::BadIpVersion));
    assert_eq!(
        p(LinkType::RawIp, &[]).err(),
        Some(DropReason::BadIpVersion)
    );
    assert_eq!(
        p(LinkType::RawIp, &[0x55; 40]).err(),
        Some(DropReason::BadIpVersion)
    );
    assert_eq!(
        p(LinkType::Ipv4, &[]).err(),
        Some(DropReason::TruncatedIpv4)
    );
    assert_eq!(
        p(LinkType::Ipv6, &[]).err(),
        Some(DropReason::TruncatedIpv6)
    );
    // A wire length below the captured length is taken as the captured one.
    let mut tso = v4.clone();
    tso[2..4].copy_from_slice(&[0, 0]);
    assert_eq!(parse(LinkType::RawIp, &tso, 3).unwrap().ip_len, 29);
}
