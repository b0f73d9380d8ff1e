//! `xdprobe demo`: hands over to the `xdprobe-demo` binary, which holds the
//! demo (namespaces, a user-space bridge, traffic programs, a collector) so
//! the appliance binary carries none of it. Every argument goes through
//! unchanged; `xdprobe demo --help` is the demo's own help.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// The demo's arguments (`xdprobe demo --help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// `$XDPROBE_DEMO_BIN`, else `xdprobe-demo` beside this binary (as cargo
/// builds them), else on `PATH`.
fn demo_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("XDPROBE_DEMO_BIN") {
        return Some(PathBuf::from(p));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("xdprobe-demo")))
        .filter(|p| p.is_file());
    beside.or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join("xdprobe-demo"))
            .find(|p| p.is_file())
    })
}

pub fn run(a: DemoArgs) -> anyhow::Result<ExitCode> {
    let Some(bin) = demo_binary() else {
        anyhow::bail!(
            "the demo is a binary of its own, `xdprobe-demo`, not found beside this one or on PATH \
             (build it: cargo build --release --bin xdprobe-demo, or run `make demo`)"
        );
    };
    let mut cmd = Command::new(&bin);
    cmd.args(&a.args);
    // The demo finds this very probe, whichever copy was started.
    if std::env::var_os("XDPROBE_BIN").is_none()
        && let Ok(me) = std::env::current_exe()
    {
        cmd.env("XDPROBE_BIN", me);
    }
    let err = cmd.exec();
    Err(anyhow::Error::new(err).context(format!("starting {}", bin.display())))
}
