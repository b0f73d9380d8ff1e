//! Dropping privileges once the daemon is set up.
//!
//! Setup (loading and attaching XDP, creating AF_XDP sockets and UMEMs,
//! binding the metrics port) needs root. Afterwards the daemon keeps only
//! what it still uses:
//! - `CAP_BPF`: reading the XDP program's counter map (`bpf()` on an fd it
//!   already holds);
//! - `CAP_NET_ADMIN`: detaching XDP at exit when the kernel attached it
//!   through netlink rather than a bpf_link (closing a bpf_link needs
//!   nothing).
//!
//! Everything else is removed from the effective, permitted, inheritable
//! and bounding sets, and `no_new_privs` is set, so no later `execve` can
//! regain anything. With `[probe] user` set, the process also switches to
//! that user (and its primary group, no supplementary groups), keeping the
//! two capabilities across the switch.
//!
//! Must run before any other thread is started: capabilities are per
//! thread, and threads created later inherit the reduced set.

use std::ffi::CString;

#[derive(Debug, thiserror::Error)]
pub enum PrivError {
    #[error("user {0:?} not found")]
    NoUser(String),
    #[error("{call} failed")]
    Sys {
        call: &'static str,
        #[source]
        source: std::io::Error,
    },
}

pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_BPF: u32 = 39;
/// Capabilities the daemon keeps.
pub const KEEP: [u32; 2] = [CAP_NET_ADMIN, CAP_BPF];
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn sys(call: &'static str, rc: libc::c_long) -> Result<(), PrivError> {
    if rc < 0 {
        return Err(PrivError::Sys {
            call,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The kept set as a 64-bit mask (bit n = capability n), as
/// `/proc/PID/status` shows it in `CapEff`.
pub fn keep_mask() -> u64 {
    KEEP.iter().fold(0, |m, &c| m | (1u64 << c))
}

/// Drops to `KEEP` (and to `user`, if given). Idempotent.
pub fn drop_privileges(user: Option<&str>) -> Result<(), PrivError> {
    drop_to(user, &KEEP)
}

/// Drops every capability but `keep` (and to `user`, if given); the
/// manager keeps less than the daemon.
pub fn drop_to(user: Option<&str>, keep: &[u32]) -> Result<(), PrivError> {
    let ids = match user {
        Some(name) => Some(lookup_user(name)?),
        None => None,
    };
    // Bounding set first: removing from it needs CAP_SETPCAP, which goes
    // below. Capabilities this kernel does not know fail with EINVAL: stop.
    for cap in 0..64u32 {
        if keep.contains(&cap) {
            continue;
        }
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
        if rc < 0 {
            break;
        }
    }
    if let Some((uid, gid)) = ids {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) };
        sys("prctl(PR_SET_KEEPCAPS)", rc.into())?;
        // SAFETY: an empty group list (null pointer with length 0).
        let rc = unsafe { libc::setgroups(0, std::ptr::null()) };
        sys("setgroups", rc.into())?;
        // SAFETY: plain id arguments.
        let rc = unsafe { libc::setresgid(gid, gid, gid) };
        sys("setresgid", rc.into())?;
        // SAFETY: plain id arguments; glibc applies it to every thread.
        let rc = unsafe { libc::setresuid(uid, uid, uid) };
        sys("setresuid", rc.into())?;
    }
    // Only what the process still has: one started without a capability
    // (a unit's empty CapabilityBoundingSet=) cannot be given one, and
    // asking for it would fail the whole drop.
    let held = permitted_caps().unwrap_or(u64::MAX);
    let kept: Vec<u32> = keep
        .iter()
        .copied()
        .filter(|&c| held & (1u64 << c) != 0)
        .collect();
    let mut data = [CapData::default(); 2];
    for &cap in &kept {
        let word = (cap / 32) as usize;
        let bit = 1u32 << (cap % 32);
        if let Some(d) = data.get_mut(word) {
            d.effective |= bit;
            d.permitted |= bit;
        }
    }
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset(2) with a valid v3 header and two data words, as the
    // v3 ABI requires; it only changes this thread's capabilities.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &raw mut hdr, data.as_ptr()) };
    sys("capset", rc)?;
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    sys("prctl(PR_SET_NO_NEW_PRIVS)", rc.into())?;
    tracing::info!(
        user = user.unwrap_or("(unchanged)"),
        kept = ?kept.iter().map(|&c| cap_name(c)).collect::<Vec<_>>(),
        "privileges dropped"
    );
    Ok(())
}

fn cap_name(c: u32) -> String {
    match c {
        CAP_NET_ADMIN => "CAP_NET_ADMIN".into(),
        CAP_BPF => "CAP_BPF".into(),
        c => format!("capability {c}"),
    }
}

fn lookup_user(name: &str) -> Result<(libc::uid_t, libc::gid_t), PrivError> {
    let c = CString::new(name).map_err(|_| PrivError::NoUser(name.to_owned()))?;
    // SAFETY: getpwnam with a valid C string; the result is read at once,
    // before any other call that could reuse its static buffer (setup is
    // single-threaded).
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return Err(PrivError::NoUser(name.to_owned()));
    }
    // SAFETY: non-null result of getpwnam points to a valid passwd.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Ok((uid, gid))
}

/// `CapEff` of this process, from /proc (for the log and the tests).
pub fn effective_caps() -> Option<u64> {
    status_caps("CapEff:")
}

/// `CapPrm` of this process: what it can still make effective.
fn permitted_caps() -> Option<u64> {
    status_caps("CapPrm:")
}

fn status_caps(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    u64::from_str_radix(line.trim_start_matches(field).trim(), 16).ok()
}
