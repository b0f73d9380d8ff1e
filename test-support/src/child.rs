//! A test's child processes (the probe, collectors, tcpdump, servers):
//! killed and reaped when the guard drops, whatever the outcome (a failed
//! assertion included), signalled, and waited for with a deadline.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A child killed (SIGKILL) and reaped on drop unless it has exited.
pub struct ChildGuard(Option<Child>);

impl ChildGuard {
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard(Some(child))
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// The child itself (its pipes, `try_wait`).
    ///
    /// # Panics
    /// After [`stop`](Self::stop) or [`kill`](Self::kill) took it.
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child is still guarded")
    }

    /// Still running (not yet exited, nor stopped here).
    pub fn is_running(&mut self) -> bool {
        self.0
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.0 {
            signal(c.id(), sig);
        }
    }

    /// Sends `sig`, waits up to `limit` for the child to exit, kills it
    /// after. Its exit status when it exited within the limit.
    pub fn stop(&mut self, sig: i32, limit: Duration) -> Option<ExitStatus> {
        let mut c = self.0.take()?;
        if let Ok(Some(st)) = c.try_wait() {
            return Some(st);
        }
        signal(c.id(), sig);
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }

    /// SIGINT, then up to `limit` (nfcapd, pmacct and tcpdump write their
    /// output on SIGINT), then SIGKILL.
    pub fn interrupt_and_wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.stop(libc::SIGINT, limit)
    }

    /// Waits for the child to exit on its own; kills it and panics naming
    /// `what` after `limit`.
    pub fn wait(&mut self, limit: Duration, what: &str) -> ExitStatus {
        let st = wait_exit(self.child(), limit, what);
        self.0 = None;
        st
    }

    /// Kills and reaps it now.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends `sig` to `pid` (a child this test spawned).
pub fn signal(pid: u32, sig: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is
        // that of a child this test spawned.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Waits for a child with a deadline; kills it and panics on timeout.
pub fn wait_exit(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let end = Instant::now() + limit;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `cond` every 20 ms; panics with `what` after `limit`. For every
/// wait on something a test can observe, instead of a fixed sleep.
pub fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < end,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `cond` every 20 ms for up to `limit`; whether it came to hold.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A log without its terminal colour codes (`ESC [ … letter`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut esc = false;
    for ch in s.chars() {
        match (esc, ch) {
            (false, '\u{1b}') => esc = true,
            (true, c) if c.is_ascii_alphabetic() => esc = false,
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}
