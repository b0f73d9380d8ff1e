//! TCP three-way-handshake timing (`docs/spec/npm-metrics.md` §1): server network time
//! `t_snt` (SYN → SYN+ACK), client network time `t_cnt` (SYN+ACK → the ACK
//! completing the handshake), RTT = `t_snt + t_cnt`.
//!
//! Which packets count when the handshake is retried (the choices are tested
//! in `tcp_tests.rs`):
//! - **SYN retries**: the SYN that counts is the *last* SYN captured before
//!   the SYN+ACK that counts. A retried SYN usually means the first one (or
//!   its answer) was lost, so the server answered the later one. This is also
//!   the SYN Wireshark's `tcp.analysis.initial_rtt` measures from, so RTT
//!   equals `initial_rtt`. A SYN captured *after* that SYN+ACK only counts if
//!   another SYN+ACK follows it (then that pair is used).
//! - **SYN+ACK retries**: the SYN+ACK that counts is the *last* one captured
//!   before the handshake ACK (the ACK answers the latest SYN+ACK the client
//!   got). The server's SYN+ACK retransmission wait therefore lands in
//!   `t_snt`; in exchange `t_snt + t_cnt` is exactly handshake ACK − SYN.
//! - **Handshake ACK**: the first client→server segment with ACK and without
//!   SYN/RST after a SYN or SYN+ACK (data on it is allowed).
//! - **Missing parts** are absent (`None`), never 0: no SYN ⇒ no `t_snt` and
//!   no RTT; no ACK ⇒ no `t_cnt` and no RTT. When the SYN+ACK alone was not
//!   captured (asymmetric routing: only one direction passes the probe), RTT
//!   is still measured as ACK − SYN while `t_snt`/`t_cnt` stay absent.
//! - **Out of order**: a SYN+ACK captured before any SYN, or after the
//!   handshake ACK, or timestamps that go backwards, make the affected parts
//!   absent (and RTT with them).

use crate::time::Timestamp;

const HAVE_SYN: u8 = 1;
const HAVE_SYNACK: u8 = 1 << 1;
/// The counted SYN+ACK has a SYN captured before it (`pair_syn` valid).
const HAVE_PAIR: u8 = 1 << 2;
/// The handshake ACK was seen: no later packet changes the handshake.
const DONE: u8 = 1 << 3;
/// A SYN+ACK arrived after the handshake ACK: the order is broken.
const OUT_OF_ORDER: u8 = 1 << 4;

/// Handshake timestamps of one flow (40 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handshake {
    /// Latest SYN captured (ns).
    last_syn: u64,
    /// The SYN paired with `synack`: the last SYN captured before it.
    pair_syn: u64,
    /// The counted SYN+ACK (the latest before the handshake ACK).
    synack: u64,
    /// The handshake ACK.
    ack: u64,
    flags: u8,
}

impl Handshake {
    #[inline]
    fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    /// A client→server SYN without ACK.
    pub fn on_syn(&mut self, ts: Timestamp) {
        if self.has(DONE) {
            return;
        }
        self.last_syn = ts.as_nanos();
        self.flags |= HAVE_SYN;
    }

    /// A server→client SYN+ACK.
    pub fn on_synack(&mut self, ts: Timestamp) {
        let ts = ts.as_nanos();
        if self.has(DONE) {
            if !self.has(HAVE_SYNACK) {
                // The ACK came first: keep SYN→SYN+ACK (still measurable),
                // but the client part and RTT are out of order.
                self.flags |= OUT_OF_ORDER;
                self.record_synack(ts);
            }
            return;
        }
        self.record_synack(ts);
    }

    fn record_synack(&mut self, ts: u64) {
        self.synack = ts;
        self.flags |= HAVE_SYNACK;
        if self.has(HAVE_SYN) && self.last_syn <= ts {
            self.pair_syn = self.last_syn;
            self.flags |= HAVE_PAIR;
        } else {
            self.flags &= !HAVE_PAIR;
        }
    }

    /// A client→server segment with ACK, without SYN and RST.
    pub fn on_client_ack(&mut self, ts: Timestamp) {
        if self.has(DONE) {
            return;
        }
        // Mid-stream flows (neither SYN nor SYN+ACK seen) have no handshake;
        // marking them done keeps a late stray SYN from inventing one.
        self.ack = ts.as_nanos();
        self.flags |= DONE;
    }

    /// The handshake ACK was seen: no later SYN or ACK changes the
    /// handshake (a late SYN+ACK still may, see [`on_synack`](Self::on_synack)).
    #[inline]
    pub fn done(&self) -> bool {
        self.has(DONE)
    }

    /// `t_snt` in ns: counted SYN+ACK − the SYN before it.
    #[inline]
    pub fn server_net_ns(&self) -> Option<u64> {
        if self.flags & (HAVE_SYNACK | HAVE_PAIR) == HAVE_SYNACK | HAVE_PAIR {
            self.synack.checked_sub(self.pair_syn)
        } else {
            None
        }
    }

    /// `t_cnt` in ns: handshake ACK − counted SYN+ACK.
    #[inline]
    pub fn client_net_ns(&self) -> Option<u64> {
        if self.flags & (DONE | HAVE_SYNACK | OUT_OF_ORDER) == DONE | HAVE_SYNACK {
            self.ack.checked_sub(self.synack)
        } else {
            None
        }
    }

    /// RTT in ns: `t_snt + t_cnt`, or ACK − SYN when only the SYN+ACK was
    /// not captured.
    #[inline]
    pub fn rtt_ns(&self) -> Option<u64> {
        if self.has(OUT_OF_ORDER) {
            return None;
        }
        if self.has(HAVE_SYNACK) {
            Some(self.server_net_ns()?.saturating_add(self.client_net_ns()?))
        } else if self.flags & (DONE | HAVE_SYN) == DONE | HAVE_SYN {
            self.ack.checked_sub(self.last_syn)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Handshake;
    use crate::time::Timestamp;

    fn t(us: u64) -> Timestamp {
        Timestamp::from_micros(us)
    }

    #[test]
    fn metrics_handshake_plain() {
        let mut h = Handshake::default();
        h.on_syn(t(1000));
        assert_eq!(h.server_net_ns(), None);
        h.on_synack(t(11_000));
        assert_eq!(h.server_net_ns(), Some(10_000_000));
        assert_eq!(h.rtt_ns(), None);
        h.on_client_ack(t(16_000));
        assert_eq!(h.client_net_ns(), Some(5_000_000));
        assert_eq!(h.rtt_ns(), Some(15_000_000));
        // Later packets change nothing.
        h.on_syn(t(20_000));
        h.on_synack(t(21_000));
        h.on_client_ack(t(22_000));
        assert_eq!(h.rtt_ns(), Some(15_000_000));
    }

    #[test]
    fn metrics_handshake_timestamps_backwards_are_absent() {
        let mut h = Handshake::default();
        h.on_syn(t(5000));
        h.on_synack(t(4000)); // captured later, stamped earlier
        h.on_client_ack(t(6000));
        assert_eq!(h.server_net_ns(), None);
        assert_eq!(h.client_net_ns(), Some(2_000_000));
        assert_eq!(h.rtt_ns(), None);
    }
}
