//! Which host programs are loaded, and whether a probe left any behind
//! (told apart by program ID, so other processes' probes never count).

use std::process::Command;

use serde_json::Value;

/// The host programs loaded now that were not loaded at `before`, once the
/// kernel has released those of a probe that just exited: a program's last
/// reference goes with its link, and the kernel frees it after an RCU grace
/// period, so `bpftool` may list it for a while after the process is gone.
/// BTF-typed (`tp_btf`) programs wait for an RCU-tasks grace period, which
/// took over 3 s on a loaded CI machine. Waits up to 30 s for there to be
/// none (returning as soon as there are none), then returns them.
/// Programs are told apart by ID, so another process's probe that comes or
/// goes meanwhile is not counted.
pub fn left_loaded(before: &[String]) -> Vec<String> {
    wait_gone(loaded_host_programs, |p| !before.contains(p))
}

/// What `now()` lists that `counts`, polled every 50 ms until there is
/// none or 30 s have passed; what is left then.
pub fn wait_gone(now: impl Fn() -> Vec<String>, counts: impl Fn(&String) -> bool) -> Vec<String> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left: Vec<String> = now().into_iter().filter(|p| counts(p)).collect();
        if left.is_empty() || std::time::Instant::now() > until {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The host programs process `pid` holds open, as `name#id`: the program
/// IDs of its descriptors (`/proc/PID/fdinfo`, `prog_id:`), so programs
/// other processes load meanwhile (other tests on the machine) are never
/// among them.
pub fn host_programs_of(pid: u32) -> Vec<String> {
    let mut ids = std::collections::HashSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) {
        for e in dir.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            ids.extend(text.lines().filter_map(|l| {
                l.strip_prefix("prog_id:")
                    .and_then(|v| v.trim().parse::<u64>().ok())
            }));
        }
    }
    loaded_host_programs()
        .into_iter()
        .filter(|p| {
            p.rsplit('#')
                .next()
                .and_then(|id| id.parse::<u64>().ok())
                .is_some_and(|id| ids.contains(&id))
        })
        .collect()
}

/// Of `ours` (from [`host_programs_of`]), those still loaded after up to
/// 30 s (see [`left_loaded`] for why a wait).
pub fn still_loaded(ours: &[String]) -> Vec<String> {
    wait_gone(loaded_host_programs, |p| ours.contains(p))
}

/// The host programs loaded now (bpftool), as `name#id`.
pub fn loaded_host_programs() -> Vec<String> {
    loaded_programs(|n| n.starts_with("stack_") || n.starts_with("conn_"))
}

/// The BPF programs loaded now whose name `keep` accepts (bpftool), as
/// `name#id`.
pub fn loaded_programs(keep: impl Fn(&str) -> bool) -> Vec<String> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]));
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p["name"].as_str()?, p["id"].as_u64()?)))
                .filter(|(n, _)| keep(n))
                .map(|(n, id)| format!("{n}#{id}"))
                .collect()
        })
        .unwrap_or_default()
}
