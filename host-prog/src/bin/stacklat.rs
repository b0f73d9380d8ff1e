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
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{
        BtfTracePointContext, FEntryContext, ProbeContext, RawTracePointContext, TracePointContext,
    },
};
use host_prog::{
    AF_INET, AF_INET6, ETH_P_IP, ETH_P_IPV6, Segment, holds_sample, parse_tcp, rd, rec_i32,
    rec_u16, rec_u64, state_identity, tp_i32, tp_span, tp_u16, tp_u64,
};
use xdprobe_common::host::{
    GATE_ENTRY, GATE_REST, SEND_SLOTS_LEN, STACK_FILTER_CGROUP, STACK_FILTER_NETNS,
    STACK_FILTER_PORT, STACK_FILTER_TGID, STACK_MAX_CGROUPS, STACK_MAX_NETNS, STACK_MAX_PORTS,
    STACK_MAX_TGIDS, SendSlot, SockId, StackCounters, StackEvent, StackSettings, layer, skb_slot,
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

/// Thread ID modulo its length → the thread's send call in flight
/// ([`SendSlot`]). An array, not a hash: the verifier inlines its lookup,
/// so the entry store of a send call is a few plain stores instead of a
/// locked hash update (0.5–1 µs here, on every write(2) of the host).
/// A slot is taken over by whichever thread of its index writes last; the
/// other finds another `tid` there and counts `no_entry`. A thread whose
/// call was on a file (no `sock_send_length`) keeps its entry until its
/// next call overwrites it; user space clears entries older than a minute.
#[map(name = "SEND_SLOTS")]
static SEND_SLOTS: Array<SendSlot> = Array::with_max_entries(SEND_SLOTS_LEN, 0);

/// The calling thread's send slot.
#[inline(always)]
fn send_slot(tid: u32) -> Option<&'static mut SendSlot> {
    let p = SEND_SLOTS.get_ptr_mut(tid & (SEND_SLOTS_LEN - 1))?;
    // SAFETY: a pointer into the array's value storage, valid for the
    // map's lifetime. Only threads of this index write the slot; the
    // `tid` check tells their contents apart (two such threads sending at
    // the same instant on two CPUs is the one race, and tids that far
    // apart alive at once are rare).
    Some(unsafe { &mut *p })
}

/// Which programs may observe (`GATE_ENTRY`, `GATE_REST`): all of them
/// unless a sampling window closed. One array lookup, inlined.
#[map(name = "STACK_GATE")]
static STACK_GATE: Array<u32> = Array::with_max_entries(1, 0);

#[inline(always)]
fn open(bit: u32) -> bool {
    STACK_GATE.get(0).is_some_and(|g| *g & bit != 0)
}

/// When the send path's entry last opened (0: since the start). Entries
/// stamped before it are stale: the call began while nothing watched.
#[map(name = "STACK_EPOCH")]
static STACK_EPOCH: Array<u64> = Array::with_max_entries(1, 0);

#[inline(always)]
fn epoch() -> u64 {
    STACK_EPOCH.get(0).copied().unwrap_or(0)
}

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
    StaleEntry,
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
        Count::StaleEntry => p.stale_entry += 1,
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

/// Reports a socket-identified observation (socket and TCP layers) whose
/// range the caller found `sampled`.
#[inline(always)]
fn emit_sock(layer: u8, sk: u64, seq: u32, end: u32, ts_ns: u64, tgid: u32, rx: bool) {
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

/// Reports a header-identified observation (IP and device layers). The
/// time is read once the segment is known to be sampled: an unsampled one
/// costs no clock read (the sampled one's time is later by the header
/// reads, tens of ns).
#[inline(always)]
fn emit_skb(layer: u8, skb: u64, s: &Segment) {
    if s.len == 0 {
        return; // pure ACK, SYN, FIN, RST: no stream bytes
    }
    let end = s.seq.wrapping_add(s.len);
    if !sampled(s.seq, end) {
        return;
    }
    let mut ev = StackEvent {
        ts_ns: now(),
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

/// The `sk_buff` fields the header walk needs.
struct SkbFields {
    len: u32,
    /// `protocol` (network order), `transport_header`, `network_header`,
    /// `mac_header` (adjacent: the loader checks).
    hdrs: [u16; 4],
    head: u64,
    data: u64,
}

/// Three reads: one read spanning `len` to `data` (96 bytes) measured no
/// cheaper here (bpf_stats, iperf3 over veth), so the smaller reads stay.
#[inline(always)]
fn skb_fields(skb: u64) -> Option<SkbFields> {
    let (head, data) = skb_head_data(skb)?;
    Some(SkbFields {
        len: rd::<u32>(skb, setting!(off.skb_len))?,
        hdrs: rd::<[u16; 4]>(skb, setting!(off.skb_protocol))?,
        head,
        data,
    })
}

/// Transmit side: the network header is set, `data` points at the link
/// header.
#[inline(always)]
fn tx_skb(layer: u8, skb: u64) {
    if !open(GATE_REST) {
        return;
    }
    let Some(f) = skb_fields(skb) else {
        count(Count::ReadFailed);
        return;
    };
    let l3 = f.head + u64::from(f.hdrs[2]);
    let before = l3.saturating_sub(f.data);
    if before > u64::from(f.len) {
        return;
    }
    if let Some(s) = parse_tcp(l3, f.len - before as u32) {
        emit_skb(layer, skb, &s);
    }
}

/// Receive side: `data` points at the network header (the driver's
/// `eth_type_trans` pulled the link header); the network header offset is
/// not set yet at the device layer.
#[inline(always)]
fn rx_skb(layer: u8, skb: u64) {
    if !open(GATE_REST) {
        return;
    }
    let Some(f) = skb_fields(skb) else {
        count(Count::ReadFailed);
        return;
    };
    let proto = u16::from_be(f.hdrs[0]);
    if proto != ETH_P_IP && proto != ETH_P_IPV6 {
        return;
    }
    if let Some(s) = parse_tcp(f.data, f.len) {
        emit_skb(layer, skb, &s);
    }
}

// ---- sender -------------------------------------------------------------

/// Bytes of a `sock_{send,recv}_length` record read in one go from `sk`
/// on (6.18: `sk` at 8, `flags` ends at 28); one read instead of one per
/// field.
const SOCK_LEN_SPAN: usize = 24;

/// The same for `tcp_probe` from `data_len` on (6.18: at 76; `skaddr`
/// ends at 136).
const TCP_PROBE_SPAN: usize = 64;

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
fn tcp_sendmsg(sk: u64) {
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
        emit_skb(layer, skb as u64, &s);
    }
}

#[inline(always)]
fn rx_skb_btf(layer: u8, skb: *const u8) {
    let proto = u16::from_be(ld::<u16>(skb, setting!(off.skb_protocol)));
    if proto != ETH_P_IP && proto != ETH_P_IPV6 {
        return;
    }
    let data: u64 = ld(skb, setting!(off.skb_data));
    let len: u32 = ld(skb, setting!(off.skb_len));
    if let Some(s) = parse_tcp(data, len) {
        emit_skb(layer, skb as u64, &s);
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

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Unreachable by construction; a surviving panic path makes the
    // verifier reject the program at load time.
    loop {}
}
