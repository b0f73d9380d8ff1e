//! TLS over TCP: the client's first ClientHello (SNI, ALPN offered, JA3,
//! JA4) and the server's ServerHello (version, cipher, ALPN chosen) and,
//! up to TLS 1.2, its certificate's name.
//!
//! Each direction's stream (`stream`) shows the consumer the bytes from
//! the first one on; the consumer walks the TLS records (RFC 8446 §5.1),
//! joins the handshake fragments of consecutive handshake records into the
//! worker's scratch buffer (a hello split over records and segments reads
//! whole), and keeps everything held until it has what it needs, within
//! the reassembly bound. A handshake message that declares more than the
//! bound (a ServerHello of 2^24 bytes) is refused at once and counted.

pub mod cert;
pub mod fingerprint;
pub mod hello;

use crate::fields::{Alpn, MAX_NAME, Name, TlsInfo, str_of};
use crate::stats::L7Stats;
use crate::stream::Eat;
use crate::text::Text;
use hello::{ClientHello, ServerHello};

const CONTENT_CCS: u8 = 20;
const CONTENT_HANDSHAKE: u8 = 22;
const HS_CLIENT_HELLO: u8 = 1;
const HS_SERVER_HELLO: u8 = 2;
const HS_CERTIFICATE: u8 = 11;
/// Largest record body (RFC 5246 §6.2.3: 2^14 + 2048).
const MAX_RECORD: usize = 16384 + 2048;

/// How a record walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// At the end of the bytes (the last record may be partial).
    End,
    /// At a record that is not a handshake record (its content type).
    Other(u8),
    /// At bytes that are not a TLS record header.
    Bad,
}

/// Joins the handshake fragments of the records at the start of `stream`
/// into `out` (cleared first; a partial last record contributes what it
/// has), passing over change_cipher_spec records when `skip_ccs`.
pub(crate) fn handshake_bytes(stream: &[u8], skip_ccs: bool, out: &mut Vec<u8>) -> Stop {
    out.clear();
    let mut at = 0;
    while at < stream.len() {
        let Some(h) = stream.get(at..at + 5) else {
            return Stop::End;
        };
        let (ctype, len) = (h[0], usize::from(u16::from_be_bytes([h[3], h[4]])));
        if !(20..=24).contains(&ctype) || h[1] != 3 || len > MAX_RECORD {
            return Stop::Bad;
        }
        let body = &stream[at + 5..stream.len().min(at + 5 + len)];
        match ctype {
            CONTENT_HANDSHAKE => out.extend_from_slice(body),
            CONTENT_CCS if skip_ccs => {}
            other => return Stop::Other(other),
        }
        at += 5 + len;
    }
    Stop::End
}

/// One handshake message at the start of `hs`: its type, declared length
/// and the part of its body present.
fn message(hs: &[u8]) -> Option<(u8, usize, &[u8])> {
    let h = hs.get(..4)?;
    let len = usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3]);
    Some((h[0], len, &hs[4..hs.len().min(4 + len)]))
}

/// Per-flow TLS state: the fields so far and what is still awaited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsState {
    pub sni: Option<Name>,
    pub alpn: Option<Alpn>,
    pub version: Option<u16>,
    pub cipher: Option<u16>,
    pub ja3: Option<[u8; 16]>,
    pub ja4: Option<fingerprint::Ja4>,
    pub cert_cn: Option<Name>,
    /// The ALPN protocol the server chose (refines the label).
    pub chosen_alpn: Text<32>,
    pub client_done: bool,
    pub server_done: bool,
    /// A HelloRetryRequest was seen: the next ServerHello decides.
    hrr: bool,
}

/// The worker's buffers the TLS and QUIC consumers share.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Joined handshake bytes (up to the reassembly bound).
    pub hs: Vec<u8>,
    /// JA4's sorted lists.
    pub sort: Vec<u16>,
}

/// What a ClientHello gives a record (TLS over TCP, or QUIC).
pub(crate) struct HelloFields {
    pub sni: Option<crate::fields::Name>,
    pub alpn: Option<Alpn>,
    /// `None` for a hello carried in QUIC: its record has no JA3 field,
    /// and the MD5 (about 0.9 µs for a 50-value hello) would be thrown
    /// away.
    pub ja3: Option<[u8; 16]>,
    pub ja4: fingerprint::Ja4,
}

impl HelloFields {
    pub fn of(h: &ClientHello<'_>, quic: bool, sort: &mut Vec<u16>, stats: &mut L7Stats) -> Self {
        if h.sni_refused {
            stats.tls_sni_refused += 1;
        }
        HelloFields {
            sni: h.sni.map(|s| Text::cut(s, MAX_NAME).0),
            alpn: h.alpn.and_then(Alpn::from_wire),
            ja3: (!quic).then(|| fingerprint::ja3(h)),
            ja4: fingerprint::ja4(h, quic, sort),
        }
    }
}

impl TlsState {
    /// The client direction's consumer.
    pub fn client_eat(
        &mut self,
        stream: &[u8],
        sc: &mut Scratch,
        bound: usize,
        stats: &mut L7Stats,
    ) -> Eat {
        let stop = handshake_bytes(stream, false, &mut sc.hs);
        let Some((typ, len, body)) = message(&sc.hs) else {
            return self.client_more(stop, stats);
        };
        if typ != HS_CLIENT_HELLO {
            stats.tls_unexpected += 1;
            return self.client_finish();
        }
        if len > bound {
            stats.tls_too_long += 1;
            return self.client_finish();
        }
        if body.len() < len {
            return self.client_more(stop, stats);
        }
        match ClientHello::parse(body) {
            Ok(h) => {
                let f = HelloFields::of(&h, false, &mut sc.sort, stats);
                self.sni = f.sni;
                self.alpn = f.alpn;
                self.ja3 = f.ja3;
                self.ja4 = Some(f.ja4);
                stats.tls_client_hellos += 1;
            }
            Err(_) => stats.tls_malformed += 1,
        }
        self.client_finish()
    }

    fn client_more(&mut self, stop: Stop, stats: &mut L7Stats) -> Eat {
        if stop == Stop::End {
            return Eat::MORE;
        }
        stats.tls_unexpected += 1;
        self.client_finish()
    }

    fn client_finish(&mut self) -> Eat {
        self.client_done = true;
        Eat::DONE
    }

    /// The server direction's consumer.
    pub fn server_eat(
        &mut self,
        stream: &[u8],
        sc: &mut Scratch,
        bound: usize,
        stats: &mut L7Stats,
    ) -> Eat {
        let stop = handshake_bytes(stream, self.hrr, &mut sc.hs);
        let mut hs = &sc.hs[..];
        let mut sh_seen = false;
        while let Some((typ, len, body)) = message(hs) {
            if len > bound {
                stats.tls_too_long += 1;
                return self.server_finish();
            }
            let whole = body.len() == len;
            match typ {
                HS_SERVER_HELLO if whole => {
                    sh_seen = true;
                    if !self.server_hello(body, stats) {
                        return self.server_finish();
                    }
                }
                HS_CERTIFICATE => {
                    if self.certificate(body) || whole {
                        return self.server_finish();
                    }
                }
                _ if !whole => {}
                // A message after the ServerHello that is not the
                // certificate: TLS 1.2 without one (PSK, anonymous), or
                // ServerHelloDone.
                _ if sh_seen => return self.server_finish(),
                _ => {
                    stats.tls_unexpected += 1;
                    return self.server_finish();
                }
            }
            if !whole {
                break;
            }
            hs = &hs[4 + len..];
        }
        match stop {
            Stop::End => Eat::MORE,
            // After a HelloRetryRequest, the compatibility CCS: walk past
            // it (next time) to the ServerHello that follows.
            Stop::Other(CONTENT_CCS) if self.hrr => Eat::MORE,
            // CCS after a TLS 1.2 ServerHello: an abbreviated handshake.
            _ => self.server_finish(),
        }
    }

    /// A whole ServerHello; false when nothing more is to be had from the
    /// server (TLS 1.3: the rest is encrypted; or malformed).
    fn server_hello(&mut self, body: &[u8], stats: &mut L7Stats) -> bool {
        let Ok(h) = ServerHello::parse(body) else {
            stats.tls_malformed += 1;
            return false;
        };
        // The flight is walked again as it grows: count a hello once.
        let new = self.version.is_none() || self.hrr;
        self.version = Some(h.version());
        self.cipher = Some(h.cipher);
        if let Some(a) = h.alpn {
            self.chosen_alpn.set(a, 32);
        }
        if h.hrr {
            self.hrr = true;
            return true;
        }
        if new {
            stats.tls_server_hellos += 1;
        }
        h.version() < 0x0304
    }

    /// The first certificate of a Certificate message (complete or not);
    /// true once it was read.
    fn certificate(&mut self, body: &[u8]) -> bool {
        let mut rd = hello::Rd(body);
        let (Ok(_list), Ok(n)) = (rd.u24(), rd.u24()) else {
            return false;
        };
        let Ok(der) = rd.take(n) else {
            return false;
        };
        let (cn, san) = cert::names(der);
        self.cert_cn = cn.or(san).map(|n| Text::cut(n, MAX_NAME).0);
        true
    }

    fn server_finish(&mut self) -> Eat {
        self.server_done = true;
        Eat::DONE
    }

    /// The record's fields.
    pub fn info(&self) -> TlsInfo {
        TlsInfo {
            sni: self.sni.as_ref().map(str_of),
            alpn: self.alpn.map(|a| a.wire().into()),
            version: self.version,
            cipher: self.cipher,
            ja3: self.ja3,
            ja4: self.ja4,
            cert_cn: self.cert_cn.as_ref().map(str_of),
        }
    }

    /// The ALPN protocol that refines the label: the server's choice when
    /// seen, else the client's first offer.
    pub fn label_alpn(&self) -> Option<&[u8]> {
        if !self.chosen_alpn.is_empty() {
            return Some(self.chosen_alpn.as_bytes());
        }
        self.alpn.as_ref().and_then(|a| a.first())
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
