//! Opening the files the probe writes (IPFIX `file://` exports, JSON
//! lines, the manager's outputs, generated keys) so that a path another
//! user controls cannot redirect the write.
//!
//! The probe usually runs as root. Had it opened `/tmp/x/out.ipfix` with
//! a plain `creat()`, a local user who planted a symlink there (to
//! `/etc/shadow`, say) would have had root truncate its target. So:
//! - a new file is created with `O_CREAT | O_EXCL | O_NOFOLLOW` and the
//!   given mode (0640 by default): `O_EXCL` fails rather than follow a
//!   symlink or take over a file that appeared meanwhile;
//! - an existing one is opened with `O_NOFOLLOW | O_NONBLOCK` (a symlink as
//!   the last component fails with `ELOOP`, a planted FIFO does not hang
//!   the open), then checked on the open descriptor: it must be a regular
//!   file with one link (a hard link to another file would be that file),
//!   and only then truncated (unless appending).
//!
//! Symlinks in the directories above the file are the administrator's:
//! they are followed (`/var/log` → `/data/log` is a normal set-up).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Mode of the files the probe creates, unless configured otherwise.
pub const DEFAULT_MODE: u32 = 0o640;

#[derive(Debug, thiserror::Error)]
pub enum SafeFileError {
    #[error(
        "{path}: is a symbolic link; refusing to write through it (remove it, or write elsewhere)"
    )]
    Symlink { path: PathBuf },
    #[error("{path}: not a regular file; refusing to write to it")]
    NotRegular { path: PathBuf },
    #[error(
        "{path}: has {links} hard links; refusing to write to it (it would change the other names too)"
    )]
    HardLinked { path: PathBuf, links: u64 },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl SafeFileError {
    fn io(path: &Path, source: io::Error) -> Self {
        SafeFileError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

impl From<SafeFileError> for io::Error {
    fn from(e: SafeFileError) -> io::Error {
        let kind = match &e {
            SafeFileError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::PermissionDenied,
        };
        io::Error::new(kind, e.to_string())
    }
}

/// How an existing file is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Emptied (a new export).
    Truncate,
    /// Written at its end.
    Append,
}

fn open_raw(path: &Path, flags: libc::c_int, mode: u32) -> io::Result<File> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
    // SAFETY: open(2) with a valid NUL-terminated path; the descriptor it
    // returns is owned by the File made from it and nothing else.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor this function owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Opens `path` for writing as described in the module doc; a new file
/// gets `mode` (before the umask).
pub fn create(path: &Path, mode: u32, existing: Existing) -> Result<File, SafeFileError> {
    let base = libc::O_WRONLY | libc::O_NOFOLLOW;
    let append = if existing == Existing::Append {
        libc::O_APPEND
    } else {
        0
    };
    match open_raw(path, base | append | libc::O_CREAT | libc::O_EXCL, mode) {
        Ok(f) => return Ok(f),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
        Err(e) => return Err(SafeFileError::io(path, e)),
    }
    let f = match open_raw(path, base | append | libc::O_NONBLOCK, 0) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(SafeFileError::Symlink {
                path: path.to_owned(),
            });
        }
        Err(e) => return Err(SafeFileError::io(path, e)),
    };
    let md = f.metadata().map_err(|e| SafeFileError::io(path, e))?;
    if !md.file_type().is_file() {
        return Err(SafeFileError::NotRegular {
            path: path.to_owned(),
        });
    }
    let links = std::os::unix::fs::MetadataExt::nlink(&md);
    if links > 1 {
        return Err(SafeFileError::HardLinked {
            path: path.to_owned(),
            links,
        });
    }
    // Blocking writes from here on (a regular file ignores O_NONBLOCK,
    // but say what is meant).
    // SAFETY: fcntl on a descriptor `f` owns, integer arguments only.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    if existing == Existing::Truncate {
        f.set_len(0).map_err(|e| SafeFileError::io(path, e))?;
    }
    Ok(f)
}

/// [`create`] with the default mode, truncating: the common case.
pub fn create_new_or_truncate(path: &Path) -> Result<File, SafeFileError> {
    create(path, DEFAULT_MODE, Existing::Truncate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("xdprobe-safefile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_new_file_gets_the_mode_and_an_old_one_is_emptied() {
        let d = dir("new");
        let p = d.join("out");
        let mut f = create(&p, 0o600, Existing::Truncate).unwrap();
        f.write_all(b"hello").unwrap();
        drop(f);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mut f = create(&p, 0o600, Existing::Append).unwrap();
        f.write_all(b"!").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"hello!");
        create_new_or_truncate(&p).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn symlinks_hard_links_and_fifos_are_refused_and_left_alone() {
        let d = dir("planted");
        let target = d.join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        let link = d.join("out");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = create_new_or_truncate(&link).unwrap_err();
        assert!(matches!(e, SafeFileError::Symlink { .. }), "{e}");
        assert!(e.to_string().contains(link.to_str().unwrap()), "{e}");
        // A dangling link is no better: O_EXCL refuses it too.
        let dangling = d.join("dangling");
        std::os::unix::fs::symlink(d.join("nothing"), &dangling).unwrap();
        assert!(create_new_or_truncate(&dangling).is_err());
        assert!(!d.join("nothing").exists());
        let hard = d.join("hard");
        std::fs::hard_link(&target, &hard).unwrap();
        let e = create_new_or_truncate(&hard).unwrap_err();
        assert!(
            matches!(e, SafeFileError::HardLinked { links: 2, .. }),
            "{e}"
        );
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo with a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = create_new_or_truncate(&fifo).unwrap_err();
        assert!(!matches!(e, SafeFileError::Symlink { .. }), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        let _ = std::fs::remove_dir_all(&d);
    }
}
