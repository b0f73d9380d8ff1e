//! Attribution of later IP fragments to their flow.
//!
//! Only the first fragment of a datagram carries the transport header. The
//! probe remembers, per (src, dst, protocol, IP ID), the ports of a first
//! fragment for a short time, so the later fragments count in the same flow
//! (an operator expects a fragmented DNS answer inside the DNS flow, not in a
//! port-less one). A later fragment whose first fragment was not seen (lost,
//! or arrived after it) counts in a port-less flow of its address pair and is
//! counted as `unattributed`.
//!
//! The table is a fixed ring of `capacity` slots in arrival order plus a
//! pre-sized index, so every operation is O(1) and nothing allocates after
//! construction, whatever arrives. When the ring is full the oldest slot
//! makes room: an entry past the reassembly timeout leaves as `expired`, a
//! live one as `evicted` (counted: under a first-fragment flood the newest
//! datagrams win, as a legitimate one's later fragments follow it within
//! microseconds while a flood's never come). A last fragment frees its
//! entry at once; its slot is reused when the ring comes round to it.
//!
//! Wireshark differs: with reassembly on it shows the *last* fragment as the
//! UDP/TCP packet and the others as plain IP; golden tests compare totals per
//! address pair for fragmented traffic (see `tests/golden.rs`).

use std::net::IpAddr;

use hashbrown::HashMap;

use super::mem::{AllocError, hash_index_bytes, index_capacity};
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

/// One ring slot: a remembered first fragment, or a free slot (`live`
/// false) left by a last fragment or not used yet.
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: FragKey,
    src_port: u16,
    dst_port: u16,
    live: bool,
    seen: Timestamp,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragStats {
    /// Later fragments counted in their datagram's flow.
    pub attributed: u64,
    /// Later fragments whose first fragment was not seen (or was forgotten).
    pub unattributed: u64,
    /// Remembered first fragments pushed out by newer ones before the
    /// reassembly timeout, because the table was full.
    pub evicted: u64,
    /// Remembered first fragments whose datagram never ended within the
    /// reassembly timeout (found when their slot was reused).
    pub expired: u64,
}

#[derive(Debug)]
pub struct FragTable {
    /// Slot index by datagram; at most `ring.len()` entries in twice the
    /// room ([`index_capacity`]), so it never grows past its first allocation.
    index: HashMap<FragKey, u32>,
    ring: Vec<Slot>,
    /// Next slot to (re)use: the oldest one once the ring has wrapped.
    next: usize,
    pub stats: FragStats,
}

impl FragTable {
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, u32::MAX as usize);
        FragTable {
            index: HashMap::with_capacity(index_capacity(capacity)),
            ring: Vec::with_capacity(capacity),
            next: 0,
            stats: FragStats::default(),
        }
    }

    /// [`new`](Self::new) that reports an allocation failure instead of
    /// aborting.
    pub fn try_new(capacity: usize) -> Result<Self, AllocError> {
        let capacity = capacity.clamp(1, u32::MAX as usize);
        let fail = || AllocError {
            what: "the fragment table",
            bytes: Self::memory_bytes(capacity),
        };
        let mut ring = Vec::new();
        ring.try_reserve_exact(capacity).map_err(|_| fail())?;
        let mut index = HashMap::new();
        index
            .try_reserve(index_capacity(capacity))
            .map_err(|_| fail())?;
        Ok(FragTable {
            index,
            ring,
            next: 0,
            stats: FragStats::default(),
        })
    }

    /// Bytes this table allocates for `capacity` entries (index and ring),
    /// for the up-front memory estimate.
    pub fn memory_bytes(capacity: usize) -> u64 {
        let capacity = capacity.clamp(1, u32::MAX as usize);
        hash_index_bytes(index_capacity(capacity), size_of::<(FragKey, u32)>())
            + (capacity * size_of::<Slot>()) as u64
    }

    /// Remembers the ports of a first fragment. O(1): takes the next ring
    /// slot, pushing out whatever the oldest slot still holds.
    pub fn first(&mut self, key: FragKey, (src_port, dst_port): (u16, u16), now: Timestamp) {
        let slot = Slot {
            key,
            src_port,
            dst_port,
            live: true,
            seen: now,
        };
        // A repeated first fragment (same datagram) replaces the earlier one.
        if let Some(old) = self.index.remove(&key)
            && let Some(s) = self.ring.get_mut(old as usize)
        {
            s.live = false;
        }
        let i = if self.ring.len() < self.ring.capacity() {
            self.ring.push(slot);
            self.ring.len() - 1
        } else {
            let i = self.next;
            let Some(old) = self.ring.get_mut(i) else {
                return;
            };
            if old.live {
                if now.nanos_since(old.seen) < FRAG_TIMEOUT_NS {
                    self.stats.evicted += 1;
                } else {
                    self.stats.expired += 1;
                }
                self.index.remove(&old.key);
            }
            *old = slot;
            self.next = if i + 1 == self.ring.len() { 0 } else { i + 1 };
            i
        };
        self.index.insert(key, i as u32);
    }

    /// Ports for a later fragment, `(0, 0)` when its first fragment is
    /// unknown. The entry is dropped with the last fragment (`more == false`).
    pub fn later(&mut self, key: FragKey, more: bool, now: Timestamp) -> (u16, u16) {
        let slot = self.index.get(&key).copied();
        let found = slot
            .and_then(|i| self.ring.get(i as usize))
            .filter(|s| now.nanos_since(s.seen) < FRAG_TIMEOUT_NS)
            .map(|s| (s.src_port, s.dst_port));
        if !more && let Some(i) = slot {
            self.index.remove(&key);
            if let Some(s) = self.ring.get_mut(i as usize) {
                s.live = false;
            }
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
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
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
    fn full_table_pushes_out_the_oldest_and_counts_it() {
        let mut t = FragTable::new(2);
        t.first(k(1, 2, 17, 1), (1, 1), Timestamp(0));
        t.first(k(1, 2, 17, 2), (2, 2), Timestamp(0));
        t.first(k(1, 2, 17, 3), (3, 3), Timestamp(1));
        assert_eq!(t.stats.evicted, 1);
        assert_eq!(t.len(), 2);
        // The newest datagrams are the ones remembered.
        assert_eq!(t.later(k(1, 2, 17, 1), false, Timestamp(2)), (0, 0));
        assert_eq!(t.later(k(1, 2, 17, 3), true, Timestamp(2)), (3, 3));
        // A slot whose datagram is past the timeout leaves as expired.
        let later = Timestamp(FRAG_TIMEOUT_NS + 1);
        t.first(k(1, 2, 17, 4), (9, 9), later);
        assert_eq!((t.stats.evicted, t.stats.expired), (1, 1));
        assert_eq!(t.later(k(1, 2, 17, 4), false, later), (9, 9));
        // Slot 0 holds 3, whose timeout has passed too.
        t.first(k(1, 2, 17, 5), (5, 5), later);
        assert_eq!((t.stats.evicted, t.stats.expired), (1, 2));
        // Slot 1 was freed by 4's last fragment: nothing is pushed out.
        t.first(k(1, 2, 17, 6), (6, 6), later);
        assert_eq!((t.stats.evicted, t.stats.expired), (1, 2));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_repeated_first_fragment_replaces_the_earlier_one() {
        let mut t = FragTable::new(4);
        t.first(k(1, 2, 17, 7), (1, 1), Timestamp(0));
        t.first(k(1, 2, 17, 7), (2, 2), Timestamp(1));
        assert_eq!(t.len(), 1);
        assert_eq!(t.later(k(1, 2, 17, 7), false, Timestamp(2)), (2, 2));
        assert!(t.is_empty());
        // Neither slot is live any more: filling the ring evicts nothing.
        for id in 10..14 {
            t.first(k(1, 2, 17, id), (3, 3), Timestamp(3));
        }
        assert_eq!(t.stats.evicted, 0);
        t.first(k(1, 2, 17, 20), (3, 3), Timestamp(3));
        assert_eq!(t.stats.evicted, 1);
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn a_flood_keeps_the_table_at_its_capacity() {
        let mut t = FragTable::new(64);
        let bytes = t.index.allocation_size();
        for id in 0..100_000 {
            t.first(k(1, 2, 17, id), (1, 1), Timestamp(u64::from(id)));
            assert_eq!(t.index.allocation_size(), bytes, "the index grew at {id}");
        }
        assert_eq!(t.len(), 64);
        assert_eq!(t.stats.evicted, 100_000 - 64);
        assert_eq!(t.ring.capacity(), 64);
        assert!(FragTable::memory_bytes(64) >= bytes as u64);
    }
}
