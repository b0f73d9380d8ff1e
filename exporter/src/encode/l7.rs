//! L7 field values (`ie_l7`) of one record: strings as RFC 7011 §7
//! variable-length values in IPFIX (cut to 255 bytes on a character
//! boundary, the one-byte length form: a record always fits a message) and
//! NUL-padded fixed-length ones in NetFlow v9; numbers big-endian, all ones
//! when absent; the JA3 digest and JA4 string as bytes, zero when absent.

use std::borrow::Cow;
use std::net::IpAddr;

use xdprobe_dataplane::FlowRecord;
use xdprobe_dataplane::l7::L7Fields;
use xdprobe_dataplane::l7::fields::{DnsInfo, HttpInfo, QuicInfo, TlsInfo, alpn_names};
use xdprobe_dataplane::l7::text::Shown;

use super::varlen;
use crate::ie::{Field, VARLEN};
use crate::ie_l7::{Kind, L7Value};
use crate::template::FlowTemplate;

/// Longest IPFIX string value written (the one-byte length form).
pub const MAX_TEXT: usize = 254;

/// Shorter caps tried, in order, when a record with strings at
/// [`MAX_TEXT`] would not fit a message (the ntop profile's HTTP template
/// carries ten strings): the longest that fits is used.
pub const TEXT_CAPS: [usize; 4] = [MAX_TEXT, 128, 64, 32];

fn tls(r: &FlowRecord) -> Option<&TlsInfo> {
    r.l7.as_ref().and_then(L7Fields::tls)
}
fn quic(r: &FlowRecord) -> Option<&QuicInfo> {
    r.l7.as_ref().and_then(L7Fields::quic)
}
fn http(r: &FlowRecord) -> Option<&HttpInfo> {
    r.l7.as_ref().and_then(L7Fields::http)
}
fn dns(r: &FlowRecord) -> Option<&DnsInfo> {
    r.l7.as_ref().and_then(L7Fields::dns)
}

/// Wire bytes as valid UTF-8 text (escaped where they are not).
fn shown(b: Option<&[u8]>) -> Cow<'_, [u8]> {
    match b {
        None => Cow::Borrowed(&[]),
        Some(b) if Shown(b).is_verbatim() => Cow::Borrowed(b),
        Some(b) => Cow::Owned(Shown(b).to_string().into_bytes()),
    }
}

/// ALPN names joined by commas.
fn alpn(w: Option<&[u8]>) -> Cow<'_, [u8]> {
    let Some(w) = w else {
        return Cow::Borrowed(&[]);
    };
    let mut v = Vec::with_capacity(w.len());
    for (i, p) in alpn_names(w).enumerate() {
        if i > 0 {
            v.push(b',');
        }
        v.extend_from_slice(&shown(Some(p)));
    }
    Cow::Owned(v)
}

/// The text of a string value, before cutting.
fn text(v: L7Value, r: &FlowRecord) -> Cow<'_, [u8]> {
    use L7Value::*;
    match v {
        App => Cow::Borrowed(r.app.map_or("", |a| a.as_str()).as_bytes()),
        TlsSni => shown(tls(r).and_then(|t| t.sni.as_deref())),
        TlsAlpn => alpn(tls(r).and_then(|t| t.alpn.as_deref())),
        TlsCertName => shown(tls(r).and_then(|t| t.cert_cn.as_deref())),
        QuicSni => shown(quic(r).and_then(|q| q.sni.as_deref())),
        QuicAlpn => alpn(quic(r).and_then(|q| q.alpn.as_deref())),
        HttpMethod => shown(http(r).and_then(|h| h.method.as_deref())),
        HttpHost => shown(http(r).and_then(|h| h.host.as_deref())),
        HttpTarget => shown(http(r).and_then(|h| h.target.as_deref())),
        HttpUserAgent => shown(http(r).and_then(|h| h.user_agent.as_deref())),
        DnsQname => shown(dns(r).and_then(|d| d.qname.as_deref())),
        _ => Cow::Borrowed(&[]),
    }
}

/// `b` cut to `max` bytes without splitting a UTF-8 character.
fn cut(b: &[u8], max: usize) -> &[u8] {
    match std::str::from_utf8(b) {
        Ok(s) => varlen::truncate_utf8(s, max).as_bytes(),
        Err(_) => &b[..b.len().min(max)],
    }
}

fn number(v: L7Value, r: &FlowRecord) -> Option<u64> {
    use L7Value::*;
    let u = |x: u32| Some(u64::from(x));
    match v {
        TlsVersion => tls(r)?.version.map(u64::from),
        TlsCipher => tls(r)?.cipher.map(u64::from),
        QuicVersion => u(quic(r)?.version),
        HttpStatus => http(r)?.status.map(u64::from),
        HttpRequests => u(http(r)?.requests),
        HttpClass(n) => u(*http(r)?.status_class.get(usize::from(n).checked_sub(1)?)?),
        HttpSrtMin => http(r)?.srt.min_us().map(u64::from),
        HttpSrtMean => http(r)?.srt.mean_us().map(u64::from),
        HttpSrtMax => http(r)?.srt.max_us().map(u64::from),
        DnsQtype => dns(r)?.qtype.map(u64::from),
        DnsQclass => dns(r)?.qclass.map(u64::from),
        DnsRcode => dns(r)?.rcode.map(u64::from),
        DnsAnswers => dns(r)?.answers.map(u64::from),
        DnsRcodes(i) => u(*dns(r)?.rcodes.get(usize::from(i))?),
        _ => None,
    }
}

fn bytes(v: L7Value, r: &FlowRecord, out: &mut [u8]) {
    let src: Option<&[u8]> = match v {
        L7Value::TlsJa3 => tls(r).and_then(|t| t.ja3.as_ref()).map(|h| &h[..]),
        L7Value::Ja4 => tls(r)
            .and_then(|t| t.ja4.as_ref())
            .or_else(|| quic(r).and_then(|q| q.ja4.as_ref()))
            .map(|f| &f[..]),
        L7Value::DnsAddrV4 | L7Value::DnsAddrV6 => match (v, dns(r).and_then(|d| d.answer_addr)) {
            (L7Value::DnsAddrV4, Some(IpAddr::V4(a))) => {
                out.copy_from_slice(&a.octets());
                return;
            }
            (L7Value::DnsAddrV6, Some(IpAddr::V6(a))) => {
                out.copy_from_slice(&a.octets());
                return;
            }
            _ => None,
        },
        _ => None,
    };
    if let Some(s) = src {
        let n = s.len().min(out.len());
        out[..n].copy_from_slice(&s[..n]);
    }
}

/// Appends field `f` (an L7 value) of record `r`, strings cut to `cap`.
pub fn write(out: &mut Vec<u8>, f: &Field, v: L7Value, r: &FlowRecord, cap: usize) {
    match v.kind() {
        Kind::Text if f.len == VARLEN => {
            let t = text(v, r);
            varlen::write(out, cut(&t, cap));
        }
        Kind::Text => {
            let t = text(v, r);
            let t = cut(&t, usize::from(f.len));
            out.extend_from_slice(t);
            out.resize(out.len() + usize::from(f.len) - t.len(), 0);
        }
        Kind::Uint(n) => {
            let x = number(v, r).unwrap_or(u64::MAX);
            let n = usize::from(n);
            let x = if n < 8 {
                x.min((1u64 << (8 * n)) - 1)
            } else {
                x
            };
            out.extend_from_slice(&x.to_be_bytes()[8 - n..]);
        }
        Kind::Bytes(n) => {
            let at = out.len();
            out.resize(at + usize::from(n), 0);
            bytes(v, r, &mut out[at..]);
        }
    }
}

/// Bytes a data record of `t` takes for `r` with strings cut to `cap`:
/// the fixed fields and each variable-length value with its length prefix.
pub fn record_len(t: &FlowTemplate, r: &FlowRecord, cap: usize) -> usize {
    t.record_len
        + t.fields
            .iter()
            .filter(|f| f.len == VARLEN)
            .map(|f| match f.value {
                crate::ie::Value::L7(v) => varlen::encoded_len(cut(&text(v, r), cap).len()),
                _ => 1,
            })
            .sum::<usize>()
}

/// The most bytes a data record of `t` takes with strings cut to the
/// smallest cap: what must fit a message.
pub fn max_record_len(t: &FlowTemplate) -> usize {
    let smallest = TEXT_CAPS[TEXT_CAPS.len() - 1];
    t.record_len + t.fields.iter().filter(|f| f.len == VARLEN).count() * (1 + smallest)
}
