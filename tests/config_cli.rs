//! `xdprobe check-config` end to end: the real binary on the shipped example
//! and on broken files, checking exit codes and the `FILE:LINE:COL: key:
//! message` lines an operator (or `ExecStartPre=`) sees.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_xdprobe");

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/probe.toml")
}

fn check(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("check-config")
        .args(args)
        .env("XDPROBE_LOG", "warn")
        .output()
        .expect("run xdprobe")
}

/// `check` accepted the config (exit 0); its stderr otherwise.
fn passes(args: &[&str]) -> Output {
    let out = check(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A scratch directory removed on drop, even when an assertion fails.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("xdprobe-config-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write config");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Online CPUs as the kernel lists them (independent of xdprobe's parser).
fn online_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .map(|s| {
            s.trim()
                .split(',')
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => {
                        b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0)
                    }
                    None => 1,
                })
                .sum()
        })
        .unwrap_or(1)
}

#[test]
fn shipped_example_passes_with_a_summary() {
    let file = example();
    let out = passes(&["--no-machine-check", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(&format!("{}: OK\n", file.display())),
        "{stdout}"
    );
    assert!(stdout.contains("interface eth1"), "{stdout}");
    assert!(stdout.contains("0->core 0, 1->core 1"), "{stdout}");
    assert!(stdout.contains("hand-off auto"), "{stdout}");
    // 2 queues: 2 rings of 1024 slots and 2 lanes of 512, 2064 B a slot.
    assert!(
        stdout.contains("hand-off rings and lanes 6.0 MiB"),
        "{stdout}"
    );
    assert!(stdout.contains("262144 per worker x 2 workers"), "{stdout}");
    assert!(
        stdout.contains("collectors: udp://127.0.0.1:4739"),
        "{stdout}"
    );
    // 2 queues x 4096 frames x 4096 B.
    assert!(stdout.contains("locked memory: 128.0 MiB"), "{stdout}");

    // With the machine check on, cores 0 and 1 must exist here.
    if online_cpus() >= 2 {
        passes(&[file.to_str().unwrap()]);
    } else {
        eprintln!("only one CPU online: skipping the machine-checked run of deploy/probe.toml");
    }
}

const IFACE: &str = "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 0 }]\n";

/// Each broken file: (name, text, expected "LINE:COL: key: message" start).
fn broken_files() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "typo-key",
            format!("{IFACE}\n[flow]\nidle_timout = \"30s\"\n"),
            "6:1: flow.idle_timout: unknown field `idle_timout`",
        ),
        (
            "no-unit",
            format!("{IFACE}\n[flow]\nidle_timeout = \"30\"\n"),
            "6:16: flow.idle_timeout: duration \"30\" has no unit",
        ),
        (
            "umem",
            format!("{IFACE}umem_frames = 3000\n"),
            "4:15: interface[0].umem_frames: umem_frames must be a power of two (got 3000)",
        ),
        (
            "dup-queue",
            "[[interface]]\nname = \"eth1\"\nqueues = [\n    { queue = 0, core = 0 },\n    { queue = 0, core = 1 },\n]\n".to_owned(),
            "5:15: interface[0].queues[1].queue: queue 0 listed twice (first at line 4)",
        ),
        (
            "no-such-core",
            "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 100000 }]\n".to_owned(),
            "3:31: interface[0].queues[0].core: core 100000 does not exist on this machine (",
        ),
        (
            "collector",
            format!("{IFACE}[export]\ncollectors = [\"udp://192.0.2.1\"]\n"),
            "5:15: export.collectors[0]: collector \"udp://192.0.2.1\": missing :PORT",
        ),
        (
            "prefix",
            format!("{IFACE}[filter]\nprefixes = [\"192.0.2.0/24\",\n    \"198.51.100.1/24\"]\n"),
            "6:5: filter.prefixes[1]: prefix \"198.51.100.1/24\" has host bits set",
        ),
        ("capacity", format!("{IFACE}[flow]\ncapacity = 0\n"), "5:12: flow.capacity: capacity must be greater than zero"),
        ("syntax", format!("{IFACE}[flow\ncapacity = 1\n"), "4:6: TOML syntax error:"),
        ("no-interface", "[flow]\ncapacity = 1024\n".to_owned(), "1:1: interface: at least one [[interface]] is required"),
        (
            "linger",
            format!("{IFACE}[flow]\nidle_timeout = \"10s\"\ntcp_end_linger = \"30s\"\n"),
            "6:18: flow.tcp_end_linger: tcp_end_linger (30s) must not exceed idle_timeout (10s)",
        ),
        (
            "metrics",
            format!("{IFACE}[metrics]\nlisten = \"127.0.0.1\"\n"),
            "5:10: metrics.listen: \"127.0.0.1\" is not an IP address and port",
        ),
    ]
}

#[test]
fn each_broken_file_gives_its_error_and_exit_2() {
    let dir = Scratch::new("broken");
    for (name, text, want) in broken_files() {
        let path = dir.write(&format!("{name}.toml"), &text);
        let out = check(&[path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "{name}: nothing on stdout when refused"
        );
        let expected = format!("{}:{want}", path.display());
        assert!(
            stderr.lines().any(|l| l.starts_with(&expected)),
            "{name}: no line starting with\n  {expected}\nin\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
}

#[test]
fn every_error_in_a_file_is_listed() {
    let dir = Scratch::new("many");
    let text = "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 0 }]\nfill_ring = 1000\n\n[flow]\ncapacity = 0\nactive_timeout = \"5 minutes\"\n\n[filter]\nports = [0]\n";
    let path = dir.write("many.toml", text);
    let out = check(&[path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let p = path.display();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 5, "{stderr}");
    assert!(
        lines[0].starts_with(&format!("{p}:4:13: interface[0].fill_ring: ")),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with(&format!("{p}:7:12: flow.capacity: ")),
        "{stderr}"
    );
    assert!(
        lines[2].starts_with(&format!("{p}:8:18: flow.active_timeout: ")),
        "{stderr}"
    );
    assert!(
        lines[3].starts_with(&format!("{p}:11:10: filter.ports[0]: ")),
        "{stderr}"
    );
    assert_eq!(lines[4], format!("{p}: 4 errors"));
}

#[test]
fn unreadable_file_is_a_config_error() {
    let dir = Scratch::new("missing");
    let path = dir.0.join("absent.toml");
    let out = check(&[path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot read {}", path.display())),
        "{stderr}"
    );
}

#[test]
fn machine_checks_can_be_skipped_for_another_host() {
    let dir = Scratch::new("other-host");
    let path = dir.write(
        "big.toml",
        "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 100000 }]\n",
    );
    let out = check(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let out = passes(&["--no-machine-check", path.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("0->core 100000"));
}

/// The exporter's own URL parser runs too (it resolves names; `.invalid`
/// never resolves, RFC 6761), and its error gets the URL's line.
#[test]
fn collectors_are_checked_by_the_exporter_with_their_line() {
    let dir = Scratch::new("exporter");
    let text = format!(
        "{IFACE}[export]\ncollectors = [\n    \"udp://127.0.0.1:4739\",\n    \"udp://collector.invalid:4739\",\n]\n"
    );
    let path = dir.write("dns.toml", &text);
    let out = check(&[path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let want = format!(
        "{}:7:5: export.collectors[1]: collector \"udp://collector.invalid:4739\": ",
        path.display()
    );
    assert!(
        stderr.lines().any(|l| l.starts_with(&want)),
        "no {want:?} in\n{stderr}"
    );
}

/// The config embedded in deploy/k8s/daemonset.yaml (the `probe.toml: |`
/// block scalar) must pass too.
#[test]
fn kubernetes_configmap_passes() {
    let yaml_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/k8s/daemonset.yaml");
    let yaml = std::fs::read_to_string(&yaml_path).expect("read daemonset.yaml");
    let mut lines = yaml
        .lines()
        .skip_while(|l| l.trim() != "probe.toml: |")
        .skip(1)
        .peekable();
    let indent = lines
        .peek()
        .map(|l| l.len() - l.trim_start().len())
        .expect("a block after probe.toml: |");
    let block: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect();
    assert!(block.len() > 5, "{block:?}");
    let dir = Scratch::new("k8s");
    let path = dir.write("probe.toml", &block.join("\n"));
    let out = passes(&["--no-machine-check", path.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("collectors: udp://198.51.100.7:4739"));
}
