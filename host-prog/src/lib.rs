//! Kernel-side helpers shared by xdprobe's host tracing programs: reading
//! kernel memory at offsets user space found in the running kernel's BTF,
//! and the bounded TCP/IP header walk on an `sk_buff`.
//!
//! Every read goes through `bpf_probe_read_kernel`, which fails cleanly on
//! a bad address: the programs attach to classic tracepoints whose
//! arguments are plain integers to the verifier, so direct loads are not
//! an option there, and one code path serves every hook kind.
#![no_std]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cbpf;

use aya_ebpf::EbpfContext;
use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_buf};
use aya_ebpf::programs::TracePointContext;
use xdprobe_common::host::TpOffsets;

pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;
pub const IPPROTO_TCP: u8 = 6;
pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86DD;

/// Reads a `T` at `base + off` in kernel memory.
#[inline(always)]
pub fn rd<T>(base: u64, off: u32) -> Option<T> {
    if base == 0 {
        return None;
    }
    // SAFETY: the helper copies from any kernel address and returns an
    // error instead of faulting; the value is only used as plain data.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const T) }.ok()
}

/// A TCP segment's identity and byte range, from its headers.
#[derive(Clone, Copy)]
pub struct Segment {
    pub family: u8,
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    /// Payload bytes (SYN/FIN not counted).
    pub len: u32,
}

/// Bytes read in one go from the network header: an IPv6 header (40) or an
/// option-less IPv4 header (20), plus the first 16 bytes of TCP.
const HDR_BYTES: usize = 56;

/// Parses the IPv4/IPv6 + TCP headers at `l3`. `l3_len` is the number of
/// bytes from `l3` to the end of the skb's data (linear and paged), which
/// for TSO/GSO and GRO skbs is the only trustworthy total: IPv4's total
/// length may be 0 there (BIG TCP). `None` for anything but TCP.
#[inline(always)]
pub fn parse_tcp(l3: u64, l3_len: u32) -> Option<Segment> {
    let mut b = [0u8; HDR_BYTES];
    // SAFETY: reads HDR_BYTES of kernel memory at l3 into a stack buffer of
    // that size; the helper fails cleanly on a bad address.
    unsafe { bpf_probe_read_kernel_buf(l3 as *const u8, &mut b) }.ok()?;
    let mut s = Segment {
        family: 0,
        saddr: [0; 16],
        daddr: [0; 16],
        sport: 0,
        dport: 0,
        seq: 0,
        len: 0,
    };
    let (l3_hdr, ip_len, th) = match b[0] >> 4 {
        4 => {
            if b[9] != IPPROTO_TCP {
                return None;
            }
            // Not the first fragment: no TCP header here.
            if u16::from_be_bytes([b[6], b[7]]) & 0x1fff != 0 {
                return None;
            }
            let ihl = u32::from(b[0] & 0x0f) * 4;
            if ihl < 20 {
                return None;
            }
            s.family = AF_INET as u8;
            s.saddr[..4].copy_from_slice(&b[12..16]);
            s.daddr[..4].copy_from_slice(&b[16..20]);
            let tot = u32::from(u16::from_be_bytes([b[2], b[3]]));
            let th: [u8; 16] = if ihl == 20 {
                let mut t = [0u8; 16];
                t.copy_from_slice(&b[20..36]);
                t
            } else {
                rd::<[u8; 16]>(l3, ihl)?
            };
            (ihl, if tot == 0 { l3_len } else { tot.min(l3_len) }, th)
        }
        6 => {
            // Extension headers before TCP are not walked: TCP over IPv6
            // carries none in practice, and the walk would cost every packet.
            if b[6] != IPPROTO_TCP {
                return None;
            }
            s.family = AF_INET6 as u8;
            s.saddr.copy_from_slice(&b[8..24]);
            s.daddr.copy_from_slice(&b[24..40]);
            let pl = u32::from(u16::from_be_bytes([b[4], b[5]]));
            let mut t = [0u8; 16];
            t.copy_from_slice(&b[40..56]);
            (
                40,
                if pl == 0 {
                    l3_len
                } else {
                    (pl + 40).min(l3_len)
                },
                t,
            )
        }
        _ => return None,
    };
    s.sport = u16::from_be_bytes([th[0], th[1]]);
    s.dport = u16::from_be_bytes([th[2], th[3]]);
    s.seq = u32::from_be_bytes([th[4], th[5], th[6], th[7]]);
    let doff = u32::from(th[12] >> 4) * 4;
    s.len = ip_len.saturating_sub(l3_hdr + doff);
    Some(s)
}

/// True when `[seq, end)` (wrapping) holds a byte whose sequence number is
/// a multiple of `every` — the sampling grid every layer and every host
/// agrees on without sharing state. `every` ≤ 1: always.
#[inline(always)]
pub fn holds_sample(seq: u32, end: u32, every: u32) -> bool {
    if every <= 1 {
        return true;
    }
    let r = seq % every;
    let to_first = if r == 0 { 0 } else { every - r };
    to_first < end.wrapping_sub(seq)
}

/// Reads a `u64` field of a tracepoint record at an offset from tracefs.
#[inline(always)]
pub fn tp_u64(ctx: &TracePointContext, off: u32) -> u64 {
    // SAFETY: reads the tracepoint record at an offset taken from the
    // event's tracefs format; the helper fails cleanly.
    unsafe { ctx.read_at::<u64>(off as usize) }.unwrap_or(0)
}

#[inline(always)]
pub fn tp_i32(ctx: &TracePointContext, off: u32) -> i32 {
    // SAFETY: as in `tp_u64`.
    unsafe { ctx.read_at::<i32>(off as usize) }.unwrap_or(0)
}

#[inline(always)]
pub fn tp_u16(ctx: &TracePointContext, off: u32) -> u16 {
    // SAFETY: as in `tp_u64`.
    unsafe { ctx.read_at::<u16>(off as usize) }.unwrap_or(0)
}

/// `N` bytes of kernel memory (a tracepoint record, an `sk_buff`) read in
/// one helper call from `base` on, for programs that need several fields
/// of one object: each `rd` or `read_at` is a helper call of its own, and
/// the calls, not the bytes, are what costs. Fields are looked up at their
/// absolute offsets (constants to the verifier, which drops the branch
/// not taken); one outside the span is `None`, and the caller reads it
/// on its own.
pub struct Span<const N: usize> {
    base: u32,
    b: [u8; N],
}

impl<const N: usize> Span<N> {
    /// Reads `[addr + base, addr + base + N)`; `None` if the read fails.
    #[inline(always)]
    pub fn read(addr: u64, base: u32) -> Option<Self> {
        if addr == 0 {
            return None;
        }
        let mut s = Span { base, b: [0u8; N] };
        // SAFETY: copies N bytes of kernel memory straight into a stack
        // buffer of that size (no `Option` copy: the stack is 512 bytes);
        // the helper fails cleanly on a bad address.
        unsafe { bpf_probe_read_kernel_buf((addr + u64::from(base)) as *const u8, &mut s.b) }
            .ok()?;
        Some(s)
    }

    #[inline(always)]
    fn bytes<const M: usize>(&self, off: u32) -> Option<[u8; M]> {
        let o = off.checked_sub(self.base)? as usize;
        let b = self.b.get(o..o + M)?;
        let mut out = [0u8; M];
        out.copy_from_slice(b);
        Some(out)
    }

    #[inline(always)]
    pub fn u16(&self, off: u32) -> Option<u16> {
        self.bytes(off).map(u16::from_ne_bytes)
    }

    #[inline(always)]
    pub fn u32(&self, off: u32) -> Option<u32> {
        self.bytes(off).map(u32::from_ne_bytes)
    }

    #[inline(always)]
    pub fn i32(&self, off: u32) -> Option<i32> {
        self.bytes(off).map(i32::from_ne_bytes)
    }

    #[inline(always)]
    pub fn u64(&self, off: u32) -> Option<u64> {
        self.bytes(off).map(u64::from_ne_bytes)
    }
}

/// A tracepoint record's span from `base` (see [`Span`]). The record sits
/// in a per-CPU trace buffer of `PERF_MAX_TRACE_SIZE` bytes, so a span
/// past a shorter record reads that buffer, not foreign memory.
#[inline(always)]
pub fn tp_span<const N: usize>(ctx: &TracePointContext, base: u32) -> Option<Span<N>> {
    Span::read(ctx.as_ptr() as u64, base)
}

/// A record field from `span` if it holds it, else read on its own.
#[inline(always)]
pub fn rec_u64<const N: usize>(ctx: &TracePointContext, s: &Span<N>, off: u32) -> u64 {
    s.u64(off).unwrap_or_else(|| tp_u64(ctx, off))
}

#[inline(always)]
pub fn rec_i32<const N: usize>(ctx: &TracePointContext, s: &Span<N>, off: u32) -> i32 {
    s.i32(off).unwrap_or_else(|| tp_i32(ctx, off))
}

#[inline(always)]
pub fn rec_u16<const N: usize>(ctx: &TracePointContext, s: &Span<N>, off: u32) -> u16 {
    s.u16(off).unwrap_or_else(|| tp_u16(ctx, off))
}

/// A connection's identity as an `inet_sock_set_state` record gives it
/// (local end first): family, addresses (IPv4 in the first four bytes),
/// ports in host order. Read from the record, not the socket: by CLOSE
/// the socket may have given its port back.
pub struct StateIdentity {
    pub family: u8,
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
}

#[inline(always)]
pub fn state_identity(ctx: &TracePointContext, tp: &TpOffsets) -> Option<StateIdentity> {
    let family = tp_u16(ctx, tp.state_family);
    let mut id = StateIdentity {
        family: family as u8,
        saddr: [0; 16],
        daddr: [0; 16],
        sport: tp_u16(ctx, tp.state_sport),
        dport: tp_u16(ctx, tp.state_dport),
    };
    // SAFETY: record reads at tracefs offsets; the helper fails cleanly.
    unsafe {
        if family == AF_INET {
            id.saddr[..4].copy_from_slice(&ctx.read_at::<[u8; 4]>(tp.state_saddr as usize).ok()?);
            id.daddr[..4].copy_from_slice(&ctx.read_at::<[u8; 4]>(tp.state_daddr as usize).ok()?);
        } else if family == AF_INET6 {
            id.saddr = ctx.read_at::<[u8; 16]>(tp.state_saddr_v6 as usize).ok()?;
            id.daddr = ctx.read_at::<[u8; 16]>(tp.state_daddr_v6 as usize).ok()?;
        } else {
            return None;
        }
    }
    Some(id)
}
