//! Attaching one program to many tracepoints, each with a BPF cookie
//! that tells the program which point fired.
//!
//! The record cannot tell: the kernel overwrites its first 8 bytes
//! (`common_type` and the other common fields) with a `pt_regs` pointer
//! before a BPF program sees it (`perf_trace_run_bpf_submit`). aya 0.14
//! attaches tracepoints without a cookie, so this opens the perf event
//! and creates the BPF link itself (`perf_event_open(2)`,
//! `BPF_LINK_CREATE` with `perf_event.bpf_cookie`, kernel 5.15+). Each
//! [`Link`] detaches when dropped.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// `perf_event_attr` up to `PERF_ATTR_SIZE_VER0` (64 bytes); the kernel
/// takes the fields past it as zero.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PERF_EVENT: u32 = 41;

/// The `link_create` member of `union bpf_attr`, padded to the size the
/// kernel reads for it.
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    bpf_cookie: u64,
    _rest: [u64; 6],
}

/// An attached (program, tracepoint) pair; dropping it detaches.
#[derive(Debug)]
pub struct Link {
    _link: OwnedFd,
    _perf: OwnedFd,
}

/// Opens the tracepoint `event_id` (tracefs `id`) as a perf event, all
/// processes, and links `prog` to it with `cookie`.
pub fn attach(prog: impl AsFd, event_id: u16, cookie: u64) -> io::Result<Link> {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_TRACEPOINT,
        size: size_of::<PerfEventAttr>() as u32,
        config: u64::from(event_id),
        wakeup_events: 1,
        ..PerfEventAttr::default()
    };
    // SAFETY: perf_event_open(attr, pid = -1 (all), cpu = 0, group = -1,
    // flags) with a valid attr of the size it states; a tracepoint event
    // with a BPF program fires on every CPU.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            -1 as libc::c_int,
            0 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd the syscall returned, owned from here on.
    let perf = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let la = LinkCreateAttr {
        prog_fd: prog.as_fd().as_raw_fd() as u32,
        target_fd: perf.as_raw_fd() as u32,
        attach_type: BPF_PERF_EVENT,
        flags: 0,
        bpf_cookie: cookie,
        _rest: [0; 6],
    };
    // SAFETY: bpf(BPF_LINK_CREATE, attr, size) with a zero-padded attr
    // of the stated size.
    let lfd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &la as *const LinkCreateAttr,
            size_of::<LinkCreateAttr>() as libc::c_uint,
        )
    };
    if lfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd the syscall returned, owned from here on.
    let link = unsafe { OwnedFd::from_raw_fd(lfd as i32) };
    Ok(Link {
        _link: link,
        _perf: perf,
    })
}

const _: () = assert!(size_of::<PerfEventAttr>() == 64);
