//! xdprobe's XDP program, attached to the capture interface.
//!
//! Per frame: take the timestamp (TAI, before any other work), walk the
//! headers a bounded number of steps (the header policy shared with the
//! parser: see `walk`), apply the optional filters (set by
//! user space through maps and read-only globals, so a filter change is
//! never a recompile), write the timestamp into the metadata area in front of
//! the frame, and redirect to the AF_XDP socket of the frame's RX queue.
//! Everything not redirected is dropped on a mirror port (appliance mode) or
//! passed to the host stack (host mode). A frame the walk cannot classify
//! is redirected all the same: user space's parser has the last word.
//!
//! No logging from here: the per-CPU counters say what happened.
#![no_std]
#![no_main]
#![deny(clippy::undocumented_unsafe_blocks)]

mod walk;

use aya_ebpf::{
    bindings::xdp_action,
    helpers::generated::{bpf_ktime_get_tai_ns, bpf_xdp_adjust_meta},
    macros::{map, xdp},
    maps::{HashMap, LpmTrie, PerCpuArray, XskMap, lpm_trie::Key},
    programs::XdpContext,
};
use xdprobe_common::{
    FILTER_MAX_ENTRIES, MAX_QUEUES, META_LEN, META_MAGIC, SETTING_FILTER_PORT,
    SETTING_FILTER_PREFIX, SETTING_FILTER_VLAN, SETTING_HOST_MODE, XdpCounters, XdpMeta,
    XdpSettings,
};

use crate::walk::{Addrs, Headers, Walk};

/// The kernel requires a GPL-compatible licence string for some helpers
/// (kfuncs such as the RX hardware timestamp); this object is offered under
/// MIT or GPL.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

/// Read-only settings, overwritten by the loader before the program is
/// loaded (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static SETTINGS: XdpSettings = XdpSettings { flags: 0, _pad: 0 };

#[map(name = "XSKS")]
static XSKS: XskMap = XskMap::with_max_entries(MAX_QUEUES, 0);

#[map(name = "COUNTERS")]
static COUNTERS: PerCpuArray<XdpCounters> = PerCpuArray::with_max_entries(1, 0);

#[map(name = "VLAN_FILTER")]
static VLAN_FILTER: HashMap<u16, u8> = HashMap::with_max_entries(FILTER_MAX_ENTRIES, 0);

#[map(name = "PREFIX4_FILTER")]
static PREFIX4_FILTER: LpmTrie<[u8; 4], u8> = LpmTrie::with_max_entries(FILTER_MAX_ENTRIES, 0);

#[map(name = "PREFIX6_FILTER")]
static PREFIX6_FILTER: LpmTrie<[u8; 16], u8> = LpmTrie::with_max_entries(FILTER_MAX_ENTRIES, 0);

#[map(name = "PORT_FILTER")]
static PORT_FILTER: HashMap<u16, u8> = HashMap::with_max_entries(FILTER_MAX_ENTRIES, 0);

#[xdp]
pub fn xdprobe_xdp(ctx: XdpContext) -> u32 {
    // SAFETY: helper without arguments; available since kernel 6.1.
    let tai_ns = unsafe { bpf_ktime_get_tai_ns() };
    // SAFETY: `SETTINGS` is a plain static; the volatile read keeps the
    // compiler from folding the build-time value, so the loader's value is
    // the one the verifier sees.
    let flags = unsafe { core::ptr::read_volatile(&SETTINGS.flags) };
    let reject = if flags & SETTING_HOST_MODE != 0 {
        xdp_action::XDP_PASS
    } else {
        xdp_action::XDP_DROP
    };
    let Some(counters) = COUNTERS.get_ptr_mut(0) else {
        return reject;
    };
    // SAFETY: index 0 of a one-entry per-CPU array: a valid pointer to this
    // CPU's slot, which nothing else writes while this program runs on it
    // (XDP runs with preemption disabled).
    let counters = unsafe { &mut *counters };
    counters.seen += 1;

    match classify(&ctx, flags) {
        Verdict::Capture => {}
        Verdict::Unclassified => counters.unclassified += 1,
        Verdict::NonIp => {
            counters.non_ip += 1;
            return reject;
        }
        Verdict::Filtered => {
            counters.filtered += 1;
            return reject;
        }
    }

    if !write_meta(&ctx, tai_ns) {
        counters.meta_failed += 1;
    }
    match XSKS.redirect(ctx.rx_queue_index(), 0) {
        Ok(action) => {
            counters.redirected += 1;
            action
        }
        Err(_) => {
            counters.redirect_failed += 1;
            reject
        }
    }
}

enum Verdict {
    Capture,
    /// Captured without a verdict of ours: the parser decides.
    Unclassified,
    NonIp,
    Filtered,
}

/// Decides whether a frame is captured. Only walks as deep as the enabled
/// filters need: with no filter, the L2 walk (to tell IP from ARP) is all.
#[inline(always)]
fn classify(ctx: &XdpContext, flags: u32) -> Verdict {
    let need_l3 = flags & (SETTING_FILTER_PREFIX | SETTING_FILTER_PORT) != 0;
    let h = match walk::walk(ctx, need_l3, flags & SETTING_FILTER_PORT != 0) {
        Walk::Ip(h) => h,
        Walk::NotIp => return Verdict::NonIp,
        Walk::Unclassified { vlan } => {
            // An address or port filter cannot be evaluated on it.
            return if !vlan_allowed(vlan, flags) || need_l3 {
                Verdict::Filtered
            } else {
                Verdict::Unclassified
            };
        }
    };
    if !vlan_allowed(h.vlan, flags) {
        return Verdict::Filtered;
    }
    if flags & SETTING_FILTER_PREFIX != 0 && !prefix_match(&h) {
        return Verdict::Filtered;
    }
    if flags & SETTING_FILTER_PORT != 0 {
        let Some((sp, dp)) = h.ports else {
            return Verdict::Filtered;
        };
        // SAFETY: map lookups; the values are plain bytes only tested for presence.
        let hit = unsafe { PORT_FILTER.get(sp).is_some() || PORT_FILTER.get(dp).is_some() };
        if !hit {
            return Verdict::Filtered;
        }
    }
    Verdict::Capture
}

/// The VLAN filter's verdict on the outermost VLAN ID; true when it is off.
#[inline(always)]
fn vlan_allowed(vlan: u16, flags: u32) -> bool {
    // SAFETY: map lookup; the value is a plain byte only tested for presence.
    flags & SETTING_FILTER_VLAN == 0 || unsafe { VLAN_FILTER.get(vlan) }.is_some()
}

#[inline(always)]
fn prefix_match(h: &Headers) -> bool {
    match h.addrs {
        Addrs::V4 { src, dst } => {
            PREFIX4_FILTER.get(Key::new(32, src)).is_some()
                || PREFIX4_FILTER.get(Key::new(32, dst)).is_some()
        }
        Addrs::V6 { src, dst } => {
            PREFIX6_FILTER.get(Key::new(128, src)).is_some()
                || PREFIX6_FILTER.get(Key::new(128, dst)).is_some()
        }
        Addrs::None => false,
    }
}

/// Grows the metadata area by `META_LEN` bytes and writes the timestamp
/// there. False if the driver offers no metadata room.
#[inline(always)]
fn write_meta(ctx: &XdpContext, tai_ns: u64) -> bool {
    const DELTA: i32 = -(META_LEN as i32);
    // SAFETY: `ctx.ctx` is the program's own context pointer; the helper
    // checks the delta against the headroom and fails cleanly.
    if unsafe { bpf_xdp_adjust_meta(ctx.ctx, DELTA) } != 0 {
        return false;
    }
    // Packet pointers must be re-read after the helper.
    let meta = ctx.metadata();
    if meta + META_LEN > ctx.data() {
        return false;
    }
    let value = XdpMeta {
        tai_ns,
        magic: META_MAGIC,
        _pad: 0,
    };
    // SAFETY: `[meta, meta + META_LEN)` lies inside the metadata area, as
    // the bound check against `data` above proves to the verifier; the
    // area is only 4-byte aligned, hence the unaligned write.
    unsafe { core::ptr::write_unaligned(meta as *mut XdpMeta, value) };
    true
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Unreachable by construction; if a panic path survived optimisation,
    // this loop makes the verifier reject the program at load time instead
    // of the program doing something undefined.
    loop {}
}
