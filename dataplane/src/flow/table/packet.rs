//! What one packet does to its flow once the table found or made it:
//! its counters and times in the hot line, and a TCP segment's tracker,
//! flags and closing; the DNS tracker, the cold entry and the L7 parsers
//! only for the packets that need them.

use super::entry::Arrival;
use super::{FlowTable, Kind, TCP};
use crate::flow::key::Side;
use crate::flow::lru::ListId;
use crate::metrics::tcp::TsCtx;
use crate::parse::{L4, PacketMeta, TcpFlags, TcpMeta};
use crate::time::Timestamp;
use xdprobe_l7::Transport;

impl FlowTable {
    /// A packet of flow `id` without a TCP header, sent from `side`: UDP,
    /// ICMP, other protocols, a non-first fragment (of any flow).
    #[inline]
    pub(super) fn on_other(&mut self, id: u32, side: Side, pkt: &PacketMeta<'_>, ts: Timestamp) {
        let h = self.slabs.head_mut(id);
        let (dir, when) = h.account(side, pkt.ip_len, ts);
        let (kind, dns) = (h.kind, h.side);
        let l7 = pkt.payload_len > 0 && h.l7_inspect(dir);
        if when != Arrival::InOrder {
            self.note_first(id, when, ts);
        }
        if kind == Kind::Dns
            && let Some(d) = self.slabs.dns.get_mut(dns)
        {
            d.on_datagram(dir, pkt.payload, ts);
        }
        if l7 && pkt.l4 == L4::Udp {
            self.l7_payload(id, dir, Transport::Udp, pkt, ts, None);
        }
    }

    /// The first packet time of flow `id`'s interval, when its packet at
    /// `ts` started the interval or came out of time order (cold: these
    /// are the only packets that read it).
    #[cold]
    fn note_first(&mut self, id: u32, when: Arrival, ts: Timestamp) {
        let c = self.slabs.cold_mut(id);
        c.first = match when {
            Arrival::First => ts,
            _ => c.first.min(ts),
        };
    }

    /// A TCP segment of flow `id` (in the TCP slab) sent from `side`.
    #[inline]
    pub(super) fn on_tcp(
        &mut self,
        id: u32,
        side: Side,
        t: &TcpMeta,
        pkt: &PacketMeta<'_>,
        ts: Timestamp,
    ) {
        let i = (id & !TCP) as usize;
        let (Some(hot), Some(cold)) = (
            self.slabs.tcp.hot.get_mut(i),
            self.slabs.tcp.cold.get_mut(i),
        ) else {
            return;
        };
        let h = &mut hot.head;
        let (dir, when) = h.account(side, pkt.ip_len, ts);
        match when {
            Arrival::InOrder => {}
            Arrival::First => cold.cold.first = ts,
            Arrival::Early => cold.cold.first = cold.cold.first.min(ts),
        }
        if t.flags.contains(TcpFlags::FIN) {
            h.set_fin(dir);
        }
        let closes = !h.closing() && (t.flags.contains(TcpFlags::RST) || h.fin_both());
        let l7 = pkt.payload_len > 0 && h.l7_inspect(dir);
        hot.tcp.note_flags(dir, t.flags);
        // The L7 parsers need the expected sequence number from before
        // this segment moves it, whether the direction's SYN was seen, and
        // for an HTTP flow the handshake's server time (a second cold line:
        // read only when the flow's handle, in the first, says so).
        let l7 = l7.then(|| {
            let syn = hot.tcp.flags()[dir.index()] & TcpFlags::SYN.bits() != 0;
            let t_snt = cold.cold.l7.wants_server_time();
            let t_snt = t_snt.then(|| cold.tcp.server_net_ns()).flatten();
            (hot.tcp.expected(dir), syn, t_snt)
        });
        let now = self.now;
        if closes {
            cold.close_deadline = now.saturating_add_nanos(self.cfg_linger_ns);
        }
        if self.npm && hot.head.npm() {
            let tsrtt = self.ts_col.get_mut(i as u32).map(|flow| TsCtx {
                flow,
                worker: &mut self.ts_stats,
            });
            hot.tcp.on_segment(
                &mut cold.tcp,
                dir,
                t,
                pkt.payload_len,
                pkt.payload,
                ts,
                tsrtt,
            );
        }
        if closes {
            let due = now.saturating_add_nanos(self.cfg_linger_ns);
            self.next_deadline = self.next_deadline.min(due);
            self.lists.push_back(&mut self.slabs, ListId::Closing, id);
        }
        if let Some((expected, syn, t_snt)) = l7 {
            let seq = t.seq;
            let transport = Transport::Tcp { seq, expected, syn };
            self.l7_payload(id, dir, transport, pkt, ts, t_snt);
        }
    }
}
