//! The per-worker L7 engine and each flow's handle into it.
//!
//! A flow's L7 state is reached through one 8-byte [`Slot`] that the flow
//! table keeps beside the flow (out of line: a flow pays nothing else until
//! a payload matched a protocol). The slot holds the application label,
//! how many payload packets were inspected per direction, and, once a
//! protocol matched, the index of the flow's parser state in that
//! protocol's pool. All pools share one bound (`L7Config::max_flows`); a
//! flow that finds them full keeps its label and is counted
//! (`flows_refused`). TLS and QUIC flows give their pool slot back as soon
//! as their hellos are read: their fields are *frozen* into a small boxed
//! [`L7Fields`] for the rest of the flow. HTTP and DNS flows keep their
//! state for their whole life, since every transaction counts.

mod dns_state;
mod slab;
mod tcp;

use crate::app::{self, App, Guess};
use crate::fields::L7Fields;
use crate::http::{HttpCfg, HttpState};
use crate::pool::{BUF_BYTES, BufPool, Pool};
use crate::quic::{QuicCtx, QuicState};
use crate::stats::L7Stats;
use crate::stream::Stream;
use crate::tls::{Scratch, TlsState};
use dns_state::DnsState;
use slab::Slab;

/// Which way a payload travels in its flow (client = the flow's
/// initiator, as the flow table decided).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    C2S,
    S2C,
}

impl Dir {
    pub fn index(self) -> usize {
        match self {
            Dir::C2S => 0,
            Dir::S2C => 1,
        }
    }
}

/// The transport of a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A TCP segment: its sequence number, and the sequence number the
    /// direction's next byte was expected at before it (from the SYN or
    /// earlier segments), when known: a segment beyond it arrived after a
    /// hole (reordering or loss). `syn`: the direction's SYN was seen, so
    /// until its first payload `expected` is the stream's first byte (a
    /// payload there is the start of the stream, not a piece of its middle).
    Tcp {
        seq: u32,
        expected: Option<u32>,
        syn: bool,
    },
    Udp,
}

/// One payload as the engine sees it.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    pub dir: Dir,
    pub transport: Transport,
    /// The captured payload bytes.
    pub payload: &'a [u8],
    /// The payload length on the wire (more than `payload.len()` when the
    /// snap length cut the packet).
    pub wire_len: u32,
    pub ts_ns: u64,
    /// (client port, server port).
    pub ports: (u16, u16),
    /// The handshake's server network time in ns (0 when not measured):
    /// HTTP response times subtract it, as TCP SRT does
    /// (`npm-metrics.md` §2).
    pub t_snt_ns: u64,
}

impl Segment<'_> {
    /// A TCP payload at its direction's first byte: the SYN was seen and
    /// the payload starts where the stream's first byte was expected.
    fn stream_start(&self) -> bool {
        matches!(self.transport, Transport::Tcp { seq, expected: Some(e), syn: true } if seq == e)
    }
}

/// Settings (validated by the config crate, `[l7]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L7Config {
    pub tls: bool,
    pub quic: bool,
    pub http: bool,
    pub dns: bool,
    /// Payload packets per direction inspected while a flow matched
    /// nothing or its hellos are still awaited.
    pub packets: u8,
    /// Flows with parser state at once, per worker (all protocols).
    pub max_flows: usize,
    /// Reassembly buffers ([`BUF_BYTES`] each) per worker.
    pub buffers: usize,
    /// Bytes a TLS hello flight, a QUIC CRYPTO stream or a DNS-over-TCP
    /// message may take (at most [`BUF_BYTES`]).
    pub reassembly: usize,
    /// Bytes an HTTP head may take (at most [`BUF_BYTES`]).
    pub http_max_head: usize,
    /// Bytes of the HTTP request target kept.
    pub http_target_len: usize,
    pub http_user_agent: bool,
}

impl Default for L7Config {
    fn default() -> Self {
        L7Config {
            tls: true,
            quic: true,
            http: true,
            dns: true,
            packets: 8,
            max_flows: 16_384,
            buffers: 1024,
            reassembly: BUF_BYTES,
            http_max_head: 8192,
            http_target_len: 256,
            http_user_agent: false,
        }
    }
}

impl L7Config {
    /// The most a worker allocates for L7 state with these settings. Each
    /// protocol has its own pool, and a pool keeps what it once allocated
    /// (reused, never freed), so over a run every pool may reach
    /// `max_flows` entries even though at most `max_flows` states are in
    /// use at once: the bound is every pool full, and every buffer.
    pub fn memory_bytes(&self) -> u64 {
        let state = size_of::<TlsFlow>()
            + size_of::<QuicState>()
            + size_of::<HttpFlow>()
            + size_of::<DnsFlow>()
            + size_of::<PendingFlow>();
        (self.max_flows * state + self.buffers * BUF_BYTES) as u64
    }
}

// `Slot::kind`: the low bits say where the state is, the high bits are
// flags.
const K_NONE: u8 = 0;
const K_PENDING: u8 = 1;
const K_TLS: u8 = 2;
const K_QUIC: u8 = 3;
const K_HTTP: u8 = 4;
const K_DNS: u8 = 5;
const K_FROZEN: u8 = 6;
const K_MASK: u8 = 0x0F;
/// Nothing matched the first in-order payload of the direction (<< dir).
const NOTHING_C2S: u8 = 0x10;
/// No more inspection: the table stops calling.
const DONE: u8 = 0x80;

/// A flow's handle into the engine: 8 bytes, all zero for a new flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Slot {
    idx: u32,
    kind: u8,
    app: u8,
    seen: [u8; 2],
}

const _: () = assert!(size_of::<Slot>() == 8);

impl Slot {
    /// No more payload needs to be shown for this flow.
    pub fn done(&self) -> bool {
        self.kind & DONE != 0
    }

    /// Whether the flow is past its first look: a protocol's parser
    /// follows it, or its stream start is awaited. A direction given up
    /// while nothing matched ([`Progress::DoneDir`]) is wanted again then.
    pub fn has_state(&self) -> bool {
        self.k() != K_NONE
    }

    /// Whether the next segment may need the handshake's server network
    /// time ([`Segment::t_snt_ns`]): only an HTTP response can, so only a
    /// flow that is HTTP or whose stream start is still awaited (its held
    /// bytes may turn out to be HTTP). Callers that keep the time apart
    /// read it only then.
    pub fn wants_server_time(&self) -> bool {
        !self.done() && matches!(self.k(), K_PENDING | K_HTTP)
    }

    fn k(&self) -> u8 {
        self.kind & K_MASK
    }

    fn set(&mut self, kind: u8, idx: u32) {
        self.kind = (self.kind & !K_MASK) | kind;
        self.idx = idx;
    }
}

/// What the engine says after a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Show me this flow's next payloads.
    More,
    /// Nothing more is needed from this flow.
    Done,
    /// Nothing more is needed from this direction of the flow (its stream
    /// began with bytes no parser knows); keep showing the other.
    DoneDir(Dir),
}

#[derive(Clone, Copy, Debug, Default)]
struct PendingFlow {
    streams: [Stream; 2],
}

#[derive(Clone, Copy, Debug, Default)]
struct TlsFlow {
    streams: [Stream; 2],
    st: TlsState,
}

#[derive(Clone, Copy, Debug, Default)]
struct HttpFlow {
    streams: [Stream; 2],
    st: HttpState,
}

#[derive(Clone, Copy, Debug, Default)]
struct DnsFlow {
    streams: [Stream; 2],
    st: DnsState,
}

/// One worker's L7 engine.
pub struct L7 {
    cfg: L7Config,
    pending: Pool<PendingFlow>,
    tls: Pool<TlsFlow>,
    quic: Pool<QuicState>,
    http: Pool<HttpFlow>,
    dns: Pool<DnsFlow>,
    frozen: Slab<L7Fields>,
    bufs: BufPool,
    scratch: Scratch,
    /// A QUIC packet being decrypted.
    quic_buf: Vec<u8>,
    stats: L7Stats,
}

impl L7 {
    pub fn new(cfg: L7Config) -> Self {
        let n = cfg.max_flows;
        let mut scratch = Scratch::default();
        scratch.hs.reserve(BUF_BYTES + 5);
        scratch.sort.reserve(BUF_BYTES / 2);
        L7 {
            cfg,
            pending: Pool::new(n),
            tls: Pool::new(n),
            quic: Pool::new(n),
            http: Pool::new(n),
            dns: Pool::new(n),
            frozen: Slab::default(),
            bufs: BufPool::new(cfg.buffers),
            scratch,
            quic_buf: Vec::with_capacity(65_536),
            stats: L7Stats::default(),
        }
    }

    pub fn config(&self) -> &L7Config {
        &self.cfg
    }

    pub fn stats(&self) -> &L7Stats {
        &self.stats
    }

    /// Flows holding parser state now.
    pub fn states_in_use(&self) -> usize {
        self.pending.in_use()
            + self.tls.in_use()
            + self.quic.in_use()
            + self.http.in_use()
            + self.dns.in_use()
    }

    /// Bytes the pools hold now: their high-water mark, as freed entries
    /// stay allocated for reuse (at most [`L7Config::memory_bytes`]).
    pub fn allocated_bytes(&self) -> usize {
        self.pending.allocated() * size_of::<PendingFlow>()
            + self.tls.allocated() * size_of::<TlsFlow>()
            + self.quic.allocated() * size_of::<QuicState>()
            + self.http.allocated() * size_of::<HttpFlow>()
            + self.dns.allocated() * size_of::<DnsFlow>()
            + self.bufs.allocated() * BUF_BYTES
    }

    fn room(&mut self) -> bool {
        if self.states_in_use() < self.cfg.max_flows {
            return true;
        }
        self.stats.flows_refused += 1;
        false
    }

    /// Whether a TCP payload of `dir` at `seq`, `wire` bytes on the wire,
    /// would change nothing: the flow is followed by the HTTP parser and
    /// the payload lies wholly in bytes it already used or stepped over (a
    /// response body, a request body before its last segment). The table
    /// asks first and does not build the segment: a download's body
    /// segments then cost one comparison each instead of the walk through
    /// [`L7::on_segment`] (about 330 instructions, `callgrind`). Exactly
    /// the segments `on_segment` would pass over untouched answer true:
    /// an HTTP flow reads no per-direction payload count.
    #[inline]
    pub fn passes_over(&self, slot: &Slot, dir: Dir, seq: u32, wire: u32) -> bool {
        if slot.k() != K_HTTP || slot.done() {
            return false;
        }
        let Some(h) = self.http.get(slot.idx) else {
            return false;
        };
        let d = dir.index();
        // The request direction's segment that reaches the end of a
        // request body times the request (`HttpState::request_ended`).
        let ends_request = d == 0
            && h.st
                .body_end
                .is_some_and(|end| (seq.wrapping_add(wire).wrapping_sub(end) as i32) >= 0);
        !ends_request && h.streams[d].behind(seq, wire)
    }

    /// One payload of the flow whose slot this is.
    pub fn on_segment(&mut self, slot: &mut Slot, seg: &Segment<'_>) -> Progress {
        if slot.done() {
            return Progress::Done;
        }
        if seg.wire_len == 0 {
            return Progress::More;
        }
        let d = seg.dir.index();
        slot.seen[d] = slot.seen[d].saturating_add(1);
        let start = slot.k() == K_NONE && slot.seen[d] == 1 && seg.stream_start();
        match slot.k() {
            K_NONE => self.first_look(slot, seg),
            K_QUIC => self.quic_seg(slot, seg),
            K_DNS if seg.transport == Transport::Udp => self.dns_datagram(slot, seg),
            K_PENDING | K_TLS | K_HTTP | K_DNS => self.tcp_seg(slot, seg),
            _ => slot.kind |= DONE,
        }
        if slot.done() {
            Progress::Done
        } else if slot.k() == K_NONE
            && ((start && slot.kind & NOTHING_C2S << d != 0) || slot.seen[d] >= self.cfg.packets)
        {
            // The stream's first bytes matched nothing: the direction is
            // decided (docs/l7.md: the label comes from each direction's
            // first in-order payload). Or, picked up mid-stream, it showed
            // its `packets` payloads without a match. Its later payloads
            // are not looked at; the other direction's still are.
            Progress::DoneDir(seg.dir)
        } else {
            Progress::More
        }
    }

    /// A payload of a flow with no state yet: what does it look like?
    fn first_look(&mut self, slot: &mut Slot, seg: &Segment<'_>) {
        let guess = match seg.transport {
            Transport::Tcp { seq, expected, .. } => {
                if expected.is_some_and(|e| (seq.wrapping_sub(e) as i32) > 0) {
                    // Bytes before this one are still to come.
                    return self.start_pending(slot, seg, expected.unwrap_or(seq));
                }
                app::guess_tcp(seg.payload, seg.ports)
            }
            Transport::Udp => app::guess_udp(seg.payload, seg.ports),
        };
        self.matched(slot, seg, guess);
    }

    /// Acts on a guess for a flow without state.
    fn matched(&mut self, slot: &mut Slot, seg: &Segment<'_>, guess: Guess) {
        let label = |a: App| a as u8;
        let tcp = matches!(seg.transport, Transport::Tcp { .. });
        match guess {
            Guess::Nothing => self.nothing(slot, seg),
            Guess::Ssh | Guess::Smb | Guess::Http2 => {
                slot.app = label(match guess {
                    Guess::Ssh => App::Ssh,
                    Guess::Smb => App::Smb,
                    _ => App::Http2,
                });
                slot.kind |= DONE;
            }
            Guess::Tls => self.start(slot, seg, App::Tls, self.cfg.tls, K_TLS),
            Guess::Http => self.start(slot, seg, App::Http, self.cfg.http, K_HTTP),
            Guess::Dns => self.start(slot, seg, App::Dns, self.cfg.dns, K_DNS),
            Guess::Quic if !tcp => self.start(slot, seg, App::Quic, self.cfg.quic, K_QUIC),
            Guess::Quic => self.nothing(slot, seg),
        }
    }

    /// A payload that matched nothing.
    fn nothing(&mut self, slot: &mut Slot, seg: &Segment<'_>) {
        let d = seg.dir.index();
        if matches!(seg.transport, Transport::Tcp { .. }) {
            // A stream's first bytes decide for the direction.
            slot.kind |= NOTHING_C2S << d;
        }
        let both = NOTHING_C2S | NOTHING_C2S << 1;
        let seen = u16::from(slot.seen[0]) + u16::from(slot.seen[1]);
        if slot.kind & both == both || seen >= 2 * u16::from(self.cfg.packets) {
            slot.kind |= DONE;
        }
    }

    /// Gives the flow state for `kind` (or just the label, when the
    /// protocol is off or the pools are full) and feeds it the payload.
    fn start(&mut self, slot: &mut Slot, seg: &Segment<'_>, app: App, on: bool, kind: u8) {
        slot.app = app as u8;
        if !on || !self.room() {
            slot.kind |= DONE;
            return;
        }
        let idx = match kind {
            K_TLS => self.tls.take(TlsFlow::default),
            K_HTTP => self.http.take(HttpFlow::default),
            K_DNS => self.dns.take(DnsFlow::default),
            _ => self.quic.take(QuicState::default),
        };
        let Some(idx) = idx else {
            self.stats.flows_refused += 1;
            slot.kind |= DONE;
            return;
        };
        self.stats.flows += 1;
        slot.set(kind, idx);
        self.on_state(slot, seg);
    }

    /// Feeds a payload to the flow's state.
    fn on_state(&mut self, slot: &mut Slot, seg: &Segment<'_>) {
        match (slot.k(), seg.transport) {
            (K_QUIC, _) => self.quic_seg(slot, seg),
            (K_DNS, Transport::Udp) => self.dns_datagram(slot, seg),
            _ => self.tcp_seg(slot, seg),
        }
    }

    fn quic_seg(&mut self, slot: &mut Slot, seg: &Segment<'_>) {
        let Some(q) = self.quic.get_mut(slot.idx) else {
            slot.kind |= DONE;
            return;
        };
        let mut cx = QuicCtx {
            pool: &mut self.bufs,
            scratch: &mut self.scratch,
            quic: &mut self.quic_buf,
            stats: &mut self.stats,
            bound: self.cfg.reassembly,
        };
        q.on_datagram(seg.dir, seg.payload, &mut cx);
        let gave_up =
            u16::from(slot.seen[0]) + u16::from(slot.seen[1]) >= 2 * u16::from(self.cfg.packets);
        if q.done || gave_up {
            q.finish(&mut self.bufs);
            let info = q.info();
            let first = info
                .alpn
                .as_deref()
                .and_then(|a| crate::fields::alpn_names(a).next());
            slot.app = App::from_u8(slot.app).refine(first.unwrap_or(b"")) as u8;
            self.quic.give(slot.idx);
            self.freeze(slot, L7Fields::Quic(Box::new(info)));
        }
    }

    fn dns_datagram(&mut self, slot: &mut Slot, seg: &Segment<'_>) {
        match self.dns.get_mut(slot.idx) {
            Some(f) => f.st.on_message(seg.payload, &mut self.stats),
            None => slot.kind |= DONE,
        }
    }

    /// Keeps `fields` for the rest of the flow and stops inspecting it.
    fn freeze(&mut self, slot: &mut Slot, fields: L7Fields) {
        let i = self.frozen.insert(fields);
        slot.set(K_FROZEN, i);
        slot.kind |= DONE;
    }

    fn http_cfg(&self) -> HttpCfg {
        HttpCfg {
            target_len: self.cfg.http_target_len,
            user_agent: self.cfg.http_user_agent,
        }
    }

    /// The flow's label (refined by ALPN once seen).
    pub fn app(&self, slot: &Slot) -> App {
        let a = App::from_u8(slot.app);
        match slot.k() {
            K_TLS => self
                .tls
                .get(slot.idx)
                .and_then(|t| t.st.label_alpn())
                .map_or(a, |p| a.refine(p)),
            _ => a,
        }
    }

    /// The fields of the flow's current record.
    pub fn fields(&self, slot: &Slot) -> Option<L7Fields> {
        match slot.k() {
            K_TLS => self
                .tls
                .get(slot.idx)
                .map(|t| L7Fields::Tls(Box::new(t.st.info()))),
            K_QUIC => self
                .quic
                .get(slot.idx)
                .map(|q| L7Fields::Quic(Box::new(q.info()))),
            K_HTTP => self
                .http
                .get(slot.idx)
                .map(|h| L7Fields::Http(Box::new(h.st.info()))),
            K_DNS => self
                .dns
                .get(slot.idx)
                .map(|d| L7Fields::Dns(Box::new(d.st.info()))),
            K_FROZEN => self.frozen.get(slot.idx).cloned(),
            _ => None,
        }
    }

    /// The label and fields of the flow's last record, and its state
    /// released (the frozen fields move out, uncopied).
    pub fn finish(&mut self, slot: &mut Slot) -> (App, Option<L7Fields>) {
        let app = self.app(slot);
        if slot.k() == K_FROZEN {
            let fields = self.frozen.remove(slot.idx);
            *slot = Slot::default();
            return (app, fields);
        }
        let fields = self.fields(slot);
        self.release(slot);
        (app, fields)
    }

    /// A new reporting interval: per-interval counts restart.
    pub fn end_interval(&mut self, slot: &mut Slot) {
        match slot.k() {
            K_HTTP => {
                if let Some(h) = self.http.get_mut(slot.idx) {
                    h.st.reset_interval();
                }
            }
            K_DNS => {
                if let Some(d) = self.dns.get_mut(slot.idx) {
                    d.st.reset_interval();
                }
            }
            _ => {}
        }
    }

    /// Frees whatever the flow holds; the slot is zero again.
    pub fn release(&mut self, slot: &mut Slot) {
        let i = slot.idx;
        match slot.k() {
            K_PENDING => {
                if let Some(p) = self.pending.get_mut(i) {
                    p.streams.iter_mut().for_each(|s| s.finish(&mut self.bufs));
                }
                self.pending.give(i);
            }
            K_TLS => {
                if let Some(t) = self.tls.get_mut(i) {
                    t.streams.iter_mut().for_each(|s| s.finish(&mut self.bufs));
                }
                self.tls.give(i);
            }
            K_QUIC => {
                if let Some(q) = self.quic.get_mut(i) {
                    q.finish(&mut self.bufs);
                }
                self.quic.give(i);
            }
            K_HTTP => {
                if let Some(h) = self.http.get_mut(i) {
                    h.streams.iter_mut().for_each(|s| s.finish(&mut self.bufs));
                }
                self.http.give(i);
            }
            K_DNS => {
                if let Some(d) = self.dns.get_mut(i) {
                    d.streams.iter_mut().for_each(|s| s.finish(&mut self.bufs));
                }
                self.dns.give(i);
            }
            K_FROZEN => {
                self.frozen.remove(i);
            }
            _ => {}
        }
        *slot = Slot::default();
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
