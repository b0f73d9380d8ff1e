//! The Debian package, as an operator meets it: built with the script
//! `make deb` runs (deploy/deb/build.sh, from the binary this test suite
//! built rather than a second release build), installed into this very
//! system with `apt-get install ./xdprobe_….deb`, checked (files, owners,
//! modes, the system user, `man xdprobe-run`, the completions, the shipped
//! configs passing their own checks, `systemd-analyze verify`), its two
//! units started, then removed and purged with nothing left behind.
//!
//! Where systemd is not PID 1 (containers, CI), the units' ExecStartPre,
//! ExecStart and ExecReload lines run as systemd would run them: the same
//! user, capabilities, memlock limit, environment, file-system sandbox and
//! system-call filters, applied by `package_support::sandbox` from the
//! installed unit files (the test prints which directive it applied how).
//! The daemon captures real frames sent over a veth between namespaces.
//!
//! Needs root; skips loudly otherwise (never under CI=true).

mod live_support;
mod package_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use live_support::{NetNs, VethOpts, require_root, require_tool, veth};
use package_support::sandbox::Sandbox;
use package_support::services::{self, creds, rx_frames, scrape, wait_for};
use package_support::unit::Unit;
use package_support::{
    Installed, PACKAGE, apt, dpkg_status, edit, named_paths, owned_by, run, stat, stdout,
};
use xdprobe_test_support::TempDir;

const UNITS: &str = "/usr/lib/systemd/system";
const TX_DEV: &str = "pkt0";
const PROBE_DEV: &str = "pkr0";
/// CAP_NET_ADMIN and CAP_BPF: what the daemon keeps once set up
/// (src/daemon/privs.rs).
const DAEMON_KEEPS: u64 = (1 << 12) | (1 << 39);

fn systemd_is_pid1() -> bool {
    std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd")
}

#[test]
fn the_package_installs_runs_its_units_and_purges_clean() {
    if !require_root!() {
        return;
    }
    let tools = [
        "dpkg-deb",
        "apt-get",
        "cargo-deb",
        "man",
        "setpriv",
        "strip",
        "zsh",
        "fish",
        "adduser",
    ];
    if !tools.iter().all(|t| require_tool(t)) {
        return;
    }
    let _machine = package_support::lock();
    eprintln!(
        "PID 1 is {:?}: the units' commands are started by this test as systemd would \
         start them (package_support::sandbox), not by systemd",
        std::fs::read_to_string("/proc/1/comm")
            .unwrap_or_default()
            .trim()
    );
    if systemd_is_pid1() {
        eprintln!("(systemd is PID 1 here, but the test leaves the machine's services alone)");
    }
    package_support::purge_if_present();
    let before = named_paths();
    let tmp = TempDir::new("package");
    let deb = build(tmp.path());
    check_archive(&deb);

    let installed = Installed;
    apt(&["install", deb.to_str().expect("path")]);
    let uid = check_installed();
    check_docs_and_completions();
    verify_units();
    run_daemon(tmp.path(), uid);
    run_manager(tmp.path(), uid);
    edited_config_survives(&deb);

    apt(&["purge", PACKAGE]);
    drop(installed);
    nothing_left(&before, uid);
}

/// deploy/deb/build.sh on this suite's binary; the .deb's path.
fn build(dir: &Path) -> PathBuf {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = stdout(&[
        &format!("{root}/deploy/deb/build.sh"),
        "--binary",
        env!("CARGO_BIN_EXE_xdprobe"),
        "--out",
        dir.to_str().expect("path"),
    ]);
    let deb = PathBuf::from(out.lines().last().expect("the .deb's path").trim());
    assert!(deb.is_file(), "{out}");
    eprintln!("built {}", deb.display());
    deb
}

/// The archive's control fields and file list, before anything is installed.
fn check_archive(deb: &Path) {
    let d = deb.to_str().expect("path");
    let depends = stdout(&["dpkg-deb", "-f", d, "Depends"]);
    for dep in ["adduser", "init-system-helpers", "libc6", "libelf1"] {
        assert!(depends.contains(dep), "Depends lacks {dep}: {depends}");
    }
    let list = stdout(&["dpkg-deb", "-c", d]);
    let entry = |path: &str| {
        list.lines()
            .find(|l| l.ends_with(&format!(" ./{path}")))
            .unwrap_or_else(|| panic!("{path} not in the package:\n{list}"))
            .to_owned()
    };
    for (path, mode) in [
        ("usr/bin/xdprobe", "-rwxr-xr-x 0/0"),
        ("etc/xdprobe/probe.toml", "-rw-r--r-- 0/0"),
        ("etc/xdprobe/manager.toml", "-rw-r--r-- 0/0"),
        ("usr/lib/xdprobe/setup-nic.sh", "-rwxr-xr-x 0/0"),
        ("usr/lib/systemd/system/xdprobe.service", "-rw-r--r-- 0/0"),
        (
            "usr/lib/systemd/system/xdprobe-manager.service",
            "-rw-r--r-- 0/0",
        ),
        (
            "usr/share/xdprobe/prometheus/xdprobe.rules.yml",
            "-rw-r--r-- 0/0",
        ),
        ("usr/share/xdprobe/grafana/xdprobe.json", "-rw-r--r-- 0/0"),
    ] {
        let e = entry(path);
        let got = e.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        assert_eq!(got, mode, "{path}: {e}");
    }
    for page in [
        "xdprobe",
        "xdprobe-pcap",
        "xdprobe-run",
        "xdprobe-check-config",
        "xdprobe-host",
        "xdprobe-connlat",
        "xdprobe-trace",
        "xdprobe-trace-echo",
        "xdprobe-manager",
    ] {
        entry(&format!("usr/share/man/man1/{page}.1.gz"));
    }
    assert!(
        !list.contains("xdprobe-generate"),
        "the hidden generate command has no page"
    );
    let conffiles = stdout(&[
        "sh",
        "-c",
        &format!("dpkg-deb --ctrl-tarfile {d} | tar -xO ./conffiles"),
    ]);
    let mut cf: Vec<&str> = conffiles.lines().collect();
    cf.sort_unstable();
    assert_eq!(cf, ["/etc/xdprobe/manager.toml", "/etc/xdprobe/probe.toml"]);
}

/// Files, owners and modes on disk, the user, the version, the shipped
/// configs' own checks. Returns the system user's uid.
fn check_installed() -> u32 {
    assert_eq!(dpkg_status().as_deref(), Some("installed"));
    for (path, mode, owner) in [
        ("/usr/bin/xdprobe", 0o755, "root"),
        ("/etc/xdprobe", 0o755, "root"),
        ("/etc/xdprobe/probe.toml", 0o644, "root"),
        ("/etc/xdprobe/manager.toml", 0o644, "root"),
        ("/usr/lib/xdprobe/setup-nic.sh", 0o755, "root"),
        ("/usr/lib/systemd/system/xdprobe.service", 0o644, "root"),
        (
            "/usr/lib/systemd/system/xdprobe-manager.service",
            0o644,
            "root",
        ),
        ("/usr/share/man/man1/xdprobe-run.1.gz", 0o644, "root"),
        (
            "/usr/share/bash-completion/completions/xdprobe",
            0o644,
            "root",
        ),
        ("/usr/share/zsh/vendor-completions/_xdprobe", 0o644, "root"),
        (
            "/usr/share/fish/vendor_completions.d/xdprobe.fish",
            0o644,
            "root",
        ),
    ] {
        assert_eq!(stat(path), (mode, owner.into(), owner.into()), "{path}");
    }
    let pw = stdout(&["getent", "passwd", "xdprobe"]);
    let f: Vec<&str> = pw.trim().split(':').collect();
    let uid: u32 = f[2].parse().expect("uid");
    assert!(uid < 1000, "a system user: {pw}");
    assert_eq!((f[5], f[6]), ("/nonexistent", "/usr/sbin/nologin"), "{pw}");
    let gr = stdout(&["getent", "group", "xdprobe"]);
    assert_eq!(
        gr.split(':').nth(2),
        Some(f[3]),
        "primary group xdprobe: {gr}"
    );
    let version = stdout(&["/usr/bin/xdprobe", "--version"]);
    assert_eq!(
        version.trim(),
        format!("xdprobe {}", env!("CARGO_PKG_VERSION"))
    );
    // The shipped configs pass the checks their units run first.
    let ok = stdout(&[
        "/usr/bin/xdprobe",
        "check-config",
        "/etc/xdprobe/probe.toml",
    ]);
    eprintln!("shipped probe.toml: {}", ok.trim());
    // The manager's: its agents' channel is TLS with the certificates the
    // postinst made, the key readable by the service's group only.
    let m = stdout(&[
        "/usr/bin/xdprobe",
        "manager",
        "--check",
        "-c",
        "/etc/xdprobe/manager.toml",
    ]);
    eprintln!("shipped manager.toml: {}", m.trim());
    assert!(m.contains("agents' channel: mutual TLS"), "{m}");
    assert_eq!(
        stat("/etc/xdprobe/fleet"),
        (0o750, "root".into(), "xdprobe".into())
    );
    assert_eq!(
        stat("/etc/xdprobe/fleet/manager.key"),
        (0o640, "root".into(), "xdprobe".into())
    );
    assert_eq!(
        stat("/etc/xdprobe/fleet/ca.key"),
        (0o600, "root".into(), "root".into())
    );
    uid
}

/// `man xdprobe-run` renders; the completions complete.
fn check_docs_and_completions() {
    assert_eq!(
        stdout(&["man", "-w", "xdprobe-run"]).trim(),
        "/usr/share/man/man1/xdprobe-run.1.gz"
    );
    let page = stdout(&[
        "env",
        "MANWIDTH=100",
        "LANG=C.UTF-8",
        "man",
        "-P",
        "cat",
        "xdprobe-run",
    ]);
    // Words as printed: man hyphenates long ones across lines.
    let page = page
        .split('\u{2010}')
        .map(str::trim_start)
        .collect::<Vec<_>>()
        .join("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for want in [
        "xdprobe-run",
        "xdprobe run",
        "--config",
        "/etc/xdprobe/probe.toml",
        "--no-handoff",
    ] {
        assert!(
            page.contains(want),
            "man xdprobe-run lacks {want:?}:\n{page}"
        );
    }
    let top = stdout(&["env", "MANWIDTH=100", "man", "-P", "cat", "xdprobe"]);
    for sub in ["pcap", "run", "check-config", "manager", "trace"] {
        assert!(top.contains(sub), "man xdprobe lacks {sub}:\n{top}");
    }
    // bash: what TAB offers after `xdprobe che` and `xdprobe pcap --for`.
    let complete = |words: &str, cword: usize| {
        let script = format!(
            "source /usr/share/bash-completion/completions/xdprobe; COMP_WORDS=({words}); \
             COMP_CWORD={cword}; _xdprobe xdprobe \"${{COMP_WORDS[{cword}]}}\" \"${{COMP_WORDS[{}]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            cword - 1
        );
        stdout(&["bash", "-c", &script])
    };
    assert_eq!(complete("xdprobe che", 1).trim(), "check-config");
    assert_eq!(complete("xdprobe pcap --for", 2).trim(), "--format");
    assert!(!complete("xdprobe ''", 1).contains("generate"));
    run(&["zsh", "-n", "/usr/share/zsh/vendor-completions/_xdprobe"]);
    run(&[
        "fish",
        "-n",
        "/usr/share/fish/vendor_completions.d/xdprobe.fish",
    ]);
}

/// `systemd-analyze verify` on the installed units, when it is there.
/// Its own check of `Documentation=man:` pages runs `man` at the default
/// width, and man-db then keeps a formatted copy in `/var/cache/man`
/// that outlives the purge (on some machines: where man may write
/// there). So the pages are found here with `man -w`, which formats
/// nothing, and verify is told not to look.
fn verify_units() {
    for u in ["xdprobe.service", "xdprobe-manager.service"] {
        let path = format!("{UNITS}/{u}");
        let unit = std::fs::read_to_string(&path).expect("unit");
        let pages: Vec<&str> = unit
            .lines()
            .filter_map(|l| l.strip_prefix("Documentation="))
            .flat_map(str::split_whitespace)
            .filter_map(|d| d.strip_prefix("man:"))
            .collect();
        assert!(!pages.is_empty(), "{u} names no man page");
        for page in pages {
            let (name, section) = page
                .strip_suffix(')')
                .and_then(|p| p.split_once('('))
                .unwrap_or_else(|| panic!("{u}: Documentation=man:{page}"));
            assert_eq!(
                stdout(&["man", "-w", section, name]).trim(),
                format!("/usr/share/man/man{section}/{name}.{section}.gz"),
                "{u}: Documentation=man:{page}"
            );
        }
    }
    if !require_tool("systemd-analyze") {
        return;
    }
    for u in ["xdprobe.service", "xdprobe-manager.service"] {
        let path = format!("{UNITS}/{u}");
        let out = run(&["systemd-analyze", "verify", "--man=no", &path]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.trim().is_empty(), "systemd-analyze verify {u}:\n{err}");
        let sec = stdout(&["systemd-analyze", "security", "--offline=true", &path]);
        let overall = sec
            .lines()
            .find(|l| l.contains("Overall exposure"))
            .unwrap_or("");
        eprintln!("{u}: verified; {}", overall.trim_start_matches('→').trim());
    }
}

/// The sandbox of an installed unit, its directives listed.
fn sandbox_of(unit: &Unit, scratch: &Path) -> Sandbox {
    std::fs::create_dir_all(scratch).expect("scratch");
    let sb = Sandbox::new(unit, scratch, true);
    eprintln!("{}: as systemd would apply it:", unit.path.display());
    for l in &sb.report {
        eprintln!("  {l}");
    }
    sb
}

/// xdprobe.service's commands on an operator's edit of probe.toml: the
/// capture interface is a veth in a namespace, records go to a file.
fn run_daemon(dir: &Path, uid: u32) {
    let unit = Unit::load(&Path::new(UNITS).join("xdprobe.service"));
    let sb = sandbox_of(&unit, &dir.join("scratch-daemon"));
    let cfg = Path::new("/etc/xdprobe/probe.toml");
    edit(cfg, "name = \"eth1\"", &format!("name = \"{PROBE_DEV}\""));
    edit(
        cfg,
        "    { queue = 0, core = 0 },\n    { queue = 1, core = 1 },\n",
        "    { queue = 0, core = 0 },\n",
    );
    edit(
        cfg,
        "collectors = [\"udp://127.0.0.1:4739\"]",
        "collectors = [\"file:///var/lib/xdprobe/records.ipfix\"]",
    );
    if let Some(limit) = sb.memlock_limit() {
        // The UMEM is locked memory of a user without CAP_IPC_LOCK.
        eprintln!(
            "!!!! LimitMEMLOCK=infinity cannot be applied here (no CAP_SYS_RESOURCE); \
             the daemon gets {limit} bytes, so its UMEM is cut to 512 frames (2 MiB) \
             instead of the shipped 64 MiB !!!!"
        );
        edit(cfg, "umem_frames = 16384", "umem_frames = 512");
        edit(cfg, "rx_ring = 8192", "rx_ring = 512");
        edit(cfg, "fill_ring = 8192", "fill_ring = 512");
    }
    let tx = NetNs::new("pkt");
    let ns = NetNs::new("pkp");
    veth(&tx, TX_DEV, &ns, PROBE_DEV, VethOpts::default());
    ns.exec(&["ip", "link", "set", PROBE_DEV, "promisc", "on"]);
    let log = dir.join("xdprobe.service.log");

    sandbox_holds(&sb, &ns, dir);
    services::run_lines(&unit, &sb, "ExecStartPre", None, &ns, &log);
    let mut d = services::start(&sb, &unit.exec_start(), &ns, &log);
    d.wait_log("xdprobe running", Duration::from_secs(30));
    let c = creds(d.child.id());
    assert_eq!(c.uid, uid, "runs as xdprobe");
    assert_eq!(
        c.cap_eff, DAEMON_KEEPS,
        "effective capabilities after setup"
    );
    assert_eq!(
        c.cap_bnd,
        services::bounding(&unit),
        "bounding set of the unit"
    );
    assert!(
        c.no_new_privs && c.seccomp,
        "no_new_privs and a seccomp filter"
    );

    let sent = services::send_frames(&tx, TX_DEV);
    wait_for(Duration::from_secs(10), "the frames at the workers", || {
        rx_frames(&ns, 9464) >= sent
    });
    assert_eq!(rx_frames(&ns, 9464), sent, "{}", scrape(&ns, 9464));
    services::run_lines(&unit, &sb, "ExecReload", Some(d.child.id()), &ns, &log);
    d.wait_log("reload:", Duration::from_secs(10));

    let stop = unit.get("TimeoutStopSec").expect("TimeoutStopSec");
    let limit = Duration::from_secs(stop.trim_end_matches('s').parse().expect("seconds"));
    let (st, text) = d.stop(libc::SIGTERM, limit);
    assert!(st.success(), "exit on SIGTERM: {st}\n{text}");
    assert!(!text.contains(" ERROR "), "{text}");
    let records = "/var/lib/xdprobe/records.ipfix";
    assert_eq!(stat(records), (0o640, "xdprobe".into(), "xdprobe".into()));
    let size = std::fs::metadata(records).expect("records").len();
    assert!(size > 0, "records written");
    eprintln!(
        "xdprobe.service: {sent} frames captured, {size} bytes of IPFIX written, reloaded, stopped"
    );
}

/// What a process of the daemon's sandbox sees: a read-only system with
/// only its state and log directories writable, a private /dev and /tmp.
fn sandbox_holds(sb: &Sandbox, ns: &NetNs, dir: &Path) {
    let log = dir.join("sandbox-self-check.log");
    let script = "cat /proc/self/mountinfo; echo ===; ls -A /dev; echo ===; ls -A /tmp; echo ===; \
                  touch /var/lib/xdprobe/probe && echo state-writable; \
                  touch /etc/xdprobe/probe 2>/dev/null || echo etc-refused";
    let argv = ["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
    let mut s = services::start(sb, &argv, ns, &log);
    assert!(s.child.wait().expect("wait").success(), "{}", s.log_text());
    let out = s.log_text();
    let parts: Vec<&str> = out.split("===\n").collect();
    let opts = |mp: &str| {
        parts[0]
            .lines()
            .rfind(|l| l.split(' ').nth(4) == Some(mp))
            .map(|l| l.split(' ').nth(5).unwrap_or("").to_owned())
            .unwrap_or_else(|| panic!("{mp} not mounted:\n{}", parts[0]))
    };
    assert!(opts("/").starts_with("ro"), "/ read-only: {}", opts("/"));
    assert!(opts("/var/lib/xdprobe").starts_with("rw"));
    let mut dev: Vec<&str> = parts[1].lines().collect();
    dev.sort_unstable();
    assert_eq!(
        dev,
        [
            "fd", "full", "null", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty",
            "urandom", "zero"
        ]
    );
    assert_eq!(parts[2].trim(), "", "a private, empty /tmp");
    assert!(
        parts[3].contains("state-writable") && parts[3].contains("etc-refused"),
        "{out}"
    );
    std::fs::remove_file("/var/lib/xdprobe/probe").expect("remove probe file");
}

/// xdprobe-manager.service's commands on the shipped manager.toml, in a
/// namespace of its own (its default ports).
fn run_manager(dir: &Path, uid: u32) {
    let unit = Unit::load(&Path::new(UNITS).join("xdprobe-manager.service"));
    let sb = sandbox_of(&unit, &dir.join("scratch-manager"));
    let ns = NetNs::new("pkm");
    let log = dir.join("xdprobe-manager.service.log");
    services::run_lines(&unit, &sb, "ExecStartPre", None, &ns, &log);
    let mut m = services::start(&sb, &unit.exec_start(), &ns, &log);
    m.wait_log("manager listening", Duration::from_secs(20));
    let c = creds(m.child.id());
    assert_eq!(
        (c.uid, c.cap_eff, c.cap_bnd),
        (uid, 0, 0),
        "no capability at all"
    );
    assert!(c.no_new_privs && c.seccomp);
    let text = scrape(&ns, 9465);
    assert!(
        text.contains("# TYPE xdprobe_manager_reports counter"),
        "{text}"
    );
    // The sandbox is real: this unit allows no netlink socket.
    let ip = sb
        .command(&["/usr/sbin/ip".into(), "-o".into(), "link".into()], None)
        .output()
        .expect("ip");
    assert!(
        !ip.status.success() && String::from_utf8_lossy(&ip.stderr).contains("not supported"),
        "AF_NETLINK refused by RestrictAddressFamilies: {ip:?}"
    );
    let (st, text) = m.stop(libc::SIGTERM, Duration::from_secs(30));
    assert!(st.success(), "exit on SIGTERM: {st}\n{text}");
    eprintln!("xdprobe-manager.service: started, scraped, stopped");
}

/// A reinstall keeps the edited probe.toml; a remove keeps it too.
fn edited_config_survives(deb: &Path) {
    let cfg = "/etc/xdprobe/probe.toml";
    let edited = std::fs::read_to_string(cfg).expect("config");
    assert!(edited.contains(PROBE_DEV));
    apt(&["install", "--reinstall", deb.to_str().expect("path")]);
    assert_eq!(std::fs::read_to_string(cfg).expect("config"), edited);
    apt(&["remove", PACKAGE]);
    assert_eq!(dpkg_status().as_deref(), Some("config-files"));
    assert!(!Path::new("/usr/bin/xdprobe").exists());
    assert_eq!(std::fs::read_to_string(cfg).expect("config"), edited);
}

/// After the purge: dpkg forgot the package, the user and group are gone,
/// no file named like it or owned by its user remains.
fn nothing_left(before: &std::collections::BTreeSet<String>, uid: u32) {
    assert_eq!(dpkg_status(), None);
    let after = named_paths();
    let left: Vec<&String> = after.difference(before).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        owned_by(uid).is_empty(),
        "files of uid {uid}: {:?}",
        owned_by(uid)
    );
    for db in ["passwd", "group"] {
        let st = std::process::Command::new("getent")
            .args([db, "xdprobe"])
            .output()
            .expect("getent");
        assert!(!st.status.success(), "xdprobe still in {db}");
    }
    eprintln!("purged: nothing named xdprobe or owned by uid {uid} left");
}
