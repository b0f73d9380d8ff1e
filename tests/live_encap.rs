//! One header policy, live and in files: crafted frames of every
//! encapsulation the parser walks (VLAN, QinQ, three tags, MPLS with one
//! and three labels, VLAN + MPLS, PPPoE over IPv4 and IPv6, IPv6 with
//! extension headers, an MPLS Ethernet pseudowire) are sent over a veth
//! into `xdprobe run` and written to a pcap file. Every IP frame must reach
//! a worker (the XDP program's and the workers' counters), the XDP program
//! must classify each as the policy says (`non_ip` for ARP only,
//! `unclassified` for the pseudowire only), the parser must refuse none,
//! and the live flow records must equal what `xdprobe pcap` makes of the
//! pcap file, and what was sent. One frame past each limit (VLAN tags,
//! MPLS labels, IPv6 extension headers) must be counted under the same
//! drop reason live and from the file. tshark, the project's oracle, must
//! count the same packets and IP bytes per flow and direction, except where
//! the policy departs from it (named below).
//!
//! Needs root; skips loudly otherwise (never under CI=true).

mod live_support;
mod oracle;

use std::{
    collections::BTreeMap,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use live_support::{
    NetNs, VethOpts,
    frames::{ALL, C2S, S2C, all_frames, beyond_limits, send_raw, write_pcap},
    probe::{Probe, ProbeOpts, metric},
    require_root, require_tool,
    topo::TempDir,
    veth,
};
use serde_json::Value;

const TX_DEV: &str = "et0";
const PROBE_DEV: &str = "ep0";

/// A record without what depends on when it was captured; keyed by its
/// endpoints.
fn comparable(records: &[Value]) -> BTreeMap<String, Value> {
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if let Some(o) = r.as_object_mut() {
                o.retain(|k, _| !k.ends_with("_us") && k != "end_reason");
            }
            let key = format!(
                "{} {}:{} {}:{} vlan {}",
                r["proto"],
                r["client_addr"],
                r["client_port"],
                r["server_addr"],
                r["server_port"],
                r["vlan"]
            );
            (key, r)
        })
        .collect()
}

/// `xdprobe pcap` on `pcap`: its records and its `--stats` drop counts.
fn endpoint(ip: &Value, port: &Value) -> String {
    format!(
        "{}:{}",
        ip.as_str().unwrap_or("?"),
        port.as_u64().unwrap_or(0)
    )
}

/// tshark's flows of `pcap` against the live records: packets and IP
/// bytes per direction. Two departures, both by policy: tshark does not
/// decode the MPLS pseudowire (its heuristic takes the all-zero control
/// word for the start of a MAC address; `dataplane/src/parse/walk.rs`), and
/// it follows the frames past our limits (203.0.113.0/24 and
/// 2001:db8::31/32), which we count as drops.
fn check_against_tshark(pcap: &Path, live: &[Value]) {
    let o = oracle::run(pcap, false);
    let pair = |a: String, b: String| if a <= b { (a, b) } else { (b, a) };
    let mut matched = 0;
    for f in &o.flows {
        let client = endpoint(&f["src_ip"], &f["src_port"]);
        let server = endpoint(&f["dst_ip"], &f["dst_port"]);
        let beyond = ["203.0.113.", "2001:db8::31", "2001:db8::32"];
        if beyond
            .iter()
            .any(|b| client.starts_with(b) || server.starts_with(b))
        {
            continue;
        }
        let want = pair(client.clone(), server.clone());
        let r = live
            .iter()
            .find(|r| {
                pair(
                    endpoint(&r["client_addr"], &r["client_port"]),
                    endpoint(&r["server_addr"], &r["server_port"]),
                ) == want
            })
            .unwrap_or_else(|| panic!("tshark flow {client} -> {server} has no live record"));
        let same = endpoint(&r["client_addr"], &r["client_port"]) == client;
        let (oc, os) = if same { ("c2s", "s2c") } else { ("s2c", "c2s") };
        for (ours, theirs) in [(oc, "c2s"), (os, "s2c")] {
            assert_eq!(
                (r[ours]["packets"].as_u64(), r[ours]["bytes"].as_u64()),
                (
                    f[theirs]["packets"].as_u64(),
                    f[theirs]["ip_bytes"].as_u64()
                ),
                "{client} -> {server} {theirs}: live vs tshark"
            );
        }
        matched += 1;
    }
    assert_eq!(matched, ALL.len() - 1, "every flow but the pseudowire's");
}

fn pcap_run(pcap: &Path) -> (Vec<Value>, BTreeMap<String, u64>) {
    let out = Command::new(env!("CARGO_BIN_EXE_xdprobe"))
        .arg("pcap")
        .arg(pcap)
        .args([
            "--format",
            "json",
            "--workers",
            "1",
            "--no-progress",
            "--stats",
        ])
        .output()
        .expect("run xdprobe pcap");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xdprobe pcap: {stderr}");
    let records = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON record"))
        .collect();
    // "  dropped REASON: N"
    let drops = stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("dropped "))
        .filter_map(|l| {
            let (reason, n) = l.split_once(": ")?;
            Some((reason.to_owned(), n.trim().parse().ok()?))
        })
        .collect();
    (records, drops)
}

#[test]
fn every_encapsulation_reaches_a_worker_and_matches_the_file() {
    if !require_root!() {
        return;
    }
    let tmp = TempDir::new("live_encap");
    let mut frames = all_frames();
    let beyond = beyond_limits();
    frames.extend(beyond.iter().map(|(_, f)| f.clone()));
    let pcap = tmp.0.join("sent.pcap");
    write_pcap(&pcap, &frames);

    let tx = NetNs::new("ent");
    let p = NetNs::new("enp");
    veth(&tx, TX_DEV, &p, PROBE_DEV, VethOpts::default());
    p.exec(&["ip", "link", "set", PROBE_DEV, "promisc", "on"]);
    let probe = Probe::start(
        &p,
        &tmp.0,
        &ProbeOpts {
            iface: PROBE_DEV,
            metrics_port: 19491,
            ..ProbeOpts::default()
        },
    );
    tx.run(|| send_raw(TX_DEV, &frames));

    // Everything but the ARP frame goes to a worker.
    let to_workers = (frames.len() - 1) as u64;
    let xdp = |m: &str, r: &str| metric(m, "xdprobe_xdp_packets_total", &format!("result=\"{r}\""));
    // Until the workers have read every frame meant for them, or 10 s: a
    // frame the XDP program drops never arrives, and the assertions below
    // say which counter took it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut m = probe.metrics(&p);
    while metric(&m, "xdprobe_worker_rx_frames_total", "") < to_workers && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
        m = probe.metrics(&p);
    }
    let (status, live, log) = probe.stop();
    assert!(
        status.success(),
        "xdprobe run exits 0 on SIGTERM: {status}\n{log}"
    );
    let xdp_lines: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("xdprobe_xdp_packets_total"))
        .collect();
    eprintln!(
        "{} frames sent ({} encapsulations, {} past a limit, 1 ARP); XDP: {xdp_lines:?}",
        frames.len(),
        ALL.len(),
        beyond.len()
    );

    let per_flow = (C2S + S2C) as u64;
    assert_eq!(xdp(&m, "seen"), frames.len() as u64, "{m}");
    assert_eq!(xdp(&m, "non_ip"), 1, "only the ARP frame is not IP: {m}");
    // The pseudowire's frames, and the VLAN and MPLS stacks too deep.
    assert_eq!(xdp(&m, "unclassified"), per_flow + 2, "{m}");
    assert_eq!(xdp(&m, "redirected"), to_workers, "{m}");
    assert_eq!(
        (xdp(&m, "filtered"), xdp(&m, "redirect_failed")),
        (0, 0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "xdprobe_worker_rx_frames_total", ""),
        to_workers,
        "{m}"
    );
    let drops = "xdprobe_worker_parse_drops_total";
    assert_eq!(metric(&m, drops, ""), beyond.len() as u64, "{m}");
    for (reason, _) in &beyond {
        assert_eq!(
            metric(&m, drops, &format!("reason=\"{reason}\"")),
            1,
            "{reason}: {m}"
        );
    }

    // What was sent: one flow per encapsulation, 3 + 2 packets.
    let live = comparable(&live);
    assert_eq!(
        live.len(),
        ALL.len(),
        "one flow per encapsulation: {live:#?}"
    );
    for (k, r) in &live {
        assert_eq!(
            (r["c2s"]["packets"].as_u64(), r["s2c"]["packets"].as_u64()),
            (Some(C2S as u64), Some(S2C as u64)),
            "{k}"
        );
    }
    let mut vlans: Vec<_> = live.values().filter_map(|r| r["vlan"].as_u64()).collect();
    vlans.sort_unstable();
    assert_eq!(vlans, [10, 100, 200, 400], "outermost tags: {live:#?}");

    // What the parser makes of the same frames from a file.
    let (file, file_drops) = pcap_run(&pcap);
    let file = comparable(&file);
    let live_keys: Vec<_> = live.keys().collect();
    let file_keys: Vec<_> = file.keys().collect();
    assert_eq!(
        live_keys, file_keys,
        "the same flows live and from the file"
    );
    for (k, r) in &live {
        assert_eq!(Some(r), file.get(k), "{k}: live vs file");
    }
    let mut want: BTreeMap<String, u64> = beyond.iter().map(|(r, _)| (r.to_string(), 1)).collect();
    want.insert("not_ip".into(), 1);
    assert_eq!(
        file_drops, want,
        "the file's drops: the same, and the ARP frame"
    );

    let live_records: Vec<Value> = live.into_values().collect();
    if require_tool("tshark") {
        check_against_tshark(&pcap, &live_records);
    }
}
