use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A scratch directory, removed when dropped — also when the test fails —
/// unless `XDPROBE_KEEP_TEST_DIR` is set (then its path is printed, for
/// looking at what a failing test left).
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new directory `xdprobe-TAG-PID-N` under the system's temp dir
    /// (unique per process and call, so parallel tests never share one).
    pub fn new(tag: &str) -> TempDir {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("xdprobe-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
        TempDir(p)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("XDPROBE_KEEP_TEST_DIR").is_some() {
            eprintln!("kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
