//! The skb layers on other hook kinds: BTF-typed tracepoints (direct
//! loads from the `sk_buff`), and kprobes or fentry on a kernel function
//! of the operator's choice.

use aya_ebpf::macros::{btf_tracepoint, fentry, kprobe};
use aya_ebpf::programs::{BtfTracePointContext, FEntryContext, ProbeContext};
use host_prog::{ETH_P_IP, ETH_P_IPV6, parse_tcp};
use xdprobe_common::host::{layer, skb_slot};

use crate::emit::{emit_skb, rx_skb, tx_skb};

/// A direct load from a BTF-typed kernel pointer at an offset from the
/// settings (a constant to the verifier: the settings map is frozen).
#[inline(always)]
pub(crate) fn ld<T: Copy>(p: *const u8, off: u32) -> T {
    // SAFETY: in a BTF-typed program the verifier checks this load against
    // the kernel's BTF (it must be a member of that size) and the JIT makes
    // it a fault-tolerant load.
    unsafe { core::ptr::read_volatile(p.add(off as usize).cast::<T>()) }
}

/// `tx_skb` with the sk_buff's own fields read directly (one
/// `bpf_probe_read_kernel` less per field; measured ~20 % cheaper per
/// event, docs/host-latency.md).
#[inline(always)]
pub(crate) fn tx_skb_btf(layer: u8, skb: *const u8) {
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
pub(crate) fn rx_skb_btf(layer: u8, skb: *const u8) {
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

// The skb layers on kernel functions (per-kernel option).

/// The `struct sk_buff *` argument of a kprobe'd function (its position,
/// from BTF, is in the settings per slot).
#[inline(always)]
pub(crate) fn kp_skb(ctx: &ProbeContext, slot: usize) -> u64 {
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
pub(crate) fn fe_skb(ctx: &FEntryContext, slot: usize) -> u64 {
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
