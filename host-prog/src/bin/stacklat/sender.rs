//! The sending side's layers: the send call (`SOCK_TX`), TCP's send loop
//! (`TCP_TX`), IP's hand-off to the device (`IP_TX`) and the driver
//! (`DEV_TX`).

use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use aya_ebpf::macros::{btf_tracepoint, raw_tracepoint, tracepoint};
use aya_ebpf::programs::{BtfTracePointContext, RawTracePointContext, TracePointContext};
use host_prog::{rd, rec_i32, rec_u16, rec_u64, tp_span, tp_u64};
use xdprobe_common::host::{GATE_ENTRY, GATE_REST, SendSlot, layer};

use crate::emit::{emit_sock, tx_skb};
use crate::maps::{Count, count, epoch, now, open, send_slot};
use crate::scope::{sampled, tgid_ok};

/// Bytes of a `sock_{send,recv}_length` record read in one go from `sk`
/// on (6.18: `sk` at 8, `flags` ends at 28); one read instead of one per
/// field.
pub(crate) const SOCK_LEN_SPAN: usize = 24;

/// `syscalls:sys_enter_{write,writev,sendto,sendmsg,sendmmsg,sendfile64}`:
/// the socket-layer time of the bytes this call will send. The socket is
/// not known yet; `sock_send_length` pairs it by thread when the call
/// returns. Plain stores into the thread's array slot: this runs on every
/// write(2) of the host, sockets or not.
#[tracepoint]
pub fn stack_send_enter(_ctx: TracePointContext) -> u32 {
    if !open(GATE_ENTRY) {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !tgid_ok((pid_tgid >> 32) as u32) {
        return 0;
    }
    let tid = pid_tgid as u32;
    let Some(slot) = send_slot(tid) else {
        return 0;
    };
    slot.tid = tid;
    slot.entry_ns = now();
    // A TCP-layer observation left by a path that never reached
    // `sock_send_length` (kTLS) is not finished by this call's bytes.
    slot.tcp_sk = 0;
    0
}

/// `sock:sock_send_length` (when a send call returns): the socket-layer
/// observation `[write_seq - ret, write_seq)` at the call's entry time, and
/// the end of the TCP-layer observation the call was building. The
/// socket's `write_seq` is read only when the slot holds something to
/// finish; both ranges are tested against the sampling grid before
/// anything else is read.
#[tracepoint]
pub fn stack_send_length(ctx: TracePointContext) -> u32 {
    if !open(GATE_REST) {
        return 0;
    }
    let tp = setting!(tp);
    let Some(r) = tp_span::<SOCK_LEN_SPAN>(&ctx, tp.send_sk) else {
        return 0;
    };
    if rec_u16(&ctx, &r, tp.send_protocol) != u16::from(host_prog::IPPROTO_TCP) {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(slot) = send_slot(tid) else {
        return 0;
    };
    let ret = rec_i32(&ctx, &r, tp.send_ret);
    let sk = rec_u64(&ctx, &r, tp.send_sk);
    // One copy of the slot up front (volatile: left to itself the
    // compiler defers the loads and mangles the map pointer in ways the
    // verifier rejects).
    // SAFETY: `slot` is a valid, aligned map value.
    let cur = unsafe { core::ptr::read_volatile(slot as *const SendSlot) };
    let (mut entry, mut pending, mut pseq, mut pts) = (0, false, 0, 0);
    if cur.tid == tid {
        entry = cur.entry_ns;
        pending = cur.tcp_sk != 0 && cur.tcp_sk == sk;
        (pseq, pts) = (cur.tcp_seq, cur.tcp_ts_ns);
        slot.entry_ns = 0;
        slot.tcp_sk = 0;
    }
    // What the slot kept from before the current window opened (a call
    // whose return fell between windows, when this program was gated)
    // belongs to another call: never paired with this one.
    let since = epoch();
    if entry != 0 && entry < since {
        count(Count::StaleEntry);
        entry = 0;
    }
    if pending && pts < since {
        pending = false;
    }
    let sock = ret > 0;
    if sock && entry == 0 {
        count(Count::NoEntry);
    }
    let sock = sock && entry != 0;
    if !sock && !pending {
        return 0;
    }
    let Some(write_seq) = rd::<u32>(sk, setting!(off.tp_write_seq)) else {
        return 0;
    };
    if pending && pseq != write_seq && sampled(pseq, write_seq) {
        emit_sock(layer::TCP_TX, sk, pseq, write_seq, pts, 0, false);
    }
    if !sock {
        return 0;
    }
    let seq = write_seq.wrapping_sub(ret as u32);
    if !sampled(seq, write_seq) {
        return 0;
    }
    let tgid = (pid_tgid >> 32) as u32;
    if !tgid_ok(tgid) {
        return 0;
    }
    emit_sock(layer::SOCK_TX, sk, seq, write_seq, entry, tgid, false);
    0
}

/// `tcp_sendmsg_locked` fires once per skb the send loop fills, before it
/// copies: `write_seq` then is where this batch of bytes starts. The
/// batch's end is the next firing's `write_seq` (or the call's end); an
/// unchanged `write_seq` means the loop waited for memory and copies only
/// now, so the time is renewed. The pending batch lives in the thread's
/// send slot: one call sends on one socket, and the kernel serialises a
/// thread's firings.
#[inline(always)]
pub(crate) fn tcp_sendmsg(sk: u64) {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !tgid_ok((pid_tgid >> 32) as u32) {
        return;
    }
    let Some(ws) = rd::<u32>(sk, setting!(off.tp_write_seq)) else {
        count(Count::ReadFailed);
        return;
    };
    let tid = pid_tgid as u32;
    let Some(slot) = send_slot(tid) else {
        return;
    };
    if slot.tid == tid {
        // A batch begun before the window opened was not watched whole.
        if slot.tcp_sk == sk
            && slot.tcp_seq != ws
            && slot.tcp_ts_ns >= epoch()
            && sampled(slot.tcp_seq, ws)
        {
            emit_sock(
                layer::TCP_TX,
                sk,
                slot.tcp_seq,
                ws,
                slot.tcp_ts_ns,
                0,
                false,
            );
        }
    } else {
        // Another thread's slot (or a path without the entry hook): take it.
        slot.tid = tid;
        slot.entry_ns = 0;
    }
    slot.tcp_sk = sk;
    slot.tcp_seq = ws;
    slot.tcp_ts_ns = now();
}

#[btf_tracepoint(function = "tcp_sendmsg_locked")]
pub fn stack_tcp_sendmsg_btf(ctx: BtfTracePointContext) -> u32 {
    let sk: u64 = ctx.arg(0);
    tcp_sendmsg(sk);
    0
}

#[raw_tracepoint(tracepoint = "tcp_sendmsg_locked")]
pub fn stack_tcp_sendmsg_raw(ctx: RawTracePointContext) -> u32 {
    let sk: u64 = ctx.arg(0);
    tcp_sendmsg(sk);
    0
}

/// `IP_TX` (default `net:net_dev_queue`): IP is done with the segment and
/// hands it to the device layer, before the qdisc.
#[tracepoint]
pub fn stack_ip_tx(ctx: TracePointContext) -> u32 {
    tx_skb(layer::IP_TX, tp_u64(&ctx, setting!(tp.ip_tx_skb)));
    0
}

/// `DEV_TX` (default `net:net_dev_start_xmit`): the qdisc released the
/// segment to the driver.
#[tracepoint]
pub fn stack_dev_tx(ctx: TracePointContext) -> u32 {
    tx_skb(layer::DEV_TX, tp_u64(&ctx, setting!(tp.dev_tx_skb)));
    0
}
