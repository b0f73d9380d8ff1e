//! Real collectors and decoders as tests run them: nfcapd (its files read
//! back with nfdump), and tshark decoding what a UDP collector received as
//! IPFIX/NetFlow (`cflow`). Each collector runs under a [`ChildGuard`];
//! before it is told to write its output, the test waits until it has read
//! every datagram sent to it (its socket's receive queue is empty), not for
//! a fixed time.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::child::{ChildGuard, wait_for};
use crate::collect::free_udp_port;

/// Waits (5 s at most) until a collector has bound UDP `port` on 127.0.0.1.
pub fn wait_udp_bound(port: u16) {
    wait_for(
        Duration::from_secs(5),
        &format!("a collector on udp {port}"),
        || UdpSocket::bind(("127.0.0.1", port)).is_err(),
    );
}

/// Bytes waiting in the receive queue of the UDP socket bound to `port`
/// (`/proc/net/udp` and `udp6`, this namespace); `None` when no socket is.
pub fn udp_rx_queue(port: u16) -> Option<u64> {
    let port = format!("{port:04X}");
    ["/proc/net/udp", "/proc/net/udp6"].iter().find_map(|f| {
        let text = std::fs::read_to_string(f).ok()?;
        text.lines().skip(1).find_map(|l| {
            let mut cols = l.split_whitespace();
            let local = cols.nth(1)?;
            if local.rsplit(':').next()? != port {
                return None;
            }
            let queues = cols.nth(2)?;
            u64::from_str_radix(queues.split(':').nth(1)?, 16).ok()
        })
    })
}

/// Waits (10 s at most) until the collector on UDP `port` has read every
/// datagram sent to it: the sender has finished, so an empty receive queue
/// means it holds them all.
pub fn wait_udp_drained(port: u16) {
    wait_for(
        Duration::from_secs(10),
        &format!("the collector on udp {port} to read its datagrams"),
        || udp_rx_queue(port).is_none_or(|q| q == 0),
    );
}

/// A collector that binds a UDP port: started, and waited for until it has.
pub fn start_udp_collector(cmd: &mut Command, port: u16) -> ChildGuard {
    let child = cmd
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let guard = ChildGuard::new(child);
    wait_udp_bound(port);
    guard
}

/// nfcapd on 127.0.0.1 and a free port, writing into `dir`.
pub struct Nfcapd {
    pub port: u16,
    pub dir: PathBuf,
    guard: ChildGuard,
}

impl Nfcapd {
    pub fn start(dir: &Path) -> Nfcapd {
        let port = free_udp_port();
        let mut cmd = Command::new("nfcapd");
        cmd.args([
            "-b",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "3600",
            "-w",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        Nfcapd {
            port,
            dir: dir.to_owned(),
            guard: start_udp_collector(&mut cmd, port),
        }
    }

    /// Once it has read every datagram: SIGINT, on which it writes its
    /// file, and its exit.
    pub fn finish(&mut self) {
        wait_udp_drained(self.port);
        self.guard.interrupt_and_wait(Duration::from_secs(10));
    }
}

/// `nfdump -R DIR -o FORMAT` in UTC: its output.
pub fn nfdump(dir: &Path, format: &str) -> String {
    let out = Command::new("nfdump")
        .env("TZ", "UTC")
        .arg("-R")
        .arg(dir)
        .args(["-o", format])
        .output()
        .expect("running nfdump");
    assert!(
        out.status.success(),
        "nfdump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// tshark on `pcap`, UDP `port` decoded as IPFIX/NetFlow (`cflow`, with no
/// cap on a template's fields: the ntop biflow template has 62, over the
/// default 60), with `args` (`-V`, `-T fields …`): its output.
pub fn tshark_cflow(pcap: &Path, port: u16, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args(["-o", "cflow.max_template_fields:0"])
        .args(["-d", &format!("udp.port=={port},cflow")])
        .args(args)
        .output()
        .expect("running tshark");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every value of the cflow field `name` across all packets, in order.
pub fn tshark_cflow_field(pcap: &Path, port: u16, name: &str) -> Vec<String> {
    let args = [
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=;",
        "-e",
        name,
    ];
    tshark_cflow(pcap, port, &args)
        .lines()
        .flat_map(|l| l.split(';').map(str::to_owned).collect::<Vec<_>>())
        .filter(|s| !s.is_empty())
        .collect()
}
