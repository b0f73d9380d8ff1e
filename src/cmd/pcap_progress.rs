//! `xdprobe pcap`'s progress bar: bytes of the file read, on stderr, only
//! when stderr is a terminal (never into a log, a pipe or a test's capture)
//! that the records are not printed on (a bar redrawn between table rows
//! garbles both), and the input has a size to measure against (a file,
//! not a pipe).

use std::io::IsTerminal;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Position updates every this many batches: off the per-packet path (the
/// bar redraws at most 20 times a second anyway).
const EVERY_BATCHES: u32 = 256;

pub struct Progress {
    bar: Option<ProgressBar>,
    batches: u32,
}

impl Progress {
    /// A bar for `path` when `wanted`, stderr is a terminal, the records
    /// (`records_on_stdout`) do not go to that same terminal and `path` is
    /// a regular file; otherwise one that does nothing.
    pub fn new(path: &Path, wanted: bool, records_on_stdout: bool) -> Progress {
        let shared = records_on_stdout && stdout_is_stderr_terminal();
        let bar = (wanted && std::io::stderr().is_terminal() && !shared)
            .then(|| std::fs::metadata(path).ok())
            .flatten()
            .filter(|m| m.is_file() && path.as_os_str() != "-")
            .map(|m| {
                let bar =
                    ProgressBar::with_draw_target(Some(m.len()), ProgressDrawTarget::stderr());
                let style = ProgressStyle::with_template(
                    "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar());
                bar.set_style(style);
                bar.tick();
                bar
            });
        Progress { bar, batches: 0 }
    }

    /// After each batch; `offset` = bytes of the file consumed.
    pub fn batch(&mut self, offset: impl FnOnce() -> u64) {
        if let Some(bar) = &self.bar {
            self.batches += 1;
            if self.batches.is_multiple_of(EVERY_BATCHES) {
                bar.set_position(offset());
            }
        }
    }

    /// Removes the bar, so the summary and errors print on a clean line.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Whether stdout is a terminal, the very one stderr is (same device).
fn stdout_is_stderr_terminal() -> bool {
    fn device(fd: BorrowedFd<'_>) -> Option<u64> {
        let f = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        Some(f.metadata().ok()?.rdev())
    }
    let (out, err) = (std::io::stdout(), std::io::stderr());
    out.is_terminal() && device(out.as_fd()).is_some_and(|d| Some(d) == device(err.as_fd()))
}
