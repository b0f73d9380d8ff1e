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

use xdprobe_common::host::StackSettings;

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

/// Overwritten by the loader before load (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
pub(crate) static STACK_SETTINGS: StackSettings = StackSettings::ZERO;

/// Reads one settings field. The volatile read keeps the compiler from
/// folding the build-time zeros; the verifier then sees the loader's value.
macro_rules! setting {
    ($($f:tt)+) => {
        // SAFETY: a plain static, never written by the program.
        unsafe { core::ptr::read_volatile(&$crate::STACK_SETTINGS.$($f)+) }
    };
}

mod emit;
mod maps;
mod receiver;
mod scope;
mod sender;
mod skb_hooks;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Unreachable by construction; a surviving panic path makes the
    // verifier reject the program at load time.
    loop {}
}
