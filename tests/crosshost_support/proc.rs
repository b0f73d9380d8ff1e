//! `Proc`: the rig's processes (the xdprobe binary, tcpdump) inside a
//! namespace, with their log, killed on drop.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::live_support::NetNs;
use crate::live_support::topo::ChildGuard;
use xdprobe_test_support::strip_ansi;

/// A process of ours inside a namespace, killed on drop.
pub struct Proc {
    child: ChildGuard,
    pub stderr: PathBuf,
}

impl Proc {
    pub fn spawn(ns: &NetNs, args: &[&str], stderr: &Path) -> Proc {
        Self::spawn_cmd(ns, env!("CARGO_BIN_EXE_xdprobe"), args, stderr)
    }

    /// Any program inside `ns` (tcpdump).
    pub fn spawn_cmd(ns: &NetNs, program: &str, args: &[&str], stderr: &Path) -> Proc {
        let child = ns
            .command(program)
            .args(args)
            .env("XDPROBE_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(stderr).expect("stderr file"))
            .spawn()
            .expect("spawn xdprobe");
        Proc {
            child: ChildGuard::new(child),
            stderr: stderr.to_owned(),
        }
    }

    pub fn log(&self) -> String {
        let raw = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        strip_ansi(&raw)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the log holds every one of `needles`.
    pub fn wait_log(&self, needles: &[&str], limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            let log = self.log();
            if needles.iter().all(|n| log.contains(n)) {
                return;
            }
            assert!(Instant::now() < end, "waiting for {needles:?} in:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Occurrences of `needle` in the log.
    pub fn count(&self, needle: &str) -> usize {
        self.log().matches(needle).count()
    }

    pub fn alive(&mut self) -> bool {
        self.child.is_running()
    }

    /// SIGTERM, and the log once it exited (which it must do cleanly).
    pub fn stop(mut self) -> String {
        let st = self.child.stop(libc::SIGTERM, Duration::from_secs(20));
        let log = self.log();
        let st = st.unwrap_or_else(|| panic!("no exit after SIGTERM:\n{log}"));
        assert!(st.success(), "exit {st}:\n{log}");
        log
    }

    /// SIGINT, wait, whatever the status (tcpdump).
    pub fn stop_quiet(mut self) {
        self.child.interrupt_and_wait(Duration::from_secs(10));
    }

    /// SIGKILL: a crash.
    pub fn kill(mut self) {
        self.child.kill();
    }
}
