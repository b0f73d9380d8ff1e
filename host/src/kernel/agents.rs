//! Other processes running the same kind of probe: found by the BPF
//! programs the kernel has loaded (by name) and the processes holding a
//! descriptor of one of them (`/proc/PID/fdinfo`, `prog_id:`). Two
//! stack-latency agents both work, but every hook then runs two programs
//! per packet (twice the cost inside the very paths being timed), and
//! an operator who forgot the first one should hear of it.

use std::collections::HashSet;

/// A process holding one of the programs looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Its command line, spaces between the arguments (at most 200 bytes).
    pub cmdline: String,
    /// Names of the programs it holds.
    pub programs: Vec<String>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.cmdline)
    }
}

/// IDs and names of the loaded programs whose name starts with one of
/// `prefixes` (the kernel keeps the first 15 bytes of a name).
fn loaded(prefixes: &[&str]) -> Vec<(u32, String)> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|p| {
            let name = p.name_as_str()?.to_owned();
            prefixes
                .iter()
                .any(|x| name.starts_with(x))
                .then_some((p.id(), name))
        })
        .collect()
}

/// The `prog_id` a descriptor's fdinfo names, if it is a BPF program or
/// link.
fn prog_id(fdinfo: &str) -> Option<u32> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("prog_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Processes other than this one holding a program named with one of
/// `prefixes`. Best effort: processes that end meanwhile, or whose
/// descriptors cannot be read, are left out.
pub fn others_holding(prefixes: &[&str]) -> Vec<Holder> {
    let progs = loaded(prefixes);
    if progs.is_empty() {
        return Vec::new();
    }
    let ids: HashSet<u32> = progs.iter().map(|p| p.0).collect();
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fdinfo")) else {
            continue;
        };
        let mut held: Vec<String> = Vec::new();
        for fd in fds.flatten() {
            let Some(id) = std::fs::read_to_string(fd.path())
                .ok()
                .and_then(|s| prog_id(&s))
            else {
                continue;
            };
            if ids.contains(&id)
                && let Some((_, name)) = progs.iter().find(|p| p.0 == id)
                && !held.contains(name)
            {
                held.push(name.clone());
            }
        }
        if held.is_empty() {
            continue;
        }
        let mut cmdline = std::fs::read(e.path().join("cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .replace('\0', " ")
            })
            .unwrap_or_default();
        if cmdline.len() > 200 {
            let mut cut = 200;
            while !cmdline.is_char_boundary(cut) {
                cut -= 1;
            }
            cmdline.truncate(cut);
            cmdline.push('…');
        }
        held.sort();
        out.push(Holder {
            pid,
            cmdline,
            programs: held,
        });
    }
    out.sort_by_key(|h| h.pid);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prog_ids_from_fdinfo() {
        let prog = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nprog_type:\t26\nprog_jited:\t1\nprog_tag:\tab\nmemlock:\t4096\nprog_id:\t412\n";
        assert_eq!(prog_id(prog), Some(412));
        let link = "pos:\t0\nflags:\t02000000\nlink_type:\ttracing\nlink_id:\t9\nprog_tag:\tab\nprog_id:\t77\n";
        assert_eq!(prog_id(link), Some(77));
        assert_eq!(prog_id("pos:\t0\nflags:\t0100002\n"), None);
    }
}
