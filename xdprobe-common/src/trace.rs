//! Types shared by the kernel packet path tracer (`host-prog/src/bin/
//! pathtrace.rs`) and its loader (`xdprobe-host`'s `trace` module).
//!
//! One program serves every tracepoint: each is attached with a BPF
//! cookie, the point's index into `TRACE_POINTS`, which says where its
//! record keeps the skb. Packets
//! are followed by the address of their data (`sk_buff.head`) — stable
//! across clones and across the `sk_buff` struct being recycled — and a
//! trail of (point, time) steps is kept per packet until it is freed
//! (`docs/host-trace.md`). Map names are in [`crate::host::names`].

use crate::host::KernelOffsets;

/// Steps kept per trail; later ones are counted in `Trail::lost_steps`.
pub const TRACE_MAX_STEPS: usize = 32;
/// Bytes of the packet (from its IP header) the flow filter sees: like
/// tcpdump's `-s 128`, a filter that reads past them does not match.
pub const TRACE_PKT_BYTES: usize = 128;
/// Bytes of the packet (from its IP header) kept in the trail, for user
/// space to tell flows and echo probes apart.
pub const TRACE_HDR_BYTES: usize = 64;
/// Most classic BPF instructions the in-kernel filter runs.
pub const TRACE_FILTER_MAX: usize = 64;
/// Network namespaces one run may be scoped to.
pub const TRACE_MAX_NETNS: usize = 8;
/// Tracepoints one run may attach to.
pub const TRACE_MAX_POINTS: u32 = 512;

/// `TracePoint::flags`: the skb is freed here (`skb:consume_skb`,
/// `skb:kfree_skb`): the trail ends when no clone shares the data.
pub const POINT_FREE: u16 = 1 << 0;
/// The record carries a drop reason at `TracePoint::reason_off`.
pub const POINT_DROP: u16 = 1 << 1;
/// The skb may already be gone when this fires (`net:net_dev_xmit` runs
/// after the driver took it): no kernel memory is read through it; the
/// step goes to the trail that handed this skb address to the driver
/// (`POINT_ARM`) and has not seen its `POINT_AFTER` step yet.
pub const POINT_AFTER: u16 = 1 << 2;
/// A trail never starts here (free points, and whatever the user says).
pub const POINT_NO_START: u16 = 1 << 3;
/// The skb is handed to a driver here (`net:net_dev_start_xmit`): the
/// next `POINT_AFTER` step of the same skb belongs to this trail.
pub const POINT_ARM: u16 = 1 << 4;

/// What `TRACE_POINTS` holds per point (index: the attach cookie).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracePoint {
    /// Index of the point in the run's list (what user space names).
    pub id: u16,
    /// `POINT_*` bits.
    pub flags: u16,
    /// Offset of the skb pointer in the tracepoint record.
    pub skb_off: u16,
    /// Offset of the drop reason (`POINT_DROP`), else 0.
    pub reason_off: u16,
}

/// One classic BPF instruction, as libpcap compiles it (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbpfInsn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl CbpfInsn {
    pub const ZERO: CbpfInsn = CbpfInsn {
        code: 0,
        jt: 0,
        jf: 0,
        k: 0,
    };
}

/// Kernel struct members the tracer reads beyond [`KernelOffsets`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceOffsets {
    /// `sk_buff.data_len` (u32): paged bytes; `len - data_len` is linear.
    pub skb_data_len: u32,
    /// `sk_buff.end` (`sk_buff_data_t`, a u32 offset from `head`): where
    /// `skb_shared_info` starts.
    pub skb_end: u32,
    /// `skb_shared_info.dataref` (atomic_t): how many skbs share the data
    /// (low 16 bits).
    pub shinfo_dataref: u32,
    /// `sk_buff.mark` (u32).
    pub skb_mark: u32,
}

/// `TraceSettings::flags`: only packets whose device is in one of the
/// network namespaces `netns[..n_netns]` start a trail.
pub const TRACE_FILTER_NETNS: u32 = 1 << 0;
/// Only packets with `mark & mark_mask == mark_value` start a trail.
pub const TRACE_FILTER_MARK: u32 = 1 << 1;
/// Only packets the classic BPF program `filter[..filter_len]` accepts
/// (run over the first `TRACE_PKT_BYTES` from the IP header) start a trail.
pub const TRACE_FILTER_PROG: u32 = 1 << 2;

/// Read-only settings of the path tracer, set by the loader.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceSettings {
    pub off: KernelOffsets,
    pub xoff: TraceOffsets,
    /// `TRACE_FILTER_*` bits.
    pub flags: u32,
    pub mark_value: u32,
    pub mark_mask: u32,
    pub n_netns: u32,
    pub netns: [u32; TRACE_MAX_NETNS],
    pub filter_len: u32,
    pub _pad: u32,
    pub filter: [CbpfInsn; TRACE_FILTER_MAX],
}

impl TraceSettings {
    pub const ZERO: TraceSettings = TraceSettings {
        off: KernelOffsets::ZERO,
        xoff: TraceOffsets {
            skb_data_len: 0,
            skb_end: 0,
            shinfo_dataref: 0,
            skb_mark: 0,
        },
        flags: 0,
        mark_value: 0,
        mark_mask: 0,
        n_netns: 0,
        netns: [0; TRACE_MAX_NETNS],
        filter_len: 0,
        _pad: 0,
        filter: [CbpfInsn::ZERO; TRACE_FILTER_MAX],
    };
}

impl Default for TraceSettings {
    fn default() -> Self {
        Self::ZERO
    }
}

/// One step of a trail: the packet passed point `point` at `ts_ns`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStep {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    /// Network namespace inode of the skb's device (0: unknown).
    pub netns: u32,
    /// Interface index of the skb's device (0: none or unknown).
    pub ifindex: u32,
    /// `TracePoint::id`.
    pub point: u16,
    /// CPU the point fired on.
    pub cpu: u16,
    pub _pad: u32,
}

impl TraceStep {
    pub const ZERO: TraceStep = TraceStep {
        ts_ns: 0,
        netns: 0,
        ifindex: 0,
        point: 0,
        cpu: 0,
        _pad: 0,
    };
}

/// `Trail::end`: why the trail ended.
pub mod end {
    /// Still open (never in a finished trail).
    pub const OPEN: u8 = 0;
    /// Freed normally (`skb:consume_skb`).
    pub const CONSUMED: u8 = 1;
    /// Dropped (`skb:kfree_skb`; `Trail::drop_reason` says why).
    pub const DROPPED: u8 = 2;
    /// Another packet showed up in the same data buffer: this one's free
    /// was missed (freed where no tracepoint fires).
    pub const REUSED: u8 = 3;
    /// No step for the idle time: collected by user space.
    pub const IDLE: u8 = 4;
    /// Still open when the tracer stopped.
    pub const STOPPED: u8 = 5;
}

/// One packet's path through the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trail {
    /// `sk_buff.head` when the trail started (the map key).
    pub head: u64,
    /// The `sk_buff` of the latest step.
    pub skb: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Length from the IP header on, when the trail started.
    pub pkt_len: u32,
    pub n_steps: u16,
    /// Steps past `TRACE_MAX_STEPS`, not kept.
    pub lost_steps: u16,
    /// `enum skb_drop_reason` for `end::DROPPED`.
    pub drop_reason: u32,
    /// `end::*`.
    pub end: u8,
    /// Valid bytes in `hdr`.
    pub caplen: u8,
    pub _pad: u16,
    /// What tells this packet from the next one in the same buffer: a
    /// hash of the IP identity (ID, protocol, addresses; IPv6 flow label)
    /// and the first 8 bytes after the IP header (ports and TCP sequence
    /// number, UDP length and checksum, ICMP id and sequence).
    pub fp: u64,
    /// The skb last handed to a driver (`POINT_ARM`), until its
    /// `POINT_AFTER` step; 0: none.
    pub armed: u64,
    /// The first bytes from the IP header, when the trail started.
    pub hdr: [u8; TRACE_HDR_BYTES],
    pub steps: [TraceStep; TRACE_MAX_STEPS],
}

impl Trail {
    pub const ZERO: Trail = Trail {
        head: 0,
        skb: 0,
        first_ns: 0,
        last_ns: 0,
        pkt_len: 0,
        n_steps: 0,
        lost_steps: 0,
        drop_reason: 0,
        end: 0,
        caplen: 0,
        _pad: 0,
        fp: 0,
        armed: 0,
        hdr: [0; TRACE_HDR_BYTES],
        steps: [TraceStep::ZERO; TRACE_MAX_STEPS],
    };
}

impl Default for Trail {
    fn default() -> Self {
        Self::ZERO
    }
}

/// Per-CPU working space of the tracer (one `TRACE_SCRATCH` entry): a
/// trail being built, the packet copy the filter reads and the filter's
/// scratch memory — too big for the 512-byte eBPF stack.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TraceScratch {
    pub trail: Trail,
    pub pkt: [u8; TRACE_PKT_BYTES],
    pub mem: [u32; 16],
}

/// Per-CPU counters of the tracer; user space sums them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceCounters {
    /// Times a traced point fired.
    pub hits: u64,
    /// Trails started.
    pub started: u64,
    /// Finished trails written to the ring buffer.
    pub finished: u64,
    /// Steps recorded on trails.
    pub steps: u64,
    /// Steps not kept: the trail was full.
    pub steps_lost: u64,
    /// Trails not started: the trail map was full.
    pub table_full: u64,
    /// Finished trails lost: the ring buffer was full.
    pub ringbuf_full: u64,
    /// IP packets at a point without a trail that the netns, mark or flow
    /// filter rejected.
    pub filtered: u64,
    /// Kernel memory reads that failed.
    pub read_failed: u64,
    /// Trails moved to a new data buffer (the skb's head was reallocated).
    pub rekeyed: u64,
    /// Trails ended because another packet showed up in their data
    /// buffer (their free was missed).
    pub reused: u64,
    /// skb → trail entries not stored: that map was full.
    pub skbs_full: u64,
}

impl TraceCounters {
    pub const fn add(self, o: TraceCounters) -> TraceCounters {
        TraceCounters {
            hits: self.hits.wrapping_add(o.hits),
            started: self.started.wrapping_add(o.started),
            finished: self.finished.wrapping_add(o.finished),
            steps: self.steps.wrapping_add(o.steps),
            steps_lost: self.steps_lost.wrapping_add(o.steps_lost),
            table_full: self.table_full.wrapping_add(o.table_full),
            ringbuf_full: self.ringbuf_full.wrapping_add(o.ringbuf_full),
            filtered: self.filtered.wrapping_add(o.filtered),
            read_failed: self.read_failed.wrapping_add(o.read_failed),
            rekeyed: self.rekeyed.wrapping_add(o.rekeyed),
            reused: self.reused.wrapping_add(o.reused),
            skbs_full: self.skbs_full.wrapping_add(o.skbs_full),
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), only integer fields and arrays of them, padding
    // spelled out (sizes asserted below): every bit pattern is valid.
    unsafe impl aya::Pod for super::TracePoint {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TraceSettings {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Trail {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TraceCounters {}
}

const _: () = assert!(core::mem::size_of::<TracePoint>() == 8);
const _: () = assert!(core::mem::size_of::<CbpfInsn>() == 8);
const _: () = assert!(core::mem::size_of::<TraceStep>() == 24);
const _: () = assert!(core::mem::size_of::<Trail>() == 64 + TRACE_HDR_BYTES + 24 * TRACE_MAX_STEPS);
const _: () = assert!(
    core::mem::size_of::<TraceSettings>() == 26 * 4 + 16 + 16 + 32 + 8 + 8 * TRACE_FILTER_MAX
);
const _: () = assert!(core::mem::size_of::<TraceCounters>() == 12 * 8);
