//! The L7 information elements (issue 23; docs/exporter.md "What each flow
//! is"): IANA elements where the registry has them (applicationName,
//! httpRequestMethod/Host/Target, httpStatusCode, httpUserAgent), the rest
//! enterprise elements under the configured PEN in block 1400–1449, and,
//! in the ntop profile, nProbe's own elements too (its L7 protocol name,
//! SSL server name, HTTP and DNS elements).
//!
//! Strings are variable-length in IPFIX (RFC 7011 §7: empty when absent);
//! NetFlow v9 has no variable length, so there they are fixed-length,
//! NUL-padded, and cut to [`v9_len`]. Numbers absent from a record are all
//! ones ([`crate::ie::NOT_MEASURED`] and its narrower kin).

/// What fills an L7 field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L7Value {
    App,
    TlsSni,
    TlsAlpn,
    TlsVersion,
    TlsCipher,
    TlsJa3,
    /// The JA4 of a TLS or a QUIC ClientHello.
    Ja4,
    TlsCertName,
    QuicVersion,
    QuicSni,
    QuicAlpn,
    HttpMethod,
    HttpHost,
    HttpTarget,
    HttpStatus,
    HttpUserAgent,
    HttpRequests,
    /// Responses of class `n`xx this interval, n in 1..=5.
    HttpClass(u8),
    HttpSrtMin,
    HttpSrtMean,
    HttpSrtMax,
    DnsQname,
    DnsQtype,
    DnsQclass,
    DnsRcode,
    DnsAnswers,
    DnsAddrV4,
    DnsAddrV6,
    /// Responses this interval: 0 NOERROR, 1 NXDOMAIN, 2 SERVFAIL, 3 other.
    DnsRcodes(u8),
}

/// How a value is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A string: variable length in IPFIX, fixed in NetFlow v9.
    Text,
    /// Unsigned integer of this many bytes.
    Uint(u16),
    /// Raw bytes of this many.
    Bytes(u16),
}

impl L7Value {
    pub fn kind(self) -> Kind {
        use L7Value::*;
        match self {
            App | TlsSni | TlsAlpn | TlsCertName | QuicSni | QuicAlpn | HttpMethod | HttpHost
            | HttpTarget | HttpUserAgent | DnsQname => Kind::Text,
            TlsVersion | TlsCipher | HttpStatus | DnsQtype | DnsQclass | DnsAnswers => {
                Kind::Uint(2)
            }
            QuicVersion | HttpRequests | HttpClass(_) | HttpSrtMin | HttpSrtMean | HttpSrtMax
            | DnsRcodes(_) => Kind::Uint(4),
            DnsRcode => Kind::Uint(1),
            TlsJa3 => Kind::Bytes(16),
            Ja4 => Kind::Bytes(36),
            DnsAddrV4 => Kind::Bytes(4),
            DnsAddrV6 => Kind::Bytes(16),
        }
    }
}

/// The fixed length a string gets in NetFlow v9.
/// Names (server names, hosts, DNS questions, certificate names) keep 112
/// bytes; the rest what their values need, the target and User-Agent 48:
/// so the ntop profile's HTTP record, its strings duplicated under nProbe's
/// IDs, fits a 1472-byte message twice over (uniflow mode).
pub fn v9_len(v: L7Value) -> u16 {
    match v {
        L7Value::App | L7Value::HttpMethod => 16,
        L7Value::TlsJa3 => 32,
        L7Value::Ja4 => 48,
        L7Value::HttpTarget | L7Value::HttpUserAgent => 48,
        L7Value::TlsAlpn | L7Value::QuicAlpn => 64,
        _ => 112,
    }
}

/// One element: where it lives and what it says, the single source of
/// `docs/exporter.md`'s L7 table and the pmacct primitives.
pub struct L7Element {
    /// 0: IANA; else under the configured PEN.
    pub enterprise: bool,
    pub id: u16,
    pub name: &'static str,
    /// pmacct `aggregate_primitives` name (the JSON key of the same value).
    pub primitive: &'static str,
    pub data_type: &'static str,
    pub value: L7Value,
    pub description: &'static str,
}

const fn e(
    id: u16,
    name: &'static str,
    primitive: &'static str,
    data_type: &'static str,
    value: L7Value,
    description: &'static str,
) -> L7Element {
    L7Element {
        enterprise: true,
        id,
        name,
        primitive,
        data_type,
        value,
        description,
    }
}

const fn iana(
    id: u16,
    name: &'static str,
    primitive: &'static str,
    data_type: &'static str,
    value: L7Value,
    description: &'static str,
) -> L7Element {
    L7Element {
        enterprise: false,
        id,
        name,
        primitive,
        data_type,
        value,
        description,
    }
}

use L7Value::*;

/// Every L7 element, in the order templates carry them.
pub const L7_ELEMENTS: &[L7Element] = &[
    iana(
        96,
        "applicationName",
        "app",
        "string",
        App,
        "The application label (`app`): tls, tls/h2, quic/h3, http, dns, ssh, …, unknown",
    ),
    e(
        1401,
        "tlsServerName",
        "tls_sni",
        "string",
        TlsSni,
        "server_name of the first ClientHello",
    ),
    e(
        1402,
        "tlsAlpnOffered",
        "tls_alpn",
        "string",
        TlsAlpn,
        "ALPN protocols the client offered, comma-separated",
    ),
    e(
        1403,
        "tlsVersion",
        "tls_version",
        "unsigned16",
        TlsVersion,
        "Negotiated version (0x0304 = TLS 1.3); 65535 when not seen",
    ),
    e(
        1404,
        "tlsCipherSuite",
        "tls_cipher",
        "unsigned16",
        TlsCipher,
        "Cipher suite the ServerHello chose; 65535 when not seen",
    ),
    e(
        1405,
        "tlsJa3",
        "tls_ja3",
        "octetArray",
        TlsJa3,
        "JA3 MD5 (16 bytes; zero when not seen)",
    ),
    e(
        1406,
        "tlsJa4",
        "tls_ja4",
        "string",
        Ja4,
        "JA4 of the ClientHello (TLS or QUIC), 36 characters; zero bytes when not seen",
    ),
    e(
        1407,
        "tlsCertificateName",
        "tls_cert_cn",
        "string",
        TlsCertName,
        "Server certificate subject CN, else first SAN dNSName (TLS <= 1.2)",
    ),
    e(
        1410,
        "quicVersion",
        "quic_version",
        "unsigned32",
        QuicVersion,
        "QUIC version of the long header (1 = RFC 9000, 0x6b3343cf = RFC 9369)",
    ),
    e(
        1411,
        "quicServerName",
        "quic_sni",
        "string",
        QuicSni,
        "server_name of the ClientHello in the client's Initials",
    ),
    e(
        1412,
        "quicAlpnOffered",
        "quic_alpn",
        "string",
        QuicAlpn,
        "ALPN protocols the QUIC client offered, comma-separated",
    ),
    iana(
        459,
        "httpRequestMethod",
        "http_method",
        "string",
        HttpMethod,
        "Method of the flow's first request",
    ),
    iana(
        460,
        "httpRequestHost",
        "http_host",
        "string",
        HttpHost,
        "Host header of the flow's first request",
    ),
    iana(
        461,
        "httpRequestTarget",
        "http_target",
        "string",
        HttpTarget,
        "Target (path and query) of the flow's first request, cut to [l7] http_target_len",
    ),
    iana(
        457,
        "httpStatusCode",
        "http_status",
        "unsigned16",
        HttpStatus,
        "Status of the last response; 65535 when none",
    ),
    iana(
        468,
        "httpUserAgent",
        "http_user_agent",
        "string",
        HttpUserAgent,
        "User-Agent of the first request ([l7] http_user_agent)",
    ),
    e(
        1420,
        "httpRequestCount",
        "http_requests",
        "unsigned32",
        HttpRequests,
        "Requests this interval",
    ),
    e(
        1421,
        "httpResponses1xx",
        "http_status_1xx",
        "unsigned32",
        HttpClass(1),
        "Responses 1xx this interval",
    ),
    e(
        1422,
        "httpResponses2xx",
        "http_status_2xx",
        "unsigned32",
        HttpClass(2),
        "Responses 2xx this interval",
    ),
    e(
        1423,
        "httpResponses3xx",
        "http_status_3xx",
        "unsigned32",
        HttpClass(3),
        "Responses 3xx this interval",
    ),
    e(
        1424,
        "httpResponses4xx",
        "http_status_4xx",
        "unsigned32",
        HttpClass(4),
        "Responses 4xx this interval",
    ),
    e(
        1425,
        "httpResponses5xx",
        "http_status_5xx",
        "unsigned32",
        HttpClass(5),
        "Responses 5xx this interval",
    ),
    e(
        1426,
        "httpResponseTimeMinMicroseconds",
        "http_srt_min_us",
        "unsigned32",
        HttpSrtMin,
        "Minimum request-to-response time; 4294967295 when none",
    ),
    e(
        1427,
        "httpResponseTimeMeanMicroseconds",
        "http_srt_mean_us",
        "unsigned32",
        HttpSrtMean,
        "Mean request-to-response time; 4294967295 when none",
    ),
    e(
        1428,
        "httpResponseTimeMaxMicroseconds",
        "http_srt_max_us",
        "unsigned32",
        HttpSrtMax,
        "Maximum request-to-response time; 4294967295 when none",
    ),
    e(
        1430,
        "dnsQueryName",
        "dns_qname",
        "string",
        DnsQname,
        "First question's name",
    ),
    e(
        1431,
        "dnsQueryType",
        "dns_qtype",
        "unsigned16",
        DnsQtype,
        "First question's type; 65535 when none",
    ),
    e(
        1432,
        "dnsQueryClass",
        "dns_qclass",
        "unsigned16",
        DnsQclass,
        "First question's class; 65535 when none",
    ),
    e(
        1433,
        "dnsResponseCode",
        "dns_rcode",
        "unsigned8",
        DnsRcode,
        "First response's RCODE; 255 when no response",
    ),
    e(
        1434,
        "dnsAnswerCount",
        "dns_answers",
        "unsigned16",
        DnsAnswers,
        "First response's answer count; 65535 when no response",
    ),
    e(
        1435,
        "dnsAnswerIpv4Address",
        "dns_addr_v4",
        "ipv4Address",
        DnsAddrV4,
        "First A answer of the first response; 0.0.0.0 when none",
    ),
    e(
        1436,
        "dnsAnswerIpv6Address",
        "dns_addr_v6",
        "ipv6Address",
        DnsAddrV6,
        "First AAAA answer of the first response; :: when none",
    ),
    e(
        1437,
        "dnsResponsesNoError",
        "dns_rcode_noerror",
        "unsigned32",
        DnsRcodes(0),
        "Responses with RCODE NOERROR this interval",
    ),
    e(
        1438,
        "dnsResponsesNxDomain",
        "dns_rcode_nxdomain",
        "unsigned32",
        DnsRcodes(1),
        "Responses with RCODE NXDOMAIN this interval",
    ),
    e(
        1439,
        "dnsResponsesServFail",
        "dns_rcode_servfail",
        "unsigned32",
        DnsRcodes(2),
        "Responses with RCODE SERVFAIL this interval",
    ),
    e(
        1440,
        "dnsResponsesOther",
        "dns_rcode_other",
        "unsigned32",
        DnsRcodes(3),
        "Responses with any other RCODE this interval",
    ),
];

/// nProbe's elements (PEN 35632; v9 type 57472 + id) the ntop profile
/// adds, and what fills them.
pub const NTOP_L7: &[(u16, L7Value)] = &[
    (119, App),           // L7_PROTO_NAME
    (188, TlsSni),        // SSL_SERVER_NAME (QUIC's too)
    (360, HttpMethod),    // HTTP_METHOD
    (187, HttpHost),      // HTTP_HOST
    (180, HttpTarget),    // HTTP_URL
    (181, HttpStatus),    // HTTP_RET_CODE
    (183, HttpUserAgent), // HTTP_UA
    (205, DnsQname),      // DNS_QUERY
    (207, DnsQtype),      // DNS_QUERY_TYPE
    (208, DnsRcode),      // DNS_RET_CODE
    (209, DnsAnswers),    // DNS_NUM_ANSWERS
];

/// The element of `v` in [`L7_ELEMENTS`].
pub fn element(v: L7Value) -> Option<&'static L7Element> {
    L7_ELEMENTS.iter().find(|e| e.value == v)
}
