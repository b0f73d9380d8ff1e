//! Clock-sync responder: answers the manager's UDP timing probes from XDP,
//! the lowest layer of the receive path, so the two stamps it writes carry
//! as little software noise as the host allows (no socket, no scheduler,
//! no user space between the wire and the stamp).
//!
//! Per probe (`xdprobe_common::sync` has the layout): stamp `t2` on entry,
//! check it is a well-formed unanswered probe to the configured port from
//! an allowed source, swap the Ethernet, IP and UDP addresses, mark it
//! answered, stamp `t3` last and send it back out of the same interface
//! (`XDP_TX`). Everything else is passed on untouched.
//!
//! The stamps are `bpf_ktime_get_ns()`, `CLOCK_MONOTONIC`: the clock the
//! stack-latency events are stamped with, so the offset the manager
//! estimates from these probes is exactly the one to apply to those
//! events. (TAI or REALTIME would add the kernel's REALTIME−MONOTONIC
//! offset, which NTP steps and slews independently, as an error.)
//!
//! Checksums: swapping the addresses leaves the IPv4 header checksum
//! unchanged (a ones'-complement sum does not depend on order). The UDP
//! checksum, which IPv6 requires, is computed afresh over the pseudo-header
//! and the 48 bytes of header and probe: an incremental update (RFC 1624)
//! would carry on whatever the sender left there, and a sender with
//! checksum offload (any veth) leaves only a partial sum for the NIC to
//! finish.
#![no_std]
#![no_main]
#![deny(clippy::undocumented_unsafe_blocks)]

use aya_ebpf::{
    bindings::xdp_action,
    helpers::bpf_ktime_get_ns,
    macros::{map, xdp},
    maps::PerCpuArray,
    programs::XdpContext,
};
use xdprobe_common::sync::{
    PROBE_FLAG_ANSWERED, PROBE_FLAGS, PROBE_LEN, PROBE_MAGIC, PROBE_MAGIC_OFF, PROBE_T2, PROBE_T3,
    PROBE_VERSION, PROBE_VERSION_1, SYNC_ALLOW_V4, SYNC_ALLOW_V6, SYNC_V4, SYNC_V6, SyncCounters,
    SyncSettings,
};

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

/// Overwritten by the loader before load (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static SYNC_SETTINGS: SyncSettings = SyncSettings::ZERO;

/// Reads one settings field. The volatile read keeps the compiler from
/// folding the build-time zeros; the verifier then sees the loader's value.
macro_rules! setting {
    ($($f:tt)+) => {
        // SAFETY: a plain static, never written by the program.
        unsafe { core::ptr::read_volatile(&SYNC_SETTINGS.$($f)+) }
    };
}

#[map(name = "SYNC_COUNTERS")]
static SYNC_COUNTERS: PerCpuArray<SyncCounters> = PerCpuArray::with_max_entries(1, 0);

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
const IPPROTO_UDP: u8 = 17;
const UDP_HLEN: usize = 8;
/// The UDP header and the probe, checked against the frame's end at once.
const UDP_PROBE: usize = UDP_HLEN + PROBE_LEN;

#[derive(Clone, Copy)]
enum Count {
    Answered,
    Malformed,
    Refused,
}

#[inline(always)]
fn counters() -> Option<&'static mut SyncCounters> {
    let p = SYNC_COUNTERS.get_ptr_mut(0)?;
    // SAFETY: index 0 of a one-entry per-CPU array: this CPU's slot, which
    // nothing else writes while this program runs on it (XDP runs with
    // preemption disabled).
    Some(unsafe { &mut *p })
}

#[inline(always)]
fn count(c: Count) {
    if let Some(p) = counters() {
        match c {
            Count::Answered => p.answered += 1,
            Count::Malformed => p.malformed += 1,
            Count::Refused => p.refused += 1,
        }
    }
}

#[inline(always)]
fn stamp() -> u64 {
    // SAFETY: helper without arguments.
    let t = unsafe { bpf_ktime_get_ns() };
    t.wrapping_add_signed(setting!(offset_ns))
}

#[xdp]
pub fn xdprobe_clocksync(ctx: XdpContext) -> u32 {
    // First thing: the receive stamp.
    let t2 = stamp();
    if let Some(p) = counters() {
        p.seen += 1;
    }
    match answer(&ctx, t2) {
        Some(()) => {
            count(Count::Answered);
            xdp_action::XDP_TX
        }
        None => xdp_action::XDP_PASS,
    }
}

/// A pointer into the frame with `N` readable bytes behind it.
#[inline(always)]
fn at<const N: usize>(ctx: &XdpContext, off: usize) -> Option<*mut [u8; N]> {
    let p = ctx.data() + off;
    if p + N > ctx.data_end() {
        return None;
    }
    Some(p as *mut [u8; N])
}

/// Reads `N` bytes at `p + off`; the caller checked `p`'s range covers them.
#[inline(always)]
fn get<const N: usize>(p: usize, off: usize) -> [u8; N] {
    // SAFETY: every caller passes a pointer whose range was checked against
    // `data_end` for at least `off + N` bytes; frame bytes have no
    // alignment, hence the unaligned read.
    unsafe { core::ptr::read_unaligned((p + off) as *const [u8; N]) }
}

#[inline(always)]
fn put<const N: usize>(p: usize, off: usize, v: [u8; N]) {
    // SAFETY: as in `get`; XDP frames are writable.
    unsafe { core::ptr::write_unaligned((p + off) as *mut [u8; N], v) }
}

/// Where an answerable probe's headers are in the frame.
#[derive(Clone, Copy)]
struct Probe {
    eth: usize,
    /// Offset of the IP header (past the VLAN tags).
    l3: usize,
    /// Address of the UDP header.
    udp: usize,
    ethertype: u16,
    /// The settings' flags, read once.
    flags: u32,
}

/// Stamps and turns the probe around; `None` (pass it on) for anything
/// that is not an answerable probe.
#[inline(always)]
fn answer(ctx: &XdpContext, t2: u64) -> Option<()> {
    let p = locate(ctx)?;
    swap_ends(ctx, &p)?;
    let pl = p.udp + UDP_HLEN;
    let old_flags = u16::from_be_bytes(get::<2>(pl, PROBE_FLAGS));
    put(pl, PROBE_FLAGS, (old_flags | PROBE_FLAG_ANSWERED).to_be_bytes());
    put(pl, PROBE_T2, t2.to_be_bytes());
    // Last: the transmit stamp.
    put(pl, PROBE_T3, stamp().to_be_bytes());
    checksum(ctx, &p)
}

/// Walks to the UDP header (at most two VLAN tags, IPv4 without
/// fragments, IPv6 without extension headers) and checks that it holds
/// an unanswered probe of ours; a malformed one is counted.
#[inline(always)]
fn locate(ctx: &XdpContext) -> Option<Probe> {
    let eth = at::<ETH_HLEN>(ctx, 0)? as usize;
    let mut ethertype = u16::from_be_bytes(get::<2>(eth, 12));
    let mut l3 = ETH_HLEN;
    // At most two VLAN tags (QinQ), each 4 bytes.
    for _ in 0..2 {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        let tag = at::<4>(ctx, l3)? as usize;
        ethertype = u16::from_be_bytes(get::<2>(tag, 2));
        l3 += 4;
    }
    let flags = setting!(flags);
    let l4 = match ethertype {
        ETH_P_IP if flags & SYNC_V4 != 0 => {
            let ip = at::<20>(ctx, l3)? as usize;
            let h = get::<20>(ip, 0);
            let ihl = usize::from(h[0] & 0x0f) * 4;
            // UDP, not a fragment (neither MF nor an offset).
            if h[0] >> 4 != 4 || ihl < 20 || h[9] != IPPROTO_UDP || h[6] & 0x3f != 0 || h[7] != 0 {
                return None;
            }
            l3 + ihl
        }
        // No extension headers: the manager sends none.
        ETH_P_IPV6 if flags & SYNC_V6 != 0 => {
            let ip = at::<40>(ctx, l3)? as usize;
            if get::<1>(ip, 6)[0] != IPPROTO_UDP {
                return None;
            }
            l3 + 40
        }
        _ => return None,
    };
    let udp = at::<UDP_PROBE>(ctx, l4)? as usize;
    if u16::from_be_bytes(get::<2>(udp, 2)) != setting!(port) {
        return None;
    }
    let pl = udp + UDP_HLEN;
    let unanswered = u16::from_be_bytes(get::<2>(pl, PROBE_FLAGS)) & PROBE_FLAG_ANSWERED == 0;
    if u16::from_be_bytes(get::<2>(udp, 4)) as usize != UDP_PROBE
        || u32::from_be_bytes(get::<4>(pl, PROBE_MAGIC_OFF)) != PROBE_MAGIC
        || u16::from_be_bytes(get::<2>(pl, PROBE_VERSION)) != PROBE_VERSION_1
        || !unanswered
    {
        count(Count::Malformed);
        return None;
    }
    Some(Probe {
        eth,
        l3,
        udp,
        ethertype,
        flags,
    })
}

/// Swaps the addresses (after checking the source against the allowed
/// one), the MACs and the ports.
#[inline(always)]
fn swap_ends(ctx: &XdpContext, p: &Probe) -> Option<()> {
    if p.ethertype == ETH_P_IP {
        let ip = at::<20>(ctx, p.l3)? as usize;
        let (src, dst) = (get::<4>(ip, 12), get::<4>(ip, 16));
        if p.flags & SYNC_ALLOW_V4 != 0 && src != setting!(allow_v4) {
            count(Count::Refused);
            return None;
        }
        put(ip, 12, dst);
        put(ip, 16, src);
    } else {
        let ip = at::<40>(ctx, p.l3)? as usize;
        let (src, dst) = (get::<16>(ip, 8), get::<16>(ip, 24));
        if p.flags & SYNC_ALLOW_V6 != 0 && src != setting!(allow_v6) {
            count(Count::Refused);
            return None;
        }
        put(ip, 8, dst);
        put(ip, 24, src);
    }
    let (mac_dst, mac_src) = (get::<6>(p.eth, 0), get::<6>(p.eth, 6));
    put(p.eth, 0, mac_src);
    put(p.eth, 6, mac_dst);
    let (sport, dport) = (get::<2>(p.udp, 0), get::<2>(p.udp, 2));
    put(p.udp, 0, dport);
    put(p.udp, 2, sport);
    Some(())
}

/// The UDP checksum, computed afresh, not updated: a probe sent from a
/// veth or with checksum offload arrives here with only the
/// pseudo-header's partial sum in it (the NIC would have finished it).
#[inline(always)]
fn checksum(ctx: &XdpContext, p: &Probe) -> Option<()> {
    let udp = p.udp;
    put(udp, 6, [0, 0]);
    let mut acc = sum::<UDP_PROBE>(udp) + u32::from(IPPROTO_UDP) + UDP_PROBE as u32;
    if p.ethertype == ETH_P_IP {
        let ip = at::<20>(ctx, p.l3)? as usize;
        acc += sum::<8>(ip + 12);
    } else {
        let ip = at::<40>(ctx, p.l3)? as usize;
        acc += sum::<32>(ip + 8);
    }
    // At most 32 words of 0xffff plus two: two folds bring it to 16 bits.
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    let mut c = !(acc as u16);
    if c == 0 {
        // RFC 768: a computed 0 is sent as all ones.
        c = 0xffff;
    }
    put(udp, 6, c.to_be_bytes());
    Some(())
}

/// The ones'-complement sum (not yet folded) of the `N` bytes at `p`, as
/// big-endian 16-bit words; the caller checked the range.
#[inline(always)]
fn sum<const N: usize>(p: usize) -> u32 {
    let b = get::<N>(p, 0);
    let mut acc = 0u32;
    let mut i = 0;
    while i + 1 < N {
        acc += u32::from(u16::from_be_bytes([b[i], b[i + 1]]));
        i += 2;
    }
    acc
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Unreachable by construction; a surviving panic path makes the
    // verifier reject the program at load time.
    loop {}
}
