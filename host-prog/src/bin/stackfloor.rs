//! Benchmark only: the stack-latency programs with their bodies removed.
//!
//! Every program of `stacklat/` is here under the same name and of the
//! same kind, returning at once, so the stack probe's loader attaches them
//! at exactly the hooks it would attach the real ones to
//! (`StackOptions::empty_programs`). What an iperf3 run loses with these
//! attached is the kernel's own cost of running any program at those hooks
//! (tracepoint dispatch, the classic tracepoints' record, the indirect
//! call): the floor under the real programs' cost
//! (`benches/host_overhead.sh`, BENCHMARKS.md).
//!
//! The maps and the settings global exist so the loader's checks and map
//! hand-over run unchanged; no attached program touches them.
#![no_std]
#![no_main]
#![deny(clippy::undocumented_unsafe_blocks)]

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, kprobe, map, raw_tracepoint, tracepoint},
    maps::{Array, PerCpuArray, RingBuf},
    programs::{
        BtfTracePointContext, FEntryContext, ProbeContext, RawTracePointContext, TracePointContext,
    },
};
use xdprobe_common::host::{SEND_SLOTS_LEN, SendSlot, StackCounters, StackSettings};

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

/// Overwritten by the loader before load, as in `stacklat/main.rs`.
#[unsafe(no_mangle)]
static STACK_SETTINGS: StackSettings = StackSettings::ZERO;

#[map(name = "STACK_EVENTS")]
static STACK_EVENTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

#[map(name = "STACK_COUNTERS")]
static STACK_COUNTERS: PerCpuArray<StackCounters> = PerCpuArray::with_max_entries(1, 0);

#[map(name = "SEND_SLOTS")]
static SEND_SLOTS: Array<SendSlot> = Array::with_max_entries(SEND_SLOTS_LEN, 0);

/// Never loaded or attached: it references the settings and the maps so
/// the linker keeps them in the object.
#[tracepoint]
pub fn stack_floor_keep(_ctx: TracePointContext) -> u32 {
    // SAFETY: a plain static, never written by the program.
    let n = unsafe { core::ptr::read_volatile(&STACK_SETTINGS.sample_bytes) };
    let _ = STACK_EVENTS.query(0);
    let _ = STACK_COUNTERS.get_ptr_mut(0);
    let _ = SEND_SLOTS.get_ptr_mut(n & (SEND_SLOTS_LEN - 1));
    0
}

/// Empty programs of one kind, one per name.
macro_rules! empty {
    ($attr:ident, $ctx:ty: $($name:ident),+ $(,)?) => {
        $(
            #[$attr]
            pub fn $name(_ctx: $ctx) -> u32 {
                0
            }
        )+
    };
}

empty!(tracepoint, TracePointContext:
    stack_send_enter, stack_send_length, stack_ip_tx, stack_dev_tx, stack_dev_rx0,
    stack_dev_rx1, stack_dev_rx2, stack_ip_rx, stack_tcp_probe, stack_recv_length,
    stack_set_state,
);

empty!(btf_tracepoint, BtfTracePointContext:
    stack_tcp_sendmsg_btf, stack_bt_ip_tx, stack_bt_dev_tx, stack_bt_dev_rx0,
    stack_bt_dev_rx1, stack_bt_dev_rx2, stack_bt_ip_rx, stack_tcp_probe_btf,
);

empty!(raw_tracepoint, RawTracePointContext: stack_tcp_sendmsg_raw);

empty!(kprobe, ProbeContext:
    stack_kp_ip_tx, stack_kp_dev_tx, stack_kp_dev_rx0, stack_kp_dev_rx1, stack_kp_dev_rx2,
    stack_kp_ip_rx,
);

empty!(fentry, FEntryContext:
    stack_fe_ip_tx, stack_fe_dev_tx, stack_fe_dev_rx0, stack_fe_dev_rx1, stack_fe_dev_rx2,
    stack_fe_ip_rx,
);

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Unreachable by construction; a surviving panic path makes the
    // verifier reject the program at load time.
    loop {}
}
