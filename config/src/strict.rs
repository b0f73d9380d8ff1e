//! sshd's `StrictModes` for the config file: run as root, the probe (and
//! the manager) would take its settings — collectors, output paths, the
//! user to switch to — from a file another user can change. Such a file
//! is refused when the process runs as root: writable by group or others,
//! owned by another user than root or the process's own, or in a
//! directory others may write to (without the sticky bit). The override,
//! for set-ups that know better, is the environment variable
//! [`OVERRIDE_ENV`]`=1` (never a key in the file: its writer could set
//! it). `xdprobe check-config` warns about the same things without
//! refusing.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Set to `1` to run as root with a config file others can change.
pub const OVERRIDE_ENV: &str = "XDPROBE_ALLOW_INSECURE_CONFIG";

/// What is wrong with who may change `path`, if anything.
pub fn mode_problem(path: &Path) -> Option<String> {
    let md = std::fs::metadata(path).ok()?;
    let mode = md.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "is writable by {} (mode {mode:04o})",
            if mode & 0o002 != 0 {
                "everyone"
            } else {
                "its group"
            }
        ));
    }
    let euid = euid();
    if md.uid() != 0 && md.uid() != euid {
        return Some(format!("is owned by uid {}, not root", md.uid()));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(d) = std::fs::metadata(dir) {
        let dm = d.mode() & 0o7777;
        if dm & 0o022 != 0 && dm & 0o1000 == 0 {
            return Some(format!(
                "is in {}, which others may write to (mode {dm:04o}): they could replace it",
                dir.display()
            ));
        }
    }
    None
}

fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The refusal, when running as root without the override.
pub fn refuse_unsafe(path: &Path) -> Option<String> {
    if euid() != 0 || std::env::var(OVERRIDE_ENV).is_ok_and(|v| v == "1") {
        return None;
    }
    let p = mode_problem(path)?;
    Some(format!(
        "{} {p}; refusing to run as root with a config file others can change \
         (chmod go-w / chown root it, or set {OVERRIDE_ENV}=1 to run anyway)",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn group_or_world_writable_files_and_open_directories_are_named() {
        let d = std::env::temp_dir().join(format!("xdprobe-strict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = d.join("probe.toml");
        std::fs::write(&f, "").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(mode_problem(&f), None);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(mode_problem(&f).unwrap().contains("everyone (mode 0666)"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert!(mode_problem(&f).unwrap().contains("its group"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(mode_problem(&f).unwrap().contains("others may write to"));
        // /tmp-like: sticky, fine.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(mode_problem(&f), None);
        let _ = std::fs::remove_dir_all(&d);
    }
}
