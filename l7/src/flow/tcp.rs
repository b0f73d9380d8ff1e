//! TCP payloads: each direction's stream fed to its protocol's consumer.

use super::{
    DONE, DnsFlow, HttpFlow, K_DNS, K_HTTP, K_PENDING, K_TLS, L7, NOTHING_C2S, PendingFlow,
    Segment, Slot, TlsFlow, Transport,
};
use crate::app::{self, App, Guess};
use crate::fields::L7Fields;
use crate::http::HttpCtx;
use crate::stream::{Eat, Follow, Seg, Stream};

/// The stream segment of a payload (`None`: not TCP), and where a stream
/// that has seen nothing yet starts: at the byte expected next when this
/// segment came after a hole, so the hole can still fill.
fn seg_of<'a>(seg: &Segment<'a>, stream: &mut Stream) -> Option<Seg<'a>> {
    let Transport::Tcp { seq, expected, .. } = seg.transport else {
        return None;
    };
    if let Some(e) = expected
        && (seq.wrapping_sub(e) as i32) > 0
    {
        stream.start_at(e);
    }
    Some(Seg {
        seq,
        data: seg.payload,
        wire: seg.wire_len,
    })
}

/// What the dispatch functions feed: a payload, or nothing (run the
/// consumer over held bytes, after the flow's protocol was recognised).
#[derive(Clone, Copy)]
enum Feed<'s, 'a> {
    Payload(&'s Segment<'a>),
    Held(&'s Segment<'a>),
}

impl<'s, 'a> Feed<'s, 'a> {
    fn seg(&self) -> &'s Segment<'a> {
        match self {
            Feed::Payload(s) | Feed::Held(s) => s,
        }
    }

    /// The stream segment (`None` for `Held`), and whether to feed at all.
    fn stream_seg(&self, stream: &mut Stream) -> Option<Option<Seg<'a>>> {
        match self {
            Feed::Payload(s) => seg_of(s, stream).map(Some),
            Feed::Held(_) => Some(None),
        }
    }
}

impl L7 {
    pub(super) fn tcp_seg(&mut self, slot: &mut Slot, seg: &Segment<'_>) {
        self.dispatch(slot, Feed::Payload(seg));
    }

    fn dispatch(&mut self, slot: &mut Slot, f: Feed<'_, '_>) {
        match slot.k() {
            K_PENDING => self.pending_seg(slot, f.seg()),
            K_TLS => self.tls_seg(slot, f),
            K_HTTP => self.http_seg(slot, f),
            K_DNS => self.dns_tcp_seg(slot, f),
            _ => slot.kind |= DONE,
        }
    }

    /// The first payload of a direction came after a hole: hold it (in a
    /// pending state) until the stream's start arrives and can be
    /// recognised.
    pub(super) fn start_pending(&mut self, slot: &mut Slot, seg: &Segment<'_>, start: u32) {
        let idx = if self.room() {
            self.pending.take(PendingFlow::default)
        } else {
            None
        };
        let Some(idx) = idx else {
            slot.kind |= DONE;
            return;
        };
        slot.set(K_PENDING, idx);
        if let Some(p) = self.pending.get_mut(idx) {
            p.streams[seg.dir.index()].start_at(start);
        }
        self.pending_seg(slot, seg);
    }

    /// A payload of a flow whose stream start is awaited.
    fn pending_seg(&mut self, slot: &mut Slot, seg: &Segment<'_>) {
        let d = seg.dir.index();
        let Some(p) = self.pending.get_mut(slot.idx) else {
            slot.kind |= DONE;
            return;
        };
        let Some(s) = seg_of(seg, &mut p.streams[d]) else {
            return;
        };
        let mut guess = None;
        let r = p.streams[d].feed(&mut self.bufs, s, self.cfg.reassembly, &mut |_, b| {
            guess = Some(app::guess_tcp(b, seg.ports));
            Eat::MORE
        });
        if let Err(why) = r {
            self.stats.lost(why);
            guess = Some(Guess::Nothing);
        }
        match guess {
            None => {}
            Some(Guess::Nothing) => {
                p.streams[d].finish(&mut self.bufs);
                slot.kind |= NOTHING_C2S << d;
                let both = NOTHING_C2S | NOTHING_C2S << 1;
                if slot.kind & both == both {
                    self.release(slot);
                    slot.kind |= DONE;
                }
            }
            Some(g) => self.recognised(slot, seg, g),
        }
    }

    /// A pending flow's stream start was recognised: its streams move to
    /// the protocol's state as they are, and the held bytes are parsed.
    fn recognised(&mut self, slot: &mut Slot, seg: &Segment<'_>, g: Guess) {
        let streams = self
            .pending
            .get(slot.idx)
            .map(|p| p.streams)
            .unwrap_or_default();
        self.pending.give(slot.idx);
        let (app, kind, on) = match g {
            Guess::Tls => (App::Tls, K_TLS, self.cfg.tls),
            Guess::Http => (App::Http, K_HTTP, self.cfg.http),
            Guess::Dns => (App::Dns, K_DNS, self.cfg.dns),
            Guess::Ssh => (App::Ssh, 0, false),
            Guess::Smb => (App::Smb, 0, false),
            _ => (App::Http2, 0, false),
        };
        let idx = match (kind, on) {
            (K_TLS, true) => self.tls.take(|| TlsFlow {
                streams,
                ..TlsFlow::default()
            }),
            (K_HTTP, true) => self.http.take(|| HttpFlow {
                streams,
                ..HttpFlow::default()
            }),
            (K_DNS, true) => self.dns.take(|| DnsFlow {
                streams,
                ..DnsFlow::default()
            }),
            _ => None,
        };
        *slot = Slot {
            app: app as u8,
            seen: slot.seen,
            ..Slot::default()
        };
        let Some(i) = idx else {
            for mut s in streams {
                s.finish(&mut self.bufs);
            }
            slot.kind |= DONE;
            return;
        };
        self.stats.flows += 1;
        slot.set(kind, i);
        self.dispatch(slot, Feed::Held(seg));
    }

    fn tls_seg(&mut self, slot: &mut Slot, f: Feed<'_, '_>) {
        let d = f.seg().dir.index();
        let bound = self.cfg.reassembly;
        let Some(t) = self.tls.get_mut(slot.idx) else {
            slot.kind |= DONE;
            return;
        };
        let TlsFlow { streams, st } = t;
        if let Some(s) = f.stream_seg(&mut streams[d]) {
            let (sc, stats) = (&mut self.scratch, &mut self.stats);
            let r = streams[d].drive(&mut self.bufs, s, bound, &mut |_, b| match d {
                0 => st.client_eat(b, sc, bound, stats),
                _ => st.server_eat(b, sc, bound, stats),
            });
            if let Err(why) = r {
                self.stats.lost(why);
            }
        }
        // A direction whose stream ended, or that showed its packets
        // without the hello, is done.
        for (i, s) in streams.iter().enumerate() {
            let gave_up = slot.seen[i] >= self.cfg.packets;
            if matches!(s.state, Follow::Lost | Follow::Done) || gave_up {
                match i {
                    0 => st.client_done = true,
                    _ => st.server_done = true,
                }
            }
        }
        if st.client_done && st.server_done {
            for s in streams.iter_mut() {
                s.finish(&mut self.bufs);
            }
            let app = App::from_u8(slot.app);
            slot.app = st.label_alpn().map_or(app, |p| app.refine(p)) as u8;
            let info = st.info();
            self.tls.give(slot.idx);
            self.freeze(slot, L7Fields::Tls(Box::new(info)));
        }
    }

    fn http_seg(&mut self, slot: &mut Slot, f: Feed<'_, '_>) {
        let seg = f.seg();
        let d = seg.dir.index();
        let bound = self.cfg.http_max_head;
        let cfg = self.http_cfg();
        let Some(h) = self.http.get_mut(slot.idx) else {
            slot.kind |= DONE;
            return;
        };
        let HttpFlow { streams, st } = h;
        let Some(s) = f.stream_seg(&mut streams[d]) else {
            return;
        };
        if let Some(s) = s
            && streams[d].state == Follow::Lost
        {
            let starts = match d {
                0 => app::is_request_start(seg.payload),
                _ => app::is_response_start(seg.payload),
            };
            if !starts {
                return;
            }
            streams[d].resync(&mut self.bufs, s.seq);
            st.restart(d);
        }
        let mut cx = HttpCtx {
            ts_ns: seg.ts_ns,
            t_snt_ns: seg.t_snt_ns,
            cfg,
            stats: &mut self.stats,
        };
        let r = streams[d].drive(&mut self.bufs, s, bound, &mut |pos, b| match d {
            0 => st.request_eat(pos, b, &mut cx),
            _ => st.response_eat(b, &mut cx),
        });
        if let Err(why) = r {
            self.stats.lost(why);
            st.forget_pending();
        }
        if let (0, Some(s), Some(end)) = (d, s, st.body_end)
            && (s.seq.wrapping_add(s.wire).wrapping_sub(end) as i32) >= 0
        {
            st.request_ended(seg.ts_ns);
        }
        if streams[1].state == Follow::Done {
            // An upgrade, a tunnel, or a response until close: nothing
            // more to parse either way.
            streams[0].finish(&mut self.bufs);
            slot.kind |= DONE;
        }
    }

    fn dns_tcp_seg(&mut self, slot: &mut Slot, f: Feed<'_, '_>) {
        let d = f.seg().dir.index();
        let bound = self.cfg.reassembly;
        let Some(fl) = self.dns.get_mut(slot.idx) else {
            slot.kind |= DONE;
            return;
        };
        let DnsFlow { streams, st } = fl;
        let Some(s) = f.stream_seg(&mut streams[d]) else {
            return;
        };
        let stats = &mut self.stats;
        let r = streams[d].drive(&mut self.bufs, s, bound, &mut |_, b| {
            st.tcp_eat(b, bound, stats)
        });
        if let Err(why) = r {
            self.stats.lost(why);
        }
        if streams
            .iter()
            .all(|s| matches!(s.state, Follow::Lost | Follow::Done))
        {
            slot.kind |= DONE;
        }
    }
}
