//! The seccomp filter systemd would install for a unit's system-call
//! directives (SystemCallFilter, RestrictAddressFamilies, RestrictNamespaces,
//! MemoryDenyWriteExecute, ProtectClock, ...), written as a classic BPF
//! program: argument rules first (each returns an errno or falls through),
//! then the allow list (or deny list), the way systemd's libseccomp rules
//! behave. x86_64 only (the machines this runs on).
//!
//! Syscall numbers come from the kernel headers (`asm/unistd_64.h`), the
//! groups (`@system-service`) from `systemd-analyze syscall-filter`: the
//! emulation uses systemd's own definition of every group.

use std::collections::BTreeSet;
use std::process::Command;

/// `struct seccomp_data` offsets: nr, arch, then the six arguments.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
fn off_arg(i: u32) -> u32 {
    16 + 8 * i
}

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// x32 system calls come with this bit set on the native architecture.
const X32_BIT: u32 = 0x4000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;

const LD_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const ALU_AND: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET: u16 = 0x06; // BPF_RET | BPF_K

/// When a rule's syscall is refused.
#[derive(Clone, Debug)]
pub enum Cond {
    Always,
    /// Argument `arg` has any bit of the mask set.
    AnyBit(u32, u32),
    /// Argument `arg` has every bit of the mask set.
    AllBits(u32, u32),
    /// Argument `arg` (masked) is one of the values.
    In(u32, u32, Vec<u32>),
    /// Argument `arg` is none of the values.
    NotIn(u32, Vec<u32>),
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub syscall: &'static str,
    pub cond: Cond,
    pub errno: i32,
}

/// The whole filter: rules, then `SystemCallFilter=`'s list.
#[derive(Default, Debug)]
pub struct Filter {
    pub rules: Vec<Rule>,
    /// (deny list?, names): `~@mount` denies, `@system-service` allows.
    pub list: Option<(bool, BTreeSet<String>)>,
}

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Number of a system call on this machine, from the kernel headers.
pub fn syscall_nr(name: &str) -> Option<u32> {
    static TABLE: std::sync::OnceLock<Vec<(String, u32)>> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let text = std::fs::read_to_string("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
            .expect("kernel headers (linux-libc-dev): asm/unistd_64.h");
        text.lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("#define __NR_")?.split_whitespace();
                Some((w.next()?.to_owned(), w.next()?.parse().ok()?))
            })
            .collect()
    });
    t.iter().find(|(n, _)| n == name).map(|(_, nr)| *nr)
}

/// Expands `@group` entries with systemd's own tables, recursively.
pub fn expand(words: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo: Vec<String> = words.to_vec();
    let mut seen = BTreeSet::new();
    while let Some(w) = todo.pop() {
        if !w.starts_with('@') {
            out.insert(w);
            continue;
        }
        if !seen.insert(w.clone()) {
            continue;
        }
        let o = Command::new("systemd-analyze")
            .args(["syscall-filter", &w])
            .output()
            .expect("systemd-analyze syscall-filter");
        assert!(o.status.success(), "unknown syscall group {w}");
        let text = String::from_utf8_lossy(&o.stdout);
        // The first line names the group; members are indented; `#` lines
        // are comments.
        for l in text.lines().skip(1) {
            let l = l.trim();
            if !l.is_empty() && !l.starts_with('#') {
                todo.push(l.to_owned());
            }
        }
    }
    out
}

impl Filter {
    /// The BPF program. Panics on a rule naming an unknown syscall.
    pub fn program(&self) -> Vec<libc::sock_filter> {
        let mut p = vec![
            ins(LD_ABS, 0, 0, OFF_ARCH),
            ins(JEQ, 1, 0, AUDIT_ARCH_X86_64),
            ins(RET, 0, 0, RET_KILL_PROCESS),
            ins(LD_ABS, 0, 0, OFF_NR),
            ins(JGE, 0, 1, X32_BIT),
            ins(RET, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
        ];
        for r in &self.rules {
            let nr = syscall_nr(r.syscall).unwrap_or_else(|| panic!("syscall {}", r.syscall));
            let body = body(&r.cond, RET_ERRNO | (r.errno as u32 & 0xffff));
            p.push(ins(LD_ABS, 0, 0, OFF_NR));
            p.push(ins(
                JEQ,
                0,
                u8::try_from(body.len()).expect("short rule"),
                nr,
            ));
            p.extend(body);
        }
        p.push(ins(LD_ABS, 0, 0, OFF_NR));
        match &self.list {
            None => p.push(ins(RET, 0, 0, RET_ALLOW)),
            Some((deny, names)) => {
                let listed = if *deny {
                    RET_ERRNO | libc::EPERM as u32
                } else {
                    RET_ALLOW
                };
                // Names of other architectures' calls have no number here.
                for nr in names.iter().filter_map(|n| syscall_nr(n)) {
                    p.push(ins(JEQ, 0, 1, nr));
                    p.push(ins(RET, 0, 0, listed));
                }
                p.push(ins(
                    RET,
                    0,
                    0,
                    if *deny { RET_ALLOW } else { RET_KILL_PROCESS },
                ));
            }
        }
        assert!(p.len() < 4096, "filter too long: {}", p.len());
        p
    }
}

/// A rule's body after the syscall matched: returns `ret` when the
/// condition holds, else falls through to the next rule.
fn body(c: &Cond, ret: u32) -> Vec<libc::sock_filter> {
    let mut b = Vec::new();
    match c {
        Cond::Always => {}
        Cond::AnyBit(arg, mask) => {
            b.push(ins(LD_ABS, 0, 0, off_arg(*arg)));
            b.push(ins(JSET, 0, 1, *mask));
        }
        Cond::AllBits(arg, mask) => {
            b.push(ins(LD_ABS, 0, 0, off_arg(*arg)));
            b.push(ins(ALU_AND, 0, 0, *mask));
            b.push(ins(JEQ, 0, 1, *mask));
        }
        Cond::In(arg, mask, vals) => {
            b.push(ins(LD_ABS, 0, 0, off_arg(*arg)));
            b.push(ins(ALU_AND, 0, 0, *mask));
            let n = vals.len();
            for (k, v) in vals.iter().enumerate() {
                let jf = u8::from(k + 1 == n);
                b.push(ins(JEQ, (n - 1 - k) as u8, jf, *v));
            }
        }
        Cond::NotIn(arg, vals) => {
            b.push(ins(LD_ABS, 0, 0, off_arg(*arg)));
            let n = vals.len();
            for (k, v) in vals.iter().enumerate() {
                b.push(ins(JEQ, (n - k) as u8, 0, *v));
            }
        }
    }
    b.push(ins(RET, 0, 0, ret));
    b
}

/// Installs `prog` on the calling thread (a child between fork and exec).
/// Async-signal-safe: no allocation.
///
/// # Safety
/// `prog` must stay alive during the call (it is copied by the kernel).
pub unsafe fn install(prog: &[libc::sock_filter]) -> std::io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: a valid sock_fprog pointing at `prog`; root may install a
    // filter without no_new_privs (CAP_SYS_ADMIN).
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &raw const fprog,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
