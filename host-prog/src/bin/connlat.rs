//! TCP connect latency per process, from one tracepoint:
//! `sock:inet_sock_set_state`, as a BTF-typed raw tracepoint where the
//! kernel has one (`conn_set_state_btf`) or else the classic tracepoint
//! (`conn_set_state`). The BTF-typed one is preferred because the kernel
//! skips a classic tracepoint program whenever *any* BPF program or a BPF
//! map system call is already running on that CPU (the `bpf_prog_active`
//! guard, counted in the program's `recursion_misses`), which loses
//! attempts while user space reads the probe's own maps; a raw tracepoint
//! program is skipped only when it interrupts itself.
//! CLOSE → SYN_SENT fires inside `connect()`,
//! in the connecting process's context, so the process is known there; the
//! start is kept by socket. SYN_SENT → ESTABLISHED (in softirq, when the
//! SYN+ACK is processed) or SYN_SENT → CLOSE (refused, timed out, aborted)
//! ends the attempt and reports it. The minimum-latency filter is applied
//! here, so user space only sees what it prints (as libbpf-tools'
//! tcpconnlat does).
#![no_std]
#![no_main]
#![deny(clippy::undocumented_unsafe_blocks)]

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{btf_tracepoint, map, tracepoint},
    maps::{LruHashMap, PerCpuArray, RingBuf},
    programs::{BtfTracePointContext, TracePointContext},
};
use host_prog::{
    AF_INET, AF_INET6, IPPROTO_TCP, StateIdentity, rd, state_identity, tp_i32, tp_u16, tp_u64,
};
use xdprobe_common::host::{
    ConnCounters, ConnEvent, ConnSettings, ConnSockOffsets, ConnStart, STACK_MAX_TGIDS,
    conn_result,
};

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

/// Overwritten by the loader before load.
#[unsafe(no_mangle)]
static CONN_SETTINGS: ConnSettings = ConnSettings::ZERO;

macro_rules! setting {
    ($($f:tt)+) => {
        // SAFETY: a plain static, never written by the program.
        unsafe { core::ptr::read_volatile(&CONN_SETTINGS.$($f)+) }
    };
}

#[map(name = "CONN_EVENTS")]
static CONN_EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Connections in SYN_SENT. LRU-bounded; user space also removes entries
/// older than any SYN retry schedule (a socket freed without a CLOSE
/// transition would otherwise stay until evicted).
#[map(name = "CONN_START")]
static CONN_START: LruHashMap<u64, ConnStart> = LruHashMap::with_max_entries(16384, 0);

#[map(name = "CONN_COUNTERS")]
static CONN_COUNTERS: PerCpuArray<ConnCounters> = PerCpuArray::with_max_entries(1, 0);

const TCP_ESTABLISHED: i32 = 1;
const TCP_SYN_SENT: i32 = 2;
const TCP_CLOSE: i32 = 7;
const ECONNREFUSED: i32 = 111;
const ETIMEDOUT: i32 = 110;

#[inline(always)]
fn counters() -> Option<&'static mut ConnCounters> {
    let p = CONN_COUNTERS.get_ptr_mut(0)?;
    // SAFETY: index 0 of a one-entry per-CPU array: this CPU's slot;
    // tracing programs do not nest on one CPU.
    Some(unsafe { &mut *p })
}

#[inline(always)]
fn tgid_ok(tgid: u32) -> bool {
    let n = setting!(n_tgids) as usize;
    if n == 0 {
        return true;
    }
    for i in 0..STACK_MAX_TGIDS {
        if i >= n {
            break;
        }
        if setting!(tgids[i]) == tgid {
            return true;
        }
    }
    false
}

#[tracepoint]
pub fn conn_set_state(ctx: TracePointContext) -> u32 {
    let tp = setting!(tp);
    if tp_u16(&ctx, tp.state_protocol) != u16::from(IPPROTO_TCP) {
        return 0;
    }
    let old = tp_i32(&ctx, tp.state_old);
    let new = tp_i32(&ctx, tp.state_new);
    let sk = tp_u64(&ctx, tp.state_sk);
    on_state(old, new, sk, || state_identity(&ctx, &tp))
}

#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn conn_set_state_btf(ctx: BtfTracePointContext) -> u32 {
    let sk: u64 = ctx.arg(0);
    let old: i32 = ctx.arg(1);
    let new: i32 = ctx.arg(2);
    let o = setting!(sk);
    if rd::<u16>(sk, o.protocol) != Some(u16::from(IPPROTO_TCP)) {
        return 0;
    }
    on_state(old, new, sk, || sock_identity(sk, &o))
}

/// The connection's identity from the socket, as the classic tracepoint's
/// `TP_fast_assign` takes it.
#[inline(always)]
fn sock_identity(sk: u64, o: &ConnSockOffsets) -> Option<StateIdentity> {
    let family = rd::<u16>(sk, o.family)?;
    let mut id = StateIdentity {
        family: family as u8,
        saddr: [0; 16],
        daddr: [0; 16],
        sport: u16::from_be(rd::<u16>(sk, o.sport)?),
        dport: u16::from_be(rd::<u16>(sk, o.dport)?),
    };
    if family == AF_INET {
        id.saddr[..4].copy_from_slice(&rd::<[u8; 4]>(sk, o.saddr)?);
        id.daddr[..4].copy_from_slice(&rd::<[u8; 4]>(sk, o.daddr)?);
    } else if family == AF_INET6 {
        id.saddr = rd::<[u8; 16]>(sk, o.saddr6)?;
        id.daddr = rd::<[u8; 16]>(sk, o.daddr6)?;
    } else {
        return None;
    }
    Some(id)
}

/// One TCP state change of socket `sk`, whichever hook saw it.
#[inline(always)]
fn on_state(old: i32, new: i32, sk: u64, identity: impl FnOnce() -> Option<StateIdentity>) -> u32 {
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if old == TCP_CLOSE && new == TCP_SYN_SENT {
        let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        if !tgid_ok(tgid) {
            return 0;
        }
        let start = ConnStart {
            ts_ns: now,
            tgid,
            _pad: 0,
            comm: bpf_get_current_comm().unwrap_or([0; 16]),
        };
        let _ = CONN_START.insert(sk, start, 0);
        if let Some(c) = counters() {
            c.started += 1;
        }
        return 0;
    }
    if old != TCP_SYN_SENT || (new != TCP_ESTABLISHED && new != TCP_CLOSE) {
        return 0;
    }
    // SAFETY: copied out before the entry is removed.
    let Some(start) = (unsafe { CONN_START.get(sk) }).copied() else {
        if let Some(c) = counters() {
            c.no_start += 1;
        }
        return 0;
    };
    let _ = CONN_START.remove(sk);
    let latency = now.saturating_sub(start.ts_ns);
    let (result, err) = if new == TCP_ESTABLISHED {
        if latency < setting!(min_ns) {
            if let Some(c) = counters() {
                c.below_min += 1;
            }
            return 0;
        }
        (conn_result::ESTABLISHED, 0)
    } else {
        let err = rd::<i32>(sk, setting!(sk_err)).unwrap_or(0);
        let r = match err {
            ECONNREFUSED => conn_result::REFUSED,
            ETIMEDOUT => conn_result::TIMED_OUT,
            _ => conn_result::FAILED,
        };
        (r, err)
    };
    let Some(id) = identity() else {
        if let Some(c) = counters() {
            c.no_identity += 1;
        }
        return 0;
    };
    let ev = ConnEvent {
        start_ns: start.ts_ns,
        latency_ns: latency,
        tgid: start.tgid,
        err,
        comm: start.comm,
        saddr: id.saddr,
        daddr: id.daddr,
        sport: id.sport,
        dport: id.dport,
        family: id.family,
        result,
        _pad: 0,
    };
    let flags = if CONN_EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= u64::from(setting!(wakeup_bytes))
    {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    let ok = CONN_EVENTS
        .output::<ConnEvent>(&ev, u64::from(flags))
        .is_ok();
    if let Some(c) = counters() {
        if ok {
            c.events += 1;
        } else {
            c.ringbuf_full += 1;
        }
    }
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Unreachable by construction; a surviving panic path makes the
    // verifier reject the program at load time.
    loop {}
}
