//! A TCP segment builder for the trackers' unit tests: a test names what
//! it is about (direction, flags, sequence numbers, an option, the time)
//! and the rest takes a plain default, so a tracker test reads as the
//! trace it replays and a new header field means editing one place.

use super::tcp::{TcpTracker, TsCtx};
use crate::parse::{TcpFlags, TcpMeta, TcpOptions};
use crate::record::{Dir, EndReason, FlowRecord};
use crate::time::Timestamp;

/// One segment, fed to a tracker with [`Seg::feed`].
#[derive(Clone, Debug)]
pub(crate) struct Seg {
    dir: Dir,
    meta: TcpMeta,
    payload: Vec<u8>,
    at_ns: u64,
}

impl Seg {
    /// A segment of `flags` in direction `dir`: sequence and
    /// acknowledgement 0, window 1000, no options, no payload, at time 0.
    pub fn new(dir: Dir, flags: TcpFlags) -> Seg {
        Seg {
            dir,
            meta: TcpMeta {
                seq: 0,
                ack: 0,
                flags,
                window: 1000,
                options: TcpOptions::default(),
            },
            payload: Vec::new(),
            at_ns: 0,
        }
    }

    pub fn seq(mut self, seq: u32) -> Seg {
        self.meta.seq = seq;
        self
    }

    pub fn ack(mut self, ack: u32) -> Seg {
        self.meta.ack = ack;
        self
    }

    pub fn win(mut self, window: u16) -> Seg {
        self.meta.window = window;
        self
    }

    /// `len` payload bytes of zeros.
    pub fn len(mut self, len: u32) -> Seg {
        self.payload = vec![0; len as usize];
        self
    }

    pub fn payload(mut self, p: &[u8]) -> Seg {
        self.payload = p.to_vec();
        self
    }

    /// The timestamp option (TSval, TSecr), or none.
    pub fn tsopt(mut self, opt: Option<(u32, u32)>) -> Seg {
        self.meta.options.timestamp = opt;
        self
    }

    /// The window-scale option, or none.
    pub fn wscale(mut self, ws: Option<u8>) -> Seg {
        self.meta.options.window_scale = ws;
        self
    }

    /// When it was captured, in ns.
    pub fn at(mut self, ns: u64) -> Seg {
        self.at_ns = ns;
        self
    }

    /// Shows the segment to `t` (and to its timestamp-RTT state, if any).
    pub fn feed(&self, t: &mut TcpTracker, tsrtt: Option<TsCtx<'_>>) {
        t.on_segment(
            self.dir,
            &self.meta,
            self.payload.len() as u32,
            &self.payload,
            Timestamp::from_nanos(self.at_ns),
            tsrtt,
        );
    }
}

/// The record the trackers' tests fill: TCP, client port 40000, server
/// port 80, ended idle.
pub(crate) fn tcp_record() -> FlowRecord {
    FlowRecord {
        client_port: 40000,
        server_port: 80,
        end_reason: EndReason::Idle,
        ..FlowRecord::blank(6)
    }
}
