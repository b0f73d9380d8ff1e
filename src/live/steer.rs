//! Which worker owns a frame, when the NIC's RSS does not send both
//! directions of a connection to one queue.
//!
//! The owner is a hash of the two IP addresses, symmetric in source and
//! destination (the pair is ordered before hashing), modulo the number of
//! workers. Ports are left out on purpose: non-first IP fragments carry
//! none, and they must reach the same worker as the first fragment. This is
//! a separate, raw-frame walk (Ethernet, up to two VLAN tags, IPv4/IPv6
//! addresses only) so the hand-off decision costs no full parse; frames it
//! cannot place (non-IP, truncated) stay with the worker that received them.

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;

fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

/// The (source, destination) address bytes of an Ethernet frame.
fn addrs(frame: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut ethertype = be16(frame, 12)?;
    let mut off = 14usize;
    for _ in 0..2 {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        ethertype = be16(frame, off + 2)?;
        off += 4;
    }
    match ethertype {
        ETH_P_IP => Some((
            frame.get(off + 12..off + 16)?,
            frame.get(off + 16..off + 20)?,
        )),
        ETH_P_IPV6 => Some((
            frame.get(off + 8..off + 24)?,
            frame.get(off + 24..off + 40)?,
        )),
        _ => None,
    }
}

/// FNV-1a over both addresses, smaller first: the same value for both
/// directions. Not keyed: a worker imbalance an attacker could provoke by
/// choosing addresses is bounded by the per-worker ring and is visible in
/// the hand-off counters.
pub fn symmetric_hash(frame: &[u8]) -> Option<u64> {
    let (a, b) = addrs(frame)?;
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in lo.iter().chain(hi.iter()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Fold the high bits in: FNV's low bits are weak for short inputs.
    Some(h ^ (h >> 32))
}

/// The index of the worker that owns `frame`, or `None` to keep it local.
#[inline]
pub fn owner(frame: &[u8], workers: usize) -> Option<usize> {
    if workers <= 1 {
        return None;
    }
    let h = symmetric_hash(frame)?;
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
