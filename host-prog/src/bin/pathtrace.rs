//! Kernel packet path tracing: one program attached to every chosen
//! tracepoint appends (point, time) to the trail of each followed packet
//! (`docs/host-trace.md`).
//!
//! - Which point fired: the BPF cookie the loader attached it with (the
//!   record's own `common_type` is overwritten before a program sees it),
//!   an index into `TRACE_POINTS`, which also says where the record keeps
//!   the skb pointer.
//! - Which packet: the skb's data buffer (`sk_buff.head`). Clones share
//!   it; a recycled `sk_buff` struct does not carry it over. A packet
//!   reaching a point without a trail starts one if it passes the netns,
//!   mark and flow filters (the flow filter is classic BPF compiled by
//!   libpcap, interpreted here over the first bytes from the IP header).
//! - `TRACE_SKBS` remembers which trail each live skb is on, which finds
//!   the trail again when the skb's head was reallocated (the trail is
//!   re-keyed) and at points where the skb may already be freed.
//! - The trail ends on `skb:consume_skb` / `skb:kfree_skb` once no clone
//!   shares the data, or when another packet turns up in the same buffer
//!   (its free was missed); user space collects idle trails.
#![no_std]
#![no_main]
#![deny(clippy::undocumented_unsafe_blocks)]

use aya_ebpf::{
    EbpfContext,
    helpers::{
        bpf_get_attach_cookie, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel_buf,
    },
    macros::{map, tracepoint},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use host_prog::cbpf::idx;
use host_prog::{ETH_P_IP, ETH_P_IPV6, rd};
use xdprobe_common::trace::{
    POINT_AFTER, POINT_ARM, POINT_DROP, POINT_FREE, POINT_NO_START, TRACE_FILTER_MARK,
    TRACE_FILTER_NETNS, TRACE_FILTER_PROG, TRACE_HDR_BYTES, TRACE_MAX_NETNS, TRACE_MAX_POINTS,
    TRACE_PKT_BYTES, TraceCounters, TracePoint, TraceScratch, TraceSettings,
    TraceStep, Trail, end,
};

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

/// Overwritten by the loader before load (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static TRACE_SETTINGS: TraceSettings = TraceSettings::ZERO;

macro_rules! setting {
    ($($f:tt)+) => {
        // SAFETY: a plain static, never written by the program; the
        // volatile read keeps the build-time zeros from being folded.
        unsafe { core::ptr::read_volatile(&TRACE_SETTINGS.$($f)+) }
    };
}

#[map(name = "TRACE_POINTS")]
static TRACE_POINTS: Array<TracePoint> = Array::with_max_entries(TRACE_MAX_POINTS, 0);

/// Sized by the loader (`--max-trails`).
#[map(name = "TRACE_TRAILS")]
static TRACE_TRAILS: HashMap<u64, Trail> = HashMap::with_max_entries(4096, 0);

/// Sized by the loader (twice the trails: clones).
#[map(name = "TRACE_SKBS")]
static TRACE_SKBS: HashMap<u64, u64> = HashMap::with_max_entries(8192, 0);

#[map(name = "TRACE_EVENTS")]
static TRACE_EVENTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

#[map(name = "TRACE_COUNTERS")]
static TRACE_COUNTERS: PerCpuArray<TraceCounters> = PerCpuArray::with_max_entries(1, 0);

#[map(name = "TRACE_SCRATCH")]
static TRACE_SCRATCH: PerCpuArray<TraceScratch> = PerCpuArray::with_max_entries(1, 0);

const BPF_NOEXIST: u64 = 1;
/// User space drains the ring on a timer: waking it from inside the
/// traced path (an irq_work per trail) would add to the steps it times.
const BPF_RB_NO_WAKEUP: u64 = 1;

#[derive(Clone, Copy)]
enum Count {
    Hits,
    Started,
    Finished,
    Steps,
    StepsLost,
    TableFull,
    RingbufFull,
    Filtered,
    ReadFailed,
    Rekeyed,
    Reused,
    SkbsFull,
}

#[inline(always)]
fn count(c: Count) {
    let Some(p) = TRACE_COUNTERS.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot of a one-entry per-CPU array; tracing
    // programs do not nest on one CPU (bpf_prog_active), so plain
    // increments are exact.
    let p = unsafe { &mut *p };
    match c {
        Count::Hits => p.hits += 1,
        Count::Started => p.started += 1,
        Count::Finished => p.finished += 1,
        Count::Steps => p.steps += 1,
        Count::StepsLost => p.steps_lost += 1,
        Count::TableFull => p.table_full += 1,
        Count::RingbufFull => p.ringbuf_full += 1,
        Count::Filtered => p.filtered += 1,
        Count::ReadFailed => p.read_failed += 1,
        Count::Rekeyed => p.rekeyed += 1,
        Count::Reused => p.reused += 1,
        Count::SkbsFull => p.skbs_full += 1,
    }
}

/// The device an skb is on: (network namespace inode, ifindex).
#[inline(always)]
fn dev_of(skb: u64) -> (u32, u32) {
    let Some(dev) = rd::<u64>(skb, setting!(off.skb_dev)) else {
        return (0, 0);
    };
    if dev == 0 {
        return (0, 0);
    }
    let ifindex = rd::<u32>(dev, setting!(off.dev_ifindex)).unwrap_or(0);
    let netns = rd::<u64>(dev, setting!(off.dev_nd_net))
        .and_then(|net| rd::<u32>(net, setting!(off.net_ns_inum)))
        .unwrap_or(0);
    (netns, ifindex)
}

/// How many skbs share `head`'s data (its `skb_shared_info.dataref`).
#[inline(always)]
fn dataref(skb: u64, head: u64) -> u32 {
    let Some(end) = rd::<u32>(skb, setting!(xoff.skb_end)) else {
        return 1;
    };
    rd::<u32>(head + u64::from(end), setting!(xoff.shinfo_dataref)).map_or(1, |d| d & 0xffff)
}

/// Appends a step; `skb` 0: the skb may be gone, do not read it.
#[inline(always)]
fn append(t: &mut Trail, point: u16, now: u64, skb: u64) {
    t.last_ns = now;
    let n = t.n_steps as usize;
    let Some(s) = t.steps.get_mut(n) else {
        t.lost_steps = t.lost_steps.saturating_add(1);
        count(Count::StepsLost);
        return;
    };
    let (netns, ifindex) = if skb == 0 { (0, 0) } else { dev_of(skb) };
    // SAFETY: helper without arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    *s = TraceStep {
        ts_ns: now,
        netns,
        ifindex,
        point,
        cpu: cpu as u16,
        _pad: 0,
    };
    t.n_steps += 1;
    count(Count::Steps);
}

/// Sends a finished trail to user space. The caller removes it.
#[inline(always)]
fn finish(t: &mut Trail, why: u8) {
    t.end = why;
    match TRACE_EVENTS.output::<Trail>(&*t, BPF_RB_NO_WAKEUP) {
        Ok(()) => count(Count::Finished),
        Err(_) => count(Count::RingbufFull),
    }
}

#[tracepoint]
pub fn trace_point(ctx: TracePointContext) -> u32 {
    // SAFETY: the helper reads the cookie of the link this run came
    // through; `ctx` is the program's own context pointer.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let Some(p) = TRACE_POINTS.get(cookie as u32).copied() else {
        return 0;
    };
    if p.flags == 0 && p.skb_off == 0 {
        return 0; // a slot the loader left empty
    }
    // SAFETY: the offset comes from this event's tracefs format; the
    // helper fails cleanly.
    let skb = unsafe { ctx.read_at::<u64>(usize::from(p.skb_off)) }.unwrap_or(0);
    if skb == 0 {
        return 0;
    }
    count(Count::Hits);
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let reason = if p.flags & POINT_DROP != 0 {
        // SAFETY: as for the skb pointer.
        unsafe { ctx.read_at::<u32>(usize::from(p.reason_off)) }.unwrap_or(0)
    } else {
        0
    };
    step(&p, skb, now, reason);
    0
}

#[inline(always)]
fn step(p: &TracePoint, skb: u64, now: u64, reason: u32) {
    if p.flags & POINT_AFTER != 0 {
        // The skb may be freed already: find its trail by address only.
        // SAFETY: copied out at once.
        let Some(key) = (unsafe { TRACE_SKBS.get(skb) }).copied() else {
            return;
        };
        if let Some(t) = TRACE_TRAILS.get_ptr_mut(key) {
            // SAFETY: a pointer to this map's value; concurrent updates of
            // one trail from two CPUs can only race on a step's slot,
            // which costs that step, never memory safety.
            let t = unsafe { &mut *t };
            if t.armed == skb {
                t.armed = 0;
                append(t, p.id, now, 0);
            }
        }
        return;
    }
    let Some(head) = rd::<u64>(skb, setting!(off.skb_head)) else {
        count(Count::ReadFailed);
        return;
    };
    if head == 0 {
        return;
    }
    let Some(s) = TRACE_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot of a one-entry per-CPU array; programs do
    // not nest on one CPU.
    let s = unsafe { &mut *s };
    if let Some(t) = TRACE_TRAILS.get_ptr_mut(head) {
        // SAFETY: as above.
        let t = unsafe { &mut *t };
        // SAFETY: copied out at once.
        let known = t.skb == skb || (unsafe { TRACE_SKBS.get(skb) }).copied() == Some(head);
        let shared = if known { 0 } else { dataref(skb, head) };
        if (known || shared > 1) && fp_now(skb, head, s) == Some(t.fp) {
            // The same packet, or a clone sharing its data.
            append(t, p.id, now, skb);
            t.skb = skb;
            if p.flags & POINT_ARM != 0 {
                t.armed = skb;
            }
            if p.flags & POINT_FREE != 0 {
                let _ = TRACE_SKBS.remove(skb);
                let refs = if shared == 0 {
                    dataref(skb, head)
                } else {
                    shared
                };
                if refs <= 1 {
                    if p.flags & POINT_DROP != 0 {
                        t.drop_reason = reason;
                        finish(t, end::DROPPED);
                    } else {
                        finish(t, end::CONSUMED);
                    }
                    let _ = TRACE_TRAILS.remove(head);
                }
            } else if !known && TRACE_SKBS.insert(skb, head, 0).is_err() {
                count(Count::SkbsFull);
            }
            return;
        }
        // Another packet in this buffer: the trail's free was missed.
        let old_skb = t.skb;
        finish(t, end::REUSED);
        count(Count::Reused);
        let _ = TRACE_TRAILS.remove(head);
        let _ = TRACE_SKBS.remove(old_skb);
    } else if p.flags & POINT_FREE == 0 && rekey(p, skb, head, now, s) {
        return;
    }
    if p.flags & (POINT_FREE | POINT_NO_START) != 0 {
        return;
    }
    let Some(pkt) = copy_packet(skb, head, s) else {
        count(Count::ReadFailed);
        return;
    };
    start(p, skb, head, now, &pkt, s);
}

/// The skb is on a trail under another head: its data was reallocated
/// (`pskb_expand_head`, linearisation). Moves the trail to the new head.
#[inline(always)]
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "by value, the 900-byte trail would be copied onto the 512-byte eBPF stack"
)]
fn rekey(p: &TracePoint, skb: u64, head: u64, now: u64, s: &mut TraceScratch) -> bool {
    // SAFETY: copied out at once.
    let Some(old) = (unsafe { TRACE_SKBS.get(skb) }).copied() else {
        return false;
    };
    if old == head {
        return false;
    }
    let Some(t) = TRACE_TRAILS.get_ptr_mut(old) else {
        let _ = TRACE_SKBS.remove(skb);
        return false;
    };
    // SAFETY: as in `step`.
    let t = unsafe { &mut *t };
    if t.skb != skb || fp_now(skb, head, s) != Some(t.fp) {
        return false;
    }
    append(t, p.id, now, skb);
    if p.flags & POINT_ARM != 0 {
        t.armed = skb;
    }
    if TRACE_TRAILS.insert(head, &*t, BPF_NOEXIST).is_err() {
        count(Count::TableFull);
        return true;
    }
    let _ = TRACE_TRAILS.remove(old);
    if TRACE_SKBS.insert(skb, head, 0).is_err() {
        count(Count::SkbsFull);
    }
    count(Count::Rekeyed);
    true
}

/// What `copy_packet` found.
struct Pkt {
    /// Bytes of `TraceScratch::pkt` that are the packet's (linear data).
    caplen: u32,
    /// Length from the IP header to the end of the packet.
    total: u32,
    fp: u64,
}

/// Where the IP header is: where IP put it on the way out and where the
/// stack put it on the way in (`network_header`); before either (a
/// driver's receive) `data` is past the link header, or at it when the
/// MAC header offset says so. `data` is read only when needed.
#[inline(always)]
fn l3_of(skb: u64, head: u64, data: Option<u64>) -> Option<u64> {
    let nh = rd::<u16>(skb, setting!(off.skb_network_header))?;
    if nh != 0 && nh != 0xffff {
        return Some(head + u64::from(nh));
    }
    let data = match data {
        Some(d) => d,
        None => rd::<u64>(skb, setting!(off.skb_data))?,
    };
    let mh = rd::<u16>(skb, setting!(off.skb_mac_header))?;
    Some(if mh != 0xffff && data == head + u64::from(mh) {
        data + 14
    } else {
        data
    })
}

/// The packet's fingerprint now (two or three kernel reads and one copy
/// of its first bytes into the scratch space).
#[inline(always)]
fn fp_now(skb: u64, head: u64, s: &mut TraceScratch) -> Option<u64> {
    let l3 = l3_of(skb, head, None)?;
    // SAFETY: copies TRACE_PKT_BYTES of kernel memory into a buffer of
    // that size; the helper fails cleanly on a bad address.
    unsafe { bpf_probe_read_kernel_buf(l3 as *const u8, &mut s.pkt) }.ok()?;
    Some(fingerprint(&s.pkt))
}

/// Copies the packet from its IP header into `s.pkt`, with what the
/// filter needs to know about it, and fingerprints it.
#[inline(always)]
fn copy_packet(skb: u64, head: u64, s: &mut TraceScratch) -> Option<Pkt> {
    let data = rd::<u64>(skb, setting!(off.skb_data))?;
    let len = rd::<u32>(skb, setting!(off.skb_len))?;
    let data_len = rd::<u32>(skb, setting!(xoff.skb_data_len))?;
    let l3 = l3_of(skb, head, Some(data))?;
    let linear_end = data + u64::from(len.saturating_sub(data_len));
    if l3 < head || l3 > linear_end {
        return None;
    }
    let linear = (linear_end - l3) as u32;
    let total = if l3 >= data {
        len.saturating_sub((l3 - data) as u32)
    } else {
        len + (data - l3) as u32
    };
    // SAFETY: copies TRACE_PKT_BYTES of kernel memory into a buffer of
    // that size; the helper fails cleanly on a bad address.
    unsafe { bpf_probe_read_kernel_buf(l3 as *const u8, &mut s.pkt) }.ok()?;
    let caplen = if linear < TRACE_PKT_BYTES as u32 {
        linear
    } else {
        TRACE_PKT_BYTES as u32
    };
    Some(Pkt {
        caplen,
        total,
        fp: fingerprint(&s.pkt),
    })
}

/// FNV-1a over 32-bit words.
#[inline(always)]
fn mix(h: u64, w: u32) -> u64 {
    (h ^ u64::from(w)).wrapping_mul(0x0000_0100_0000_01b3)
}

#[inline(always)]
fn word(pkt: &[u8; TRACE_PKT_BYTES], off: usize) -> u32 {
    u32::from_be_bytes([
        pkt[idx(off)],
        pkt[idx(off + 1)],
        pkt[idx(off + 2)],
        pkt[idx(off + 3)],
    ])
}

/// The fields that stay the same while a packet crosses this host's stack
/// and differ between packets: not TTL, checksum, ECN or lengths (GRO
/// merges change those). Address or port translation changes it: a NATed
/// packet continues as a new trail. The 8 bytes after the IP header are
/// taken whether or not they are in the linear data (headers always are
/// at the traced points), so every step computes the same value.
#[inline(always)]
fn fingerprint(pkt: &[u8; TRACE_PKT_BYTES]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let (l4, end) = if pkt[0] >> 4 == 4 {
        // ID, protocol, addresses.
        h = mix(h, (u32::from(pkt[4]) << 24) | (u32::from(pkt[5]) << 16) | u32::from(pkt[9]));
        h = mix(h, word(pkt, 12));
        h = mix(h, word(pkt, 16));
        (usize::from(pkt[0] & 0x0f) * 4, 20)
    } else {
        // Flow label, next header, addresses.
        h = mix(h, (word(pkt, 0) & 0x000f_ffff) | (u32::from(pkt[6]) << 24));
        for i in 0..8 {
            h = mix(h, word(pkt, 8 + 4 * i));
        }
        (40, 40)
    };
    if l4 >= end {
        h = mix(h, word(pkt, l4));
        h = mix(h, word(pkt, l4 + 4));
    }
    h
}

#[inline(always)]
fn netns_ok(netns: u32) -> bool {
    let n = setting!(n_netns) as usize;
    for i in 0..TRACE_MAX_NETNS {
        if i >= n {
            break;
        }
        if setting!(netns[i]) == netns {
            return true;
        }
    }
    false
}

/// A packet without a trail: starts one if it passes the filters.
#[inline(always)]
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "by value, the 900-byte trail would be copied onto the 512-byte eBPF stack"
)]
fn start(p: &TracePoint, skb: u64, head: u64, now: u64, pkt: &Pkt, s: &mut TraceScratch) {
    let flags = setting!(flags);
    let Some(proto) = rd::<u16>(skb, setting!(off.skb_protocol)) else {
        count(Count::ReadFailed);
        return;
    };
    let proto = u16::from_be(proto);
    if proto != ETH_P_IP && proto != ETH_P_IPV6 {
        return;
    }
    if flags & TRACE_FILTER_NETNS != 0 && !netns_ok(dev_of(skb).0) {
        count(Count::Filtered);
        return;
    }
    if flags & TRACE_FILTER_MARK != 0 {
        let mark = rd::<u32>(skb, setting!(xoff.skb_mark)).unwrap_or(0);
        if mark & setting!(mark_mask) != setting!(mark_value) {
            count(Count::Filtered);
            return;
        }
    }
    if flags & TRACE_FILTER_PROG != 0 && cbpf(s, pkt.caplen, pkt.total) == 0 {
        count(Count::Filtered);
        return;
    }
    let t = &mut s.trail;
    t.head = head;
    t.skb = skb;
    t.first_ns = now;
    t.last_ns = now;
    t.pkt_len = pkt.total;
    t.n_steps = 0;
    t.lost_steps = 0;
    t.drop_reason = 0;
    t.end = end::OPEN;
    t.caplen = if pkt.caplen < TRACE_HDR_BYTES as u32 {
        pkt.caplen as u8
    } else {
        TRACE_HDR_BYTES as u8
    };
    t._pad = 0;
    t.fp = pkt.fp;
    t.armed = if p.flags & POINT_ARM != 0 { skb } else { 0 };
    for i in 0..TRACE_HDR_BYTES {
        t.hdr[i] = s.pkt[i];
    }
    for st in t.steps.iter_mut() {
        *st = TraceStep::ZERO;
    }
    append(t, p.id, now, skb);
    if TRACE_TRAILS.insert(head, &*t, BPF_NOEXIST).is_err() {
        count(Count::TableFull);
        return;
    }
    if TRACE_SKBS.insert(skb, head, 0).is_err() {
        count(Count::SkbsFull);
    }
    count(Count::Started);
}

/// The flow filter over the scratch copy (`host_prog::cbpf`), reading
/// the program from the settings.
#[inline(always)]
fn cbpf(s: &mut TraceScratch, caplen: u32, wirelen: u32) -> u32 {
    let n = setting!(filter_len);
    host_prog::cbpf::run(
        |pc| setting!(filter[pc]),
        n,
        &s.pkt,
        &mut s.mem,
        caplen,
        wirelen,
    )
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Unreachable by construction; a surviving panic path makes the
    // verifier reject the program at load time.
    loop {}
}
