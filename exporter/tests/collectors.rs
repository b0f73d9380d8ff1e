//! Real collectors decode what the exporter sends: nfcapd/nfdump (IPFIX
//! and NetFlow v9) and pmacct nfacctd (every NPM enterprise element through
//! the shipped `deploy/collectors/pmacct/aggregate_primitives`). The records
//! are built here; `tests/collectors.rs` of the root package does the same
//! from pcaps through the CLI.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;
use xdprobe_dataplane::FlowRecord;
use xdprobe_exporter::{CollectorSpec, ExporterConfig};
use xdprobe_test_support::TempDir;
use xdprobe_test_support::collectors::{Nfcapd, nfdump, start_udp_collector, wait_udp_drained};

fn export(url: &str, recs: &[FlowRecord]) {
    let cfg = ExporterConfig {
        collectors: vec![CollectorSpec::parse(url).unwrap()],
        ..ExporterConfig::default()
    };
    // Paced a little: a collector's socket buffer is finite.
    let stats = export_paced(cfg, recs, |i| i % 100 == 99, Duration::from_millis(5));
    assert_eq!(stats.collectors[0].not_sent, 0);
}

fn nfcapd_run(url_query: &str, recs: &[FlowRecord], tag: &str) -> Vec<Value> {
    let dir = TempDir::new(&format!("coll-{tag}"));
    let mut nfcapd = Nfcapd::start(dir.path());
    export(&format!("udp://127.0.0.1:{}{url_query}", nfcapd.port), recs);
    // nfcapd writes its file on SIGINT.
    nfcapd.finish();
    let out = nfdump(dir.path(), "json");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("nfdump json: {e}: {out}"));
    v.as_array().cloned().unwrap_or_default()
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn n(v: &Value, k: &str) -> u64 {
    v.get(k)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn ms_as_us(v: &Value, k: &str) -> u64 {
    let ms = v
        .get(k)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{k} missing in {v}"));
    (ms * 1000.0).round() as u64
}

/// A pmacct custom primitive (printed as a string) or counter.
fn pm(v: &Value, k: &str) -> u64 {
    match v.get(k) {
        Some(Value::String(s)) => s.parse().unwrap_or_else(|_| panic!("{k}={s:?} in {v}")),
        Some(x) => x.as_u64().unwrap_or_else(|| panic!("{k} in {v}")),
        None => panic!("{k} missing in {v}"),
    }
}

/// nfdump prints times as local "YYYY-MM-DDThh:mm:ss.mmm"; render ours the
/// same way (TZ=UTC is forced for nfdump below).
fn ms_time(ns: u64) -> String {
    // The exporter's milliseconds come from the rounded microsecond.
    let ms = (ns + 500) / 1_000 / 1_000;
    let secs = ms / 1000;
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%S"])
        .output()
        .unwrap();
    format!(
        "{}.{:03}",
        String::from_utf8_lossy(&out.stdout).trim(),
        ms % 1000
    )
}

fn check_nfdump_flows(flows: &[Value], recs: &[FlowRecord]) {
    assert_eq!(flows.len(), recs.len(), "nfdump shows one flow per record");
    for r in recs {
        let f = flows
            .iter()
            .find(|f| {
                n(f, "src_port") == u64::from(r.client_port)
                    && n(f, "dst_port") == u64::from(r.server_port)
            })
            .unwrap_or_else(|| panic!("flow {}:{} missing", r.client_addr, r.client_port));
        let src = f
            .get("src4_addr")
            .or_else(|| f.get("src6_addr"))
            .and_then(Value::as_str)
            .unwrap();
        assert_eq!(src.parse::<std::net::IpAddr>().unwrap(), r.client_addr);
        assert_eq!(n(f, "proto"), u64::from(r.proto));
        assert_eq!(n(f, "in_packets"), r.c2s.packets, "{f}");
        assert_eq!(n(f, "in_bytes"), r.c2s.bytes, "{f}");
        assert_eq!(n(f, "out_packets"), r.s2c.packets, "{f}");
        assert_eq!(n(f, "out_bytes"), r.s2c.bytes, "{f}");
        assert_eq!(n(f, "src_vlan"), u64::from(r.vlan.unwrap_or(0)), "{f}");
        assert_eq!(s(f, "first"), ms_time(r.start.as_nanos()), "{f}");
        assert_eq!(s(f, "last"), ms_time(r.end.as_nanos()), "{f}");
    }
}

#[test]
fn nfcapd_reads_ipfix_biflows() {
    if !require("nfcapd") || !require("nfdump") {
        return;
    }
    let recs = mixed_records(300);
    let flows = nfcapd_run("", &recs, "nfcapd-ipfix");
    check_nfdump_flows(&flows, &recs);
}

#[test]
fn nfcapd_reads_nfv9_with_latency_columns() {
    if !require("nfcapd") || !require("nfdump") {
        return;
    }
    let recs = mixed_records(300);
    let flows = nfcapd_run("?format=nfv9", &recs, "nfcapd-v9");
    if std::env::var("XDPROBE_DUMP").is_ok() {
        println!("{}", serde_json::to_string_pretty(&flows[0]).unwrap());
    }
    check_nfdump_flows(&flows, &recs);
    for r in &recs {
        let f = flows
            .iter()
            .find(|f| n(f, "src_port") == u64::from(r.client_port))
            .unwrap();
        // nProbe semantics: client/server latency = that side's RTT / 2.
        // nfdump prints them in milliseconds with µs decimals.
        let half = |v: Option<u32>| u64::from(v.map_or(0, |x| x / 2));
        assert_eq!(ms_as_us(f, "cli_latency"), half(r.npm.client_net_us), "{f}");
        assert_eq!(ms_as_us(f, "srv_latency"), half(r.npm.server_net_us), "{f}");
        assert_eq!(
            ms_as_us(f, "app_latency"),
            u64::from(r.npm.srt_us.unwrap_or(0)),
            "{f}"
        );
    }
}

/// Decode with pmacct's nfacctd using the shipped primitives file.
fn nfacctd_run(recs: &[FlowRecord], tag: &str, query: &str) -> Vec<Value> {
    nfacctd_with(recs, tag, query, "aggregate_primitives")
}

/// The same with another of the shipped primitives files.
fn nfacctd_with(recs: &[FlowRecord], tag: &str, query: &str, file: &str) -> Vec<Value> {
    let tmp = TempDir::new(&format!("coll-{tag}"));
    let dir = tmp.path();
    let port = free_udp_port();
    let primitives = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/collectors/pmacct")
        .join(file);
    let names: Vec<String> = std::fs::read_to_string(&primitives)
        .unwrap()
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("name=")
                .map(|r| r.split_whitespace().next().unwrap().to_string())
        })
        .collect();
    assert!(names.len() >= 24, "primitives file lists every element");
    let out = dir.join("out.json");
    let conf = dir.join("nfacctd.conf");
    std::fs::write(
        &conf,
        format!(
            "daemonize: false\nnfacctd_ip: 127.0.0.1\nnfacctd_port: {port}\n\
             aggregate_primitives: {}\nplugins: print\n\
             aggregate: src_host, dst_host, src_port, dst_port, proto, timestamp_start, timestamp_end, {}\n\
             print_output: json\nprint_output_file: {}\nprint_refresh_time: 60\n\
             nfacctd_time_new: false\ntimestamps_secs: false\n",
            primitives.display(),
            names.join(", "),
            out.display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("nfacctd.log")).unwrap();
    let mut nfacctd = Command::new("nfacctd");
    nfacctd
        .env("TZ", "UTC")
        .arg("-f")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(log);
    let mut guard = start_udp_collector(&mut nfacctd, port);
    export(&format!("udp://127.0.0.1:{port}{query}"), recs);
    // pmacct writes its output on SIGINT, once its core has read every
    // datagram and handed the records to the print plugin: that hand-off
    // is internal (nothing outside shows it), hence the pause after.
    wait_udp_drained(port);
    std::thread::sleep(Duration::from_millis(500));
    guard.interrupt_and_wait(Duration::from_secs(10));
    let text = std::fs::read_to_string(&out).unwrap_or_else(|e| {
        panic!(
            "nfacctd wrote nothing ({e}); log: {}",
            std::fs::read_to_string(dir.join("nfacctd.log")).unwrap()
        )
    });
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn nfacctd_decodes_every_npm_element() {
    if !require("nfacctd") {
        return;
    }
    let recs = mixed_records(200);
    let rows = nfacctd_run(&recs, "nfacctd", "");
    if std::env::var("XDPROBE_DUMP").is_ok() {
        println!("{}", serde_json::to_string_pretty(&rows[0]).unwrap());
    }
    assert_eq!(rows.len(), recs.len(), "one pmacct row per record");
    let nm = |v: Option<u32>| u64::from(v.unwrap_or(u32::MAX));
    for r in &recs {
        let row = rows
            .iter()
            .find(|x| {
                n(x, "port_src") == u64::from(r.client_port)
                    && n(x, "port_dst") == u64::from(r.server_port)
            })
            .unwrap_or_else(|| panic!("record {}:{} missing", r.client_addr, r.client_port));
        assert_eq!(n(row, "packets"), r.c2s.packets);
        assert_eq!(n(row, "bytes"), r.c2s.bytes);
        // pmacct prints the milliseconds it read as microseconds.
        let us6 = |ns: u64| format!("{}000", ms_time(ns).replace('T', " "));
        assert_eq!(s(row, "timestamp_start"), us6(r.start.as_nanos()), "{row}");
        assert_eq!(s(row, "timestamp_end"), us6(r.end.as_nanos()), "{row}");
        for (k, want) in [
            ("rtt_us", nm(r.npm.rtt_us)),
            ("cnt_us", nm(r.npm.client_net_us)),
            ("snt_us", nm(r.npm.server_net_us)),
            ("srt_us", nm(r.npm.srt_us)),
            ("srt_count", u64::from(r.npm.srt_count)),
            ("srt_min_us", nm(r.npm.srt_min_us)),
            ("srt_mean_us", nm(r.npm.srt_mean_us)),
            ("srt_max_us", nm(r.npm.srt_max_us)),
            ("retrans_c2s", u64::from(r.c2s.retrans)),
            ("retrans_s2c", u64::from(r.s2c.retrans)),
            ("retrans_fast_c2s", u64::from(r.c2s.retrans_fast)),
            ("retrans_fast_s2c", u64::from(r.s2c.retrans_fast)),
            ("retrans_spurious_c2s", u64::from(r.c2s.retrans_spurious)),
            ("retrans_spurious_s2c", u64::from(r.s2c.retrans_spurious)),
            ("retrans_other_c2s", u64::from(r.c2s.retrans_other)),
            ("retrans_other_s2c", u64::from(r.s2c.retrans_other)),
            ("ooo_c2s", u64::from(r.c2s.ooo)),
            ("ooo_s2c", u64::from(r.s2c.ooo)),
            ("keepalive_c2s", u64::from(r.c2s.keepalive)),
            ("keepalive_s2c", u64::from(r.s2c.keepalive)),
            ("dup_ack_c2s", u64::from(r.c2s.dup_ack)),
            ("dup_ack_s2c", u64::from(r.s2c.dup_ack)),
            ("zero_window_c2s", u64::from(r.c2s.zero_window)),
            ("zero_window_s2c", u64::from(r.s2c.zero_window)),
            ("window_full_c2s", u64::from(r.c2s.window_full)),
            ("window_full_s2c", u64::from(r.s2c.window_full)),
            (
                "npm_flags",
                u64::from(r.direction_guessed) | (u64::from(r.npm.tls) << 1),
            ),
            ("seq_in_flow", u64::from(r.seq_in_flow)),
        ]
        .into_iter()
        .chain(ts_rtt_expect(r))
        {
            assert_eq!(
                pm(row, k),
                want,
                "{k} of {}:{}: {row}",
                r.client_addr,
                r.client_port
            );
        }
    }
}

/// The timestamp-RTT primitives of a record: all "not measured" without
/// the option, else the leg's count (0 included) and values.
fn ts_rtt_expect(r: &FlowRecord) -> Vec<(&'static str, u64)> {
    let nm = |v: Option<u32>| u64::from(v.unwrap_or(u32::MAX));
    let mut out = Vec::new();
    for (p, leg) in [
        ("ts_snt", r.npm.ts_rtt.map(|t| t.server)),
        ("ts_cnt", r.npm.ts_rtt.map(|t| t.client)),
    ] {
        let vals = match leg {
            None => [u64::from(u32::MAX); 6],
            Some(l) => [
                u64::from(l.count),
                nm(l.min_us),
                nm(l.mean_us),
                nm(l.max_us),
                nm(l.p50_us),
                nm(l.p90_us),
            ],
        };
        for (s, v) in ["count", "min_us", "mean_us", "max_us", "p50_us", "p90_us"]
            .into_iter()
            .zip(vals)
        {
            let name: &'static str = Box::leak(format!("{p}_{s}").into_boxed_str());
            out.push((name, v));
        }
    }
    out
}

#[test]
fn nfacctd_prints_l7_names() {
    if !require("nfacctd") {
        return;
    }
    let recs = l7_records();
    let rows = nfacctd_with(&recs, "nfacctd-l7", "", "aggregate_primitives_l7");
    let text = serde_json::to_string(&rows).unwrap();
    // pmacct prints SNI, HTTP host and DNS name (and the rest) as sent.
    for want in [
        "\"tls_sni\":\"www.example.com\"",
        "\"quic_sni\":\"quic.example.org\"",
        "\"http_host\":\"web.example.net\"",
        "\"http_target\":\"/orders?id=7\"",
        "\"dns_qname\":\"dns.example.org\"",
        "\"tls_alpn\":\"h2,http/1.1\"",
    ] {
        assert!(text.contains(want), "{want} not in {text}");
    }
    let http = rows
        .iter()
        .find(|r| r["http_host"] == "web.example.net")
        .unwrap();
    // Custom u_int primitives print as strings.
    assert_eq!(
        (&http["http_status"], &http["http_requests"]),
        (&"503".into(), &"4".into())
    );
}
