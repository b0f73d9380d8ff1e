//! The connect-latency program's types (`host-prog/src/bin/connlat.rs`):
//! its settings, the start of a connection in SYN_SENT, the attempt it
//! reports when the connection is set up or fails, and its counters.

use super::{STACK_MAX_TGIDS, TpOffsets};

/// Read-only settings of the connect-latency program.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnSettings {
    /// `sock:inet_sock_set_state` field offsets (`state_*` of [`TpOffsets`]).
    pub tp: TpOffsets,
    /// `sock.sk_err`, to tell a refused connection from a timed-out one.
    pub sk_err: u32,
    /// Successful connections faster than this are not reported (ns; 0: all).
    pub min_ns: u64,
    /// Wake the reader once this many bytes wait (see `StackSettings`).
    pub wakeup_bytes: u32,
    pub n_tgids: u32,
    pub tgids: [u32; STACK_MAX_TGIDS],
    /// Socket member offsets for the BTF-typed program, which gets only
    /// the socket and the two states and reads the rest from the socket.
    pub sk: ConnSockOffsets,
}

/// Where the BTF-typed connect program finds, in a `struct sock`, what the
/// classic tracepoint's record carries (the same members its
/// `TP_fast_assign` reads; `inet_sport`, not `skc_num`, since the port is
/// released before the CLOSE transition).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnSockOffsets {
    /// `sock.sk_protocol` (u16).
    pub protocol: u32,
    /// `sock_common.skc_family` (u16).
    pub family: u32,
    /// `inet_sock.inet_sport` (__be16).
    pub sport: u32,
    /// `sock_common.skc_dport` (__be16).
    pub dport: u32,
    /// `sock_common.skc_rcv_saddr` / `skc_daddr` (__be32).
    pub saddr: u32,
    pub daddr: u32,
    /// `sock_common.skc_v6_rcv_saddr` / `skc_v6_daddr` (16 bytes).
    pub saddr6: u32,
    pub daddr6: u32,
}

impl ConnSockOffsets {
    pub const ZERO: ConnSockOffsets = ConnSockOffsets {
        protocol: 0,
        family: 0,
        sport: 0,
        dport: 0,
        saddr: 0,
        daddr: 0,
        saddr6: 0,
        daddr6: 0,
    };
}

impl ConnSettings {
    pub const ZERO: ConnSettings = ConnSettings {
        sk: ConnSockOffsets::ZERO,
        tp: TpOffsets::ZERO,
        sk_err: 0,
        min_ns: 0,
        wakeup_bytes: 0,
        n_tgids: 0,
        tgids: [0; STACK_MAX_TGIDS],
    };
}

/// A connection in SYN_SENT: who started it, when.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnStart {
    pub ts_ns: u64,
    pub tgid: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
}

/// `ConnEvent::result`.
pub mod conn_result {
    /// SYN_SENT → ESTABLISHED.
    pub const ESTABLISHED: u8 = 0;
    /// SYN_SENT → CLOSE with ECONNREFUSED (a RST answered the SYN).
    pub const REFUSED: u8 = 1;
    /// SYN_SENT → CLOSE with ETIMEDOUT (no answer to the SYN retries).
    pub const TIMED_OUT: u8 = 2;
    /// SYN_SENT → CLOSE otherwise (closed by the application, host
    /// unreachable, …): `ConnEvent::err` says which.
    pub const FAILED: u8 = 3;
}

/// One outgoing TCP connection attempt, reported when it ends (connected
/// or failed).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnEvent {
    /// When `connect()` moved the socket to SYN_SENT (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// SYN_SENT → ESTABLISHED (or → CLOSE), ns.
    pub latency_ns: u64,
    pub tgid: u32,
    /// `sock.sk_err` at the failure (0 on success).
    pub err: i32,
    pub comm: [u8; 16],
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    /// `AF_INET` / `AF_INET6`.
    pub family: u8,
    /// `conn_result::*`.
    pub result: u8,
    pub _pad: u16,
}

/// Per-CPU counters of the connect-latency program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounters {
    /// Connections seen entering SYN_SENT (in scope).
    pub started: u64,
    /// Reported (connected or failed).
    pub events: u64,
    /// Lost because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Connected faster than the minimum: not reported.
    pub below_min: u64,
    /// An end without a recorded start (began before the probe, or its
    /// entry was evicted).
    pub no_start: u64,
    /// An end whose addresses could not be read (not IPv4/IPv6, or a
    /// failed read): not reported.
    pub no_identity: u64,
}

impl ConnCounters {
    pub const fn add(self, o: ConnCounters) -> ConnCounters {
        ConnCounters {
            started: self.started.wrapping_add(o.started),
            events: self.events.wrapping_add(o.events),
            ringbuf_full: self.ringbuf_full.wrapping_add(o.ringbuf_full),
            below_min: self.below_min.wrapping_add(o.below_min),
            no_start: self.no_start.wrapping_add(o.no_start),
            no_identity: self.no_identity.wrapping_add(o.no_identity),
        }
    }
}

const _: () = assert!(core::mem::size_of::<ConnEvent>() == 8 + 8 + 4 + 4 + 16 + 32 + 8);
const _: () = assert!(core::mem::size_of::<ConnStart>() == 32);
const _: () = assert!(core::mem::size_of::<ConnSettings>() == 27 * 4 + 4 + 8 + 4 + 4 + 32 + 8 * 4);
