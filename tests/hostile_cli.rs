//! The outside robustness pass, at the command line (findings 1, 2, 3, 5,
//! 6 and 7 of issue 12): each case is the input the pass used, and the
//! assertion is what an operator sees.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;

const S: u64 = 1_000_000_000;
const T0: u64 = 1_700_000_000 * S;

/// Ethernet + IPv4 + UDP 192.0.2.1:`sport` → 192.0.2.2:53 with `payload`.
fn udp_frame(sport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    let total = (20 + 8 + payload.len()) as u16;
    f.extend_from_slice(&[
        0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
    ]);
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&53u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// A first fragment (MF set, offset 0) of datagram `id` from 192.0.2.1.
fn first_fragment(id: u16) -> Vec<u8> {
    let mut f = udp_frame(5353, &[0; 16]);
    f[18..20].copy_from_slice(&id.to_be_bytes());
    f[20] = 0x20; // more fragments
    f
}

/// Classic pcap, nanosecond magic, Ethernet; `(ns timestamp, frame)`.
fn pcap_ns(path: &Path, packets: &[(u64, Vec<u8>)]) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    b.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&65535u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for (ts, f) in packets {
        b.extend_from_slice(&((ts / S) as u32).to_le_bytes());
        b.extend_from_slice(&((ts % S) as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

/// pcapng, one Ethernet interface with `if_tsresol` = `tsresol`; packets
/// carry raw 64-bit timestamps.
fn pcapng(path: &Path, tsresol: u8, packets: &[(u64, Vec<u8>)]) {
    fn block(out: &mut Vec<u8>, ty: u32, body: &[u8]) {
        let len = (12 + body.len().next_multiple_of(4)) as u32;
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
        out.resize(out.len() + body.len().next_multiple_of(4) - body.len(), 0);
        out.extend_from_slice(&len.to_le_bytes());
    }
    let mut b = Vec::new();
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&u64::MAX.to_le_bytes());
    block(&mut b, 0x0a0d_0d0a, &shb);
    let mut idb = vec![1, 0, 0, 0, 0, 0, 0, 0];
    idb.extend_from_slice(&[9, 0, 1, 0, tsresol, 0, 0, 0, 0, 0, 0, 0]);
    block(&mut b, 1, &idb);
    for (ts, f) in packets {
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(*ts as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(f);
        block(&mut b, 6, &epb);
    }
    std::fs::write(path, b).unwrap();
}

fn run(args: &[&str], file: &Path) -> (Option<i32>, Vec<serde_json::Value>, String) {
    let out = xdprobe().arg("pcap").arg(file).args(args).output().unwrap();
    (
        out.status.code(),
        parse_lines(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn timestamps_past_the_range_are_a_named_drop_not_a_wrap() {
    let dir = TempDir::new("hostile-ts");
    let a = udp_frame(40000, b"a");
    let b = udp_frame(40001, b"b");
    // Each file: flow A, a packet stamped at the end of time, flow A again
    // one second later, flow B. Before: the bogus packet printed
    // start_us = end_us = 0, expired every open flow as idle and left its
    // own flow ending before it started.
    let files: Vec<(PathBuf, &str)> = vec![
        (dir.0.join("ns.pcapng"), "pcapng ns, u64::MAX"),
        (dir.0.join("s.pcapng"), "pcapng 10^0, u64::MAX"),
        (dir.0.join("bin.pcapng"), "pcapng 2^0, u64::MAX"),
        (dir.0.join("frac.pcap"), "classic ns, fraction 1.5e9"),
    ];
    pcapng(
        &files[0].0,
        9,
        &[
            (T0, a.clone()),
            (u64::MAX - 100, b.clone()),
            (T0 + S, a.clone()),
        ],
    );
    pcapng(
        &files[1].0,
        0,
        &[
            (T0 / S, a.clone()),
            (u64::MAX, b.clone()),
            (T0 / S + 1, a.clone()),
        ],
    );
    pcapng(
        &files[2].0,
        0x80,
        &[
            (T0 / S, a.clone()),
            (u64::MAX, b.clone()),
            (T0 / S + 1, a.clone()),
        ],
    );
    pcap_ns(
        &files[3].0,
        &[
            (T0, a.clone()),
            (T0 + S / 2, b.clone()),
            (T0 + S, a.clone()),
        ],
    );
    // The classic fraction ≥ 1e9 needs a raw edit: second record's fraction.
    let mut raw = std::fs::read(&files[3].0).unwrap();
    let second = 24 + 16 + a.len();
    raw[second + 4..second + 8].copy_from_slice(&1_500_000_000u32.to_le_bytes());
    std::fs::write(&files[3].0, raw).unwrap();

    for (file, what) in &files {
        let (code, recs, stderr) = run(&["--stats"], file);
        assert_eq!(code, Some(0), "{what}: {stderr}");
        assert!(
            stderr.contains("dropped timestamp_out_of_range: 1"),
            "{what}: {stderr}"
        );
        assert_eq!(
            recs.len(),
            1,
            "{what}: the bogus packet ended or made a flow: {recs:?}"
        );
        let r = &recs[0];
        assert_eq!(r["server_port"], 53);
        assert_eq!(r["c2s"]["packets"], 2, "{what}: flow A split: {r}");
        assert_eq!(r["start_us"].as_u64(), Some(T0 / 1_000), "{what}");
        assert_eq!(r["end_us"].as_u64(), Some((T0 + S) / 1_000), "{what}");
    }
}

/// The counters of the last exporter-statistics options record (template
/// 258) in an RFC 5655 IPFIX file, by (enterprise number, element ID).
fn last_options_record(file: &Path) -> std::collections::HashMap<(u32, u16), u64> {
    let b = std::fs::read(file).unwrap();
    let u16_at = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
    let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let mut fields: Vec<(u32, u16, u16)> = Vec::new();
    let mut last = std::collections::HashMap::new();
    let mut msg = 0;
    while msg + 16 <= b.len() {
        let end = msg + usize::from(u16_at(msg + 2));
        let mut set = msg + 16;
        while set + 4 <= end {
            let (id, len) = (u16_at(set), usize::from(u16_at(set + 2)));
            if id == 3 && u16_at(set + 4) == 258 {
                // Options template 258: field count, scope count, specifiers.
                let count = usize::from(u16_at(set + 6));
                let mut at = set + 10;
                fields.clear();
                for _ in 0..count {
                    let (fid, flen) = (u16_at(at), u16_at(at + 2));
                    if fid & 0x8000 != 0 {
                        fields.push((u32_at(at + 4), fid & 0x7fff, flen));
                        at += 8;
                    } else {
                        fields.push((0, fid, flen));
                        at += 4;
                    }
                }
            } else if id == 258 {
                let mut at = set + 4;
                for &(pen, fid, flen) in &fields {
                    let v = b[at..at + usize::from(flen)]
                        .iter()
                        .fold(0u64, |a, &x| a << 8 | u64::from(x));
                    last.insert((pen, fid), v);
                    at += usize::from(flen);
                }
            }
            set += len.max(4);
        }
        msg = end.max(msg + 16);
    }
    last
}

#[test]
fn floods_are_bounded_and_counted_in_stats_and_options_records() {
    let dir = TempDir::new("hostile-frag");
    let file = dir.0.join("frags.pcap");
    // 20 000 first fragments of one flow (new datagram IDs), then 50 small
    // flows through a table of 8.
    let mut pkts: Vec<(u64, Vec<u8>)> = (0..20_000u64)
        .map(|i| (T0 + i * 1_000, first_fragment(i as u16)))
        .collect();
    pkts.extend((0..50u64).map(|i| (T0 + S + i, udp_frame(20_000 + i as u16, b"x"))));
    pcap_ns(&file, &pkts);
    let ipfix = dir.0.join("out.ipfix");
    let url = format!("file://{}", ipfix.display());
    let (code, recs, stderr) = run(&["--stats", "--capacity", "8", "--export", &url], &file);
    assert_eq!(code, Some(0), "{stderr}");
    // The fragment table holds 4096 datagrams: the rest pushed the oldest
    // out, every one counted (before: a sweep of the whole table per
    // fragment, and the refusals reported nowhere).
    assert_eq!(recs.len(), 51);
    assert_eq!(
        recs.iter()
            .map(|r| r["c2s"]["packets"].as_u64().unwrap())
            .sum::<u64>(),
        20_050
    );
    assert!(
        stderr.contains("fragment table: 15904 evicted (table full), 0 expired"),
        "{stderr}"
    );
    assert!(stderr.contains(" evicted 43 "), "{stderr}");
    // The same counts in the last IPFIX options record (PEN 32473).
    let opts = last_options_record(&ipfix);
    assert_eq!(opts.get(&(32473, 1070)), Some(&43), "{opts:?}");
    assert_eq!(opts.get(&(32473, 1071)), Some(&15_904), "{opts:?}");
}

#[test]
fn malformed_lengths_count_what_the_frame_holds() {
    let dir = TempDir::new("hostile-len");
    let file = dir.0.join("lengths.pcap");
    // A 54-byte frame whose IPv4 total length says 65535 (TCP ACK).
    let mut v4 = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    v4.extend_from_slice(&[
        0x45, 0, 0xff, 0xff, 0, 1, 0, 0, 64, 6, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
    ]);
    v4.extend_from_slice(&[
        0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    assert_eq!(v4.len(), 54);
    // An 82-byte IPv6 frame: payload length 0, jumbo option 0xFFFFFFFF, UDP.
    let mut v6 = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    v6.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, 0, 64]);
    v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    v6.extend_from_slice(&[17, 0, 0xc2, 4, 0xff, 0xff, 0xff, 0xff]);
    v6.extend_from_slice(&[0x13, 0x88, 0, 53, 0, 0, 0, 0]);
    v6.resize(82, 0);
    pcap_ns(&file, &[(T0, v4), (T0 + S, v6)]);
    let (code, recs, stderr) = run(&["--stats"], &file);
    assert_eq!(code, Some(0), "{stderr}");
    let mut bytes: Vec<u64> = recs
        .iter()
        .map(|r| r["c2s"]["bytes"].as_u64().unwrap() + r["s2c"]["bytes"].as_u64().unwrap())
        .collect();
    // Several workers (the default) emit the two flows in either order.
    bytes.sort_unstable();
    // What the frames held after the Ethernet header, not 65535 / 4294967295.
    assert_eq!(bytes, [40, 68], "{recs:?}");
    assert!(
        stderr.contains("IP length beyond the frame (bytes counted as the frame held): 2"),
        "{stderr}"
    );
}

#[test]
fn capacity_is_bounded_and_memory_checked_before_allocating() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo.pcap");
    let (code, _, stderr) = run(&["--capacity", "0"], &demo);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("0 is not in 1..=67108864"), "{stderr}");

    let cfg = xdprobe_dataplane::FlowConfig {
        capacity: 1 << 26,
        ..Default::default()
    };
    let mut need = xdprobe::budget::Estimate::default();
    need.flow_tables(1, &cfg);
    let fits = need.check(xdprobe::budget::available()).is_ok();
    if !require(
        !fits,
        "this machine has room for 2^26 flows: nothing to refuse",
    ) {
        return;
    }
    // Before: "memory allocation of 27917287424 bytes failed", a backtrace
    // and SIGABRT.
    let (code, recs, stderr) = run(&["--capacity", "67108864"], &demo);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(recs.is_empty());
    assert!(
        stderr.contains("not enough memory: this configuration needs about"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("memory allocation") && !stderr.contains("backtrace"),
        "{stderr}"
    );

    // check-config estimates the flow tables too (before: OK).
    let dir = TempDir::new("hostile-mem");
    let toml = dir.0.join("big.toml");
    std::fs::write(
        &toml,
        "[[interface]]\nname = \"lo\"\nqueues = [{ queue = 0, core = 0 }]\n\n[flow]\ncapacity = 67108864\n",
    )
    .unwrap();
    let out = xdprobe().arg("check-config").arg(&toml).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("big.toml:6:1: flow.capacity: not enough memory"),
        "{stderr}"
    );
}

#[test]
fn streams_and_odd_paths_read_or_fail_clearly() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo.pcap");
    let bytes = std::fs::read(&demo).unwrap();
    let (_, want, _) = run(&["--format", "json"], &demo);
    assert!(!want.is_empty());
    let piped = |path: &str| {
        let mut child = xdprobe()
            .args(["pcap", path, "--format", "json"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let data = bytes.clone();
        let writer = std::thread::spawn(move || {
            // Small writes: the reader sees a pipe, not a file.
            for chunk in data.chunks(1000) {
                if stdin.write_all(chunk).is_err() {
                    break;
                }
            }
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        (
            out.status.code(),
            parse_lines(&out.stdout),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for path in ["-", "/dev/stdin"] {
        let (code, recs, stderr) = piped(path);
        assert_eq!(code, Some(0), "{path}: {stderr}");
        assert_eq!(recs, want, "{path}");
    }
    // A FIFO.
    let dir = TempDir::new("hostile-fifo");
    let fifo = dir.0.join("cap.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let feeder = {
        let (fifo, data) = (fifo.clone(), bytes.clone());
        std::thread::spawn(move || std::fs::write(fifo, data).unwrap())
    };
    let (code, recs, stderr) = run(&["--format", "json"], &fifo);
    feeder.join().unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(recs, want);
    // A directory and an empty device: a sentence, not "No such device".
    for (path, msg) in [
        (dir.0.as_path(), "is a directory, not a capture file"),
        (
            Path::new("/dev/null"),
            "empty input: no capture file header",
        ),
    ] {
        let (code, recs, stderr) = run(&[], path);
        assert_eq!(code, Some(1), "{}: {stderr}", path.display());
        assert!(recs.is_empty());
        assert!(stderr.contains(msg), "{}: {stderr}", path.display());
        assert!(!stderr.contains("os error 19"), "{stderr}");
    }
}

#[test]
fn udp_export_to_a_closed_port_counts_nothing_as_sent_and_logs_plainly() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo.pcap");
    // A port nothing listens on: bound, then released.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("udp://127.0.0.1:{port}");
    let (code, recs, stderr) = run(&["--export", &url, "--stats"], &demo);
    assert_eq!(code, Some(0), "{stderr}");
    let export = stderr
        .lines()
        .find(|l| l.starts_with("export: "))
        .expect("export line");
    // Before: about half the records reported as sent.
    let want = format!(
        "{url}: 0 messages, 0 records, 0 octets, {} not sent",
        recs.len()
    );
    assert!(export.contains(&want), "{export}\n  lacks {want}");
    assert!(stderr.contains("collector refused datagrams"), "{stderr}");
    // stderr is a pipe here: no colour escapes in the log lines.
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

#[test]
fn the_tcp_buffer_default_is_the_documented_one() {
    // Before: the exporter's own default was 262144 (pcap --export), the
    // config's and the docs' 100000.
    let cfg = xdprobe_config::parse_with(
        "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 0 }]\n",
        "t.toml",
        &xdprobe_config::Environment::unchecked(),
    )
    .unwrap();
    assert_eq!(cfg.export.tcp_buffer_records, 100_000);
    assert_eq!(
        xdprobe_exporter::ExporterConfig::default().tcp_buffer_records,
        100_000
    );
}

#[test]
fn a_packet_stamped_far_back_never_moves_a_flows_start() {
    let dir = TempDir::new("hostile-ts-back");
    let file = dir.0.join("back.pcap");
    let a = udp_frame(40000, b"a");
    // Flow A over 3 ms, one of its packets stamped 0 (1970) in between.
    // Before: the flow started at 0, a 53-year flow.
    let pkts = vec![
        (T0, a.clone()),
        (T0 + 1_000_000, a.clone()),
        (0, a.clone()),
        (T0 + 3_000_000, a.clone()),
    ];
    pcap_ns(&file, &pkts);
    let (code, recs, stderr) = run(&["--stats"], &file);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["start_us"].as_u64(), Some(T0 / 1000), "{}", recs[0]);
    assert_eq!(recs[0]["end_us"].as_u64(), Some((T0 + 3_000_000) / 1000));
    assert_eq!(recs[0]["c2s"]["packets"].as_u64(), Some(3), "{}", recs[0]);
    assert!(
        stderr.contains("1 dropped as strays over 10 s off"),
        "{stderr}"
    );
}
