//! The flow filter's classic BPF interpreter, run inside the path tracer
//! over a copy of the packet's first bytes. Semantics are libpcap's
//! `bpf_filter()` — a load past the captured bytes or a division by a
//! zero `X` ends the program with 0, shifts by 32 or more give 0 — the
//! same as `xdprobe-filter`'s user-space `cbpf::run`, which the tests hold
//! to libpcap's own interpreter.
//!
//! Written for the verifier: every index into the packet or the scratch
//! memory is masked to its array (the masks change nothing for a checked
//! program) and kept from LLVM's known-bits folding by `black_box`.

use xdprobe_common::trace::{CbpfInsn, TRACE_FILTER_MAX, TRACE_PKT_BYTES};

const PKT_MASK: usize = TRACE_PKT_BYTES - 1;
const _: () = assert!(TRACE_PKT_BYTES.is_power_of_two());

/// An index into the packet copy that the verifier can see is in bounds.
/// Callers only pass indices below `TRACE_PKT_BYTES`, so the mask changes
/// nothing; `black_box` keeps LLVM from dropping it on the strength of
/// facts the verifier does not know.
#[inline(always)]
pub fn idx(i: usize) -> usize {
    core::hint::black_box(i) & PKT_MASK
}

/// A big-endian load of `size` (1, 2, 4) bytes at `off` of the packet
/// copy; `None` past the captured bytes (libpcap: the filter returns 0).
#[inline(always)]
fn pkt_load(pkt: &[u8; TRACE_PKT_BYTES], caplen: u32, off: u32, size: u32) -> Option<u32> {
    if off >= caplen || size > caplen - off {
        return None;
    }
    let o = off as usize;
    // The masks cannot change an index below `caplen` ≤ TRACE_PKT_BYTES;
    // they let the verifier see the bound.
    let b0 = u32::from(pkt[idx(o)]);
    if size == 1 {
        return Some(b0);
    }
    let b1 = u32::from(pkt[idx(o + 1)]);
    if size == 2 {
        return Some((b0 << 8) | b1);
    }
    let b2 = u32::from(pkt[idx(o + 2)]);
    let b3 = u32::from(pkt[idx(o + 3)]);
    Some((b0 << 24) | (b1 << 16) | (b2 << 8) | b3)
}

/// Runs the `n` instructions `insn(0..n)` over `pkt[..caplen]` of a
/// packet `wirelen` bytes long; non-zero: match. The loader checked the
/// program (forward jumps inside it, memory indices < 16, no constant
/// division by zero), so each instruction runs at most once and the loop
/// bound is the largest program's length.
#[inline(always)]
pub fn run(
    insn: impl Fn(usize) -> CbpfInsn,
    n: u32,
    pkt: &[u8; TRACE_PKT_BYTES],
    mem: &mut [u32; 16],
    caplen: u32,
    wirelen: u32,
) -> u32 {
    let mut a: u32 = 0;
    let mut x: u32 = 0;
    let mut pc: u32 = 0;
    for _ in 0..TRACE_FILTER_MAX {
        if pc >= n || pc >= TRACE_FILTER_MAX as u32 {
            return 0;
        }
        let i = insn(pc as usize);
        pc += 1;
        let k = i.k;
        let class = i.code & 0x07;
        let size = match i.code & 0x18 {
            0x00 => 4,
            0x08 => 2,
            _ => 1,
        };
        if class == 0x06 {
            // RET: K or A.
            return if i.code & 0x18 == 0x10 { a } else { k };
        } else if class == 0x00 {
            // LD
            let mode = i.code & 0xe0;
            if mode == 0x20 {
                match pkt_load(pkt, caplen, k, size) {
                    Some(v) => a = v,
                    None => return 0,
                }
            } else if mode == 0x40 {
                let off = x.wrapping_add(k);
                if off < x {
                    return 0;
                }
                match pkt_load(pkt, caplen, off, size) {
                    Some(v) => a = v,
                    None => return 0,
                }
            } else if mode == 0x80 {
                a = wirelen;
            } else if mode == 0x60 {
                a = mem[core::hint::black_box(k as usize) & 15];
            } else {
                a = k;
            }
        } else if class == 0x01 {
            // LDX
            let mode = i.code & 0xe0;
            if mode == 0xa0 {
                match pkt_load(pkt, caplen, k, 1) {
                    Some(v) => x = (v & 0xf) << 2,
                    None => return 0,
                }
            } else if mode == 0x80 {
                x = wirelen;
            } else if mode == 0x60 {
                x = mem[core::hint::black_box(k as usize) & 15];
            } else {
                x = k;
            }
        } else if class == 0x02 {
            mem[core::hint::black_box(k as usize) & 15] = a;
        } else if class == 0x03 {
            mem[core::hint::black_box(k as usize) & 15] = x;
        } else if class == 0x05 {
            // JMP
            let op = i.code & 0xf0;
            if op == 0x00 {
                pc = pc.wrapping_add(k);
                continue;
            }
            let v = if i.code & 0x08 != 0 { x } else { k };
            let taken = if op == 0x10 {
                a == v
            } else if op == 0x20 {
                a > v
            } else if op == 0x30 {
                a >= v
            } else {
                a & v != 0
            };
            pc += u32::from(if taken { i.jt } else { i.jf });
        } else if class == 0x04 {
            // ALU
            let v = if i.code & 0x08 != 0 { x } else { k };
            let op = i.code & 0xf0;
            a = if op == 0x00 {
                a.wrapping_add(v)
            } else if op == 0x10 {
                a.wrapping_sub(v)
            } else if op == 0x20 {
                a.wrapping_mul(v)
            } else if op == 0x30 {
                if v == 0 {
                    return 0;
                }
                a / v
            } else if op == 0x90 {
                if v == 0 {
                    return 0;
                }
                a % v
            } else if op == 0x40 {
                a | v
            } else if op == 0x50 {
                a & v
            } else if op == 0xa0 {
                a ^ v
            } else if op == 0x60 {
                if v >= 32 { 0 } else { a << v }
            } else if op == 0x70 {
                if v >= 32 { 0 } else { a >> v }
            } else {
                a.wrapping_neg()
            };
        } else if i.code & 0xf8 == 0x80 {
            a = x; // TXA
        } else {
            x = a; // TAX
        }
    }
    0
}

