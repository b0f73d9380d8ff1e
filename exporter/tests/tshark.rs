//! Wireshark's IPFIX/NetFlow dissector (tshark) decodes every message the
//! exporter sends over UDP: no malformed packet, no data set without its
//! template, values as sent, NTP microsecond timestamps right.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::*;
use xdprobe_exporter::{CollectorSpec, ExporterConfig};
use xdprobe_test_support::collectors::{tshark_cflow, tshark_cflow_field};

/// tshark's view of what a collector received.
struct Dissected {
    pcap: std::path::PathBuf,
    port: u16,
    verbose: String,
}

impl Dissected {
    /// All values of one field across every packet, in order.
    fn field(&self, name: &str) -> Vec<String> {
        tshark_cflow_field(&self.pcap, self.port, name)
    }
}

impl Drop for Dissected {
    fn drop(&mut self) {
        if std::env::var("XDPROBE_KEEP").is_err() {
            let _ = std::fs::remove_file(&self.pcap);
        }
    }
}

/// Export `recs` to a UDP socket we read, wrap the datagrams in a pcap and
/// hand it to tshark.
fn export_and_dissect(query: &str, recs: &[xdprobe_dataplane::FlowRecord], tag: &str) -> Dissected {
    export_named(query, recs, tag, None)
}

/// The same with an observation name (`None`: the default one).
fn export_named(
    query: &str,
    recs: &[xdprobe_dataplane::FlowRecord],
    tag: &str,
    observation_name: Option<&str>,
) -> Dissected {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let cfg = ExporterConfig {
        collectors: vec![CollectorSpec::parse(&format!("udp://127.0.0.1:{port}{query}")).unwrap()],
        template_refresh_packets: 5,
        options_interval: Duration::from_millis(50),
        observation_name: observation_name.map(str::to_string),
        ..ExporterConfig::default()
    };
    let stats = export_paced(cfg, recs, |i| i % 50 == 0, Duration::from_millis(20));
    let dgrams = recv_all(&sock, Duration::from_millis(300));
    assert_eq!(dgrams.len() as u64, stats.collectors[0].messages);
    assert!(
        dgrams.iter().all(|d| d.len() <= 1500 - 28),
        "datagram over the MTU"
    );
    let pcap =
        std::env::temp_dir().join(format!("xdprobe-tshark-{tag}-{}.pcap", std::process::id()));
    write_udp_pcap(&pcap, port, &dgrams);
    let verbose = tshark_cflow(&pcap, port, &["-V"]);
    if std::env::var("XDPROBE_DUMP").is_ok_and(|d| d == tag) {
        println!("{verbose}");
    }
    Dissected {
        pcap,
        port,
        verbose,
    }
}

/// NetFlow v9 types of the receive-window counters, `ie::V9_PRIVATE_BASE`
/// plus 1060..=1063: private, so tshark calls them unknown and shows the
/// raw value, which `v9_private_values` reads.
const V9_PRIVATE: [u16; 4] = [33828, 33829, 33830, 33831];

/// A line of a private v9 field (receive window, timestamp RTT): types
/// outside the registry, which tshark calls "Unknown" by design.
fn is_v9_private_line(l: &str) -> bool {
    let ts = (1040..=1051u16).map(|id| xdprobe_exporter::ie::V9_PRIVATE_BASE + id);
    V9_PRIVATE.iter().copied().chain(ts).any(|t| {
        l.contains(&format!("Unknown({t})"))
            || l.contains(&format!("Unknown ({t})"))
            || l.contains(&format!("Type {t}: Value"))
    })
}

/// Every value tshark shows for private v9 type `t`, in order.
fn v9_private_values(verbose: &str, t: u16) -> Vec<u32> {
    let key = format!("Type {t}: Value (hex bytes): ");
    verbose
        .lines()
        .filter_map(|l| l.split_once(&key).map(|(_, hex)| hex))
        .map(|hex| u32::from_str_radix(&hex.replace(' ', ""), 16).unwrap())
        .collect()
}

/// The values tshark shows for the v9 timestamp-RTT fields, by IPFIX ID,
/// record by record.
fn v9_ts_rtt_values(verbose: &str) -> Vec<Vec<(u16, u32)>> {
    let mut recs: Vec<Vec<(u16, u32)>> = Vec::new();
    for l in verbose.lines() {
        let Some(rest) = l.trim().strip_prefix("Unknown Field Type: Type ") else {
            continue;
        };
        let Some((t, hex)) = rest.split_once(": Value (hex bytes): ") else {
            continue;
        };
        let Some(id) = t
            .parse::<u16>()
            .unwrap()
            .checked_sub(xdprobe_exporter::ie::V9_PRIVATE_BASE)
            .filter(|id| (1040..=1051).contains(id))
        else {
            continue;
        };
        let v = hex
            .split_whitespace()
            .fold(0u32, |a, b| (a << 8) | u32::from_str_radix(b, 16).unwrap());
        if id == 1040 {
            recs.push(Vec::new());
        }
        recs.last_mut().expect("1040 comes first").push((id, v));
    }
    recs
}

fn assert_clean(verbose: &str) {
    for bad in [
        "Malformed",
        "[Expert Info (Warning",
        "no template found",
        "Unknown",
        "Data (",
        "unknown",
    ] {
        let hits: Vec<&str> = verbose
            .lines()
            .filter(|l| l.contains(bad) && !is_v9_private_line(l))
            .take(5)
            .collect();
        assert!(hits.is_empty(), "tshark reports {bad:?}: {hits:#?}");
    }
}

#[test]
fn tshark_decodes_ipfix_biflow_with_every_field() {
    if !require("tshark") {
        return;
    }
    let recs = mixed_records(200);
    let d = export_and_dissect("", &recs, "ipfix");
    assert_clean(&d.verbose);
    let want: Vec<String> = recs.iter().map(|r| r.client_port.to_string()).collect();
    assert_eq!(
        d.field("cflow.srcport"),
        want,
        "one record per connection, in order"
    );
    // Forward then reverse (PEN 29305) octets for each biflow.
    let octets = d.field("cflow.octets");
    let want: Vec<String> = recs
        .iter()
        .flat_map(|r| [r.c2s.bytes.to_string(), r.s2c.bytes.to_string()])
        .collect();
    assert_eq!(octets, want);
    // dateTimeMicroseconds (NTP) decoded back to the record's microsecond.
    let starts = d.field("cflow.abstimestart");
    assert_eq!(starts.len(), 400, "ms and µs start time of every record");
    for (i, r) in recs.iter().enumerate() {
        let us = r.start.as_micros();
        let frac_us = format!(".{:06}", us % 1_000_000);
        let frac_ms = format!(".{:03}000000", (r.start.as_micros() / 1_000) % 1000);
        assert!(
            starts[2 * i].contains(&frac_ms),
            "{} vs {frac_ms}",
            starts[2 * i]
        );
        assert!(
            starts[2 * i + 1].contains(&frac_us),
            "{} vs {frac_us}",
            starts[2 * i + 1]
        );
    }
    // The options record (exporter statistics) is decoded too.
    assert!(
        !d.field("cflow.notsent_flows").is_empty(),
        "no options record decoded"
    );
}

#[test]
fn tshark_decodes_nfv9_and_ntop_profile() {
    if !require("tshark") {
        return;
    }
    let recs = mixed_records(120);
    for (q, tag) in [
        ("?format=nfv9", "v9"),
        ("?format=nfv9&profile=ntop", "v9ntop"),
        ("?profile=ntop", "ntop"),
        ("?mode=uniflow&profile=ntop", "uniflow"),
    ] {
        let d = export_and_dissect(q, &recs, tag);
        assert_clean(&d.verbose);
        if q.contains("nfv9") {
            // No variable-length fields in v9: no name, no template 259.
            assert!(d.field("cflow.observation_domain_name").is_empty());
            assert!(!d.field("cflow.template_id").iter().any(|t| t == "259"));
            // Zero window and window full per direction, in record order.
            let want: [Vec<u32>; 4] = [
                recs.iter().map(|r| r.c2s.zero_window).collect(),
                recs.iter().map(|r| r.s2c.zero_window).collect(),
                recs.iter().map(|r| r.c2s.window_full).collect(),
                recs.iter().map(|r| r.s2c.window_full).collect(),
            ];
            for (t, want) in V9_PRIVATE.iter().zip(want) {
                assert_eq!(v9_private_values(&d.verbose, *t), want, "v9 type {t} ({q})");
            }
            // The timestamp-RTT fields, values as sent (not measured =
            // 4294967295, the count included when the flow had none).
            let got = v9_ts_rtt_values(&d.verbose);
            assert_eq!(got.len(), recs.len(), "{q}");
            let nm = |v: Option<u32>| v.unwrap_or(u32::MAX);
            for (r, g) in recs.iter().zip(&got) {
                let want: Vec<(u16, u32)> = match r.npm.ts_rtt {
                    None => (1040..=1051).map(|id| (id, u32::MAX)).collect(),
                    Some(t) => [t.server, t.client]
                        .iter()
                        .flat_map(|l| {
                            [
                                l.count,
                                nm(l.min_us),
                                nm(l.mean_us),
                                nm(l.max_us),
                                nm(l.p50_us),
                                nm(l.p90_us),
                            ]
                        })
                        .zip(1040..)
                        .map(|(v, id)| (id, v))
                        .collect(),
                };
                assert_eq!(g, &want, "{q}: {}:{}", r.client_addr, r.client_port);
            }
        } else {
            let names = d.field("cflow.observation_domain_name");
            assert!(!names.is_empty(), "default name sent");
            assert!(
                names.iter().all(|n| n.starts_with("xdprobe on ")),
                "{names:?}"
            );
        }
        let want = if q.contains("uniflow") { 240 } else { 120 };
        assert_eq!(d.field("cflow.srcport").len(), want, "{q}");
        if q.contains("ntop") && !q.contains("nfv9") {
            // Wireshark names the nProbe elements under PEN 35632 itself:
            // our IDs are the ones it knows.
            let lat = d.field("cflow.pie.ntop.client_nw_latency_ms");
            assert_eq!(lat.len(), want, "{q}");
            // 5200 µs client network time → RTT/2 = 2.6 ms → 3 ms.
            assert_eq!(lat[0], "3");
            let appl = d.field("cflow.pie.ntop.appl_latency_ms");
            assert_eq!(appl[0], "2500");
            let rin = d.field("cflow.pie.ntop.retransmitted_in_pkts");
            assert_eq!(rin[0], recs[0].c2s.retrans.to_string());
            let rout = d.field("cflow.pie.ntop.retransmitted_out_pkts");
            assert_eq!(rout[0], recs[0].s2c.retrans.to_string());
            let oin = d.field("cflow.pie.ntop.ooorder_in_pkts");
            assert_eq!(oin[0], recs[0].c2s.ooo.to_string());
        }
    }
}

#[test]
fn tshark_decodes_the_observation_domain_name() {
    if !require("tshark") {
        return;
    }
    let recs = mixed_records(60);
    let long = format!(
        "xdprobe tëst-hôst: {} → uplink ✓",
        (0..40)
            .map(|i| format!("eth{i}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert!(long.len() > 255, "the 3-byte length form");
    for (name, tag) in [
        ("xdprobe pcap trace.pcapng", "name-short"),
        (long.as_str(), "name-long"),
    ] {
        let d = export_named("", &recs, tag, Some(name));
        assert_clean(&d.verbose);
        let names = d.field("cflow.observation_domain_name");
        // With every template (re)send: the first message, then every 5.
        let templates = d.field("cflow.template_id");
        let sends = templates.iter().filter(|t| *t == "259").count();
        assert!(sends >= 2, "templates resent: {templates:?}");
        assert_eq!(names.len(), sends, "one name per template send");
        assert!(names.iter().all(|n| n == name), "{names:?} vs {name:?}");
        // The scope field just before each name is the exporter's domain (1).
        let lines: Vec<&str> = d.verbose.lines().map(str::trim).collect();
        let scopes: Vec<&str> = lines
            .windows(2)
            .filter(|w| w[1].starts_with("Observation Domain Name"))
            .map(|w| w[0])
            .collect();
        assert_eq!(scopes.len(), sends);
        assert!(
            scopes.iter().all(|l| *l == "Observation Domain Id: 1"),
            "{scopes:?}"
        );
        let len_field = if name.len() < 255 {
            "cflow.string_len_short"
        } else {
            "cflow.string_len_long"
        };
        let lens = d.field(len_field);
        assert_eq!(lens.len(), sends, "{len_field}: {lens:?}");
        assert!(
            lens.iter().all(|l| *l == name.len().to_string()),
            "{lens:?}"
        );
    }
}
