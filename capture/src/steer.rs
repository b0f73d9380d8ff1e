//! Which worker owns a frame, when the NIC's RSS does not send both
//! directions of a connection to one queue, and which worker of
//! `xdprobe pcap --workers N` a capture file's frame goes to.
//!
//! The owner is a hash of the two IP addresses, symmetric in source and
//! destination (the pair is ordered before hashing), modulo the number of
//! workers. Ports are left out on purpose: non-first IP fragments carry
//! none, and they must reach the same worker as the first fragment (the
//! fragment table is keyed by addresses and IP id, so one address pair on
//! one worker keeps every fragment series whole). Everything else a flow is
//! keyed by (ports, protocol, VLAN) only splits an address pair further, so
//! a flow never spans two workers.
//!
//! The addresses are found by the parser's own link-layer walk
//! ([`xdprobe_dataplane::parse::ip_addrs`]: VLAN, MPLS, PPPoE, cooked and
//! loopback headers, with the parser's limits), so every frame the parser
//! can place in a flow is steered by the addresses it is keyed by, and the
//! walk costs no full parse. Frames it cannot place (non-IP, truncated) go
//! to a fixed worker: the one that received them live, worker 0 for files.

use xdprobe_dataplane::parse::{LinkType, ip_addrs};

/// A hash of both addresses, smaller first: the same value for both
/// directions. Not keyed: a worker imbalance an attacker could provoke by
/// choosing addresses is bounded by the per-worker ring and is visible in
/// the hand-off counters.
pub fn symmetric_hash(frame: &[u8]) -> Option<u64> {
    symmetric_hash_of(LinkType::Ethernet, frame)
}

/// [`symmetric_hash`] for a frame of any link type the parser reads.
#[inline]
pub fn symmetric_hash_of(link: LinkType, frame: &[u8]) -> Option<u64> {
    let (a, b) = ip_addrs(link, frame)?;
    // Both addresses as integers: for two of one length (`ip_addrs` gives
    // 4 and 4 or 16 and 16 bytes) their order is the bytes' order, without
    // a call to `memcmp` per frame.
    let (a, b, v6) = match (a.first_chunk::<16>(), b.first_chunk::<16>()) {
        (Some(a), Some(b)) => (u128::from_be_bytes(*a), u128::from_be_bytes(*b), true),
        _ => (word(a), word(b), false),
    };
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    // Word by word, not byte by byte (FNV over the 8 or 32 bytes was a
    // tenth of the reading's instructions with `--workers 2`), then
    // a full-avalanche finaliser so `% workers` sees well-mixed low bits.
    let h = fold(lo, v6)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(29)
        ^ fold(hi, v6);
    Some(fmix64(h))
}

/// A 4-byte address as an integer (0 if shorter).
#[inline]
fn word(addr: &[u8]) -> u128 {
    addr.first_chunk::<4>()
        .map_or(0, |v4| u128::from(u32::from_be_bytes(*v4)))
}

/// An address (IPv6, or IPv4 in the low 32 bits) folded to 64 bits.
#[inline]
fn fold(addr: u128, v6: bool) -> u64 {
    if v6 {
        ((addr >> 64) as u64).wrapping_mul(0xff51_afd7_ed55_8ccd) ^ addr as u64
    } else {
        addr as u64
    }
}

/// MurmurHash3's 64-bit finaliser: every input bit reaches every output bit.
#[inline]
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[inline]
pub fn owner(frame: &[u8], workers: usize) -> Option<usize> {
    owner_of(LinkType::Ethernet, frame, workers)
}

/// [`owner`] for a frame of any link type the parser reads.
#[inline]
pub fn owner_of(link: LinkType, frame: &[u8], workers: usize) -> Option<usize> {
    if workers <= 1 {
        return None;
    }
    let h = symmetric_hash_of(link, frame)?;
    Some((h % workers as u64) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(src: [u8; 4], dst: [u8; 4], vlan: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        f.extend_from_slice(&ip);
        f
    }

    #[test]
    fn both_directions_hash_alike() {
        let a = [192, 0, 2, 1];
        let b = [192, 0, 2, 2];
        assert_eq!(
            symmetric_hash(&v4(a, b, false)),
            symmetric_hash(&v4(b, a, false))
        );
        assert_eq!(
            symmetric_hash(&v4(a, b, true)),
            symmetric_hash(&v4(b, a, false))
        );
        assert_ne!(
            symmetric_hash(&v4(a, b, false)),
            symmetric_hash(&v4(a, [192, 0, 2, 3], false))
        );
    }

    /// The hash is the one the byte-wise version gave (slices ordered as
    /// bytes, then folded): a frame goes to the worker it always went to.
    #[test]
    fn integer_order_gives_the_byte_order_hash() {
        fn reference(a: &[u8], b: &[u8]) -> u64 {
            let fold = |x: &[u8]| match x.len() {
                16 => {
                    let v = u128::from_be_bytes(x.try_into().unwrap());
                    ((v >> 64) as u64).wrapping_mul(0xff51_afd7_ed55_8ccd) ^ v as u64
                }
                _ => u64::from(u32::from_be_bytes(x.try_into().unwrap())),
            };
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            fmix64(fold(lo).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29) ^ fold(hi))
        }
        let pairs4 = [
            ([192, 0, 2, 1], [192, 0, 2, 2]),
            ([203, 0, 113, 9], [198, 51, 100, 200]),
        ];
        for (a, b) in pairs4 {
            assert_eq!(symmetric_hash(&v4(a, b, false)), Some(reference(&a, &b)));
        }
        let a: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut b = a;
        b[8] = 0xff;
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 0, 6, 64]);
        for (x, y) in [(a, b), (b, a)] {
            let mut g = f.clone();
            g.extend_from_slice(&x);
            g.extend_from_slice(&y);
            assert_eq!(symmetric_hash(&g), Some(reference(&x, &y)));
        }
    }

    #[test]
    fn spreads_over_workers() {
        let mut seen = [0u32; 4];
        for i in 0..=255u8 {
            let f = v4([198, 51, 100, i], [203, 0, 113, 7], false);
            if let Some(o) = owner(&f, 4) {
                seen[o] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n > 32), "{seen:?}");
    }

    #[test]
    fn encapsulations_and_link_types_steer_by_the_parsed_addresses() {
        let a = [192, 0, 2, 1];
        let b = [198, 51, 100, 9];
        let plain = symmetric_hash(&v4(a, b, false));
        assert!(plain.is_some());
        // Three VLAN tags (0x9100 outer), MPLS, PPPoE: the parser reads them all.
        let mut qinq = vec![0u8; 12];
        qinq.extend_from_slice(&[0x91, 0x00, 0, 1, 0x88, 0xa8, 0, 2, 0x81, 0x00, 0, 3]);
        qinq.extend_from_slice(&v4(b, a, false)[12..]);
        assert_eq!(symmetric_hash(&qinq), plain, "3 tags");
        let mut mpls = vec![0u8; 12];
        mpls.extend_from_slice(&[0x88, 0x47, 0x00, 0x01, 0x01, 0x40]);
        mpls.extend_from_slice(&v4(b, a, false)[14..]);
        assert_eq!(symmetric_hash(&mpls), plain, "MPLS");
        let mut pppoe = vec![0u8; 12];
        pppoe.extend_from_slice(&[0x88, 0x64, 0x11, 0x00, 0x00, 0x01, 0x00, 0x16, 0x00, 0x21]);
        pppoe.extend_from_slice(&v4(b, a, false)[14..]);
        assert_eq!(symmetric_hash(&pppoe), plain, "PPPoE");
        // Raw IP and Linux cooked captures: no Ethernet header to misread.
        let raw = &v4(b, a, false)[14..];
        assert_eq!(symmetric_hash_of(LinkType::RawIp, raw), plain, "raw IP");
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(raw);
        assert_eq!(symmetric_hash_of(LinkType::LinuxSll, &sll), plain, "SLL");
    }

    #[test]
    fn fragments_of_one_datagram_share_an_owner() {
        // First fragment (ports present) and a later one (offset 1480, no
        // ports): only the addresses are hashed.
        let mut first = v4([203, 0, 113, 5], [192, 0, 2, 77], false);
        first[14 + 6] = 0x20; // MF
        first[14 + 9] = 17;
        first.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
        let mut later = v4([203, 0, 113, 5], [192, 0, 2, 77], false);
        later[14 + 6] = 0x00;
        later[14 + 7] = 185; // offset 185 × 8 bytes
        later[14 + 9] = 17;
        for n in 2..=5 {
            assert_eq!(owner(&first, n), owner(&later, n));
        }
    }

    #[test]
    fn unplaceable_frames_stay_local() {
        assert_eq!(owner(&[0u8; 10], 2), None);
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        assert_eq!(owner(&arp, 2), None);
        let short = &v4([1, 2, 3, 4], [5, 6, 7, 8], false)[..20];
        assert_eq!(owner(short, 2), None);
        assert_eq!(owner(&v4([1, 2, 3, 4], [5, 6, 7, 8], false), 1), None);
    }
}
