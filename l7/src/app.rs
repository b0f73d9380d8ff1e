//! The application label of a flow (`app`), decided from payload bytes: the
//! first payload of a direction names the protocol; the port only breaks a
//! tie (a DNS message that parses but is not exact is DNS on port 53, not
//! elsewhere). ALPN refines TLS and QUIC (`tls/h2`, `quic/h3`).

use crate::dns;

/// What a flow was found to be. One byte per flow; `Unknown` until a
/// payload matched something.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum App {
    #[default]
    Unknown = 0,
    Tls,
    /// TLS whose ALPN is `h2` (selected by the server when visible, else
    /// the client's first offer).
    TlsH2,
    /// TLS whose ALPN is `http/1.1`.
    TlsHttp1,
    /// TLS whose ALPN is `dot` (DNS over TLS, RFC 7858).
    TlsDot,
    Quic,
    /// QUIC whose first offered ALPN is `h3`.
    QuicH3,
    /// QUIC whose first offered ALPN is `doq` (DNS over QUIC, RFC 9250).
    QuicDoq,
    Http,
    /// HTTP/2 with prior knowledge (the connection preface in clear).
    Http2,
    Dns,
    Ssh,
    Smb,
}

impl App {
    pub const ALL: [App; 13] = [
        App::Unknown,
        App::Tls,
        App::TlsH2,
        App::TlsHttp1,
        App::TlsDot,
        App::Quic,
        App::QuicH3,
        App::QuicDoq,
        App::Http,
        App::Http2,
        App::Dns,
        App::Ssh,
        App::Smb,
    ];

    /// The label as exported (`app` in JSON, the L7 elements in IPFIX).
    pub fn as_str(self) -> &'static str {
        match self {
            App::Unknown => "unknown",
            App::Tls => "tls",
            App::TlsH2 => "tls/h2",
            App::TlsHttp1 => "tls/http/1.1",
            App::TlsDot => "tls/dot",
            App::Quic => "quic",
            App::QuicH3 => "quic/h3",
            App::QuicDoq => "quic/doq",
            App::Http => "http",
            App::Http2 => "http2",
            App::Dns => "dns",
            App::Ssh => "ssh",
            App::Smb => "smb",
        }
    }

    pub fn from_u8(v: u8) -> App {
        App::ALL.get(usize::from(v)).copied().unwrap_or_default()
    }

    /// The TLS or QUIC label refined by an ALPN protocol name.
    pub fn refine(self, alpn: &[u8]) -> App {
        match (self, alpn) {
            (App::Tls | App::TlsH2 | App::TlsHttp1 | App::TlsDot, b"h2") => App::TlsH2,
            (App::Tls | App::TlsH2 | App::TlsHttp1 | App::TlsDot, b"http/1.1") => App::TlsHttp1,
            (App::Tls | App::TlsH2 | App::TlsHttp1 | App::TlsDot, b"dot") => App::TlsDot,
            (App::Quic | App::QuicH3 | App::QuicDoq, b"h3") => App::QuicH3,
            (App::Quic | App::QuicH3 | App::QuicDoq, b"doq") => App::QuicDoq,
            (a, _) => a,
        }
    }
}

/// What a first payload looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guess {
    /// A TLS handshake record (type 22, version 3.x).
    Tls,
    /// An HTTP/1.x request line (client) or status line (server).
    Http,
    /// The HTTP/2 connection preface.
    Http2,
    /// A DNS message (UDP) or a length-prefixed one (TCP).
    Dns,
    /// A QUIC long-header Initial of a version we can read, or another
    /// long-header version (labelled, not decrypted).
    Quic,
    Ssh,
    Smb,
    Nothing,
}

/// HTTP/1.x request methods recognised at the start of a client stream
/// (RFC 9110 §9 and WebDAV's common ones).
const METHODS: &[&[u8]] = &[
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"PUT ",
    b"DELETE ",
    b"OPTIONS ",
    b"PATCH ",
    b"CONNECT ",
    b"TRACE ",
    b"PROPFIND ",
    b"PROPPATCH ",
    b"MKCOL ",
    b"COPY ",
    b"MOVE ",
    b"LOCK ",
    b"UNLOCK ",
    b"REPORT ",
];

/// A request line's start: a method and, when the line's end is in
/// `p`, ` HTTP/1.` in it (a line without a version is some other
/// protocol's command, not HTTP/1.x).
pub(crate) fn is_request_start(p: &[u8]) -> bool {
    // Every method starts with a capital letter: most payloads that are
    // not HTTP (binary, TLS, zeros) are refused on their first byte
    // instead of by seventeen comparisons.
    if !p.first().is_some_and(u8::is_ascii_uppercase) || !METHODS.iter().any(|m| p.starts_with(m)) {
        return false;
    }
    match p.iter().position(|b| *b == b'\n') {
        Some(eol) => p[..eol].windows(8).any(|w| w == b" HTTP/1."),
        None => true,
    }
}

pub(crate) fn is_response_start(p: &[u8]) -> bool {
    p.starts_with(b"HTTP/1.")
}

/// The DNS ports that break a tie: 53, mDNS 5353, LLMNR 5355.
pub(crate) fn dns_port(a: u16, b: u16) -> bool {
    [53, 5353, 5355].iter().any(|p| *p == a || *p == b)
}

/// The first payload of a TCP stream direction.
pub fn guess_tcp(p: &[u8], ports: (u16, u16)) -> Guess {
    match p {
        [22, 3, minor, ..] if *minor <= 4 => Guess::Tls,
        [b'S', b'S', b'H', b'-', ..] => Guess::Ssh,
        // NetBIOS session message (RFC 1002 §4.3.1) carrying SMB1/2/3.
        [0, _, _, _, 0xFD..=0xFF, b'S', b'M', b'B', ..] => Guess::Smb,
        _ if p.starts_with(b"PRI * HTTP/2.0\r\n") => Guess::Http2,
        _ if is_request_start(p) || is_response_start(p) => Guess::Http,
        [hi, lo, rest @ ..] => {
            // DNS over TCP (RFC 1035 §4.2.2): a 2-byte length, then the
            // message; the whole message in this segment (and exact), or
            // a DNS port to break the tie.
            let len = usize::from(u16::from_be_bytes([*hi, *lo]));
            let whole = rest.len() >= len;
            let port = dns_port(ports.0, ports.1);
            let msg = &rest[..rest.len().min(len)];
            if len >= dns::HEADER_LEN && (whole || port) && dns::looks_like_dns(msg, port) {
                Guess::Dns
            } else {
                Guess::Nothing
            }
        }
        _ => Guess::Nothing,
    }
}

/// NetBIOS name service (RFC 1002 §4.2) uses DNS's message format on
/// port 137: there the port breaks the tie the other way.
fn netbios_ns(a: u16, b: u16) -> bool {
    (a == 137 || b == 137) && !dns_port(a, b)
}

/// The first payload of a UDP flow direction.
pub fn guess_udp(p: &[u8], ports: (u16, u16)) -> Guess {
    if crate::quic::looks_like_long_header(p) {
        return Guess::Quic;
    }
    if !netbios_ns(ports.0, ports.1) && dns::looks_like_dns(p, dns_port(ports.0, ports.1)) {
        return Guess::Dns;
    }
    Guess::Nothing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_labels_round_trip() {
        for a in App::ALL {
            assert_eq!(App::from_u8(a as u8), a);
        }
        assert_eq!(App::from_u8(200), App::Unknown);
        assert_eq!(App::Tls.refine(b"h2").as_str(), "tls/h2");
        assert_eq!(App::Quic.refine(b"h3").as_str(), "quic/h3");
        assert_eq!(App::Tls.refine(b"spdy/3"), App::Tls);
        assert_eq!(App::Http.refine(b"h2"), App::Http);
    }

    #[test]
    fn app_every_method_passes_the_first_byte_check() {
        for m in METHODS {
            assert!(m[0].is_ascii_uppercase(), "{m:?}");
            let mut line = m.to_vec();
            line.extend_from_slice(b"/ HTTP/1.1\r\n");
            assert!(is_request_start(&line), "{m:?}");
        }
        assert!(!is_request_start(b"get / HTTP/1.1\r\n"));
        assert!(!is_request_start(&[0; 64]));
    }

    #[test]
    fn app_guess_from_first_payload() {
        let p = (40000, 8443);
        assert_eq!(guess_tcp(&[22, 3, 1, 0, 200, 1], p), Guess::Tls);
        assert_eq!(guess_tcp(b"GET / HTTP/1.1\r\n", p), Guess::Http);
        assert_eq!(guess_tcp(b"HTTP/1.1 200 OK\r\n", p), Guess::Http);
        assert_eq!(guess_tcp(b"SSH-2.0-OpenSSH_9.2\r\n", p), Guess::Ssh);
        assert_eq!(guess_tcp(b"\0\0\0\x45\xfeSMB@\0", p), Guess::Smb);
        assert_eq!(
            guess_tcp(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", p),
            Guess::Http2
        );
        assert_eq!(guess_tcp(&[0u8; 42], (1024, 80)), Guess::Nothing);
        assert_eq!(guess_tcp(b"GETX / HTTP/1.1", p), Guess::Nothing);
        assert_eq!(guess_tcp(b"GET 20000\n", p), Guess::Nothing, "not HTTP/1.x");
        assert_eq!(
            guess_tcp(b"GET /a-long-url-cut-by-the-segm", p),
            Guess::Http
        );
        assert_eq!(guess_udp(&[0u8; 42], (1024, 53)), Guess::Nothing);
        let (q, _) = crate::dns::tests::query_and_answer("wpad", 32);
        assert_eq!(
            guess_udp(&q, (40000, 4000)),
            Guess::Dns,
            "exact: DNS on any port"
        );
        assert_eq!(guess_udp(&q, (137, 137)), Guess::Nothing, "NetBIOS NS");
    }
}
