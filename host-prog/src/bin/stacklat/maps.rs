//! The programs' maps and counters: the ring buffer to user space, the
//! per-thread send slots, the sampling windows' gate and epoch, the
//! socket identity cache.

use aya_ebpf::helpers::bpf_ktime_get_ns;
use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, HashMap, PerCpuArray, RingBuf};
use xdprobe_common::host::{SEND_SLOTS_LEN, SendSlot, SockId, StackCounters};

#[map(name = "STACK_EVENTS")]
pub(crate) static STACK_EVENTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

#[map(name = "STACK_COUNTERS")]
pub(crate) static STACK_COUNTERS: PerCpuArray<StackCounters> = PerCpuArray::with_max_entries(1, 0);

/// Thread ID modulo its length → the thread's send call in flight
/// ([`SendSlot`]). An array, not a hash: the verifier inlines its lookup,
/// so the entry store of a send call is a few plain stores instead of a
/// locked hash update (0.5–1 µs here, on every write(2) of the host).
/// A slot is taken over by whichever thread of its index writes last; the
/// other finds another `tid` there and counts `no_entry`. A thread whose
/// call was on a file (no `sock_send_length`) keeps its entry until its
/// next call overwrites it; user space clears entries older than a minute.
#[map(name = "SEND_SLOTS")]
pub(crate) static SEND_SLOTS: Array<SendSlot> = Array::with_max_entries(SEND_SLOTS_LEN, 0);

/// The calling thread's send slot.
#[inline(always)]
pub(crate) fn send_slot(tid: u32) -> Option<&'static mut SendSlot> {
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
pub(crate) static STACK_GATE: Array<u32> = Array::with_max_entries(1, 0);

#[inline(always)]
pub(crate) fn open(bit: u32) -> bool {
    STACK_GATE.get(0).is_some_and(|g| *g & bit != 0)
}

/// When the send path's entry last opened (0: since the start). Entries
/// stamped before it are stale: the call began while nothing watched.
#[map(name = "STACK_EPOCH")]
pub(crate) static STACK_EPOCH: Array<u64> = Array::with_max_entries(1, 0);

#[inline(always)]
pub(crate) fn epoch() -> u64 {
    STACK_EPOCH.get(0).copied().unwrap_or(0)
}

/// Socket → its identity, read from the socket once; removed at CLOSE.
#[map(name = "SOCK_IDS")]
pub(crate) static SOCK_IDS: HashMap<u64, SockId> = HashMap::with_max_entries(65536, 0);

#[derive(Clone, Copy)]
pub(crate) enum Count {
    Events,
    RingbufFull,
    NoEntry,
    ReadFailed,
    Unsampled,
    Filtered,
    StaleEntry,
}

#[inline(always)]
pub(crate) fn count(c: Count) {
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
pub(crate) fn now() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}
