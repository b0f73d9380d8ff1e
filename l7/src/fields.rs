//! What a record carries about its flow's application: one of four field
//! sets, boxed, with its strings as exact-size heap slices, so a record
//! without L7 fields costs a null pointer and one with them about a
//! hundred bytes plus its names (`L7Fields::heap_bytes`). The parsers keep
//! their names inline ([`Text`]) while they work and make these once a
//! flow's fields are found or a record is built. Identifying fields
//! (names, the first request) carry over from interval to interval; counts
//! and response-time statistics are per interval, like the record's other
//! counters.

use std::net::IpAddr;

use crate::text::Text;
use crate::tls::fingerprint::Ja4;

/// Longest name kept: a DNS name, an SNI, a Host header, a certificate
/// name (a DNS name is at most 253 characters; longer values are cut).
pub const MAX_NAME: usize = 255;
/// ALPN protocol list bytes kept (wire form, cut at an entry boundary).
pub const MAX_ALPN: usize = 255;
/// HTTP method bytes kept.
pub const MAX_METHOD: usize = 16;
/// The longest HTTP target the configuration may ask to keep.
pub const MAX_TARGET: usize = 1024;
/// HTTP User-Agent bytes kept.
pub const MAX_USER_AGENT: usize = 255;

/// A name as the parsers keep it while they work.
pub type Name = Text<MAX_NAME>;

/// A string of a record: the wire bytes, exact size (see
/// [`Shown`](crate::text::Shown) for how outputs write them).
pub type Str = Box<[u8]>;

/// An inline text as a record string (`None` when empty).
pub fn str_of<const N: usize>(t: &Text<N>) -> Str {
    t.as_bytes().into()
}

/// An ALPN ProtocolNameList (RFC 7301 §3.1) as offered, each entry with
/// its 1-byte length, cut after the last entry that fits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Alpn(Text<MAX_ALPN>);

/// The protocol names of an ALPN list in wire form.
pub fn alpn_names(wire: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let n = usize::from(*wire.get(at)?);
        let p = wire.get(at + 1..at + 1 + n)?;
        at += 1 + n;
        Some(p)
    })
}

impl Alpn {
    /// Keeps the whole entries of `list` that fit; `None` for an empty
    /// list.
    pub fn from_wire(list: &[u8]) -> Option<Alpn> {
        let mut end = 0;
        let mut at = 0;
        while let Some(&n) = list.get(at) {
            let next = at + 1 + usize::from(n);
            if next > list.len() || next > MAX_ALPN {
                break;
            }
            at = next;
            end = next;
        }
        (end > 0).then(|| Alpn(Text::cut(&list[..end], MAX_ALPN).0))
    }

    /// The protocol names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        alpn_names(self.0.as_bytes())
    }

    pub fn first(&self) -> Option<&[u8]> {
        self.iter().next()
    }

    /// The wire form (each name with its length byte).
    pub fn wire(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// TLS over TCP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// server_name of the first ClientHello.
    pub sni: Option<Str>,
    /// ALPN protocols the client offered, in wire form ([`alpn_names`]).
    pub alpn: Option<Str>,
    /// Negotiated version: the ServerHello's supported_versions choice,
    /// else its legacy version (0x0304 = TLS 1.3).
    pub version: Option<u16>,
    /// The cipher suite the ServerHello chose.
    pub cipher: Option<u16>,
    pub ja3: Option<[u8; 16]>,
    pub ja4: Option<Ja4>,
    /// The server certificate's subject CN, else its first SAN dNSName
    /// (TLS ≤ 1.2; TLS 1.3 encrypts the certificate).
    pub cert_cn: Option<Str>,
}

/// QUIC, from the client's Initial packets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuicInfo {
    /// The long header's version (1 = RFC 9000, 0x6b3343cf = RFC 9369).
    pub version: u32,
    pub sni: Option<Str>,
    /// ALPN offered, wire form.
    pub alpn: Option<Str>,
    /// JA4 with the `q` prefix.
    pub ja4: Option<Ja4>,
}

/// Request→response times of one interval's HTTP transactions, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrtSummary {
    pub count: u32,
    sum_ns: u64,
    min_us: u32,
    max_us: u32,
}

/// ns → µs, rounded half up (as the data plane's `time::ns_to_us`).
pub(crate) fn us(ns: u64) -> u32 {
    u32::try_from(ns / 1_000 + u64::from(ns % 1_000 >= 500)).unwrap_or(u32::MAX)
}

impl SrtSummary {
    pub fn add(&mut self, ns: u64) {
        let v = us(ns);
        if self.count == 0 {
            (self.min_us, self.max_us) = (v, v);
        } else {
            self.min_us = self.min_us.min(v);
            self.max_us = self.max_us.max(v);
        }
        self.count = self.count.saturating_add(1);
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    pub fn min_us(&self) -> Option<u32> {
        (self.count > 0).then_some(self.min_us)
    }

    pub fn max_us(&self) -> Option<u32> {
        (self.count > 0).then_some(self.max_us)
    }

    pub fn mean_us(&self) -> Option<u32> {
        (self.count > 0).then(|| us(self.sum_ns / u64::from(self.count)))
    }
}

/// HTTP/1.x.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpInfo {
    /// The flow's first request: method, Host header, request target (cut
    /// to the configured length).
    pub method: Option<Str>,
    pub host: Option<Str>,
    pub target: Option<Str>,
    /// The first request's User-Agent, when configured.
    pub user_agent: Option<Str>,
    /// The last response's status code.
    pub status: Option<u16>,
    /// Requests seen this interval.
    pub requests: u32,
    /// Responses this interval by status class: 1xx … 5xx.
    pub status_class: [u32; 5],
    /// Per-transaction response times this interval.
    pub srt: SrtSummary,
}

/// DNS over UDP or TCP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsInfo {
    /// The first question seen (of a query, or of a response when its
    /// query was not seen).
    pub qname: Option<Str>,
    pub qtype: Option<u16>,
    pub qclass: Option<u16>,
    /// The first response's RCODE, answer count and first A/AAAA.
    pub rcode: Option<u8>,
    pub answers: Option<u16>,
    pub answer_addr: Option<IpAddr>,
    /// Responses this interval by RCODE: NOERROR, NXDOMAIN, SERVFAIL,
    /// any other.
    pub rcodes: [u32; 4],
}

/// The index of an RCODE in [`DnsInfo::rcodes`].
pub fn rcode_slot(rcode: u8) -> usize {
    match rcode {
        0 => 0,
        3 => 1,
        2 => 2,
        _ => 3,
    }
}

/// The application fields of one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L7Fields {
    Tls(Box<TlsInfo>),
    Quic(Box<QuicInfo>),
    Http(Box<HttpInfo>),
    Dns(Box<DnsInfo>),
}

fn len(s: &Option<Str>) -> usize {
    s.as_ref().map_or(0, |s| s.len())
}

impl L7Fields {
    /// Heap bytes this value holds (the boxed set and its strings).
    pub fn heap_bytes(&self) -> usize {
        match self {
            L7Fields::Tls(t) => size_of::<TlsInfo>() + len(&t.sni) + len(&t.alpn) + len(&t.cert_cn),
            L7Fields::Quic(q) => size_of::<QuicInfo>() + len(&q.sni) + len(&q.alpn),
            L7Fields::Http(h) => {
                size_of::<HttpInfo>()
                    + len(&h.method)
                    + len(&h.host)
                    + len(&h.target)
                    + len(&h.user_agent)
            }
            L7Fields::Dns(d) => size_of::<DnsInfo>() + len(&d.qname),
        }
    }

    pub fn tls(&self) -> Option<&TlsInfo> {
        match self {
            L7Fields::Tls(t) => Some(t),
            _ => None,
        }
    }

    pub fn quic(&self) -> Option<&QuicInfo> {
        match self {
            L7Fields::Quic(q) => Some(q),
            _ => None,
        }
    }

    pub fn http(&self) -> Option<&HttpInfo> {
        match self {
            L7Fields::Http(h) => Some(h),
            _ => None,
        }
    }

    pub fn dns(&self) -> Option<&DnsInfo> {
        match self {
            L7Fields::Dns(d) => Some(d),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_alpn_keeps_whole_entries() {
        let a = Alpn::from_wire(b"\x02h2\x08http/1.1").unwrap();
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![&b"h2"[..], b"http/1.1"]);
        assert_eq!(a.first(), Some(&b"h2"[..]));
        let a = Alpn::from_wire(b"\x02h2\x09http/1.1").unwrap();
        assert_eq!(a.iter().count(), 1, "a cut entry is dropped");
        assert_eq!(Alpn::from_wire(b""), None);
        let long: Vec<u8> = std::iter::repeat_n(b"\x63".iter().copied().chain([b'a'; 99]), 3)
            .flatten()
            .collect();
        let a = Alpn::from_wire(&long).unwrap();
        assert_eq!(
            a.iter().count(),
            2,
            "three 100-byte entries: two fit in 255"
        );
    }

    #[test]
    fn fields_srt_summary_rounds_like_the_data_plane() {
        let mut s = SrtSummary::default();
        assert_eq!((s.min_us(), s.mean_us()), (None, None));
        s.add(1_499);
        s.add(2_500);
        assert_eq!(
            (s.min_us(), s.max_us(), s.mean_us()),
            (Some(1), Some(3), Some(2))
        );
        assert_eq!(s.count, 2);
    }
}
