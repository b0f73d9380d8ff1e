//! The L7 keys of a JSON record (issue 23), flat beside the others and
//! `null` when absent: `app`, then `tls_*`, `quic_*`, `http_*`, `dns_*`.
//! Names are the wire bytes as text ([`Shown`]: control bytes and invalid
//! UTF-8 as `\xNN`); versions and cipher suites are hex as tshark writes
//! them (`0x0304`, `0x1301`, `0x00000001`); JA3 is 32 hex digits; the
//! JA4 of a QUIC flow (prefix `q`) is in `tls_ja4` too.

use std::io::Write;
use std::net::IpAddr;

use serde::Serialize;
use xdprobe_l7::fields::{DnsInfo, HttpInfo, QuicInfo, Str, TlsInfo, alpn_names};
use xdprobe_l7::text::Shown;
use xdprobe_l7::{App, L7Fields};

/// The L7 part of [`super::JsonRecord`], serde's rendering of it (the
/// hand-written writer below must produce the same bytes).
#[derive(Serialize, Default)]
pub struct JsonL7 {
    pub app: Option<&'static str>,
    pub tls_sni: Option<String>,
    pub tls_alpn: Option<Vec<String>>,
    pub tls_version: Option<String>,
    pub tls_cipher: Option<String>,
    pub tls_ja3: Option<String>,
    pub tls_ja4: Option<String>,
    pub tls_cert_cn: Option<String>,
    pub quic_version: Option<String>,
    pub quic_sni: Option<String>,
    pub quic_alpn: Option<Vec<String>>,
    pub http_method: Option<String>,
    pub http_host: Option<String>,
    pub http_target: Option<String>,
    pub http_user_agent: Option<String>,
    pub http_status: Option<u16>,
    pub http_requests: Option<u32>,
    pub http_status_1xx: Option<u32>,
    pub http_status_2xx: Option<u32>,
    pub http_status_3xx: Option<u32>,
    pub http_status_4xx: Option<u32>,
    pub http_status_5xx: Option<u32>,
    pub http_srt_min_us: Option<u32>,
    pub http_srt_mean_us: Option<u32>,
    pub http_srt_max_us: Option<u32>,
    pub dns_qname: Option<String>,
    pub dns_qtype: Option<u16>,
    pub dns_qclass: Option<u16>,
    pub dns_rcode: Option<u8>,
    pub dns_answers: Option<u16>,
    pub dns_answer_addr: Option<IpAddr>,
    pub dns_rcode_noerror: Option<u32>,
    pub dns_rcode_nxdomain: Option<u32>,
    pub dns_rcode_servfail: Option<u32>,
    pub dns_rcode_other: Option<u32>,
}

fn text(s: &Option<Str>) -> Option<String> {
    s.as_ref().map(|b| Shown(b).to_string())
}

fn names(s: &Option<Str>) -> Option<Vec<String>> {
    s.as_ref()
        .map(|w| alpn_names(w).map(|p| Shown(p).to_string()).collect())
}

/// `0x` and `digits` lower-case hex digits, as tshark writes versions.
pub fn hex_code(v: u32, digits: usize) -> String {
    format!("0x{v:0digits$x}")
}

pub fn hex_bytes(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl JsonL7 {
    pub fn of(app: Option<App>, l7: Option<&L7Fields>) -> Self {
        let mut j = JsonL7 {
            app: app.map(App::as_str),
            ..JsonL7::default()
        };
        match l7 {
            Some(L7Fields::Tls(t)) => j.tls(t),
            Some(L7Fields::Quic(q)) => j.quic(q),
            Some(L7Fields::Http(h)) => j.http(h),
            Some(L7Fields::Dns(d)) => j.dns(d),
            None => {}
        }
        j
    }

    fn tls(&mut self, t: &TlsInfo) {
        self.tls_sni = text(&t.sni);
        self.tls_alpn = names(&t.alpn);
        self.tls_version = t.version.map(|v| hex_code(v.into(), 4));
        self.tls_cipher = t.cipher.map(|v| hex_code(v.into(), 4));
        self.tls_ja3 = t.ja3.map(|h| hex_bytes(&h));
        self.tls_ja4 = t.ja4.map(|f| String::from_utf8_lossy(&f).into_owned());
        self.tls_cert_cn = text(&t.cert_cn);
    }

    fn quic(&mut self, q: &QuicInfo) {
        self.quic_version = Some(hex_code(q.version, 8));
        self.quic_sni = text(&q.sni);
        self.quic_alpn = names(&q.alpn);
        self.tls_ja4 = q.ja4.map(|f| String::from_utf8_lossy(&f).into_owned());
    }

    fn http(&mut self, h: &HttpInfo) {
        self.http_method = text(&h.method);
        self.http_host = text(&h.host);
        self.http_target = text(&h.target);
        self.http_user_agent = text(&h.user_agent);
        self.http_status = h.status;
        self.http_requests = Some(h.requests);
        let [a, b, c, d, e] = h.status_class;
        self.http_status_1xx = Some(a);
        self.http_status_2xx = Some(b);
        self.http_status_3xx = Some(c);
        self.http_status_4xx = Some(d);
        self.http_status_5xx = Some(e);
        self.http_srt_min_us = h.srt.min_us();
        self.http_srt_mean_us = h.srt.mean_us();
        self.http_srt_max_us = h.srt.max_us();
    }

    fn dns(&mut self, d: &DnsInfo) {
        self.dns_qname = text(&d.qname);
        self.dns_qtype = d.qtype;
        self.dns_qclass = d.qclass;
        self.dns_rcode = d.rcode;
        self.dns_answers = d.answers;
        self.dns_answer_addr = d.answer_addr;
        let [a, b, c, e] = d.rcodes;
        self.dns_rcode_noerror = Some(a);
        self.dns_rcode_nxdomain = Some(b);
        self.dns_rcode_servfail = Some(c);
        self.dns_rcode_other = Some(e);
    }
}

/// Every L7 key after `app`, all `null`: what most records carry.
const NULLS: &[u8] = b",\"tls_sni\":null,\"tls_alpn\":null,\"tls_version\":null,\"tls_cipher\":null,\
\"tls_ja3\":null,\"tls_ja4\":null,\"tls_cert_cn\":null,\"quic_version\":null,\"quic_sni\":null,\
\"quic_alpn\":null,\"http_method\":null,\"http_host\":null,\"http_target\":null,\
\"http_user_agent\":null,\"http_status\":null,\"http_requests\":null,\"http_status_1xx\":null,\
\"http_status_2xx\":null,\"http_status_3xx\":null,\"http_status_4xx\":null,\"http_status_5xx\":null,\
\"http_srt_min_us\":null,\"http_srt_mean_us\":null,\"http_srt_max_us\":null,\"dns_qname\":null,\
\"dns_qtype\":null,\"dns_qclass\":null,\"dns_rcode\":null,\"dns_answers\":null,\
\"dns_answer_addr\":null,\"dns_rcode_noerror\":null,\"dns_rcode_nxdomain\":null,\
\"dns_rcode_servfail\":null,\"dns_rcode_other\":null";

/// Borrowed values of the L7 keys, in key order.
#[derive(Default)]
struct View<'a> {
    tls_sni: Option<&'a [u8]>,
    tls_alpn: Option<&'a [u8]>,
    tls_version: Option<u16>,
    tls_cipher: Option<u16>,
    tls_ja3: Option<&'a [u8; 16]>,
    tls_ja4: Option<&'a [u8]>,
    tls_cert_cn: Option<&'a [u8]>,
    quic_version: Option<u32>,
    quic_sni: Option<&'a [u8]>,
    quic_alpn: Option<&'a [u8]>,
    http: Option<&'a HttpInfo>,
    dns: Option<&'a DnsInfo>,
}

impl<'a> View<'a> {
    fn of(l7: &'a L7Fields) -> Self {
        let b = |s: &'a Option<Str>| s.as_deref();
        match l7 {
            L7Fields::Tls(t) => View {
                tls_sni: b(&t.sni),
                tls_alpn: b(&t.alpn),
                tls_version: t.version,
                tls_cipher: t.cipher,
                tls_ja3: t.ja3.as_ref(),
                tls_ja4: t.ja4.as_ref().map(|f| &f[..]),
                tls_cert_cn: b(&t.cert_cn),
                ..View::default()
            },
            L7Fields::Quic(q) => View {
                quic_version: Some(q.version),
                quic_sni: b(&q.sni),
                quic_alpn: b(&q.alpn),
                tls_ja4: q.ja4.as_ref().map(|f| &f[..]),
                ..View::default()
            },
            L7Fields::Http(h) => View {
                http: Some(h),
                ..View::default()
            },
            L7Fields::Dns(d) => View {
                dns: Some(d),
                ..View::default()
            },
        }
    }
}

fn key(buf: &mut Vec<u8>, k: &str) {
    buf.extend_from_slice(b",\"");
    buf.extend_from_slice(k.as_bytes());
    buf.extend_from_slice(b"\":");
}

fn null(buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"null");
}

fn text_val(buf: &mut Vec<u8>, v: &[u8]) {
    let shown = Shown(v);
    match std::str::from_utf8(v) {
        Ok(s) if shown.is_verbatim() => super::json::string(buf, s),
        _ => super::json::string(buf, &shown.to_string()),
    }
}

fn str_key(buf: &mut Vec<u8>, k: &str, v: Option<&[u8]>) {
    key(buf, k);
    match v {
        Some(v) => text_val(buf, v),
        None => null(buf),
    }
}

fn list_key(buf: &mut Vec<u8>, k: &str, v: Option<&[u8]>) {
    key(buf, k);
    let Some(w) = v else {
        return null(buf);
    };
    buf.push(b'[');
    for (i, p) in alpn_names(w).enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        text_val(buf, p);
    }
    buf.push(b']');
}

fn num_key<I: itoa::Integer>(buf: &mut Vec<u8>, n: &mut itoa::Buffer, k: &str, v: Option<I>) {
    key(buf, k);
    match v {
        Some(v) => buf.extend_from_slice(n.format(v).as_bytes()),
        None => null(buf),
    }
}

fn hex_key(buf: &mut Vec<u8>, k: &str, v: Option<u32>, digits: usize) {
    key(buf, k);
    match v {
        Some(v) => {
            let _ = write!(buf, "\"0x{v:0digits$x}\"");
        }
        None => null(buf),
    }
}

/// Appends the L7 keys (each preceded by a comma). A record without L7
/// fields is one copy of constant bytes after its label.
pub(super) fn keys(
    buf: &mut Vec<u8>,
    n: &mut itoa::Buffer,
    app: Option<App>,
    l7: Option<&L7Fields>,
) {
    buf.extend_from_slice(b",\"app\":");
    match app {
        Some(a) => {
            buf.push(b'"');
            buf.extend_from_slice(a.as_str().as_bytes());
            buf.push(b'"');
        }
        None => null(buf),
    }
    let Some(l7) = l7 else {
        buf.extend_from_slice(NULLS);
        return;
    };
    let v = View::of(l7);
    str_key(buf, "tls_sni", v.tls_sni);
    list_key(buf, "tls_alpn", v.tls_alpn);
    hex_key(buf, "tls_version", v.tls_version.map(u32::from), 4);
    hex_key(buf, "tls_cipher", v.tls_cipher.map(u32::from), 4);
    key(buf, "tls_ja3");
    match v.tls_ja3 {
        Some(h) => {
            buf.push(b'"');
            buf.extend_from_slice(hex_bytes(h).as_bytes());
            buf.push(b'"');
        }
        None => null(buf),
    }
    str_key(buf, "tls_ja4", v.tls_ja4);
    str_key(buf, "tls_cert_cn", v.tls_cert_cn);
    hex_key(buf, "quic_version", v.quic_version, 8);
    str_key(buf, "quic_sni", v.quic_sni);
    list_key(buf, "quic_alpn", v.quic_alpn);
    http_keys(buf, n, v.http);
    dns_keys(buf, n, v.dns);
}

fn http_keys(buf: &mut Vec<u8>, n: &mut itoa::Buffer, h: Option<&HttpInfo>) {
    let s = |f: fn(&HttpInfo) -> &Option<Str>| h.and_then(|h| f(h).as_deref());
    str_key(buf, "http_method", s(|h| &h.method));
    str_key(buf, "http_host", s(|h| &h.host));
    str_key(buf, "http_target", s(|h| &h.target));
    str_key(buf, "http_user_agent", s(|h| &h.user_agent));
    num_key(buf, n, "http_status", h.and_then(|h| h.status));
    num_key(buf, n, "http_requests", h.map(|h| h.requests));
    for (i, k) in [
        "http_status_1xx",
        "http_status_2xx",
        "http_status_3xx",
        "http_status_4xx",
        "http_status_5xx",
    ]
    .into_iter()
    .enumerate()
    {
        num_key(buf, n, k, h.map(|h| h.status_class[i]));
    }
    num_key(buf, n, "http_srt_min_us", h.and_then(|h| h.srt.min_us()));
    num_key(buf, n, "http_srt_mean_us", h.and_then(|h| h.srt.mean_us()));
    num_key(buf, n, "http_srt_max_us", h.and_then(|h| h.srt.max_us()));
}

fn dns_keys(buf: &mut Vec<u8>, n: &mut itoa::Buffer, d: Option<&DnsInfo>) {
    str_key(buf, "dns_qname", d.and_then(|d| d.qname.as_deref()));
    num_key(buf, n, "dns_qtype", d.and_then(|d| d.qtype));
    num_key(buf, n, "dns_qclass", d.and_then(|d| d.qclass));
    num_key(buf, n, "dns_rcode", d.and_then(|d| d.rcode));
    num_key(buf, n, "dns_answers", d.and_then(|d| d.answers));
    key(buf, "dns_answer_addr");
    match d.and_then(|d| d.answer_addr) {
        Some(a) => {
            buf.push(b'"');
            super::json::addr(buf, a);
            buf.push(b'"');
        }
        None => null(buf),
    }
    for (i, k) in [
        "dns_rcode_noerror",
        "dns_rcode_nxdomain",
        "dns_rcode_servfail",
        "dns_rcode_other",
    ]
    .into_iter()
    .enumerate()
    {
        num_key(buf, n, k, d.map(|d| d.rcodes[i]));
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use xdprobe_l7::fields::SrtSummary;

    /// Labels for the writer tests (`json::tests`): none, and each kind.
    pub fn app(i: usize) -> Option<App> {
        [
            None,
            Some(App::Unknown),
            Some(App::TlsH2),
            Some(App::Dns),
            Some(App::QuicH3),
        ][i % 5]
    }

    fn s(b: &[u8]) -> Option<Str> {
        Some(b.into())
    }

    /// Fields for the writer tests: none, and each set, with names that
    /// need escaping and with absent parts.
    pub fn fields(i: usize) -> Option<L7Fields> {
        let mut srt = SrtSummary::default();
        if i.is_multiple_of(2) {
            srt.add(1_500_000);
            srt.add(2_000_400);
        }
        match i % 7 {
            0 => None,
            1 => Some(L7Fields::Tls(Box::new(TlsInfo {
                sni: s(b"www.example.com"),
                alpn: s(b"\x02h2\x08http/1.1"),
                version: Some(0x0304),
                cipher: Some(0x1301),
                ja3: Some([0xab; 16]),
                ja4: Some(*b"t13d1516h2_8daaf6152771_e5627efa2ab1"),
                cert_cn: s(b"quote\"back\\slash"),
            }))),
            2 => Some(L7Fields::Tls(Box::default())),
            3 => Some(L7Fields::Quic(Box::new(QuicInfo {
                version: 0x6b33_43cf,
                sni: s(b"bad\xff\x01utf8"),
                alpn: s(b"\x02h3"),
                ja4: None,
            }))),
            4 => Some(L7Fields::Http(Box::new(HttpInfo {
                method: s(b"GET"),
                host: s(b"h\xc3\xa9.example"),
                target: s(b"/a?b=c&d=\"e\""),
                user_agent: None,
                status: Some(503),
                requests: 7,
                status_class: [1, 2, 3, 4, u32::MAX],
                srt,
            }))),
            5 => Some(L7Fields::Dns(Box::new(DnsInfo {
                qname: s(b"<Root>"),
                qtype: Some(28),
                qclass: Some(1),
                rcode: Some(3),
                answers: Some(0),
                answer_addr: Some("2001:db8::7".parse().unwrap()),
                rcodes: [0, 1, 0, 9],
            }))),
            _ => Some(L7Fields::Http(Box::default())),
        }
    }

    #[test]
    fn l7_keys_null_and_filled() {
        let mut b = Vec::new();
        keys(&mut b, &mut itoa::Buffer::new(), None, None);
        let v: serde_json::Value =
            serde_json::from_slice(&[b"{\"x\":0".as_ref(), &b, b"}"].concat()).unwrap();
        assert_eq!(v["app"], serde_json::Value::Null);
        assert_eq!(v.as_object().unwrap().len(), 36, "x, app and 34 L7 keys");
        b.clear();
        keys(&mut b, &mut itoa::Buffer::new(), app(2), fields(1).as_ref());
        let v: serde_json::Value =
            serde_json::from_slice(&[b"{\"x\":0".as_ref(), &b, b"}"].concat()).unwrap();
        assert_eq!(v["app"], "tls/h2");
        assert_eq!(v["tls_alpn"], serde_json::json!(["h2", "http/1.1"]));
        assert_eq!(
            (&v["tls_version"], &v["tls_cipher"]),
            (&"0x0304".into(), &"0x1301".into())
        );
        assert_eq!(v["tls_cert_cn"], "quote\"back\\slash");
        assert_eq!(v["http_requests"], serde_json::Value::Null);
        b.clear();
        keys(&mut b, &mut itoa::Buffer::new(), None, fields(3).as_ref());
        let v: serde_json::Value =
            serde_json::from_slice(&[b"{\"x\":0".as_ref(), &b, b"}"].concat()).unwrap();
        assert_eq!(
            (&v["quic_version"], &v["quic_sni"]),
            (&"0x6b3343cf".into(), &"bad\\xff\\x01utf8".into())
        );
    }

    /// The names issue 23 fixed for tooling, in its order, then the ones
    /// added beside them (docs/l7.md); CSV has the same columns.
    #[test]
    fn l7_keys_are_the_issues_names() {
        const ISSUE: [&str; 29] = [
            "app",
            "tls_sni",
            "tls_alpn",
            "tls_version",
            "tls_cipher",
            "tls_ja3",
            "tls_ja4",
            "tls_cert_cn",
            "quic_version",
            "quic_sni",
            "quic_alpn",
            "http_method",
            "http_host",
            "http_target",
            "http_status",
            "http_requests",
            "http_status_1xx",
            "http_status_2xx",
            "http_status_3xx",
            "http_status_4xx",
            "http_status_5xx",
            "http_srt_min_us",
            "http_srt_mean_us",
            "http_srt_max_us",
            "dns_qname",
            "dns_qtype",
            "dns_rcode",
            "dns_answers",
            "dns_answer_addr",
        ];
        const ADDED: [&str; 6] = [
            "http_user_agent",
            "dns_qclass",
            "dns_rcode_noerror",
            "dns_rcode_nxdomain",
            "dns_rcode_servfail",
            "dns_rcode_other",
        ];
        let mut b = Vec::new();
        keys(&mut b, &mut itoa::Buffer::new(), None, None);
        let text = String::from_utf8(b).unwrap();
        let got: Vec<&str> = text.split('"').skip(1).step_by(2).collect();
        let mut want: Vec<&str> = ISSUE.iter().chain(&ADDED).copied().collect();
        let mut sorted = got.clone();
        sorted.sort_unstable();
        want.sort_unstable();
        assert_eq!(sorted, want);
        let mut header = String::new();
        super::super::csv::header(&mut header);
        let cols: Vec<&str> = header.trim_end().split(',').collect();
        for k in got {
            assert!(cols.contains(&k), "CSV lacks {k}");
        }
    }
}
