//! Network performance metrics (`shared/spec/npm-metrics.md`), per flow,
//! sans-IO: each tracker takes one packet's fields and its capture timestamp.
//!
//! The flow table owns one [`L4Metrics`] per flow and calls it for every
//! packet; at export it asks the tracker to fill the record's NPM fields and
//! then starts a new interval (active timeout) keeping the handshake values.

pub mod dns;
pub mod handshake;
pub mod histogram;
pub mod retrans;
pub mod seq;
pub mod sketch;
pub mod srt;
pub mod tcp;
pub mod tls;
pub mod tsrtt;

use crate::flow::record::{Dir, FlowRecord};
use crate::parse::PacketMeta;
use crate::time::Timestamp;

/// Per-flow metric state, by transport.
#[derive(Clone, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "held inline in the pre-sized flow slab: boxing the TCP state would allocate per flow and add a pointer chase per packet"
)]
pub enum L4Metrics {
    Tcp(tcp::TcpTracker),
    Dns(dns::DnsTracker),
    None,
}

impl L4Metrics {
    /// Chooses the tracker for a new flow from its first packet.
    pub fn for_flow(pkt: &PacketMeta<'_>, server_port: u16) -> Self {
        match pkt.l4 {
            crate::parse::L4::Tcp(_) => L4Metrics::Tcp(tcp::TcpTracker::default()),
            crate::parse::L4::Udp if server_port == 53 => {
                L4Metrics::Dns(dns::DnsTracker::default())
            }
            _ => L4Metrics::None,
        }
    }

    /// Feeds one packet travelling in `dir`; `tsrtt` is the flow's
    /// timestamp-RTT state when that feature is on.
    pub fn on_packet(
        &mut self,
        dir: Dir,
        pkt: &PacketMeta<'_>,
        ts: Timestamp,
        tsrtt: Option<tcp::TsCtx<'_>>,
    ) {
        match self {
            L4Metrics::Tcp(t) => {
                if let Some(tcp) = pkt.tcp() {
                    t.on_segment(dir, tcp, pkt.payload_len, pkt.payload, ts, tsrtt);
                }
            }
            L4Metrics::Dns(d) => d.on_datagram(dir, pkt.payload, ts),
            L4Metrics::None => {}
        }
    }

    /// Writes this interval's NPM fields and per-direction TCP counters into
    /// `rec`.
    pub fn fill(&self, rec: &mut FlowRecord, tsrtt: Option<&tsrtt::TsRtt>) {
        match self {
            L4Metrics::Tcp(t) => t.fill(rec, tsrtt),
            L4Metrics::Dns(d) => d.fill(rec),
            L4Metrics::None => {}
        }
    }

    /// Starts a new reporting interval (after an active-timeout record):
    /// zero the per-interval counts, keep the handshake and sequence state.
    pub fn reset_interval(&mut self, tsrtt: Option<&mut tsrtt::TsRtt>) {
        match self {
            L4Metrics::Tcp(t) => t.reset_interval(tsrtt),
            L4Metrics::Dns(d) => d.reset_interval(),
            L4Metrics::None => {}
        }
    }
}
