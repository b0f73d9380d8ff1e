//! Attribution of later IP fragments to their flow.
//!
//! Only the first fragment of a datagram carries the transport header. The
//! probe remembers, per (src, dst, protocol, IP ID), the ports of a first
//! fragment for a short time, so the later fragments count in the same flow
//! (an operator expects a fragmented DNS answer inside the DNS flow, not in a
//! port-less one). A later fragment whose first fragment was not seen (lost,
//! or arrived after it) counts in a port-less flow of its address pair and is
//! counted as `unattributed`. The table is bounded: when full, entries older
//! than the reassembly timeout are swept, and if none are, the new datagram
//! is not remembered (counted).
//!
//! Wireshark differs: with reassembly on it shows the *last* fragment as the
//! UDP/TCP packet and the others as plain IP; golden tests compare totals per
//! address pair for fragmented traffic (see `tests/golden.rs`).

use std::net::IpAddr;

use hashbrown::HashMap;

use crate::parse::PacketMeta;
use crate::time::Timestamp;

/// RFC 791/8200 reassembly timers are 15–60 s; 30 s covers both families.
const FRAG_TIMEOUT_NS: u64 = 30_000_000_000;

/// Which datagram a fragment belongs to (RFC 791 §3.2: source,
/// destination, protocol and identification).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragKey {
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    id: u32,
}

impl FragKey {
    pub fn of(pkt: &PacketMeta<'_>, id: u32) -> FragKey {
        FragKey {
            src: pkt.src,
            dst: pkt.dst,
            proto: pkt.proto,
            id,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct FragPorts {
    src_port: u16,
    dst_port: u16,
    seen: Timestamp,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragStats {
    /// Later fragments counted in their datagram's flow.
    pub attributed: u64,
    /// Later fragments whose first fragment was not seen.
    pub unattributed: u64,
    /// First fragments not remembered because the table was full.
    pub table_full: u64,
}

#[derive(Debug)]
pub struct FragTable {
    map: HashMap<FragKey, FragPorts>,
    capacity: usize,
    pub stats: FragStats,
}

impl FragTable {
    pub fn new(capacity: usize) -> Self {
        FragTable {
            map: HashMap::with_capacity(capacity),
            capacity,
            stats: FragStats::default(),
        }
    }

    /// Remembers the ports of a first fragment.
    pub fn first(&mut self, key: FragKey, (src_port, dst_port): (u16, u16), now: Timestamp) {
        if self.map.len() >= self.capacity {
            self.map
                .retain(|_, v| now.nanos_since(v.seen) < FRAG_TIMEOUT_NS);
            if self.map.len() >= self.capacity {
                self.stats.table_full += 1;
                return;
            }
        }
        self.map.insert(
            key,
            FragPorts {
                src_port,
                dst_port,
                seen: now,
            },
        );
    }

    /// Ports for a later fragment, `(0, 0)` when its first fragment is
    /// unknown. The entry is dropped with the last fragment (`more == false`).
    pub fn later(&mut self, key: FragKey, more: bool, now: Timestamp) -> (u16, u16) {
        let found = match self.map.get(&key) {
            Some(p) if now.nanos_since(p.seen) < FRAG_TIMEOUT_NS => Some((p.src_port, p.dst_port)),
            _ => None,
        };
        if !more {
            self.map.remove(&key);
        }
        match found {
            Some(ports) => {
                self.stats.attributed += 1;
                ports
            }
            None => {
                self.stats.unattributed += 1;
                (0, 0)
            }
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn a(x: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, x))
    }

    fn k(src: u8, dst: u8, proto: u8, id: u32) -> FragKey {
        FragKey {
            src: a(src),
            dst: a(dst),
            proto,
            id,
        }
    }

    #[test]
    fn later_fragments_get_first_fragment_ports_until_last() {
        let mut t = FragTable::new(4);
        t.first(k(1, 2, 17, 7), (5353, 53), Timestamp(0));
        assert_eq!(t.later(k(1, 2, 17, 7), true, Timestamp(1)), (5353, 53));
        assert_eq!(t.later(k(1, 2, 17, 7), false, Timestamp(2)), (5353, 53));
        // the last fragment removed the entry
        assert_eq!(t.later(k(1, 2, 17, 7), false, Timestamp(3)), (0, 0));
        assert_eq!(t.stats.attributed, 2);
        assert_eq!(t.stats.unattributed, 1);
        assert!(t.is_empty());
    }

    #[test]
    fn other_id_or_direction_is_not_attributed() {
        let mut t = FragTable::new(4);
        t.first(k(1, 2, 17, 7), (5353, 53), Timestamp(0));
        assert_eq!(t.later(k(1, 2, 17, 8), true, Timestamp(1)), (0, 0));
        assert_eq!(t.later(k(2, 1, 17, 7), true, Timestamp(1)), (0, 0));
        assert_eq!(t.later(k(1, 2, 6, 7), true, Timestamp(1)), (0, 0));
    }

    #[test]
    fn bounded_and_stale_entries_swept() {
        let mut t = FragTable::new(2);
        t.first(k(1, 2, 17, 1), (1, 1), Timestamp(0));
        t.first(k(1, 2, 17, 2), (1, 1), Timestamp(0));
        t.first(k(1, 2, 17, 3), (1, 1), Timestamp(1));
        assert_eq!(t.stats.table_full, 1);
        assert_eq!(t.len(), 2);
        let later = Timestamp(FRAG_TIMEOUT_NS + 1);
        t.first(k(1, 2, 17, 4), (9, 9), later);
        assert_eq!(t.len(), 1);
        assert_eq!(t.later(k(1, 2, 17, 4), false, later), (9, 9));
    }
}
