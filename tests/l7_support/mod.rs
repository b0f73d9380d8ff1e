//! Real application traffic for the L7 tests: HTTP/1.1, HTTPS (TLS 1.2
//! and 1.3), QUIC v1 and v2 (`traffic.py`: Python's standard library and
//! aioquic) and DNS over UDP and TCP (dnsmasq and dig), between the
//! client and server namespaces of the live bench (`live_support::topo`),
//! recorded there by tcpdump.

#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses a different subset"
)]

pub mod oracle;
pub mod tshark;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::live_support::topo::{Bench, ChildGuard, SERVER_IP, spawn_in, wait_exit, wait_for};

/// The Python with aioquic: the venv `deploy/bootstrap.sh` makes, else
/// the system's `python3` (whose QUIC part then says it lacks aioquic).
pub fn python() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let venv = std::env::var_os("XDG_DATA_HOME")
        .map_or_else(|| home.join(".local/share"), PathBuf::from)
        .join("xdprobe/venv/bin/python3");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/l7_support/traffic.py")
}

/// What the traffic was: whether QUIC could be made.
pub struct Made {
    pub quic: bool,
}

/// Runs every client against every server once; the bench's tcpdump (if
/// started) records it. Servers are killed before returning.
pub fn run(b: &mut Bench, dir: &Path) -> Made {
    let py = python();
    let py = py.to_string_lossy();
    let script = script();
    let script = script.to_string_lossy();
    let d = dir.to_string_lossy();
    let srv = spawn_in(
        &b.s,
        &[&py, &script, "serve", &d, SERVER_IP],
        &dir.join("serve.log"),
    );
    b.children.push(ChildGuard::new(srv));
    let dns = spawn_in(
        &b.s,
        &[
            "dnsmasq",
            "-k",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            &format!("--listen-address={SERVER_IP}"),
            "--port=53",
            "--local=/xdprobe.test/",
            &format!("--address=/www.xdprobe.test/{SERVER_IP}"),
            "--address=/v6.xdprobe.test/2001:db8::2",
            "--user=root",
            &format!("--pid-file={d}/dnsmasq.pid"),
        ],
        &dir.join("dnsmasq.log"),
    );
    b.children.push(ChildGuard::new(dns));
    wait_for(Duration::from_secs(20), "L7 servers ready", || {
        dir.join("ready").exists()
    });
    std::thread::sleep(Duration::from_millis(300));
    let ready = std::fs::read_to_string(dir.join("ready")).unwrap_or_default();
    let srv = format!("@{SERVER_IP}");
    for q in [
        vec![&srv[..], "www.xdprobe.test", "A"],
        vec![&srv, "v6.xdprobe.test", "AAAA"],
        vec![&srv, "nope.xdprobe.test", "A"],
        vec![&srv, "+tcp", "www.xdprobe.test", "A"],
    ] {
        let mut args = vec!["dig", "+time=2", "+tries=1"];
        args.extend(q);
        b.c.exec(&args);
    }
    let mut client =
        b.c.command(&py)
            .args([&*script, "client", &d, SERVER_IP])
            .stderr(std::fs::File::create(dir.join("client.log")).expect("client log"))
            .spawn()
            .expect("traffic client");
    let st = wait_exit(&mut client, Duration::from_secs(120), "traffic client");
    assert!(
        st.success(),
        "traffic client failed: {}",
        std::fs::read_to_string(dir.join("client.log")).unwrap_or_default()
    );
    Made {
        quic: ready.trim() == "quic",
    }
}
