//! The file tool's comforts, held to tcpdump where tcpdump defines them:
//! a capture filter in tcpdump syntax keeps exactly the packets
//! `tcpdump -r FILE -w - EXPR` keeps (on Ethernet, raw IP and Linux cooked
//! captures), a capture piped from tcpdump reads as the file does, and the
//! progress bar appears on a terminal only.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;

fn corpus(name: &str) -> PathBuf {
    corpus_dir().join(name)
}

/// Records of `xdprobe pcap FILE --format json ARGS…` as sorted lines, the
/// exit status and stderr.
fn records(file: &Path, args: &[&str]) -> (Vec<String>, i32, String) {
    let out = xdprobe()
        .arg("pcap")
        .arg(file)
        .args(["--format", "json", "--stats"])
        .args(args)
        .output()
        .expect("run xdprobe");
    (
        sorted_lines(&out.stdout),
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sorted_lines(b: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(b)
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

/// `tcpdump -r FILE -w - EXPR` (nanosecond timestamps kept) piped into
/// `xdprobe pcap - --format json --stats`: the records and the frame count.
fn via_tcpdump(file: &Path, expr: &str) -> (Vec<String>, u64) {
    let mut td = Command::new("tcpdump")
        .args(["--time-stamp-precision=nano", "-r"])
        .arg(file)
        .args(["-w", "-", expr])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run tcpdump");
    let out = xdprobe()
        .args(["pcap", "-", "--format", "json", "--stats"])
        .stdin(td.stdout.take().unwrap())
        .output()
        .expect("run xdprobe");
    assert!(td.wait().unwrap().success(), "tcpdump {expr:?} failed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xdprobe pcap - failed: {stderr}");
    (sorted_lines(&out.stdout), frames(&stderr))
}

/// The `frames N` of the `--stats` summary.
fn frames(stderr: &str) -> u64 {
    stderr
        .split_whitespace()
        .skip_while(|w| *w != "frames")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no frame count in {stderr:?}"))
}

fn filtered_out(stderr: &str) -> u64 {
    let at = stderr
        .find("filtered out: ")
        .unwrap_or_else(|| panic!("no filter count in {stderr:?}"));
    stderr[at + 14..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// A classic pcap's Ethernet frames re-framed as Linux cooked capture
/// (`LINKTYPE_LINUX_SLL`, 113): the 16-byte SLL header carries the
/// EtherType, the IP packet follows. Frames with VLAN tags are not in the
/// inputs used.
fn to_linux_sll(eth: &Path, out: &Path) {
    let b = std::fs::read(eth).unwrap();
    let le = match b[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => panic!("{} is not a classic pcap", eth.display()),
    };
    let u32_at = |at: usize| {
        let w: [u8; 4] = b[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let put = |v: &mut Vec<u8>, x: u32| {
        v.extend_from_slice(&if le { x.to_le_bytes() } else { x.to_be_bytes() })
    };
    let mut o = b[..20].to_vec();
    put(&mut o, 113);
    let mut at = 24;
    while at + 16 <= b.len() {
        let (sec, frac, incl, orig) = (u32_at(at), u32_at(at + 4), u32_at(at + 8), u32_at(at + 12));
        let frame = &b[at + 16..at + 16 + incl as usize];
        at += 16 + incl as usize;
        assert!(frame.len() >= 14, "short frame");
        put(&mut o, sec);
        put(&mut o, frac);
        put(&mut o, incl + 2);
        put(&mut o, orig + 2);
        o.extend_from_slice(&[0, 0, 0, 1, 0, 6]); // to us, ARPHRD_ETHER, 6
        o.extend_from_slice(&frame[6..12]); // source MAC
        o.extend_from_slice(&[0, 0]);
        o.extend_from_slice(&frame[12..14]); // EtherType
        o.extend_from_slice(&frame[14..]);
    }
    std::fs::write(out, o).unwrap();
}

#[test]
fn filter_keeps_what_tcpdump_keeps() {
    if !require(have("tcpdump"), "tcpdump is not installed") {
        return;
    }
    let tmp = TempDir::new("filter-sll");
    let sll_v4 = tmp.0.join("synth_npm_v4.sll.pcap");
    let sll_v6 = tmp.0.join("synth_npm_v6.sll.pcap");
    to_linux_sll(&corpus("synth_npm_v4.pcap"), &sll_v4);
    to_linux_sll(&corpus("synth_npm_v6.pcap"), &sll_v6);
    let ip = [
        "tcp",
        "udp",
        "port 53",
        "tcp and dst port 80",
        "ip6",
        "not tcp",
        "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0",
        "greater 200",
        "icmp or icmp6",
        "ip[8] < 64 or ip6[7] < 64",
    ];
    let ethernet_only = ["vlan", "vlan and tcp", "mpls", "ether broadcast or arp"];
    let mut cases: Vec<(PathBuf, &str)> = Vec::new();
    for f in [
        "synth_npm_v4.pcap",
        "synth_npm_v6.pcap",
        "synth_npm_vlan.pcap",
        "zeek_mixed-vlan-mpls.pcap",
        "pk_ipv6_fragments.pcapng",
        "zeek_dns-two-responses.pcap",
        "ipfixprobe_mixed.pcap",
        "zeek_http-bro.org.pcap",
        "xdprobe_ms-clock.pcapng",
    ] {
        for e in ip.iter().chain(&ethernet_only) {
            cases.push((corpus(f), e));
        }
    }
    for f in [corpus("td_LINKTYPE_RAW_ipv4.pcap"), sll_v4, sll_v6] {
        for e in ip {
            cases.push((f.clone(), e));
        }
    }
    // Expressions that split some capture: kept some packets, not all.
    let mut split: Vec<&str> = Vec::new();
    for (file, expr) in &cases {
        let what = format!("{} {expr:?}", file.display());
        let (all, rc, stderr) = records(file, &[]);
        assert_eq!(rc, 0, "{what}: {stderr}");
        let total = frames(&stderr);
        let (want, kept) = via_tcpdump(file, expr);
        let (got, rc, stderr) = records(file, &["--filter", expr, "--workers", "1"]);
        assert_eq!(rc, 0, "{what}: {stderr}");
        assert_eq!(got, want, "{what}: records differ from tcpdump's selection");
        // Several workers: the worker reading filters before it steers.
        let (got2, rc, stderr2) = records(file, &["--filter", expr, "--workers", "2"]);
        assert_eq!((rc, &got2), (0, &got), "{what} on 2 workers: {stderr2}");
        assert_eq!(
            filtered_out(&stderr2),
            filtered_out(&stderr),
            "{what} on 2 workers"
        );
        assert_eq!(frames(&stderr), kept, "{what}: frames kept");
        assert_eq!(
            filtered_out(&stderr),
            total - kept,
            "{what}: filtered count"
        );
        // The words after FILE, as tcpdump takes them, are the same filter.
        let words: Vec<&str> = expr.split(' ').collect();
        let (got_words, rc, _) = records(file, &words);
        assert_eq!((rc, &got_words), (0, &got), "{what} as trailing words");
        if kept > 0 && kept < total {
            split.push(expr);
            assert_ne!(got, all, "{what}: a partial selection changed no record");
        }
    }
    // The cases discriminate: every expression keeps some packets and
    // rejects others of at least one capture.
    for e in ip.iter().chain(&ethernet_only) {
        assert!(split.contains(e), "{e:?} split no capture's packets");
    }
}

#[test]
fn a_bad_filter_is_a_clear_error_with_exit_2() {
    let f = corpus("synth_npm_v4.pcap");
    for (expr, says) in [
        ("tcp portt 80", "syntax error"),
        ("host", "syntax error"),
        ("udp port 99999", "port"),
    ] {
        let (recs, rc, stderr) = records(&f, &["--filter", expr]);
        assert_eq!(rc, 2, "{expr:?}: {stderr}");
        assert!(recs.is_empty(), "{expr:?}: records written");
        assert!(
            stderr.contains(expr) && stderr.contains(says),
            "{expr:?}: unclear message {stderr:?}"
        );
    }
    // Valid syntax that means nothing on this capture's link layer.
    let (recs, rc, stderr) = records(
        &corpus("td_LINKTYPE_RAW_ipv4.pcap"),
        &["--filter", "ether host 02:00:00:00:00:01"],
    );
    assert_eq!(rc, 2, "{stderr}");
    assert!(recs.is_empty());
    assert!(stderr.contains("link type 101"), "{stderr}");
}

#[test]
fn stdin_from_tcpdump_reads_as_the_file() {
    if !require(have("tcpdump"), "tcpdump is not installed") {
        return;
    }
    for f in ["zeek_http-bro.org.pcap", "pk_tcp_retransmissions.pcapng"] {
        let file = corpus(f);
        let (want, rc, stderr) = records(&file, &[]);
        assert_eq!(rc, 0, "{stderr}");
        assert!(!want.is_empty());
        let (got, _) = via_tcpdump(&file, "");
        assert_eq!(got, want, "{f} through tcpdump -w - | xdprobe pcap -");
    }
}

#[test]
fn no_progress_output_when_stderr_is_not_a_terminal() {
    let out = xdprobe()
        .args(["pcap"])
        .arg(corpus("zeek_ssh.pcap"))
        .args(["--format", "none"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "stderr: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `xdprobe pcap FILE --format none ARGS` on a pseudo-terminal
/// (util-linux `script`) and returns what the terminal received.
fn on_a_terminal(args: &str) -> String {
    let cmd = format!(
        "{} pcap {} --format none {args}",
        env!("CARGO_BIN_EXE_xdprobe"),
        corpus("zeek_ssh.pcap").display()
    );
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script");
    drop(child.stdin.take().map(|mut s| s.flush()));
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn progress_bar_on_a_terminal() {
    if !require(have("script"), "script (util-linux) is not installed") {
        return;
    }
    let tty = on_a_terminal("");
    assert!(
        tty.contains("ETA") && tty.contains("MiB"),
        "no progress bar on the terminal: {tty:?}"
    );
    let quiet = on_a_terminal("--no-progress");
    assert!(!quiet.contains("ETA"), "--no-progress drew: {quiet:?}");
}
