//! The kernel's own counters of a loaded program (`bpf_prog_info`), read
//! by file descriptor: the independent figure for what a probe's programs
//! did not see.
//!
//! `recursion_misses` counts the runs the kernel skipped. A classic
//! tracepoint or kprobe program is skipped whenever any BPF program, or a
//! BPF map system call, is already running on that CPU (a softirq
//! interrupting one, for instance); a raw or BTF-typed tracepoint program
//! only when it interrupts itself. Those runs never reach the program, so
//! the program cannot count them; only the kernel can.

use std::os::fd::{AsRawFd, BorrowedFd};

use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};

/// What the kernel counts for one program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgStats {
    /// Runs the kernel skipped (see the module doc).
    pub recursion_misses: u64,
    /// Runs and their total time: only while `kernel.bpf_stats_enabled`
    /// is 1, else 0.
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// The counters of the program behind `fd`; `None` if the kernel refuses
/// (not a program, or too old to have the fields).
pub fn prog_stats(fd: BorrowedFd<'_>) -> Option<ProgStats> {
    // SAFETY: plain-data UAPI structs: all zeroes is a valid value.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    let len = std::mem::size_of::<bpf_prog_info>() as u32;
    // The `info` member of the union: what the command reads.
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = len;
    attr.info.info = std::ptr::addr_of_mut!(info) as u64;
    // SAFETY: BPF_OBJ_GET_INFO_BY_FD with a valid attr of the size passed;
    // the kernel writes at most `info_len` bytes into `info`, which lives
    // until the call returns.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_long,
            std::ptr::addr_of_mut!(attr),
            std::mem::size_of::<bpf_attr>() as libc::c_uint,
        )
    };
    if r != 0 {
        return None;
    }
    Some(ProgStats {
        recursion_misses: info.recursion_misses,
        run_count: info.run_cnt,
        run_time_ns: info.run_time_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_program_fd_is_refused() {
        use std::os::fd::AsFd;
        let f = std::fs::File::open("/dev/null").expect("/dev/null");
        assert_eq!(prog_stats(f.as_fd()), None);
    }
}
