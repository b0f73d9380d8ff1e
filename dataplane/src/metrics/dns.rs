//! DNS-over-UDP server response time (`docs/spec/npm-metrics.md` §2 "DNS over UDP").
//!
//! Client/server follow port 53 (the flow table makes the port-53 side the
//! server). A *request* is a client→server message with QR = 0, a
//! *response* a server→client message with QR = 1; anything else (too short
//! for a DNS header, or QR against the direction) is ignored.
//!
//! `Δt_rr` = first response after a request − *first* observation of that
//! request, matched by transaction ID; no handshake correction.
//!
//! Alternation (the spec: if requests and responses on one port pair do not
//! strictly alternate, SRT is not measured) is judged per transaction:
//! - a repeated query with the ID of the unanswered one is a retransmission
//!   of the same request (its first observation stays the start time);
//! - a repeated response with the ID just answered is a duplicate;
//! - a query with the ID of an *answered* transaction starts a new one;
//! - a response captured before any request is ignored (§2: SRT 0);
//! - anything else — a new query while one is unanswered, or a response
//!   whose ID is not the outstanding/just-answered one — breaks alternation:
//!   the flow's SRT is not measured from then on (the current interval's
//!   values are dropped; `srt_us` = 0, count 0, as for no measurement).

use super::srt::SrtStats;
use crate::record::{Dir, FlowRecord};
use crate::time::Timestamp;

/// DNS header length (RFC 1035 §4.1.1).
const DNS_HEADER_LEN: usize = 12;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Txn {
    #[default]
    Idle,
    Pending {
        id: u16,
        since_ns: u64,
    },
    Answered {
        id: u16,
    },
    /// Requests and responses stopped alternating.
    Broken,
}

/// SRT state of one DNS flow.
#[derive(Clone, Debug, Default)]
pub struct DnsTracker {
    txn: Txn,
    srt: SrtStats,
}

impl DnsTracker {
    pub fn on_datagram(&mut self, dir: Dir, payload: &[u8], ts: Timestamp) {
        if payload.len() < DNS_HEADER_LEN {
            return;
        }
        let (Some(&hi), Some(&lo), Some(&flags)) =
            (payload.first(), payload.get(1), payload.get(2))
        else {
            return;
        };
        let id = u16::from_be_bytes([hi, lo]);
        let is_response = flags & 0x80 != 0;
        let ts = ts.as_nanos();
        self.txn = match (dir, is_response, self.txn) {
            (_, _, Txn::Broken) => Txn::Broken,
            (Dir::C2S, false, Txn::Idle | Txn::Answered { .. }) => {
                Txn::Pending { id, since_ns: ts }
            }
            (Dir::C2S, false, p @ Txn::Pending { id: pid, .. }) if pid == id => p,
            (Dir::S2C, true, Txn::Pending { id: pid, since_ns }) if pid == id => {
                self.srt.add(ts.saturating_sub(since_ns));
                Txn::Answered { id }
            }
            (Dir::S2C, true, a @ Txn::Answered { id: aid }) if aid == id => a,
            (Dir::S2C, true, Txn::Idle) => Txn::Idle,
            (Dir::C2S, false, _) | (Dir::S2C, true, _) => {
                self.srt.reset();
                Txn::Broken
            }
            // QR against the direction: not this flow's request/response.
            (_, _, t) => t,
        };
    }

    pub fn fill(&self, rec: &mut FlowRecord) {
        self.srt.fill(&mut rec.npm);
    }

    pub fn reset_interval(&mut self) {
        self.srt.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{EndReason, Npm};

    fn msg(id: u16, response: bool) -> [u8; 12] {
        let mut m = [0u8; 12];
        m[..2].copy_from_slice(&id.to_be_bytes());
        m[2] = if response { 0x81 } else { 0x01 };
        m
    }

    fn rec() -> FlowRecord {
        FlowRecord {
            client_port: 5353,
            server_port: 53,
            end_reason: EndReason::Idle,
            ..FlowRecord::blank(17)
        }
    }

    fn npm(d: &DnsTracker) -> Npm {
        let mut r = rec();
        d.fill(&mut r);
        r.npm
    }

    fn us(v: u64) -> Timestamp {
        Timestamp::from_micros(v)
    }

    #[test]
    fn metrics_dns_first_observation_to_first_response() {
        let mut d = DnsTracker::default();
        d.on_datagram(Dir::C2S, &msg(7, false), us(1000));
        d.on_datagram(Dir::C2S, &msg(7, false), us(1500)); // retransmitted query
        d.on_datagram(Dir::S2C, &msg(7, true), us(3500));
        d.on_datagram(Dir::S2C, &msg(7, true), us(3600)); // duplicate response
        let n = npm(&d);
        assert_eq!((n.srt_us, n.srt_count), (Some(2500), 1));
        assert_eq!(n.rtt_us, None);
        assert!(!n.tls);
        // Same ID reused after the answer: a new transaction.
        d.on_datagram(Dir::C2S, &msg(7, false), us(10_000));
        d.on_datagram(Dir::S2C, &msg(7, true), us(10_100));
        let n = npm(&d);
        assert_eq!(n.srt_count, 2);
        assert_eq!(
            (n.srt_us, n.srt_min_us, n.srt_max_us),
            (Some(2500), Some(100), Some(2500))
        );
        assert_eq!(n.srt_mean_us, Some(1300));
    }

    #[test]
    fn metrics_dns_matches_by_transaction_id() {
        let mut d = DnsTracker::default();
        d.on_datagram(Dir::C2S, &msg(1, false), us(0));
        // A response with another ID does not answer query 1: alternation
        // is broken and nothing is measured, not a wrong pairing.
        d.on_datagram(Dir::S2C, &msg(2, true), us(50));
        d.on_datagram(Dir::S2C, &msg(1, true), us(80));
        let n = npm(&d);
        assert_eq!((n.srt_us, n.srt_count, n.srt_min_us), (Some(0), 0, None));
    }

    #[test]
    fn metrics_dns_non_alternating_requests_measure_nothing() {
        let mut d = DnsTracker::default();
        d.on_datagram(Dir::C2S, &msg(1, false), us(0));
        d.on_datagram(Dir::S2C, &msg(1, true), us(10));
        assert_eq!(npm(&d).srt_count, 1);
        d.on_datagram(Dir::C2S, &msg(2, false), us(100)); // never answered
        d.on_datagram(Dir::C2S, &msg(3, false), us(200));
        d.on_datagram(Dir::S2C, &msg(3, true), us(230));
        let n = npm(&d);
        assert_eq!((n.srt_us, n.srt_count), (Some(0), 0));
        // It stays unmeasured for the rest of the flow, across intervals.
        d.reset_interval();
        d.on_datagram(Dir::C2S, &msg(4, false), us(300));
        d.on_datagram(Dir::S2C, &msg(4, true), us(330));
        assert_eq!(npm(&d).srt_count, 0);
    }

    #[test]
    fn metrics_dns_response_before_request_and_garbage() {
        let mut d = DnsTracker::default();
        d.on_datagram(Dir::S2C, &msg(9, true), us(0));
        d.on_datagram(Dir::C2S, &[1, 2, 3], us(1)); // too short
        d.on_datagram(Dir::S2C, &msg(9, false), us(2)); // query from the server side
        let n = npm(&d);
        assert_eq!((n.srt_us, n.srt_count), (Some(0), 0));
        d.on_datagram(Dir::C2S, &msg(9, false), us(10));
        d.on_datagram(Dir::S2C, &msg(9, true), us(40));
        assert_eq!(npm(&d).srt_us, Some(30));
    }

    #[test]
    fn metrics_dns_interval_reset_keeps_pending_request() {
        let mut d = DnsTracker::default();
        d.on_datagram(Dir::C2S, &msg(5, false), us(0));
        d.reset_interval();
        d.on_datagram(Dir::S2C, &msg(5, true), us(700));
        let n = npm(&d);
        assert_eq!((n.srt_us, n.srt_count), (Some(700), 1));
    }
}
