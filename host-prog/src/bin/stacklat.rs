//! Stack-layer latency: one observation per (layer, TCP byte range, time)
//! at one representative hook per layer, sent to user space through a ring
//! buffer, which matches them across layers by sequence number
//! (`docs/host-latency.md`).
//!
//! Sampling is decided here and costs no state: an observation is reported
//! only when its byte range holds a byte whose sequence number is a
//! multiple of `sample_bytes`. Every layer, and the agent on the other
//! host, picks the same bytes without talking to each other. Unsampled
//! observations cost a header read and a division.
//!
//! Hook kinds: classic tracepoints wherever their fields suffice (their
//! record layout is kernel ABI and read from tracefs), a BTF-typed or raw
//! tracepoint for `tcp_sendmsg_locked`, whose record lacks the socket.
#![no_std]
#![no_main]
#![deny(clippy::undocumented_unsafe_blocks)]

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{btf_tracepoint, fentry, kprobe, map, raw_tracepoint, tracepoint},
    maps::{HashMap, PerCpuArray, RingBuf},
    programs::{
        BtfTracePointContext, FEntryContext, ProbeContext, RawTracePointContext, TracePointContext,
    },
};
use host_prog::{
    AF_INET, AF_INET6, ETH_P_IP, ETH_P_IPV6, Segment, holds_sample, parse_tcp, rd, state_identity,
    tp_i32, tp_u16, tp_u64,
};
use xdprobe_common::host::{
    STACK_FILTER_CGROUP, STACK_FILTER_NETNS, STACK_FILTER_PORT, STACK_FILTER_TGID,
    STACK_MAX_CGROUPS, STACK_MAX_NETNS, STACK_MAX_PORTS, STACK_MAX_TGIDS, SockId, StackCounters,
    StackEvent, StackSettings, TcpPending, layer, skb_slot,
};

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

/// Overwritten by the loader before load (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static STACK_SETTINGS: StackSettings = StackSettings::ZERO;

/// Reads one settings field. The volatile read keeps the compiler from
/// folding the build-time zeros; the verifier then sees the loader's value.
macro_rules! setting {
    ($($f:tt)+) => {
        // SAFETY: a plain static, never written by the program.
        unsafe { core::ptr::read_volatile(&STACK_SETTINGS.$($f)+) }
    };
}

#[map(name = "STACK_EVENTS")]
static STACK_EVENTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

#[map(name = "STACK_COUNTERS")]
static STACK_COUNTERS: PerCpuArray<StackCounters> = PerCpuArray::with_max_entries(1, 0);

/// Thread ID → time its send call was entered. A thread whose call was on
/// a file (no `sock_send_length`) keeps its one slot until its next call
/// overwrites it; slots of threads that exited are removed by user space
/// after a minute. A plain hash, not an LRU one: the LRU list's upkeep
/// cost about 1 µs per insert here, on every write(2) of the host.
#[map(name = "SEND_ENTRY")]
static SEND_ENTRY: HashMap<u32, u64> = HashMap::with_max_entries(32768, 0);

/// Socket → the TCP-layer observation its send call is building. Removed
/// when the call returns or the socket closes; user space removes what a
/// path without `sock_send_length` (kTLS) left.
#[map(name = "TCP_PENDING")]
static TCP_PENDING: HashMap<u64, TcpPending> = HashMap::with_max_entries(32768, 0);

/// Socket → its identity, read from the socket once; removed at CLOSE.
#[map(name = "SOCK_IDS")]
static SOCK_IDS: HashMap<u64, SockId> = HashMap::with_max_entries(65536, 0);

#[derive(Clone, Copy)]
enum Count {
    Events,
    RingbufFull,
    NoEntry,
    ReadFailed,
    Unsampled,
    Filtered,
}

#[inline(always)]
fn count(c: Count) {
    let Some(p) = STACK_COUNTERS.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: index 0 of a one-entry per-CPU array: this CPU's slot. A
    // tracepoint program can be interrupted by another one on this CPU
    // (NMI aside, tracing programs do not nest on one CPU: the kernel's
    // bpf_prog_active guard), so plain increments are exact.
    let p = unsafe { &mut *p };
    match c {
        Count::Events => p.events += 1,
        Count::RingbufFull => p.ringbuf_full += 1,
        Count::NoEntry => p.no_entry += 1,
        Count::ReadFailed => p.read_failed += 1,
        Count::Unsampled => p.unsampled += 1,
        Count::Filtered => p.filtered += 1,
    }
}

#[inline(always)]
fn now() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
fn sampled(seq: u32, end: u32) -> bool {
    if holds_sample(seq, end, setting!(sample_bytes)) {
        true
    } else {
        count(Count::Unsampled);
        false
    }
}

#[inline(always)]
fn port_ok(sport: u16, dport: u16) -> bool {
    if setting!(flags) & STACK_FILTER_PORT == 0 {
        return true;
    }
    let n = setting!(n_ports) as usize;
    for i in 0..STACK_MAX_PORTS {
        if i >= n {
            break;
        }
        let p = setting!(ports[i]);
        if p == sport || p == dport {
            return true;
        }
    }
    false
}

#[inline(always)]
fn netns_ok(netns: u32) -> bool {
    if setting!(flags) & STACK_FILTER_NETNS == 0 {
        return true;
    }
    let n = setting!(n_netns) as usize;
    for i in 0..STACK_MAX_NETNS {
        if i >= n {
            break;
        }
        if setting!(netns[i]) == netns {
            return true;
        }
    }
    false
}

/// Process scope of a socket-layer event (process context): the thread
/// group and the cgroup of the current task.
#[inline(always)]
fn tgid_ok(tgid: u32) -> bool {
    let flags = setting!(flags);
    if flags & STACK_FILTER_TGID != 0 {
        let n = setting!(n_tgids) as usize;
        let mut hit = false;
        for i in 0..STACK_MAX_TGIDS {
            if i >= n {
                break;
            }
            if setting!(tgids[i]) == tgid {
                hit = true;
                break;
            }
        }
        if !hit {
            return false;
        }
    }
    if flags & STACK_FILTER_CGROUP != 0 {
        // SAFETY: helper without arguments (cgroup v2 ID of the current task).
        let cg = unsafe { bpf_get_current_cgroup_id() };
        let n = setting!(n_cgroups) as usize;
        for i in 0..STACK_MAX_CGROUPS {
            if i >= n {
                break;
            }
            if setting!(cgroups[i]) == cg {
                return true;
            }
        }
        return false;
    }
    true
}

#[inline(always)]
fn output(ev: &StackEvent) {
    if !port_ok(ev.sport, ev.dport) || !netns_ok(ev.netns) {
        count(Count::Filtered);
        return;
    }
    let flags = if STACK_EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= u64::from(setting!(wakeup_bytes))
    {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    match STACK_EVENTS.output::<StackEvent>(ev, u64::from(flags)) {
        Ok(()) => count(Count::Events),
        Err(_) => count(Count::RingbufFull),
    }
}

/// The network namespace of `net` (a `struct net *`).
#[inline(always)]
fn net_inum(net: u64) -> u32 {
    rd::<u32>(net, setting!(off.net_ns_inum)).unwrap_or(0)
}

/// Reads a socket's identity and namespace from the socket itself.
#[inline(always)]
fn read_sock_id(sk: u64) -> Option<SockId> {
    let family = rd::<u16>(sk, setting!(off.sk_family))?;
    let mut id = SockId {
        family: family as u8,
        ..SockId::default()
    };
    if family == AF_INET {
        id.local[..4].copy_from_slice(&rd::<[u8; 4]>(sk, setting!(off.sk_rcv_saddr))?);
        id.remote[..4].copy_from_slice(&rd::<[u8; 4]>(sk, setting!(off.sk_daddr))?);
    } else if family == AF_INET6 {
        id.local = rd::<[u8; 16]>(sk, setting!(off.sk_v6_rcv_saddr))?;
        id.remote = rd::<[u8; 16]>(sk, setting!(off.sk_v6_daddr))?;
    } else {
        return None;
    }
    id.lport = rd::<u16>(sk, setting!(off.sk_num))?;
    id.rport = u16::from_be(rd::<u16>(sk, setting!(off.sk_dport))?);
    let net = rd::<u64>(sk, setting!(off.sk_net))?;
    id.netns = net_inum(net);
    Some(id)
}

/// Fills the event's identity from the socket (cached per socket: the
/// local and remote ends of a connected socket do not change). `rx`: the
/// data flows from the remote end to this socket (a receiver's layer), so
/// the remote end is the source.
#[inline(always)]
fn sock_identity(ev: &mut StackEvent, sk: u64, rx: bool) -> Option<()> {
    // SAFETY: copied out of the map value at once.
    let id = match unsafe { SOCK_IDS.get(sk) }.copied() {
        Some(id) => id,
        None => {
            let id = read_sock_id(sk)?;
            // A socket that is not connected yet has no remote port:
            // cache only complete identities.
            if id.rport != 0 {
                let _ = SOCK_IDS.insert(sk, id, 0);
            }
            id
        }
    };
    ev.family = id.family;
    ev.netns = id.netns;
    if rx {
        (ev.saddr, ev.daddr, ev.sport, ev.dport) = (id.remote, id.local, id.rport, id.lport);
    } else {
        (ev.saddr, ev.daddr, ev.sport, ev.dport) = (id.local, id.remote, id.lport, id.rport);
    }
    Some(())
}

/// Reports a socket-identified observation (socket and TCP layers).
#[inline(always)]
fn emit_sock(layer: u8, sk: u64, seq: u32, end: u32, ts_ns: u64, tgid: u32, rx: bool) {
    if !sampled(seq, end) {
        return;
    }
    let mut ev = StackEvent {
        ts_ns,
        seq,
        end,
        tgid,
        layer,
        ..StackEvent::default()
    };
    if sock_identity(&mut ev, sk, rx).is_none() {
        count(Count::ReadFailed);
        return;
    }
    output(&ev);
}

/// Reports a header-identified observation (IP and device layers).
#[inline(always)]
fn emit_skb(layer: u8, skb: u64, s: &Segment, ts_ns: u64) {
    if s.len == 0 {
        return; // pure ACK, SYN, FIN, RST: no stream bytes
    }
    let end = s.seq.wrapping_add(s.len);
    if !sampled(s.seq, end) {
        return;
    }
    let mut ev = StackEvent {
        ts_ns,
        seq: s.seq,
        end,
        layer,
        family: s.family,
        sport: s.sport,
        dport: s.dport,
        saddr: s.saddr,
        daddr: s.daddr,
        ..StackEvent::default()
    };
    if let Some(dev) = rd::<u64>(skb, setting!(off.skb_dev)) {
        ev.ifindex = rd::<u32>(dev, setting!(off.dev_ifindex)).unwrap_or(0);
        if let Some(net) = rd::<u64>(dev, setting!(off.dev_nd_net)) {
            ev.netns = net_inum(net);
        }
    }
    output(&ev);
}

/// `sk_buff.head` and `.data` (adjacent: the loader checks).
#[inline(always)]
fn skb_head_data(skb: u64) -> Option<(u64, u64)> {
    let [head, data] = rd::<[u64; 2]>(skb, setting!(off.skb_head))?;
    Some((head, data))
}

/// Transmit side: the network header is set, `data` points at the link
/// header.
#[inline(always)]
fn tx_skb(layer: u8, skb: u64) {
    let ts = now();
    // `protocol`, `transport_header`, `network_header`, `mac_header` are
    // adjacent (the loader checks): one read.
    let (Some((head, data)), Some(hdrs), Some(len)) = (
        skb_head_data(skb),
        rd::<[u16; 4]>(skb, setting!(off.skb_protocol)),
        rd::<u32>(skb, setting!(off.skb_len)),
    ) else {
        count(Count::ReadFailed);
        return;
    };
    let l3 = head + u64::from(hdrs[2]);
    let before = l3.saturating_sub(data);
    if before > u64::from(len) {
        return;
    }
    if let Some(s) = parse_tcp(l3, len - before as u32) {
        emit_skb(layer, skb, &s, ts);
    }
}

/// Receive side: `data` points at the network header (the driver's
/// `eth_type_trans` pulled the link header); the network header offset is
/// not set yet at the device layer.
#[inline(always)]
fn rx_skb(layer: u8, skb: u64) {
    let ts = now();
    let Some(proto) = rd::<u16>(skb, setting!(off.skb_protocol)) else {
        count(Count::ReadFailed);
        return;
    };
    let proto = u16::from_be(proto);
    if proto != ETH_P_IP && proto != ETH_P_IPV6 {
        return;
    }
    let (Some((_, data)), Some(len)) = (skb_head_data(skb), rd::<u32>(skb, setting!(off.skb_len)))
    else {
        count(Count::ReadFailed);
        return;
    };
    if let Some(s) = parse_tcp(data, len) {
        emit_skb(layer, skb, &s, ts);
    }
}

// ---- sender -------------------------------------------------------------

/// `syscalls:sys_enter_{write,writev,sendto,sendmsg,sendmmsg,sendfile64}`:
/// the socket-layer time of the bytes this call will send. The socket is
/// not known yet; `sock_send_length` pairs it by thread when the call
/// returns.
#[tracepoint]
pub fn stack_send_enter(_ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !tgid_ok((pid_tgid >> 32) as u32) {
        return 0;
    }
    let t = now();
    // An insert into an LRU map only fails on allocation failure; then this
    // call's bytes have no socket-layer time, counted at `sock_send_length`.
    let _ = SEND_ENTRY.insert(pid_tgid as u32, t, 0);
    0
}

/// `sock:sock_send_length` (when a send call returns): the socket-layer
/// observation `[write_seq - ret, write_seq)` at the call's entry time, and
/// the end of the TCP-layer observation the call was building.
#[tracepoint]
pub fn stack_send_length(ctx: TracePointContext) -> u32 {
    let tp = setting!(tp);
    if tp_u16(&ctx, tp.send_protocol) != u16::from(host_prog::IPPROTO_TCP) {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // SAFETY: the value is copied out before the entry is removed.
    let entry = unsafe { SEND_ENTRY.get(tid) }.copied();
    let _ = SEND_ENTRY.remove(tid);
    let sk = tp_u64(&ctx, tp.send_sk);
    let ret = tp_i32(&ctx, tp.send_ret);
    let Some(write_seq) = rd::<u32>(sk, setting!(off.tp_write_seq)) else {
        return 0;
    };
    // SAFETY: copied out before removal.
    if let Some(p) = unsafe { TCP_PENDING.get(sk) }.copied() {
        let _ = TCP_PENDING.remove(sk);
        if p.tid == tid && p.seq != write_seq {
            emit_sock(layer::TCP_TX, sk, p.seq, write_seq, p.ts_ns, 0, false);
        }
    }
    if ret <= 0 {
        return 0;
    }
    let Some(entry) = entry else {
        count(Count::NoEntry);
        return 0;
    };
    let tgid = (pid_tgid >> 32) as u32;
    if !tgid_ok(tgid) {
        return 0;
    }
    let seq = write_seq.wrapping_sub(ret as u32);
    emit_sock(layer::SOCK_TX, sk, seq, write_seq, entry, tgid, false);
    0
}

/// `tcp_sendmsg_locked` fires once per skb the send loop fills, before it
/// copies: `write_seq` then is where this batch of bytes starts. The
/// batch's end is the next firing's `write_seq` (or the call's end); an
/// unchanged `write_seq` means the loop waited for memory and copies only
/// now, so the time is renewed.
#[inline(always)]
fn tcp_sendmsg(sk: u64) {
    if !tgid_ok((bpf_get_current_pid_tgid() >> 32) as u32) {
        return;
    }
    let t = now();
    let Some(ws) = rd::<u32>(sk, setting!(off.tp_write_seq)) else {
        count(Count::ReadFailed);
        return;
    };
    let tid = bpf_get_current_pid_tgid() as u32;
    if let Some(p) = TCP_PENDING.get_ptr_mut(sk) {
        // SAFETY: a pointer into this map's value for `sk`; the socket lock
        // (held around tcp_sendmsg_locked and sock_send_length's caller's
        // release) serialises every writer of this entry.
        let p = unsafe { &mut *p };
        if p.tid == tid && p.seq != ws {
            emit_sock(layer::TCP_TX, sk, p.seq, ws, p.ts_ns, 0, false);
        }
        p.seq = ws;
        p.ts_ns = t;
        p.tid = tid;
    } else {
        let p = TcpPending {
            ts_ns: t,
            seq: ws,
            tid,
        };
        let _ = TCP_PENDING.insert(sk, p, 0);
    }
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

// ---- BTF-typed variants of the skb layers ---------------------------------

/// A direct load from a BTF-typed kernel pointer at an offset from the
/// settings (a constant to the verifier: the settings map is frozen).
#[inline(always)]
fn ld<T: Copy>(p: *const u8, off: u32) -> T {
    // SAFETY: in a BTF-typed program the verifier checks this load against
    // the kernel's BTF (it must be a member of that size) and the JIT makes
    // it a fault-tolerant load.
    unsafe { core::ptr::read_volatile(p.add(off as usize).cast::<T>()) }
}

/// `tx_skb` with the sk_buff's own fields read directly (one
/// `bpf_probe_read_kernel` less per field; measured ~20 % cheaper per
/// event, docs/host-latency.md).
#[inline(always)]
fn tx_skb_btf(layer: u8, skb: *const u8) {
    let ts = now();
    let head: u64 = ld(skb, setting!(off.skb_head));
    let data: u64 = ld(skb, setting!(off.skb_data));
    let nh: u16 = ld(skb, setting!(off.skb_network_header));
    let len: u32 = ld(skb, setting!(off.skb_len));
    let l3 = head + u64::from(nh);
    let before = l3.saturating_sub(data);
    if before > u64::from(len) {
        return;
    }
    if let Some(s) = parse_tcp(l3, len - before as u32) {
        emit_skb(layer, skb as u64, &s, ts);
    }
}

#[inline(always)]
fn rx_skb_btf(layer: u8, skb: *const u8) {
    let ts = now();
    let proto = u16::from_be(ld::<u16>(skb, setting!(off.skb_protocol)));
    if proto != ETH_P_IP && proto != ETH_P_IPV6 {
        return;
    }
    let data: u64 = ld(skb, setting!(off.skb_data));
    let len: u32 = ld(skb, setting!(off.skb_len));
    if let Some(s) = parse_tcp(data, len) {
        emit_skb(layer, skb as u64, &s, ts);
    }
}

/// One BTF-typed program per skb slot; every skb tracepoint this covers
/// takes the skb as its first argument.
macro_rules! btf_hooks {
    ($($name:ident, $layer:expr, $read:ident;)+) => {
        $(
            #[btf_tracepoint]
            pub fn $name(ctx: BtfTracePointContext) -> u32 {
                $read($layer, ctx.arg::<*const u8>(0));
                0
            }
        )+
    };
}

btf_hooks! {
    stack_bt_ip_tx, layer::IP_TX, tx_skb_btf;
    stack_bt_dev_tx, layer::DEV_TX, tx_skb_btf;
    stack_bt_dev_rx0, layer::DEV_RX, rx_skb_btf;
    stack_bt_dev_rx1, layer::DEV_RX, rx_skb_btf;
    stack_bt_dev_rx2, layer::DEV_RX, rx_skb_btf;
    stack_bt_ip_rx, layer::IP_RX, rx_skb_btf;
}

// ---- the skb layers on kernel functions (per-kernel option) --------------

/// The `struct sk_buff *` argument of a kprobe'd function (its position,
/// from BTF, is in the settings per slot).
#[inline(always)]
fn kp_skb(ctx: &ProbeContext, slot: usize) -> u64 {
    let a = match setting!(skb_arg[slot]) {
        0 => ctx.arg::<u64>(0),
        1 => ctx.arg::<u64>(1),
        2 => ctx.arg::<u64>(2),
        3 => ctx.arg::<u64>(3),
        4 => ctx.arg::<u64>(4),
        _ => None,
    };
    a.unwrap_or(0)
}

/// The same for fentry (BTF-typed arguments; constant indices only).
#[inline(always)]
fn fe_skb(ctx: &FEntryContext, slot: usize) -> u64 {
    match setting!(skb_arg[slot]) {
        0 => ctx.arg::<u64>(0),
        1 => ctx.arg::<u64>(1),
        2 => ctx.arg::<u64>(2),
        3 => ctx.arg::<u64>(3),
        4 => ctx.arg::<u64>(4),
        _ => 0,
    }
}

/// One kprobe and one fentry program per skb slot: the layer decides how
/// the headers are read (transmit: from the network header; receive: from
/// `data`), the function is the operator's choice (`docs/host-latency.md`).
macro_rules! function_hooks {
    ($($kp:ident, $fe:ident, $slot:expr, $layer:expr, $read:ident;)+) => {
        $(
            #[kprobe]
            pub fn $kp(ctx: ProbeContext) -> u32 {
                $read($layer, kp_skb(&ctx, $slot));
                0
            }

            #[fentry]
            pub fn $fe(ctx: FEntryContext) -> u32 {
                $read($layer, fe_skb(&ctx, $slot));
                0
            }
        )+
    };
}

function_hooks! {
    stack_kp_ip_tx, stack_fe_ip_tx, skb_slot::IP_TX, layer::IP_TX, tx_skb;
    stack_kp_dev_tx, stack_fe_dev_tx, skb_slot::DEV_TX, layer::DEV_TX, tx_skb;
    stack_kp_dev_rx0, stack_fe_dev_rx0, skb_slot::DEV_RX, layer::DEV_RX, rx_skb;
    stack_kp_dev_rx1, stack_fe_dev_rx1, skb_slot::DEV_RX + 1, layer::DEV_RX, rx_skb;
    stack_kp_dev_rx2, stack_fe_dev_rx2, skb_slot::DEV_RX + 2, layer::DEV_RX, rx_skb;
    stack_kp_ip_rx, stack_fe_ip_rx, skb_slot::IP_RX, layer::IP_RX, rx_skb;
}

// ---- receiver -----------------------------------------------------------

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
    let tp = setting!(tp);
    let data_len = u32::from(tp_u16(&ctx, tp.probe_data_len));
    if data_len == 0 {
        return 0;
    }
    let t = now();
    let skb = tp_u64(&ctx, tp.probe_skb);
    let sk = tp_u64(&ctx, tp.probe_sk);
    let Some(seq) = rd::<u32>(skb, setting!(off.skb_cb) + setting!(off.tcb_seq)) else {
        count(Count::ReadFailed);
        return 0;
    };
    emit_sock(
        layer::TCP_RX,
        sk,
        seq,
        seq.wrapping_add(data_len),
        t,
        0,
        true,
    );
    0
}

/// `sock:sock_recv_length` (when a receive call returns): the application
/// has `[copied_seq - ret, copied_seq)`.
#[tracepoint]
pub fn stack_recv_length(ctx: TracePointContext) -> u32 {
    const MSG_PEEK: i32 = 2;
    let tp = setting!(tp);
    if tp_u16(&ctx, tp.recv_protocol) != u16::from(host_prog::IPPROTO_TCP) {
        return 0;
    }
    let ret = tp_i32(&ctx, tp.recv_ret);
    if ret <= 0 || tp_i32(&ctx, tp.recv_flags) & MSG_PEEK != 0 {
        return 0;
    }
    let t = now();
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !tgid_ok(tgid) {
        return 0;
    }
    let sk = tp_u64(&ctx, tp.recv_sk);
    let Some(copied) = rd::<u32>(sk, setting!(off.tp_copied_seq)) else {
        count(Count::ReadFailed);
        return 0;
    };
    let seq = copied.wrapping_sub(ret as u32);
    emit_sock(layer::SOCK_RX, sk, seq, copied, t, tgid, true);
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
    let _ = TCP_PENDING.remove(sk);
    let _ = SOCK_IDS.remove(sk);
    let mut ev = StackEvent {
        ts_ns: now(),
        layer: layer::CLOSE,
        ..StackEvent::default()
    };
    if let Some(id) = state_identity(&ctx, &tp) {
        (ev.family, ev.saddr, ev.daddr, ev.sport, ev.dport) =
            (id.family, id.saddr, id.daddr, id.sport, id.dport);
        output(&ev);
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
