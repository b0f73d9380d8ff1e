//! The demo's child processes and its own signals: every child is killed
//! and reaped when its guard drops, so no exit path (error, panic, Ctrl-C)
//! leaves a probe, collector or traffic program running in a namespace that
//! is about to be deleted. Every wait has a deadline.

use std::{
    os::unix::process::CommandExt,
    path::Path,
    process::{Command, ExitStatus, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

/// SIGINT/SIGTERM received: the demo stops waiting and cleans up.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by a signal")]
pub struct Interrupted;

/// Set by SIGINT/SIGTERM (Ctrl-C reaches the children too: the probe then
/// flushes and exits on its own).
#[derive(Clone)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    pub fn install() -> anyhow::Result<Interrupt> {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, flag.clone()).context("installing signal handlers")?;
        }
        Ok(Interrupt(flag))
    }

    pub fn check(&self) -> Result<(), Interrupted> {
        if self.0.load(Ordering::Acquire) {
            Err(Interrupted)
        } else {
            Ok(())
        }
    }

    /// Sleeps `d` in short steps, returning early on a signal.
    pub fn sleep(&self, d: Duration) -> Result<(), Interrupted> {
        let end = Instant::now() + d;
        loop {
            self.check()?;
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    }

    /// Polls `cond` every 20 ms until it holds; an error after `limit` or on
    /// a signal.
    pub fn wait_for(
        &self,
        limit: Duration,
        what: &str,
        mut cond: impl FnMut() -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let end = Instant::now() + limit;
        loop {
            self.check()?;
            if cond()? {
                return Ok(());
            }
            if Instant::now() >= end {
                bail!("timed out after {limit:?} waiting for {what}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A child process killed (SIGKILL) and reaped on drop unless it has
/// already exited.
pub struct Child {
    child: std::process::Child,
    status: Option<ExitStatus>,
}

impl Child {
    /// Starts `cmd`. The child gets SIGTERM if the demo dies without
    /// dropping the guard (SIGKILL), so a probe or collector never outlives
    /// it; `ip netns exec` keeps that setting across its exec.
    pub fn spawn(name: &'static str, mut cmd: Command) -> anyhow::Result<Child> {
        // SAFETY: getpid has no preconditions and cannot fail.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure runs between fork and exec and calls only
        // async-signal-safe functions (prctl, getppid), allocating nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The demo died before the prctl: do not start at all.
                if libc::getppid() != parent {
                    return Err(std::io::Error::other("parent exited"));
                }
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Child {
            child,
            status: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    pub fn signal(&mut self, sig: libc::c_int) {
        if self.try_wait().is_some() {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child, which has not been reaped
            // (try_wait above returned None), so the pid is still ours.
            unsafe { libc::kill(pid, sig) };
        }
    }

    /// Waits up to `limit` for the child to exit; `None` on timeout.
    pub fn wait_timeout(
        &mut self,
        limit: Duration,
        interrupt: &Interrupt,
    ) -> anyhow::Result<Option<ExitStatus>> {
        let end = Instant::now() + limit;
        loop {
            if let Some(st) = self.try_wait() {
                return Ok(Some(st));
            }
            interrupt.check()?;
            if Instant::now() >= end {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig`, waits up to `limit`, then kills. Returns the exit status
    /// when it exited on its own.
    pub fn stop(&mut self, sig: libc::c_int, limit: Duration) -> Option<ExitStatus> {
        self.signal(sig);
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(st) = self.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        None
    }

    fn kill(&mut self) {
        if self.try_wait().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Commands run to completion, an error carrying their stderr (the test
/// bed's, which the tests use too).
pub use xdprobe_testbed::run;

/// True when `prog` is an executable file in `$PATH`.
pub fn in_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| is_executable(&d.join(prog))))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
