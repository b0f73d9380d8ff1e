//! The receiving side's layers: the device (`DEV_RX`), IP (`IP_RX`),
//! TCP (`TCP_RX`) and the reading call (`SOCK_RX`); and the socket
//! close that ends a flow.

use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use aya_ebpf::macros::{btf_tracepoint, tracepoint};
use aya_ebpf::programs::{BtfTracePointContext, TracePointContext};
use host_prog::{rd, rec_i32, rec_u16, rec_u64, state_identity, tp_i32, tp_span, tp_u16, tp_u64};
use xdprobe_common::host::{GATE_REST, StackEvent, layer};

use crate::emit::{emit_sock, net_inum, output, rx_skb};
use crate::maps::{Count, SOCK_IDS, count, now, open};
use crate::scope::{sampled, tgid_ok};
use crate::sender::SOCK_LEN_SPAN;
use crate::skb_hooks::ld;

/// Bytes of a `tcp_probe` record read in one go from `data_len` on (6.18: at 76; `skaddr`
/// ends at 136).
pub(crate) const TCP_PROBE_SPAN: usize = 64;

/// `DEV_RX` hook 0 (default `net:napi_gro_receive_entry`: a NAPI driver
/// delivered a frame).
#[tracepoint]
pub fn stack_dev_rx0(ctx: TracePointContext) -> u32 {
    rx_skb(layer::DEV_RX, tp_u64(&ctx, setting!(tp.dev_rx_skb[0])));
    0
}

/// `DEV_RX` hook 1 (default `net:netif_rx`: a non-NAPI device — veth
/// without GRO, loopback — queued a frame to the backlog).
#[tracepoint]
pub fn stack_dev_rx1(ctx: TracePointContext) -> u32 {
    rx_skb(layer::DEV_RX, tp_u64(&ctx, setting!(tp.dev_rx_skb[1])));
    0
}

/// `DEV_RX` hook 2 (default `net:netif_receive_skb_entry`: a driver
/// called `netif_receive_skb` directly, without GRO).
#[tracepoint]
pub fn stack_dev_rx2(ctx: TracePointContext) -> u32 {
    rx_skb(layer::DEV_RX, tp_u64(&ctx, setting!(tp.dev_rx_skb[2])));
    0
}

/// `IP_RX` (default `net:netif_receive_skb`): the (GRO-merged) skb enters
/// the protocol stack, on its way to `ip_rcv`.
#[tracepoint]
pub fn stack_ip_rx(ctx: TracePointContext) -> u32 {
    rx_skb(layer::IP_RX, tp_u64(&ctx, setting!(tp.ip_rx_skb)));
    0
}

/// `tcp:tcp_probe`: TCP processes a segment on an established socket
/// (softirq, or the socket backlog when the reader held the lock).
#[tracepoint]
pub fn stack_tcp_probe(ctx: TracePointContext) -> u32 {
    if !open(GATE_REST) {
        return 0;
    }
    let tp = setting!(tp);
    let Some(r) = tp_span::<TCP_PROBE_SPAN>(&ctx, tp.probe_data_len) else {
        return 0;
    };
    let data_len = u32::from(rec_u16(&ctx, &r, tp.probe_data_len));
    if data_len == 0 {
        return 0;
    }
    let skb = rec_u64(&ctx, &r, tp.probe_skb);
    let Some(seq) = rd::<u32>(skb, setting!(off.skb_cb) + setting!(off.tcb_seq)) else {
        count(Count::ReadFailed);
        return 0;
    };
    let end = seq.wrapping_add(data_len);
    if !sampled(seq, end) {
        return 0;
    }
    let t = now();
    let sk = rec_u64(&ctx, &r, tp.probe_sk);
    emit_sock(layer::TCP_RX, sk, seq, end, t, 0, true);
    0
}

/// `tcp_probe` as a BTF-typed program (the default where the kernel takes
/// it: the kernel skips a classic tracepoint program while another BPF
/// program or a map call runs on the CPU). The payload length is what the
/// classic record's `data_len` holds, `skb->len` less the TCP header
/// (`skb->data` is at the TCP header here).
#[btf_tracepoint(function = "tcp_probe")]
pub fn stack_tcp_probe_btf(ctx: BtfTracePointContext) -> u32 {
    let sk: u64 = ctx.arg(0);
    let skb: *const u8 = ctx.arg(1);
    let len: u32 = ld(skb, setting!(off.skb_len));
    let head: u64 = ld(skb, setting!(off.skb_head));
    // `transport_header` follows `protocol` (checked at start-up).
    let th: u16 = ld(skb, setting!(off.skb_protocol) + 2);
    let Some(doff) = rd::<u8>(head + u64::from(th), 12) else {
        count(Count::ReadFailed);
        return 0;
    };
    let data_len = len.saturating_sub(u32::from(doff >> 4) * 4);
    if data_len == 0 {
        return 0;
    }
    let Some(seq) = rd::<u32>(skb as u64, setting!(off.skb_cb) + setting!(off.tcb_seq)) else {
        count(Count::ReadFailed);
        return 0;
    };
    let end = seq.wrapping_add(data_len);
    if !sampled(seq, end) {
        return 0;
    }
    let t = now();
    emit_sock(layer::TCP_RX, sk, seq, end, t, 0, true);
    0
}

/// `sock:sock_recv_length` (when a receive call returns): the application
/// has `[copied_seq - ret, copied_seq)`.
#[tracepoint]
pub fn stack_recv_length(ctx: TracePointContext) -> u32 {
    const MSG_PEEK: i32 = 2;
    if !open(GATE_REST) {
        return 0;
    }
    let tp = setting!(tp);
    let Some(r) = tp_span::<SOCK_LEN_SPAN>(&ctx, tp.recv_sk) else {
        return 0;
    };
    if rec_u16(&ctx, &r, tp.recv_protocol) != u16::from(host_prog::IPPROTO_TCP) {
        return 0;
    }
    let ret = rec_i32(&ctx, &r, tp.recv_ret);
    if ret <= 0 || rec_i32(&ctx, &r, tp.recv_flags) & MSG_PEEK != 0 {
        return 0;
    }
    let sk = rec_u64(&ctx, &r, tp.recv_sk);
    let Some(copied) = rd::<u32>(sk, setting!(off.tp_copied_seq)) else {
        count(Count::ReadFailed);
        return 0;
    };
    // A read that also consumed the peer's FIN: `copied_seq` counts the
    // FIN as one byte past the data (the FIN was received: CLOSE_WAIT,
    // LAST_ACK or CLOSING; all of it read: `copied_seq == rcv_nxt`).
    let mut end = copied;
    const CLOSE_WAIT: u8 = 8;
    const LAST_ACK: u8 = 9;
    const CLOSING: u8 = 11;
    if matches!(
        rd::<u8>(sk, setting!(off.sk_state)),
        Some(CLOSE_WAIT | LAST_ACK | CLOSING)
    ) && rd::<u32>(sk, setting!(off.tp_rcv_nxt)) == Some(copied)
    {
        end = copied.wrapping_sub(1);
    }
    let seq = end.wrapping_sub(ret as u32);
    if !sampled(seq, end) {
        return 0;
    }
    let t = now();
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !tgid_ok(tgid) {
        return 0;
    }
    emit_sock(layer::SOCK_RX, sk, seq, end, t, tgid, true);
    0
}

/// `sock:inet_sock_set_state` → CLOSE: the flow ends; user space flushes
/// both directions of the connection. The identity comes from the record:
/// by now the socket may have given its port back.
#[tracepoint]
pub fn stack_set_state(ctx: TracePointContext) -> u32 {
    const TCP_CLOSE: i32 = 7;
    let tp = setting!(tp);
    if tp_u16(&ctx, tp.state_protocol) != u16::from(host_prog::IPPROTO_TCP)
        || tp_i32(&ctx, tp.state_new) != TCP_CLOSE
    {
        return 0;
    }
    let sk = tp_u64(&ctx, tp.state_sk);
    let _ = SOCK_IDS.remove(sk);
    let mut ev = StackEvent {
        ts_ns: now(),
        layer: layer::CLOSE,
        ..StackEvent::default()
    };
    // The socket's namespace: a probe scoped by namespace (an agent
    // watching its own host on a shared kernel) must see its closes.
    if let Some(net) = rd::<u64>(sk, setting!(off.sk_net)) {
        ev.netns = net_inum(net);
    }
    if let Some(id) = state_identity(&ctx, &tp) {
        (ev.family, ev.saddr, ev.daddr, ev.sport, ev.dport) =
            (id.family, id.saddr, id.daddr, id.sport, id.dport);
        output(&ev);
    }
    0
}
