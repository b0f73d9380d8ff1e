//! Waiting for a descriptor (a ring buffer, a socket) to become readable,
//! bounded in time: the agents' loops sleep here instead of spinning, and
//! wake as soon as there is something to read.

use std::os::fd::RawFd;
use std::time::Duration;

/// Blocks until `fd` is readable or `timeout` (rounded up to whole ms, at
/// least 1) has passed;
/// an interrupted or failed poll just returns early, as a timeout does:
/// every caller reads and then decides whether to wait again.
pub fn wait_readable(fd: RawFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_micros().div_ceil(1000).max(1)).unwrap_or(i32::MAX);
    // SAFETY: poll(2) on one pollfd that lives on this stack frame, with
    // a bounded timeout; it writes only `revents`.
    unsafe { libc::poll(&mut p, 1, ms) };
}
