//! A flow's life in the table: created by its first packet, moved to the
//! TCP slab if a TCP segment follows a start without one, reported, and
//! ended (its index entry, list places, slots and side state given back).

use super::entry::{Cold, Counters, Head, Hot1, Hot2, Kind, TcpColdEntry};
use super::slab::TCP;
use super::{FlowTable, Side};
use crate::flow::key::{CompactKey, FlowKey, Roles};
use crate::flow::lru::ListId;
use crate::metrics::dns::DnsTracker;
use crate::metrics::tcp::TcpHot;
use crate::parse::{L4, PacketMeta};
use crate::record::{DirStats, EndReason, FlowRecord, Npm};
use crate::time::Timestamp;

impl FlowTable {
    /// A new flow for `key` from its first packet `pkt`: its slots, index
    /// entry and list places. Evicts the least recently seen flow first
    /// if the table is full.
    #[expect(
        clippy::too_many_arguments,
        reason = "the key in both forms, its hash and side: computed once per packet"
    )]
    pub(super) fn insert(
        &mut self,
        key: &FlowKey,
        compact: CompactKey,
        hash: u64,
        side: Side,
        pkt: &PacketMeta<'_>,
        ts: Timestamp,
        out: &mut impl FnMut(FlowRecord),
    ) -> u32 {
        if self.index.len() >= self.capacity {
            self.evict_one(out);
        }
        let roles = Roles::decide(pkt, side);
        let server_port = key.endpoint(roles.client.other()).1;
        let compact = if compact.is_v6() {
            compact.with_v6_slot(self.slabs.v6.alloc(key.addrs()))
        } else {
            compact
        };
        let mut head = Head::new(compact, roles.client, roles.guessed, pkt.tos, ts);
        if self.l7.is_some() {
            head.set_l7_inspect();
        }
        let cold = Cold::new(ts, self.now);
        let id = match pkt.l4 {
            L4::Tcp(_) => {
                head.kind = Kind::Tcp;
                let hot = Hot2 {
                    head,
                    tcp: TcpHot::default(),
                };
                self.slabs.tcp.alloc(hot, TcpColdEntry::new(cold)) | TCP
            }
            L4::Udp if self.npm && server_port == 53 => {
                head.kind = Kind::Dns;
                head.side = self.slabs.dns.alloc(DnsTracker::default());
                self.slabs.one.alloc(Hot1 { head }, cold)
            }
            _ => self.slabs.one.alloc(Hot1 { head }, cold),
        };
        self.index.insert(hash, id);
        self.lists.push_back(&mut self.slabs, ListId::Lru, id);
        self.lists.push_back(&mut self.slabs, ListId::Active, id);
        let first_due = self
            .now
            .saturating_add_nanos(self.cfg_idle_ns.min(self.cfg_active_ns));
        self.next_deadline = self.next_deadline.min(first_due);
        self.stats.flows_created += 1;
        id
    }

    /// Moves flow `id` (hashed `hash`), begun by a packet without a TCP
    /// header, to the TCP slab at its first TCP segment, for its flags and
    /// closing (no metrics: the tracker is chosen from the first packet).
    /// Its index entry and list places follow it; the old slot is freed.
    /// Returns the new id.
    #[cold]
    pub(super) fn promote(&mut self, id: u32, hash: u64) -> u32 {
        let mut head = *self.slabs.head_mut(id);
        let cold = *self.slabs.cold_mut(id);
        head.kind = Kind::Tcp;
        head.set_no_npm();
        let hot = Hot2 {
            head,
            tcp: TcpHot::default(),
        };
        let new = self.slabs.tcp.alloc(hot, TcpColdEntry::new(cold)) | TCP;
        self.index.replace(hash, id, new);
        self.lists.replace(&mut self.slabs, id, new);
        // The old slot: its key's side state now belongs to the new one.
        let old = self.slabs.head_mut(id);
        old.set_dead();
        self.slabs.one.release(id);
        new
    }

    /// Emits the final record of flow `id` (if it has packets not yet
    /// reported) and frees its slots and side state.
    pub(super) fn end(&mut self, id: u32, reason: EndReason, out: &mut impl FnMut(FlowRecord)) {
        if self.slabs.head(id).is_some_and(|h| h.packets() > 0) {
            self.stats.records += 1;
            let mut rec = self.record(id, reason);
            if let Some(l7) = self.l7_finish(id) {
                (rec.app, rec.l7) = (Some(l7.0), l7.1);
            }
            out(rec);
        } else {
            self.l7_release(id);
        }
        let key = self.slabs.key(id);
        let hash = self.hash_key(&key, &key.compact());
        self.index.remove(hash, id);
        self.lists.remove_all(&mut self.slabs, id);
        self.slabs.release(id);
    }

    /// The record of flow `id`'s current interval.
    pub(super) fn record(&self, id: u32, reason: EndReason) -> FlowRecord {
        let key = self.slabs.key(id);
        let h = self.slabs.head_ref(id);
        let cold = self.slabs.cold(id);
        let client = h.client();
        let (client_addr, client_port) = key.endpoint(client);
        let (server_addr, server_port) = key.endpoint(client.other());
        let tcp = (id & TCP != 0)
            .then(|| {
                let i = (id & !TCP) as usize;
                Some((self.slabs.tcp.hot.get(i)?, self.slabs.tcp.cold.get(i)?))
            })
            .flatten();
        let flags = tcp.map_or([0; 2], |(t, _)| t.tcp.flags());
        let dir = |c: &Counters, tcp_flags: u8| DirStats {
            packets: c.packets,
            bytes: c.bytes,
            tcp_flags,
            ..DirStats::default()
        };
        let mut rec = FlowRecord {
            client_addr,
            client_port,
            server_addr,
            server_port,
            proto: key.proto,
            vlan: key.vlan(),
            direction_guessed: h.guessed(),
            start: cold.first,
            end: h.last,
            end_reason: reason,
            tos: h.tos,
            c2s: dir(&h.dirs[0], flags[0]),
            s2c: dir(&h.dirs[1], flags[1]),
            npm: Npm::default(),
            seq_in_flow: cold.seq_in_flow,
            process: None,
            app: None,
            l7: None,
        };
        match (h.kind, tcp) {
            (Kind::Tcp, Some((hot, c))) if self.npm && h.npm() => {
                hot.tcp.fill(&c.tcp, &mut rec, self.ts_col.get(id & !TCP))
            }
            (Kind::Dns, _) => {
                if let Some(d) = self.slabs.dns.get(h.side) {
                    d.fill(&mut rec);
                }
            }
            _ => {}
        }
        rec
    }

    /// Starts flow `id`'s next interval after an active-timeout record:
    /// counters restart, the trackers keep what carries over.
    pub(super) fn reset_interval(&mut self, id: u32) {
        self.l7_end_interval(id);
        let h = self.slabs.head_mut(id);
        h.dirs = [Counters::default(); 2];
        let (kind, side, npm) = (h.kind, h.side, self.npm && h.npm());
        let c = self.slabs.cold_mut(id);
        c.seq_in_flow = c.seq_in_flow.wrapping_add(1);
        match kind {
            Kind::Tcp => {
                let i = (id & !TCP) as usize;
                if let (Some(hot), Some(cold)) = (
                    self.slabs.tcp.hot.get_mut(i),
                    self.slabs.tcp.cold.get_mut(i),
                ) {
                    hot.tcp.reset_flags();
                    if npm {
                        hot.tcp
                            .reset_interval(&mut cold.tcp, self.ts_col.get_mut(i as u32));
                    }
                }
            }
            Kind::Dns => {
                if let Some(d) = self.slabs.dns.get_mut(side) {
                    d.reset_interval();
                }
            }
            Kind::None => {}
        }
    }
}
