//! Cut-at-every-length and mutation sweeps: reasons per layer, no panics.

use super::*;

#[test]
fn truncated_at_every_layer() {
    use DropReason::*;
    let f = vlan_frame(
        &[(0x88a8, 1), (0x8100, 2)],
        0x0800,
        &ipv4(6, &[1, 1, 1, 0], &tcp(2, &SYN_OPTS, b"x")),
    );
    // Options may be cut (kept), the 20 fixed TCP bytes may not.
    assert_cuts(
        LinkType::Ethernet,
        &f,
        &[
            (14, TruncatedEthernet),
            (18, TruncatedVlan),
            (22, TruncatedVlan),
            (46, TruncatedIpv4),
            (66, TruncatedTcp),
        ],
    );
    let f = eth(0x86dd, &ipv6(17, &udp(b"y")));
    assert_cuts(
        LinkType::Ethernet,
        &f,
        &[
            (14, TruncatedEthernet),
            (54, TruncatedIpv6),
            (62, TruncatedUdp),
        ],
    );
    let f = mpls_frame(&[5, 6], &ipv6(58, &[1, 0, 0, 0, 0, 0, 0, 0]));
    assert_cuts(
        LinkType::Ethernet,
        &f,
        &[
            (14, TruncatedEthernet),
            (23, TruncatedMpls),
            (62, TruncatedIpv6),
            (70, TruncatedIcmp),
        ],
    );
}

/// xorshift64*: deterministic bytes for the no-panic sweep below.
fn rng(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[test]
fn random_and_mutated_frames_never_panic() {
    const LINKS: [LinkType; 7] = [
        LinkType::Ethernet,
        LinkType::RawIp,
        LinkType::Ipv4,
        LinkType::Ipv6,
        LinkType::LinuxSll,
        LinkType::LinuxSll2,
        LinkType::Null,
    ];
    let seeds = [
        vlan_frame(
            &[(0x8100, 1)],
            0x0800,
            &ipv4(6, &[1, 1, 1, 0], &tcp(2, &SYN_OPTS, b"x")),
        ),
        eth(
            0x86dd,
            &ipv6(
                0,
                &[
                    &ext(44, 0)[..],
                    &frag6(6, 0, true, 1),
                    &tcp(2, &SYN_OPTS, b"y"),
                ]
                .concat(),
            ),
        ),
        mpls_frame(
            &[1, 2],
            &[
                &[0u8, 0, 0, 0][..],
                &eth(0x0800, &ipv4(17, &[], &udp(b"z"))),
            ]
            .concat(),
        ),
        pppoe(0x0057, &ipv6(58, &[1, 0, 0, 0, 0, 0, 0, 0])),
    ];
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut ok = 0;
    for i in 0..40_000 {
        let mut f = seeds[i % seeds.len()].clone();
        // Flip a few bytes (header bytes most of the time), then cut.
        for _ in 0..1 + rng(&mut s) % 4 {
            let at = (rng(&mut s) as usize) % f.len().min(80);
            f[at] = rng(&mut s) as u8;
        }
        f.truncate((rng(&mut s) as usize) % (f.len() + 1));
        // Half the time the framing the seed was built for.
        let r = rng(&mut s) as usize;
        let link = if r.is_multiple_of(2) {
            LinkType::Ethernet
        } else {
            LINKS[(r / 2) % LINKS.len()]
        };
        let wire = rng(&mut s) as u32;
        // A slot holding another packet, as the worker's batch reuses its
        // array: `parse_into` must leave exactly what `parse` returns,
        // never a field of the packet before (a failed frame clears it).
        let mut slot = parse(LinkType::Ethernet, &seeds[(i + 1) % seeds.len()], 0).ok();
        assert!(slot.is_some());
        let into = parse_into(link, &f, wire, &mut slot);
        let byval = parse(link, &f, wire);
        assert_eq!(into, byval.map(|_| ()), "frame {i}");
        assert_eq!(slot, byval.ok(), "frame {i}");
        if let Ok(m) = byval {
            ok += 1;
            assert!(m.payload.len() as u64 <= u64::from(m.payload_len));
        }
    }
    assert!(ok > 1_000, "mutations should still parse sometimes: {ok}");
}
