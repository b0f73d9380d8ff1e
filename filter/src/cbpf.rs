//! Classic BPF: the instruction set libpcap compiles filters into
//! (`pcap/bpf.h`), a check that a program fits xdprobe's in-kernel
//! interpreter, and a user-space interpreter with the same semantics.
//!
//! The semantics are libpcap's `bpf_filter()`: a load past the end of the
//! captured bytes ends the program with 0 (no match), as does a division
//! by a zero `X`; shifts by `X` ≥ 32 give 0. The in-kernel interpreter in
//! `host-prog/src/bin/pathtrace.rs` implements the same rules, and this
//! module is what the tests compare with libpcap.

use std::fmt;

/// One classic BPF instruction (`struct bpf_insn`, same layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl fmt::Display for Insn {
    /// The `tcpdump -dd` spelling: `{ 0x28, 0, 0, 0x0000000c }`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{ 0x{:x}, {}, {}, 0x{:08x} }}",
            self.code, self.jt, self.jf, self.k
        )
    }
}

// Instruction classes and fields (`pcap/bpf.h`).
pub const LD: u16 = 0x00;
pub const LDX: u16 = 0x01;
pub const ST: u16 = 0x02;
pub const STX: u16 = 0x03;
pub const ALU: u16 = 0x04;
pub const JMP: u16 = 0x05;
pub const RET: u16 = 0x06;
pub const MISC: u16 = 0x07;

pub const W: u16 = 0x00;
pub const H: u16 = 0x08;
pub const B: u16 = 0x10;

pub const IMM: u16 = 0x00;
pub const ABS: u16 = 0x20;
pub const IND: u16 = 0x40;
pub const MEM: u16 = 0x60;
pub const LEN: u16 = 0x80;
pub const MSH: u16 = 0xa0;

pub const ADD: u16 = 0x00;
pub const SUB: u16 = 0x10;
pub const MUL: u16 = 0x20;
pub const DIV: u16 = 0x30;
pub const OR: u16 = 0x40;
pub const AND: u16 = 0x50;
pub const LSH: u16 = 0x60;
pub const RSH: u16 = 0x70;
pub const NEG: u16 = 0x80;
pub const MOD: u16 = 0x90;
pub const XOR: u16 = 0xa0;

pub const JA: u16 = 0x00;
pub const JEQ: u16 = 0x10;
pub const JGT: u16 = 0x20;
pub const JGE: u16 = 0x30;
pub const JSET: u16 = 0x40;

pub const K: u16 = 0x00;
pub const X: u16 = 0x08;
pub const A: u16 = 0x10;

pub const TAX: u16 = 0x00;
pub const TXA: u16 = 0x80;

/// Scratch memory words (`BPF_MEMWORDS`).
pub const MEMWORDS: u32 = 16;

/// A compiled filter: a program that returns non-zero for a match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    pub insns: Vec<Insn>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    #[error("the filter is empty")]
    Empty,
    #[error("the filter compiles to {len} instructions; at most {max} run in the kernel")]
    TooLong { len: usize, max: usize },
    #[error("instruction {pc} ({insn}): {why}")]
    Bad {
        pc: usize,
        insn: Insn,
        why: &'static str,
    },
}

impl Program {
    pub fn new(insns: Vec<Insn>) -> Program {
        Program { insns }
    }

    /// A program that accepts every packet (`ret #65535`).
    pub fn accept_all() -> Program {
        Program::new(vec![Insn {
            code: RET | K,
            k: 0xffff,
            ..Insn::default()
        }])
    }

    /// Checks that the program is one the in-kernel interpreter runs the
    /// same way: at most `max` instructions, known opcodes only, jumps
    /// that land inside the program, scratch memory indices below 16, no
    /// division by a constant zero or shift by 32 or more, and a `ret`
    /// last so control cannot run off the end (as the kernel's own
    /// `bpf_check_classic` demands).
    pub fn check(&self, max: usize) -> Result<(), ProgramError> {
        let n = self.insns.len();
        if n == 0 {
            return Err(ProgramError::Empty);
        }
        if n > max {
            return Err(ProgramError::TooLong { len: n, max });
        }
        for (pc, &insn) in self.insns.iter().enumerate() {
            let bad = |why| ProgramError::Bad { pc, insn, why };
            let code = insn.code;
            let target_ok = |off: u32| (pc as u64) + 1 + u64::from(off) < n as u64;
            match code & 0x07 {
                LD => match code & 0xe0 {
                    IMM | LEN if code & 0x18 == W => {}
                    ABS | IND if code & 0x18 != 0x18 => {}
                    MEM if code & 0x18 == W => {
                        if insn.k >= MEMWORDS {
                            return Err(bad("scratch memory index out of range"));
                        }
                    }
                    _ => return Err(bad("unknown load")),
                },
                LDX => match code & 0xf8 {
                    c if c == IMM | W || c == LEN | W => {}
                    c if c == MEM | W => {
                        if insn.k >= MEMWORDS {
                            return Err(bad("scratch memory index out of range"));
                        }
                    }
                    c if c == MSH | B => {}
                    _ => return Err(bad("unknown load")),
                },
                ST | STX => {
                    if code & 0xf8 != 0 {
                        return Err(bad("unknown store"));
                    }
                    if insn.k >= MEMWORDS {
                        return Err(bad("scratch memory index out of range"));
                    }
                }
                ALU => {
                    let op = code & 0xf0;
                    if !matches!(
                        op,
                        ADD | SUB | MUL | DIV | OR | AND | LSH | RSH | NEG | MOD | XOR
                    ) {
                        return Err(bad("unknown ALU operation"));
                    }
                    if code & 0x08 == K {
                        if matches!(op, DIV | MOD) && insn.k == 0 {
                            return Err(bad("division by zero"));
                        }
                        if matches!(op, LSH | RSH) && insn.k >= 32 {
                            return Err(bad("shift by 32 or more"));
                        }
                    }
                }
                JMP => match code & 0xf0 {
                    JA => {
                        if code & 0x08 != 0 || !target_ok(insn.k) {
                            return Err(bad("jump out of the program"));
                        }
                    }
                    JEQ | JGT | JGE | JSET => {
                        if !target_ok(u32::from(insn.jt)) || !target_ok(u32::from(insn.jf)) {
                            return Err(bad("jump out of the program"));
                        }
                    }
                    _ => return Err(bad("unknown jump")),
                },
                RET => {
                    if !matches!(code & 0x18, K | A) {
                        return Err(bad("unknown return"));
                    }
                }
                _ => {
                    if code != MISC | TAX && code != MISC | TXA {
                        return Err(bad("unknown instruction"));
                    }
                }
            }
        }
        if self.insns[n - 1].code & 0x07 != RET {
            return Err(ProgramError::Bad {
                pc: n - 1,
                insn: self.insns[n - 1],
                why: "the last instruction must be a return",
            });
        }
        Ok(())
    }

    /// Runs the program over `pkt` (the captured bytes) of a packet that
    /// was `wirelen` bytes long. Non-zero: match. A program that failed
    /// [`Program::check`] returns 0 where it would misbehave.
    pub fn run(&self, pkt: &[u8], wirelen: u32) -> u32 {
        run(&self.insns, pkt, wirelen)
    }

    pub fn matches(&self, pkt: &[u8], wirelen: u32) -> bool {
        self.run(pkt, wirelen) != 0
    }
}

/// Big-endian load of `size` bytes at `off`, `None` past the end.
fn load(pkt: &[u8], off: u32, size: usize) -> Option<u32> {
    let off = usize::try_from(off).ok()?;
    let b = pkt.get(off..off.checked_add(size)?)?;
    Some(b.iter().fold(0u32, |a, &x| (a << 8) | u32::from(x)))
}

/// The interpreter (libpcap's `bpf_filter` semantics).
pub fn run(insns: &[Insn], pkt: &[u8], wirelen: u32) -> u32 {
    let mut a: u32 = 0;
    let mut x: u32 = 0;
    let mut mem = [0u32; MEMWORDS as usize];
    let mut pc = 0usize;
    // Jumps only go forward, so each instruction runs at most once.
    while let Some(&i) = insns.get(pc) {
        pc += 1;
        let size = match i.code & 0x18 {
            W => 4,
            H => 2,
            _ => 1,
        };
        match i.code {
            c if c == RET | K => return i.k,
            c if c == RET | A => return a,
            c if c == LD | W | ABS || c == LD | H | ABS || c == LD | B | ABS => {
                match load(pkt, i.k, size) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            c if c == LD | W | IND || c == LD | H | IND || c == LD | B | IND => {
                let Some(off) = x.checked_add(i.k) else {
                    return 0;
                };
                match load(pkt, off, size) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            c if c == LD | W | LEN => a = wirelen,
            c if c == LDX | W | LEN => x = wirelen,
            c if c == LDX | MSH | B => match load(pkt, i.k, 1) {
                Some(v) => x = (v & 0xf) << 2,
                None => return 0,
            },
            c if c == LD | IMM => a = i.k,
            c if c == LDX | IMM => x = i.k,
            c if c == LD | MEM => match mem.get(i.k as usize) {
                Some(&v) => a = v,
                None => return 0,
            },
            c if c == LDX | MEM => match mem.get(i.k as usize) {
                Some(&v) => x = v,
                None => return 0,
            },
            c if c == ST => match mem.get_mut(i.k as usize) {
                Some(m) => *m = a,
                None => return 0,
            },
            c if c == STX => match mem.get_mut(i.k as usize) {
                Some(m) => *m = x,
                None => return 0,
            },
            c if c == JMP | JA => pc = pc.saturating_add(i.k as usize),
            c if c & 0x07 == JMP => {
                let v = if c & 0x08 == X { x } else { i.k };
                let taken = match c & 0xf0 {
                    JEQ => a == v,
                    JGT => a > v,
                    JGE => a >= v,
                    JSET => a & v != 0,
                    _ => return 0,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            c if c & 0x07 == ALU => {
                let v = if c & 0x08 == X { x } else { i.k };
                a = match c & 0xf0 {
                    ADD => a.wrapping_add(v),
                    SUB => a.wrapping_sub(v),
                    MUL => a.wrapping_mul(v),
                    DIV if v == 0 => return 0,
                    DIV => a / v,
                    MOD if v == 0 => return 0,
                    MOD => a % v,
                    AND => a & v,
                    OR => a | v,
                    XOR => a ^ v,
                    LSH => a.checked_shl(v).unwrap_or(0),
                    RSH => a.checked_shr(v).unwrap_or(0),
                    NEG => a.wrapping_neg(),
                    _ => return 0,
                };
            }
            c if c == MISC | TAX => x = a,
            c if c == MISC | TXA => a = x,
            _ => return 0,
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
        Insn { code, jt, jf, k }
    }

    #[test]
    fn loads_jumps_and_returns() {
        // A = pkt[2..4]; if A == 0x1234 return 7 else return 0.
        let p = Program::new(vec![
            i(LD | H | ABS, 0, 0, 2),
            i(JMP | JEQ | K, 0, 1, 0x1234),
            i(RET | K, 0, 0, 7),
            i(RET | K, 0, 0, 0),
        ]);
        p.check(64).unwrap();
        assert_eq!(p.run(&[0, 0, 0x12, 0x34], 4), 7);
        assert_eq!(p.run(&[0, 0, 0x12, 0x35], 4), 0);
        // Past the captured bytes: no match, whatever the test after.
        assert_eq!(p.run(&[0, 0, 0x12], 100), 0);
    }

    #[test]
    fn msh_ind_mem_alu_misc() {
        let p = Program::new(vec![
            i(LDX | MSH | B, 0, 0, 0),    // X = (pkt[0] & 0xf) * 4 = 20
            i(LD | B | IND, 0, 0, 1),     // A = pkt[X + 1]
            i(ST, 0, 0, 3),               // M[3] = A
            i(LD | IMM, 0, 0, 10),        // A = 10
            i(ALU | ADD | X, 0, 0, 0),    // A = 30
            i(MISC | TAX, 0, 0, 0),       // X = 30
            i(LD | MEM, 0, 0, 3),         // A = M[3]
            i(ALU | ADD | X, 0, 0, 0),    // A += 30
            i(JMP | JGE | K, 0, 1, 0x50), // A >= 80?
            i(RET | A, 0, 0, 0),
            i(RET | K, 0, 0, 0),
        ]);
        p.check(64).unwrap();
        let mut pkt = [0u8; 32];
        pkt[0] = 0x45;
        pkt[21] = 0x40; // 64 + 30 = 94
        assert_eq!(p.run(&pkt, 32), 94);
        pkt[21] = 0x01;
        assert_eq!(p.run(&pkt, 32), 0);
    }

    #[test]
    fn division_by_x_zero_and_big_shifts() {
        let div = Program::new(vec![
            i(LD | IMM, 0, 0, 8),
            i(ALU | DIV | X, 0, 0, 0),
            i(RET | K, 0, 0, 1),
        ]);
        assert_eq!(div.run(&[], 0), 0);
        let shl = Program::new(vec![
            i(LD | IMM, 0, 0, 1),
            i(LDX | IMM, 0, 0, 40),
            i(ALU | LSH | X, 0, 0, 0),
            i(RET | A, 0, 0, 0),
        ]);
        assert_eq!(shl.run(&[], 0), 0);
        let len = Program::new(vec![i(LD | W | LEN, 0, 0, 0), i(RET | A, 0, 0, 0)]);
        assert_eq!(len.run(&[1, 2], 1500), 1500);
    }

    #[test]
    fn check_rejects_what_the_kernel_interpreter_would_not_run() {
        let ret = i(RET | K, 0, 0, 1);
        let bad = [
            vec![],
            vec![i(JMP | JA, 0, 0, 1), ret],
            vec![i(JMP | JEQ | K, 5, 0, 0), ret],
            vec![i(LD | MEM, 0, 0, 16), ret],
            vec![i(ST, 0, 0, 99), ret],
            vec![i(ALU | DIV | K, 0, 0, 0), ret],
            vec![i(ALU | LSH | K, 0, 0, 32), ret],
            vec![i(0x0f, 0, 0, 0), ret],
            vec![i(LD | IMM, 0, 0, 0)],
        ];
        for b in bad {
            assert!(Program::new(b.clone()).check(64).is_err(), "{b:?}");
        }
        let long = Program::new(vec![ret; 65]);
        assert_eq!(
            long.check(64),
            Err(ProgramError::TooLong { len: 65, max: 64 })
        );
        Program::accept_all().check(1).unwrap();
    }
}
