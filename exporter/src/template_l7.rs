//! The L7 templates: one per kind of L7 field set and address family, each
//! the flow template followed by that kind's elements (`ie_l7`), so a DNS
//! record carries no empty HTTP fields. IDs 260–264 (IPv4) and 265–269
//! (IPv6); the encoder announces one the first time a record needs it
//! after each template (re)send (`encode::l7`).

use xdprobe_dataplane::FlowRecord;
use xdprobe_dataplane::l7::L7Fields;

use crate::ie::{Field, PEN_NTOP, V9_PRIVATE_BASE, VARLEN, Value, ntop};
use crate::ie_l7::{Kind, L7_ELEMENTS, L7Value, NTOP_L7, element, v9_len};
use crate::template::{FlowTemplate, Format, Profile};

/// Which L7 field set a record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L7Kind {
    /// The label only (ssh, smb, unknown, …, or a protocol whose parser is
    /// off).
    App = 0,
    Tls = 1,
    Quic = 2,
    Http = 3,
    Dns = 4,
}

pub const L7_KINDS: [L7Kind; 5] = [
    L7Kind::App,
    L7Kind::Tls,
    L7Kind::Quic,
    L7Kind::Http,
    L7Kind::Dns,
];

/// First L7 template ID (IPv4, `App`); IPv6 follows the five IPv4 ones.
pub const TEMPLATE_ID_L7_BASE: u16 = 260;

impl L7Kind {
    /// The kind of a record; `None` without a label (L7 off): the plain
    /// flow template.
    pub fn of(r: &FlowRecord) -> Option<L7Kind> {
        r.app?;
        Some(match &r.l7 {
            None => L7Kind::App,
            Some(L7Fields::Tls(_)) => L7Kind::Tls,
            Some(L7Fields::Quic(_)) => L7Kind::Quic,
            Some(L7Fields::Http(_)) => L7Kind::Http,
            Some(L7Fields::Dns(_)) => L7Kind::Dns,
        })
    }

    /// Index among the L7 templates (`Templates::l7`).
    pub fn index(self, ipv6: bool) -> usize {
        self as usize + if ipv6 { L7_KINDS.len() } else { 0 }
    }

    fn values(self) -> &'static [L7Value] {
        use L7Value::*;
        match self {
            L7Kind::App => &[App],
            L7Kind::Tls => &[
                App,
                TlsSni,
                TlsAlpn,
                TlsVersion,
                TlsCipher,
                TlsJa3,
                Ja4,
                TlsCertName,
            ],
            L7Kind::Quic => &[App, QuicVersion, QuicSni, QuicAlpn, Ja4],
            L7Kind::Http => &[
                App,
                HttpMethod,
                HttpHost,
                HttpTarget,
                HttpStatus,
                HttpUserAgent,
                HttpRequests,
                HttpClass(1),
                HttpClass(2),
                HttpClass(3),
                HttpClass(4),
                HttpClass(5),
                HttpSrtMin,
                HttpSrtMean,
                HttpSrtMax,
            ],
            L7Kind::Dns => &[
                App,
                DnsQname,
                DnsQtype,
                DnsQclass,
                DnsRcode,
                DnsAnswers,
                DnsAddrV4,
                DnsAddrV6,
                DnsRcodes(0),
                DnsRcodes(1),
                DnsRcodes(2),
                DnsRcodes(3),
            ],
        }
    }
}

fn len_of(v: L7Value, format: Format) -> u16 {
    match (v.kind(), format) {
        (Kind::Text, Format::Ipfix) => VARLEN,
        (Kind::Text, Format::NetflowV9) => v9_len(v),
        (Kind::Uint(n) | Kind::Bytes(n), _) => n,
    }
}

/// The fields `kind` adds to the flow template.
fn l7_fields(kind: L7Kind, format: Format, profile: Profile, pen: u32) -> Vec<Field> {
    let mut f = Vec::new();
    for &v in kind.values() {
        let Some(e) = element(v) else { continue };
        let len = len_of(v, format);
        f.push(match (e.enterprise, format) {
            (false, _) => Field::iana(e.id, len, Value::L7(v)),
            (true, Format::Ipfix) => Field::enterprise(pen, e.id, len, Value::L7(v)),
            (true, Format::NetflowV9) => Field::iana(V9_PRIVATE_BASE + e.id, len, Value::L7(v)),
        });
    }
    if profile == Profile::Ntop {
        let quic_sni = |v: L7Value| {
            if kind == L7Kind::Quic && v == L7Value::TlsSni {
                L7Value::QuicSni
            } else {
                v
            }
        };
        for &(id, v) in NTOP_L7.iter().filter(|(_, v)| {
            *v == L7Value::App
                || kind.values().contains(v)
                || (kind == L7Kind::Quic && *v == L7Value::TlsSni)
        }) {
            let v = quic_sni(v);
            let len = len_of(v, format);
            f.push(match format {
                Format::Ipfix => Field::enterprise(PEN_NTOP, id, len, Value::L7(v)),
                Format::NetflowV9 => Field::iana(ntop::V9_BASE + id, len, Value::L7(v)),
            });
        }
    }
    f
}

/// The ten L7 templates, indexed by [`L7Kind::index`].
pub fn l7_templates(
    v4: &FlowTemplate,
    v6: &FlowTemplate,
    format: Format,
    profile: Profile,
    pen: u32,
) -> Vec<FlowTemplate> {
    let mut out = Vec::with_capacity(2 * L7_KINDS.len());
    for (base, ipv6) in [(v4, false), (v6, true)] {
        for k in L7_KINDS {
            let mut fields = base.fields.clone();
            fields.extend(l7_fields(k, format, profile, pen));
            let id = TEMPLATE_ID_L7_BASE + k.index(ipv6) as u16;
            out.push(FlowTemplate::new(id, fields));
        }
    }
    out
}

/// True if every L7 element the table lists is in some template.
pub fn covers_every_element(templates: &[FlowTemplate]) -> bool {
    L7_ELEMENTS.iter().all(|e| {
        templates
            .iter()
            .any(|t| t.fields.iter().any(|f| f.value == Value::L7(e.value)))
    })
}
