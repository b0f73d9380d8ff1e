//! A DNS flow's fields, over UDP datagrams or TCP messages: the first
//! question, the first response's code, answer count and first address,
//! and the responses' codes counted per interval. Every message's header
//! is read (cheap); the question and answers only while still wanted.

use crate::dns::{self, DnsError, Header};
use crate::fields::{DnsInfo, MAX_NAME, Name, rcode_slot, str_of};
use crate::stats::L7Stats;
use crate::stream::Eat;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DnsState {
    qname: Option<Name>,
    qtype: Option<u16>,
    qclass: Option<u16>,
    rcode: Option<u8>,
    answers: Option<u16>,
    answer_addr: Option<std::net::IpAddr>,
    rcodes: [u32; 4],
}

impl DnsState {
    /// One DNS message.
    pub fn on_message(&mut self, m: &[u8], stats: &mut L7Stats) {
        let Some(h) = Header::parse(m) else {
            stats.dns_malformed += 1;
            return;
        };
        stats.dns_messages += 1;
        let first_response = h.is_response() && self.rcode.is_none();
        if h.is_response() {
            self.rcodes[rcode_slot(h.rcode())] =
                self.rcodes[rcode_slot(h.rcode())].saturating_add(1);
        }
        if self.qname.is_some() && !first_response {
            return;
        }
        let mut name = Name::default();
        match dns::parse::<MAX_NAME>(m, &mut name) {
            Ok(msg) => {
                if self.qname.is_none()
                    && let Some((t, c)) = msg.question
                {
                    self.qname = Some(name);
                    (self.qtype, self.qclass) = (Some(t), Some(c));
                }
                if first_response {
                    self.rcode = Some(h.rcode());
                    self.answers = Some(h.ancount);
                    self.answer_addr = msg.first_addr;
                }
            }
            Err(e) => {
                if let DnsError::Name(_) = e {
                    stats.dns_name_refused += 1;
                } else {
                    stats.dns_malformed += 1;
                }
                if first_response {
                    self.rcode = Some(h.rcode());
                    self.answers = Some(h.ancount);
                }
            }
        }
    }

    /// The consumer of a DNS-over-TCP stream: length-prefixed messages
    /// (RFC 1035 §4.2.2), each read whole (within the bound).
    pub fn tcp_eat(&mut self, b: &[u8], bound: usize, stats: &mut L7Stats) -> Eat {
        let [hi, lo, rest @ ..] = b else {
            return Eat::MORE;
        };
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        if len + 2 > bound {
            stats.dns_malformed += 1;
            return Eat::LOST;
        }
        match rest.get(..len) {
            Some(m) => {
                self.on_message(m, stats);
                Eat::used(2 + len)
            }
            None => Eat::MORE,
        }
    }

    pub fn info(&self) -> DnsInfo {
        DnsInfo {
            qname: self.qname.as_ref().map(str_of),
            qtype: self.qtype,
            qclass: self.qclass,
            rcode: self.rcode,
            answers: self.answers,
            answer_addr: self.answer_addr,
            rcodes: self.rcodes,
        }
    }

    pub fn reset_interval(&mut self) {
        self.rcodes = [0; 4];
    }
}
