//! Counters of one worker's L7 parsing, summed across workers when read:
//! what was found, and every refusal by its reason (hostile or broken
//! input is counted, never followed past its bound).

use crate::stream::Loss;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L7Stats {
    /// Flows that got per-flow L7 state.
    pub flows: u64,
    /// Flows refused state because the worker's pool was full.
    pub flows_refused: u64,
    pub tls_client_hellos: u64,
    pub tls_server_hellos: u64,
    /// A handshake message declaring more than the reassembly bound.
    pub tls_too_long: u64,
    /// A hello that did not parse.
    pub tls_malformed: u64,
    /// A direction that did not start with the hello expected.
    pub tls_unexpected: u64,
    /// A server_name list of more than one name (RFC 6066 §3).
    pub tls_sni_refused: u64,
    /// QUIC Initial packets decrypted.
    pub quic_initials: u64,
    /// Initial packets whose AEAD tag did not verify (with the keys of
    /// the flow's first Destination Connection ID and of their own).
    pub quic_bad_tag: u64,
    /// Initial packets or CRYPTO frames that did not parse.
    pub quic_malformed: u64,
    pub quic_client_hellos: u64,
    pub http_requests: u64,
    pub http_responses: u64,
    /// A head (request or status line and headers) that did not parse.
    pub http_malformed: u64,
    /// More requests awaiting responses than the flow keeps.
    pub http_pending_overflow: u64,
    pub dns_messages: u64,
    /// Names refused: a compression loop or forward pointer, a pointer
    /// out of bounds, a reserved label type, over 255 bytes.
    pub dns_name_refused: u64,
    pub dns_malformed: u64,
    /// Streams lost, by reason.
    pub stream_gap: u64,
    /// A head, hello or message over the reassembly bound.
    pub stream_overflow: u64,
    pub stream_snap: u64,
    pub stream_no_buffer: u64,
    pub stream_big_skip: u64,
    /// A parser found bytes it does not parse where a message should
    /// start (the stream resyncs at a later segment that starts one).
    pub stream_parse: u64,
}

impl L7Stats {
    pub(crate) fn lost(&mut self, why: Loss) {
        let c = match why {
            Loss::Gap => &mut self.stream_gap,
            Loss::Overflow => &mut self.stream_overflow,
            Loss::Snap => &mut self.stream_snap,
            Loss::NoBuffer => &mut self.stream_no_buffer,
            Loss::BigSkip => &mut self.stream_big_skip,
            Loss::Parse => &mut self.stream_parse,
        };
        *c += 1;
    }

    /// Adds another worker's counters.
    pub fn add(&mut self, o: &L7Stats) {
        let a = self.as_array_mut();
        for (x, y) in a.into_iter().zip(o.as_array()) {
            *x += y;
        }
    }

    /// (name, value) of every counter, for logs and the metrics endpoint.
    pub fn named(&self) -> [(&'static str, u64); COUNTERS] {
        let v = self.as_array();
        let mut out = [("", 0); COUNTERS];
        for (i, n) in NAMES.iter().enumerate() {
            out[i] = (n, v[i]);
        }
        out
    }

    fn as_array(&self) -> [u64; COUNTERS] {
        [
            self.flows,
            self.flows_refused,
            self.tls_client_hellos,
            self.tls_server_hellos,
            self.tls_too_long,
            self.tls_malformed,
            self.tls_unexpected,
            self.tls_sni_refused,
            self.quic_initials,
            self.quic_bad_tag,
            self.quic_malformed,
            self.quic_client_hellos,
            self.http_requests,
            self.http_responses,
            self.http_malformed,
            self.http_pending_overflow,
            self.dns_messages,
            self.dns_name_refused,
            self.dns_malformed,
            self.stream_gap,
            self.stream_overflow,
            self.stream_snap,
            self.stream_no_buffer,
            self.stream_big_skip,
            self.stream_parse,
        ]
    }

    fn as_array_mut(&mut self) -> [&mut u64; COUNTERS] {
        [
            &mut self.flows,
            &mut self.flows_refused,
            &mut self.tls_client_hellos,
            &mut self.tls_server_hellos,
            &mut self.tls_too_long,
            &mut self.tls_malformed,
            &mut self.tls_unexpected,
            &mut self.tls_sni_refused,
            &mut self.quic_initials,
            &mut self.quic_bad_tag,
            &mut self.quic_malformed,
            &mut self.quic_client_hellos,
            &mut self.http_requests,
            &mut self.http_responses,
            &mut self.http_malformed,
            &mut self.http_pending_overflow,
            &mut self.dns_messages,
            &mut self.dns_name_refused,
            &mut self.dns_malformed,
            &mut self.stream_gap,
            &mut self.stream_overflow,
            &mut self.stream_snap,
            &mut self.stream_no_buffer,
            &mut self.stream_big_skip,
            &mut self.stream_parse,
        ]
    }
}

/// The counters that are not zero, `name n` separated by commas.
impl std::fmt::Display for L7Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (name, n) in self.named().iter().filter(|(_, n)| *n > 0) {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{name} {n}")?;
        }
        Ok(())
    }
}

/// Counters in [`L7Stats`].
pub const COUNTERS: usize = 25;

const NAMES: [&str; COUNTERS] = [
    "flows",
    "flows_refused",
    "tls_client_hellos",
    "tls_server_hellos",
    "tls_too_long",
    "tls_malformed",
    "tls_unexpected",
    "tls_sni_refused",
    "quic_initials",
    "quic_bad_tag",
    "quic_malformed",
    "quic_client_hellos",
    "http_requests",
    "http_responses",
    "http_malformed",
    "http_pending_overflow",
    "dns_messages",
    "dns_name_refused",
    "dns_malformed",
    "stream_gap",
    "stream_overflow",
    "stream_snap",
    "stream_no_buffer",
    "stream_big_skip",
    "stream_parse",
];
