//! Wireshark's IPFIX dissector (tshark) decodes the manager's host-stack
//! records: templates found, no malformed set, the 5-tuple, NTP
//! microsecond times, the enterprise values and the agent names as sent.

mod common;

use std::net::IpAddr;

use common::*;
use xdprobe_exporter::encode::host::{HostEncoder, HostRecord, SegmentStats};
use xdprobe_exporter::ie::host;
use xdprobe_test_support::collectors::tshark_cflow;

fn rec(i: u16, v6: bool) -> HostRecord {
    let (src, dst): (IpAddr, IpAddr) = if v6 {
        (
            "2001:db8:1::1".parse().unwrap(),
            "2001:db8:1::2".parse().unwrap(),
        )
    } else {
        (
            "198.51.100.1".parse().unwrap(),
            "198.51.100.2".parse().unwrap(),
        )
    };
    let mut segments = [None; 8];
    for (k, s) in segments.iter_mut().enumerate() {
        if k != 4 {
            *s = Some(SegmentStats {
                min_ns: 1_000 * (k as u64 + 1),
                mean_ns: 1_500 * (k as u64 + 1),
                p50_ns: 1_400 * (k as u64 + 1),
                p99_ns: 2_000 * (k as u64 + 1),
                max_ns: 3_000 * (k as u64 + 1),
            });
        }
    }
    HostRecord {
        src: Some(src),
        sport: 40000 + i,
        dst: Some(dst),
        dport: 5201,
        start_us: 1_700_000_000_123_456 + u64::from(i),
        end_us: 1_700_000_001_000_000,
        end_reason: 3,
        record_seq: u32::from(i),
        segments,
        complete: 100,
        incomplete: 1,
        clock_uncertainty_ns: Some(6_500),
        flags: 0b111,
        sender_agent: format!("agent-a{i}"),
        receiver_agent: "agent-b".into(),
    }
}

#[test]
fn tshark_decodes_host_stack_records() {
    if !require("tshark") {
        return;
    }
    let mut e = HostEncoder::new(32473, 7, 1472);
    let recs: Vec<HostRecord> = (0..30).map(|i| rec(i, i % 2 == 1)).collect();
    let mut msgs = vec![e.templates(1_700_000_000)];
    msgs.extend(e.records(&recs, 1_700_000_000));
    let port = 4790;
    let pcap =
        std::env::temp_dir().join(format!("xdprobe-host-tshark-{}.pcap", std::process::id()));
    write_udp_pcap(&pcap, port, &msgs);
    let verbose = tshark_cflow(&pcap, port, &["-V"]);
    if std::env::var("XDPROBE_DUMP").is_ok_and(|d| d == "host") {
        println!("{verbose}");
    }
    let _ = std::fs::remove_file(&pcap);
    for bad in ["Malformed", "no template found", "[Expert Info (Warning"] {
        assert!(!verbose.contains(bad), "tshark reports {bad}");
    }
    let ports: Vec<String> = verbose
        .lines()
        .filter_map(|l| l.trim().strip_prefix("SrcPort: "))
        .map(str::to_owned)
        .collect();
    // IPv4 records first, then IPv6, each in the order given.
    let want: Vec<String> = recs
        .iter()
        .filter(|r| matches!(r.src, Some(IpAddr::V4(_))))
        .chain(recs.iter().filter(|r| matches!(r.src, Some(IpAddr::V6(_)))))
        .map(|r| r.sport.to_string())
        .collect();
    assert_eq!(ports, want, "every record");
    // The first record's enterprise values, as tshark shows them (it
    // knows no names under the documentation PEN: type and hex value).
    let first: Vec<&str> = verbose
        .lines()
        .skip_while(|l| !l.trim().starts_with("SrcPort: 40000"))
        .take_while(|l| !l.trim().starts_with("Flow 2"))
        .collect();
    let value = |id: u16| -> String {
        let needle = format!("Type {id}: Value (hex bytes): ");
        first
            .iter()
            .find_map(|l| l.split_once(&needle).map(|(_, v)| v.replace(' ', "")))
            .unwrap_or_else(|| panic!("no element {id} in {first:#?}"))
    };
    let r = &recs[0];
    let t4 = r.segments[3].unwrap();
    assert_eq!(
        value(host::segment(4, host::Stat::P50)),
        format!("{:08x}", t4.p50_ns)
    );
    assert_eq!(
        value(host::segment(4, host::Stat::Max)),
        format!("{:08x}", t4.max_ns)
    );
    assert_eq!(
        value(host::segment(1, host::Stat::Min)),
        format!("{:08x}", 1_000)
    );
    // T5 was not measured.
    assert_eq!(value(host::segment(5, host::Stat::Mean)), "ffffffff");
    assert_eq!(value(host::COMPLETE), format!("{:08x}", 100));
    assert_eq!(value(host::CLOCK_UNCERTAINTY), format!("{:08x}", 6_500));
    assert_eq!(value(host::FLAGS), "07");
    let hex: String = "agent-a0".bytes().map(|b| format!("{b:02x}")).collect();
    assert_eq!(value(host::SENDER_AGENT), hex);
    assert!(
        first
            .iter()
            .any(|l| l.contains("StartTime: Nov 14, 2023 22:13:20.123456"))
    );
}
