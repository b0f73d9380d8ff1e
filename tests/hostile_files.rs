//! A hostile local user and a full disk: the files xdprobe writes as root
//! are never reached through a symlink another user planted, a config file
//! others can change is refused as root, and a file export on a full disk
//! keeps only whole messages, says exactly how many, and fails the run.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{TempDir, xdprobe};
use xdprobe_test_support::collect::{split_ipfix, strip_domain_name};
use xdprobe_test_support::flows::write_udp_flows_pcap;
use xdprobe_test_support::{require, require_root};

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name)
}

/// A scratch directory anyone may write to, sticky, like /tmp.
fn shared_dir(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

/// `ln -s target link` as user nobody.
fn plant_as_nobody(target: &Path, link: &Path) {
    let st = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "ln",
            "-s",
        ])
        .arg(target)
        .arg(link)
        .status()
        .expect("setpriv");
    assert!(st.success(), "planting {}", link.display());
    let md = std::fs::symlink_metadata(link).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&md), 65534);
}

#[test]
fn symlinks_planted_by_nobody_are_not_followed() {
    if !require_root!()
        || !require(
            common::have("setpriv"),
            "setpriv (util-linux) to act as user nobody",
        )
    {
        return;
    }
    let d = shared_dir("planted");
    let precious = d.0.join("precious");
    std::fs::write(&precious, b"root's data\n").unwrap();
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o600)).unwrap();

    // pcap --export file://: refused, naming the path; the target intact.
    let ipfix = d.0.join("out.ipfix");
    plant_as_nobody(&precious, &ipfix);
    let out = xdprobe()
        .arg("pcap")
        .arg(corpus("synth_npm_v4.pcap"))
        .args(["--format", "none", "--export"])
        .arg(format!("file://{}", ipfix.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "followed the symlink: {err}");
    assert!(err.contains(ipfix.to_str().unwrap()), "{err}");
    assert!(err.contains("symbolic link"), "{err}");

    // The manager's JSON and its file:// collector, from its config.
    let json = d.0.join("manager.jsonl");
    let coll = d.0.join("hosts.ipfix");
    plant_as_nobody(&precious, &json);
    plant_as_nobody(&precious, &coll);
    let cfg_dir = TempDir::new("planted-cfg");
    let cfg = cfg_dir.0.join("m.toml");
    for (json_key, coll_key, named) in [
        (
            json.display().to_string(),
            d.0.join("ok.ipfix").display().to_string(),
            &json,
        ),
        (
            cfg_dir.0.join("ok.jsonl").display().to_string(),
            coll.display().to_string(),
            &coll,
        ),
    ] {
        std::fs::write(
            &cfg,
            format!(
                "[manager]\ninsecure = true\nlisten = \"127.0.0.1:0\"\njson = \"{json_key}\"\n[export]\ncollectors = [\"file://{coll_key}\"]\n[metrics]\nenabled = false\n"
            ),
        )
        .unwrap();
        let out = xdprobe()
            .args(["manager", "-c"])
            .arg(&cfg)
            .args(["--duration", "1s"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "followed {}: {err}", named.display());
        assert!(err.contains(named.to_str().unwrap()), "{err}");
    }
    assert_eq!(std::fs::read(&precious).unwrap(), b"root's data\n");
}

#[test]
fn a_config_others_can_change_is_refused_as_root() {
    if !require_root!() {
        return;
    }
    let d = TempDir::new("strict");
    std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let m = d.0.join("manager.toml");
    std::fs::write(&m, "[manager]\ninsecure = true\n").unwrap();
    std::fs::set_permissions(&m, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = xdprobe()
        .args(["manager", "--check", "-c"])
        .arg(&m)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("writable by everyone (mode 0666)"), "{err}");
    assert!(err.contains("XDPROBE_ALLOW_INSECURE_CONFIG=1"), "{err}");
    // The documented override.
    let out = xdprobe()
        .args(["manager", "--check", "-c"])
        .arg(&m)
        .env("XDPROBE_ALLOW_INSECURE_CONFIG", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The probe: `run` refuses before touching an interface; check-config
    // warns and still checks.
    let p = d.0.join("probe.toml");
    std::fs::write(
        &p,
        "[[interface]]\nname = \"xdprobe-nosuch0\"\nqueues = [{ queue = 0, core = 0 }]\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o664)).unwrap();
    let out = xdprobe().args(["run", "-c"]).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("writable by its group"), "{err}");
    let out = xdprobe()
        .args(["check-config", "--no-machine-check"])
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning: the file is writable by its group"),
        "{err}"
    );
}

/// Unmounts the scratch tmpfs even when the test fails.
struct Mount(PathBuf);

impl Mount {
    /// A 1 MiB tmpfs mounted on `mnt` (made if missing), unmounted on drop.
    fn tmpfs_1m(mnt: &Path) -> Mount {
        std::fs::create_dir_all(mnt).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "xdprobe-test"])
            .arg(mnt)
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs");
        Mount(mnt.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Decodes every message with the `ipfix` crate (in a thread: a hang
/// fails the test); the data records.
fn ipfix_records(msgs: Vec<Vec<u8>>) -> usize {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut c = ipfix::IpfixConsumer::new();
        let p = ipfix::IpfixPrinter::new();
        let mut n = 0;
        for m in &msgs {
            let (m, _) = strip_domain_name(m);
            let sets = c.parse_message(&m).expect("ipfix crate rejected a message");
            for s in sets {
                // Flow records (not the statistics options record).
                n += p
                    .print_json(s)
                    .iter()
                    .filter(|j| j.contains("sourceIPv4Address"))
                    .count();
            }
        }
        let _ = tx.send(n);
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("ipfix crate hung")
}

fn field(text: &str, after: &str) -> u64 {
    let i = text
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} in {text}"));
    text[i + after.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("number after {after:?} in {text}"))
}

#[test]
fn a_file_export_on_a_full_disk_keeps_whole_messages_and_fails_the_run() {
    if !require_root!() {
        return;
    }
    let d = TempDir::new("fulldisk");
    let pcap = d.0.join("flows.pcap");
    // 20,000 biflow records: about 5 MB of IPFIX for a 1 MiB disk.
    write_udp_flows_pcap(&pcap, 20_000, 10);
    let mnt = d.0.join("mnt");
    let _guard = Mount::tmpfs_1m(&mnt);
    let file = mnt.join("out.ipfix");
    let out = xdprobe()
        .arg("pcap")
        .arg(&pcap)
        // Without the application label: its element is a
        // variable-length string (RFC 7011 §7), which the `ipfix` crate
        // that checks every message below cannot read.
        .args(["--format", "none", "--stats", "--no-l7", "--export"])
        .arg(format!("file://{}", file.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a lost export must fail the run: {err}"
    );
    let line = err
        .lines()
        .find(|l| l.contains("export to "))
        .unwrap_or_else(|| panic!("no failure line: {err}"));
    let written = field(line, "failed: ");
    let lost = field(line, "written, ");
    let bytes = std::fs::read(&file).unwrap();
    let msgs = split_ipfix(&bytes);
    let whole: usize = msgs.iter().map(Vec::len).sum();
    eprintln!(
        "1 MiB disk: file {} bytes, {} messages in it; xdprobe says {written} written, {lost} lost",
        bytes.len(),
        msgs.len()
    );
    assert!(lost > 0, "{err}");
    assert_eq!(whole, bytes.len(), "the file ends inside a message");
    assert!(msgs.iter().all(|m| m[..2] == [0, 10]), "not IPFIX messages");
    assert_eq!(msgs.len() as u64, written, "messages written, as counted");
    // Every message decodes, and the records are those counted as sent.
    let export = err
        .lines()
        .find(|l| l.starts_with("export: "))
        .unwrap_or_else(|| panic!("no export line: {err}"));
    let records = field(export, "messages, ");
    let not_sent = field(export, "octets, ");
    assert_eq!(records + not_sent, 20_000, "{export}");
    assert_eq!(ipfix_records(msgs) as u64, records, "{export}");
}

fn record(i: u32) -> xdprobe_dataplane::FlowRecord {
    use xdprobe_dataplane::record::DirStats;
    use xdprobe_dataplane::{EndReason, FlowRecord, Timestamp};
    let d = DirStats {
        packets: 10,
        bytes: 1000,
        ..DirStats::default()
    };
    FlowRecord {
        client_addr: [192, 0, 2, 1].into(),
        client_port: i as u16,
        server_addr: [198, 51, 100, 2].into(),
        server_port: 443,
        start: Timestamp::from_nanos(1_700_000_000_000_000_000 + u64::from(i)),
        end: Timestamp::from_nanos(1_700_000_001_000_000_000 + u64::from(i)),
        end_reason: EndReason::Idle,
        c2s: d,
        s2c: d,
        ..FlowRecord::blank(6)
    }
}

/// The daemon's exporter on a full disk: it goes on (the next write after
/// room is made succeeds), and the metrics endpoint's counters say what
/// was lost while it ran.
#[test]
fn a_running_export_survives_a_full_disk_and_counts_it_on_the_metrics() {
    if !require_root!() {
        return;
    }
    use xdprobe_exporter::{CollectorSpec, Exporter, ExporterConfig};
    let d = TempDir::new("fulldisk-live");
    let mnt = d.0.join("mnt");
    let _guard = Mount::tmpfs_1m(&mnt);
    // Ballast to free later.
    std::fs::write(mnt.join("ballast"), vec![0u8; 256 << 10]).unwrap();
    let url = format!("file://{}", mnt.join("live.ipfix").display());
    let ex = Exporter::spawn(ExporterConfig {
        collectors: vec![CollectorSpec::parse(&url).unwrap()],
        ..ExporterConfig::default()
    })
    .unwrap();
    let live = ex.live_stats();
    let tx = ex.sender();
    let registry = xdprobe::prom::Metrics::new();
    registry.register(xdprobe::daemon::export::ExportCollector(live.clone()));
    let failed = || {
        live.lock()
            .unwrap()
            .collectors
            .first()
            .map_or(0, |c| c.failed_messages)
    };
    let mut i = 0u32;
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while failed() == 0 {
        for _ in 0..500 {
            let _ = tx.send(record(i));
            i += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(std::time::Instant::now() < end, "the disk never filled");
    }
    let text = registry.render().unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("xdprobe_export_messages_failed_total{"))
        .unwrap_or_else(|| panic!("no failure counter in\n{text}"));
    assert!(line.contains(&url) && !line.ends_with(" 0"), "{line}");
    // Room again: the running exporter writes again.
    std::fs::remove_file(mnt.join("ballast")).unwrap();
    let written = live.lock().unwrap().collectors[0].messages;
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while live.lock().unwrap().collectors[0].messages == written {
        for _ in 0..50 {
            let _ = tx.send(record(i));
            i += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            std::time::Instant::now() < end,
            "no write after room was made"
        );
    }
    drop(tx);
    let stats = ex.shutdown().unwrap();
    let c = &stats.collectors[0];
    eprintln!("running export on a 1 MiB disk: {c}; metrics: {line}");
    let bytes = std::fs::read(mnt.join("live.ipfix")).unwrap();
    let msgs = split_ipfix(&bytes);
    assert_eq!(msgs.iter().map(Vec::len).sum::<usize>(), bytes.len());
    assert_eq!(msgs.len() as u64, c.messages);
}
