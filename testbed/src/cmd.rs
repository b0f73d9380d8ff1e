//! Commands run to completion (`ip`, `ethtool`, `tc`, …), failing with
//! what the command wrote to stderr.

use std::ffi::OsStr;
use std::process::{Command, ExitStatus, Output, Stdio};

/// A command that could not run, or ran and failed.
#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    #[error("empty command")]
    Empty,
    #[error("running `{cmd}`")]
    Spawn {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Failed {
        cmd: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("entering network namespace {path}")]
    Setns {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Runs a command to completion (stdin closed); its output, or an error
/// carrying its stderr when it fails.
pub fn run<S: AsRef<OsStr>>(args: &[S]) -> Result<Output, CmdError> {
    let Some((prog, rest)) = args.split_first() else {
        return Err(CmdError::Empty);
    };
    let shown = || {
        args.iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let out = Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| CmdError::Spawn {
            cmd: shown(),
            source,
        })?;
    if !out.status.success() {
        return Err(CmdError::Failed {
            cmd: shown(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out)
}

/// Runs a command and ignores its outcome (clean-up paths, optional
/// tuning).
pub fn run_quiet(args: &[&str]) {
    if let Some((prog, rest)) = args.split_first() {
        let _ = Command::new(prog)
            .args(rest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
