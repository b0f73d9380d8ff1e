//! HTTP/1.x (RFC 9112) in both directions, for the flow's whole life:
//! every request and response head is parsed (httparse, in place), bodies
//! are skipped by their framing (Content-Length, chunked, or until close:
//! RFC 9112 §6.3) without being looked at, so keep-alive and pipelined
//! transactions are all counted.
//!
//! Per transaction: the request's method, Host and target (the flow keeps
//! the first), the response's status (the flow keeps the last and counts
//! them by class), and the response time: from the request's last packet
//! (the one carrying its last byte) to the response's first (the one
//! carrying the first byte of its status line), minus the handshake's
//! server network time and floored at 0, as `npm-metrics.md` §2 measures
//! TCP SRT. Requests wait for their responses in a bounded queue, in order
//! (pipelining); 1xx responses other than 101 are interim and answer
//! nothing; 101 (an upgrade) and a 2xx to CONNECT end the following.

use crate::fields::{
    HttpInfo, MAX_METHOD, MAX_NAME, MAX_TARGET, MAX_USER_AGENT, Name, SrtSummary, str_of,
};
use crate::stats::L7Stats;
use crate::stream::Eat;
use crate::text::Text;

/// Headers parsed per head; a head with more is malformed here.
const MAX_HEADERS: usize = 96;
/// Requests awaiting a response.
const PENDING: usize = 16;

/// What a direction expects next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Head,
    /// A chunk-size line of a chunked body.
    ChunkSize,
    /// Trailer lines after the last chunk, up to the empty line.
    Trailers,
}

/// A request awaiting its response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Pending {
    /// Time of the packet with the request's last byte; 0 until seen.
    end_ns: u64,
    head: bool,
    connect: bool,
}

/// Settings the parser reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HttpCfg {
    pub target_len: usize,
    pub user_agent: bool,
}

/// One segment's context.
pub(crate) struct HttpCtx<'a> {
    pub ts_ns: u64,
    /// The handshake's server network time (0 when not measured).
    pub t_snt_ns: u64,
    pub cfg: HttpCfg,
    pub stats: &'a mut L7Stats,
}

/// Per-flow HTTP state.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HttpState {
    method: Option<Text<MAX_METHOD>>,
    host: Option<Name>,
    target: Option<Text<MAX_TARGET>>,
    user_agent: Option<Text<MAX_USER_AGENT>>,
    status: Option<u16>,
    requests: u32,
    classes: [u32; 5],
    srt: SrtSummary,
    phase: [Phase; 2],
    /// The body of the request being sent ends before this sequence
    /// number (its last byte is at `body_end - 1`).
    pub body_end: Option<u32>,
    /// First packet time of the response head being read.
    resp_start: u64,
    pending: [Pending; PENDING],
    p_head: u8,
    p_len: u8,
}

fn header<'b>(h: &[httparse::Header<'b>], name: &str) -> Option<&'b [u8]> {
    h.iter()
        .find(|x| x.name.eq_ignore_ascii_case(name))
        .map(|x| x.value)
}

/// The body framing of a message (RFC 9112 §6.3), given it may have one.
enum Body {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

fn framing(h: &[httparse::Header<'_>], request: bool) -> Body {
    if let Some(te) = header(h, "transfer-encoding") {
        let last = te.rsplit(|b| *b == b',').next().unwrap_or(te);
        if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            return Body::Chunked;
        }
        return if request {
            Body::None
        } else {
            Body::UntilClose
        };
    }
    match header(h, "content-length") {
        Some(v) => match std::str::from_utf8(v.trim_ascii())
            .ok()
            .and_then(|s| s.parse().ok())
        {
            Some(0) => Body::None,
            Some(n) => Body::Length(n),
            None if request => Body::None,
            None => Body::UntilClose,
        },
        None if request => Body::None,
        None => Body::UntilClose,
    }
}

/// Room for a head's headers, left uninitialised: httparse writes the
/// ones it parses and the head's view covers only those. Initialising all
/// of them (3 KiB) cost more than parsing a typical head, on every attempt
/// (a head split over segments is parsed again per segment).
fn no_headers<'b>() -> [std::mem::MaybeUninit<httparse::Header<'b>>; MAX_HEADERS] {
    [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS]
}

fn config() -> httparse::ParserConfig {
    let mut c = httparse::ParserConfig::default();
    c.allow_multiple_spaces_in_request_line_delimiters(true)
        .allow_multiple_spaces_in_response_status_delimiters(true)
        .allow_spaces_after_header_name_in_responses(true)
        .allow_obsolete_multiline_headers_in_responses(true)
        .ignore_invalid_headers_in_responses(true)
        .ignore_invalid_headers_in_requests(true);
    c
}

impl HttpState {
    /// The request direction's consumer (`pos`: the bytes' stream
    /// position).
    pub fn request_eat(&mut self, pos: u32, b: &[u8], cx: &mut HttpCtx<'_>) -> Eat {
        match self.phase[0] {
            Phase::Head => self.request_head(pos, b, cx),
            Phase::ChunkSize => self.chunk_size(0, b),
            Phase::Trailers => {
                let e = trailers(b);
                if e.used > 0 && self.phase_after_trailers(b) {
                    self.phase[0] = Phase::Head;
                    self.request_ended(cx.ts_ns);
                }
                e
            }
        }
    }

    fn request_head(&mut self, pos: u32, b: &[u8], cx: &mut HttpCtx<'_>) -> Eat {
        let mut headers = no_headers();
        let mut req = httparse::Request::new(&mut []);
        let n = match config().parse_request_with_uninit_headers(&mut req, b, &mut headers) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Eat::MORE,
            Err(_) => {
                cx.stats.http_malformed += 1;
                return Eat::LOST;
            }
        };
        let method = req.method.unwrap_or("").as_bytes();
        self.requests = self.requests.saturating_add(1);
        cx.stats.http_requests += 1;
        if self.method.is_none() {
            self.method = Some(Text::cut(method, MAX_METHOD).0);
            self.host = header(req.headers, "host").map(|h| Text::cut(h, MAX_NAME).0);
            let target = req.path.unwrap_or("").as_bytes();
            self.target = Some(Text::cut(target, cx.cfg.target_len.min(MAX_TARGET)).0);
            if cx.cfg.user_agent {
                self.user_agent =
                    header(req.headers, "user-agent").map(|u| Text::cut(u, MAX_USER_AGENT).0);
            }
        }
        let body = framing(req.headers, true);
        let p = Pending {
            end_ns: if matches!(body, Body::None) {
                cx.ts_ns
            } else {
                0
            },
            head: method == b"HEAD",
            connect: method == b"CONNECT",
        };
        self.push(p, cx.stats);
        match body {
            Body::Length(len) => {
                self.body_end = Some(pos.wrapping_add(n as u32).wrapping_add(len as u32));
                Eat {
                    used: n,
                    skip: len,
                    ..Eat::MORE
                }
            }
            Body::Chunked => {
                self.phase[0] = Phase::ChunkSize;
                Eat::used(n)
            }
            Body::None | Body::UntilClose => Eat::used(n),
        }
    }

    /// A chunk-size line in direction `d` (0 request, 1 response).
    fn chunk_size(&mut self, d: usize, b: &[u8]) -> Eat {
        match httparse::parse_chunk_size(b) {
            Ok(httparse::Status::Complete((n, 0))) => {
                self.phase[d] = Phase::Trailers;
                Eat::used(n)
            }
            // The chunk's data and its CRLF.
            Ok(httparse::Status::Complete((n, size))) => Eat {
                used: n,
                skip: size.saturating_add(2),
                ..Eat::MORE
            },
            Ok(httparse::Status::Partial) => Eat::MORE,
            Err(_) => Eat::LOST,
        }
    }

    /// True when the trailer section ended with the line just used.
    fn phase_after_trailers(&self, b: &[u8]) -> bool {
        b.starts_with(b"\r\n") || b.starts_with(b"\n")
    }

    /// The request being sent ended with the current packet.
    pub fn request_ended(&mut self, ts_ns: u64) {
        let n = usize::from(self.p_len);
        if n > 0 {
            let last = (usize::from(self.p_head) + n - 1) % PENDING;
            if self.pending[last].end_ns == 0 {
                self.pending[last].end_ns = ts_ns;
            }
        }
        self.body_end = None;
    }

    fn push(&mut self, p: Pending, stats: &mut L7Stats) {
        if usize::from(self.p_len) == PENDING {
            stats.http_pending_overflow += 1;
            return;
        }
        let at = (usize::from(self.p_head) + usize::from(self.p_len)) % PENDING;
        self.pending[at] = p;
        self.p_len += 1;
    }

    fn pop(&mut self) -> Option<Pending> {
        if self.p_len == 0 {
            return None;
        }
        let p = self.pending[usize::from(self.p_head)];
        self.p_head = ((usize::from(self.p_head) + 1) % PENDING) as u8;
        self.p_len -= 1;
        Some(p)
    }

    /// Direction `d` starts again at a message boundary (after a resync).
    pub fn restart(&mut self, d: usize) {
        self.phase[d] = Phase::Head;
        self.forget_pending();
    }

    /// Forgets requests awaiting responses (after a lost stream: the
    /// pairing is no longer known).
    pub fn forget_pending(&mut self) {
        self.p_len = 0;
        self.body_end = None;
        self.resp_start = 0;
    }

    /// The response direction's consumer.
    pub fn response_eat(&mut self, b: &[u8], cx: &mut HttpCtx<'_>) -> Eat {
        match self.phase[1] {
            Phase::Head => self.response_head(b, cx),
            Phase::ChunkSize => self.chunk_size(1, b),
            Phase::Trailers => {
                let e = trailers(b);
                if e.used > 0 && self.phase_after_trailers(b) {
                    self.phase[1] = Phase::Head;
                }
                e
            }
        }
    }

    fn response_head(&mut self, b: &[u8], cx: &mut HttpCtx<'_>) -> Eat {
        if self.resp_start == 0 {
            self.resp_start = cx.ts_ns.max(1);
        }
        let mut headers = no_headers();
        let mut resp = httparse::Response::new(&mut []);
        let n = match config().parse_response_with_uninit_headers(&mut resp, b, &mut headers) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Eat::MORE,
            Err(_) => {
                cx.stats.http_malformed += 1;
                return Eat::LOST;
            }
        };
        let code = resp.code.unwrap_or(0);
        cx.stats.http_responses += 1;
        self.status = Some(code);
        if let Some(c) = self
            .classes
            .get_mut(usize::from(code / 100).wrapping_sub(1))
        {
            *c = c.saturating_add(1);
        }
        let start = std::mem::take(&mut self.resp_start);
        if (100..200).contains(&code) && code != 101 {
            return Eat::used(n);
        }
        let req = self.pop().unwrap_or_default();
        if req.end_ns != 0 {
            let rr = start.saturating_sub(req.end_ns);
            self.srt.add(rr.saturating_sub(cx.t_snt_ns));
        }
        if code == 101 || (req.connect && (200..300).contains(&code)) {
            return Eat::DONE;
        }
        if req.head || code == 204 || code == 304 {
            return Eat::used(n);
        }
        match framing(resp.headers, false) {
            Body::None => Eat::used(n),
            Body::Length(len) => Eat {
                used: n,
                skip: len,
                ..Eat::MORE
            },
            Body::Chunked => {
                self.phase[1] = Phase::ChunkSize;
                Eat::used(n)
            }
            Body::UntilClose => Eat {
                used: n,
                done: true,
                ..Eat::MORE
            },
        }
    }

    /// The record's fields.
    pub fn info(&self) -> HttpInfo {
        HttpInfo {
            method: self.method.as_ref().map(str_of),
            host: self.host.as_ref().map(str_of),
            target: self.target.as_ref().map(str_of),
            user_agent: self.user_agent.as_ref().map(str_of),
            status: self.status,
            requests: self.requests,
            status_class: self.classes,
            srt: self.srt,
        }
    }

    /// A new interval: counts and times restart.
    pub fn reset_interval(&mut self) {
        self.requests = 0;
        self.classes = [0; 5];
        self.srt = SrtSummary::default();
    }
}

/// One trailer line (or the empty line that ends them).
fn trailers(b: &[u8]) -> Eat {
    match b.iter().position(|c| *c == b'\n') {
        Some(i) => Eat::used(i + 1),
        None => Eat::MORE,
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
