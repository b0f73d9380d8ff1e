//! Bad input to the host tools gets a clear error with exit status 2, or
//! a warning naming what is wrong, never a silent run that reports
//! nothing: a process that does not exist, port 0, a second stack agent
//! running beside the first, a user who may not read tracefs, a trail
//! file that is not there. And `connlat` says what it was asked:
//! `--timestamp` with `--json`, a RESULT on every line of its table.

mod common;
mod host_support;
mod live_support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use host_support::{HostProbe, Pair, SERVER_IP};
use live_support::{
    require_root,
    topo::{TempDir, signal},
};

/// A process ID this kernel can never hand out (above `pid_max`), as the
/// issue's `--pid 999999` was on this machine.
fn absent_pid() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_194_304);
    let pid = 999_999.max(max + 1);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    pid
}

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = common::xdprobe()
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run xdprobe");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Checked before anything touches the kernel: no root needed.
#[test]
fn a_scope_that_matches_nothing_is_refused_with_exit_2() {
    let pid = absent_pid().to_string();
    for (args, says) in [
        (
            vec!["host", "--duration", "1s", "--pid", &pid],
            format!("--pid {pid}: no such process"),
        ),
        (
            vec!["connlat", "--duration", "1s", "--pid", &pid],
            format!("--pid {pid}: no such process"),
        ),
        (
            vec!["host", "--duration", "1s", "--port", "0"],
            "--port 0 matches no connection".to_owned(),
        ),
        (
            vec!["host", "--duration", "1s", "--port", "80", "--port", "0"],
            "--port 0 matches no connection".to_owned(),
        ),
        // connlat has no port scope: the parser says so.
        (
            vec!["connlat", "--duration", "1s", "--port", "0"],
            "unexpected argument '--port'".to_owned(),
        ),
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: exit 2: {err}");
        assert!(err.contains(&says), "{args:?}: says {says:?}: {err}");
    }
    // A thread is not a process: the programs compare thread group IDs.
    let tid = {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid(2) takes no arguments.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            std::thread::sleep(Duration::from_secs(3));
        });
        let tid = rx.recv().unwrap();
        (tid, h)
    };
    let (code, err) = run(&["host", "--duration", "1s", "--pid", &tid.0.to_string()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("is a thread of process {}", std::process::id())),
        "{err}"
    );
    tid.1.join().unwrap();
}

#[test]
fn a_trail_file_that_is_not_there_or_not_trails_is_exit_2() {
    let (code, err) = run(&["trace", "report", "/nonexistent"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("/nonexistent") && err.contains("No such file"),
        "{err}"
    );
    let dir = TempDir::new("trace_bad_file");
    let f = dir.0.join("bad.jsonl");
    std::fs::write(&f, "{\"not\": \"a trail\"}\n").unwrap();
    let (code, err) = run(&["trace", "report", f.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("line 1"), "{err}");
}

#[test]
fn a_second_stack_agent_is_warned_of_by_pid() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let (d1, d2) = (TempDir::new("host_two_a"), TempDir::new("host_two_b"));
    let first = HostProbe::start(&d1.0, &["--port", "5321"]);
    let second = HostProbe::start(&d2.0, &["--port", "5322"]);
    let err = second.stderr();
    let want = format!(
        "another stack-latency agent is running: pid {}",
        first.pid()
    );
    assert!(err.contains(&want), "{want:?} in: {err}");
    assert!(err.contains("--port 5321"), "names its command line: {err}");
    let _ = second.stop();
    let _ = first.stop();
}

#[test]
fn a_user_who_may_not_read_tracefs_is_told_so() {
    if !require_root!() {
        return;
    }
    // tracefs mounted (as root, the tools mount it), root's only.
    let (code, err) = run(&["trace", "list", "net:net_dev_queue"]);
    assert_eq!(code, Some(0), "{err}");
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata("/sys/kernel/tracing")
            .unwrap()
            .permissions()
            .mode()
    };
    if mode & 0o005 != 0 {
        assert!(
            !common::in_ci(),
            "tracefs is world-readable here: the case cannot be made"
        );
        eprintln!("SKIPPED: tracefs is world-readable here (mode {mode:o})");
        return;
    }
    for cmd in [
        &["host", "--duration", "1s"][..],
        &["connlat", "--duration", "1s"],
        &["trace", "list"],
    ] {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_xdprobe"))
            .args(cmd)
            .env("NO_COLOR", "1")
            .output()
            .expect("setpriv");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("tracefs is mounted at /sys/kernel/tracing but this user may not read it"),
            "{cmd:?}: the real cause: {err}"
        );
        assert!(!err.contains("not mounted"), "{cmd:?}: {err}");
    }
}

/// `xdprobe connlat ARGS` while one connection is made; its stdout.
fn connlat_output(pair: &Pair, port: u16, args: &[&str]) -> String {
    let dir = TempDir::new("connlat_args");
    let (out, err) = (dir.0.join("out"), dir.0.join("err"));
    let mut child = common::xdprobe()
        .arg("connlat")
        .args(args)
        .env("XDPROBE_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn connlat");
    let end = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&err)
        .unwrap_or_default()
        .contains("attached")
    {
        assert!(Instant::now() < end, "connlat did not attach");
        std::thread::sleep(Duration::from_millis(20));
    }
    let addr: SocketAddr = format!("{SERVER_IP}:{port}").parse().unwrap();
    let l = pair.s.run(|| TcpListener::bind(addr).expect("bind"));
    let c = pair
        .c
        .run(|| TcpStream::connect_timeout(&addr, Duration::from_secs(5)));
    c.expect("connect");
    drop(l);
    std::thread::sleep(Duration::from_millis(300));
    signal(child.id(), libc::SIGTERM);
    assert!(child.wait().unwrap().success());
    std::fs::read_to_string(&out).unwrap()
}

#[test]
fn connlat_honours_timestamp_in_json_and_fills_result() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let pair = Pair::new();
    let me = std::process::id().to_string();
    let json = connlat_output(&pair, 5323, &["--json", "--timestamp", "--pid", &me]);
    let rows: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(rows.len(), 1, "{json}");
    let t = rows[0]["time_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("time_s: {json}"));
    assert!(t > 0.0 && t < 30.0, "seconds since the start: {t}");
    let table = connlat_output(&pair, 5324, &["--timestamp", "--pid", &me]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "header and one connection: {table}");
    assert!(
        lines[0].starts_with("TIME(s)") && lines[0].ends_with("RESULT"),
        "{table}"
    );
    assert!(
        lines[1].trim_end().ends_with("established"),
        "a successful connect says so: {table}"
    );
}
