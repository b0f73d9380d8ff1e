//! Golden tests: per-flow packet and byte counts per direction, first/last
//! packet times, VLAN and client/server roles of `xdprobe pcap` equal what
//! tshark says (the project's oracle, `tests/oracle/`, run at test time) on
//! real captures: every capture in `tests/corpus` (and in the optional
//! extra corpus `$XDPROBE_SHARED/corpus`), the bundled `assets/demo.pcap`,
//! and a capture of real kernel traffic made now through the project's
//! impairing bridge (`live_support::rig`).
//!
//! Flow boundaries differ by design between a flow probe and tshark's stream
//! index (timeouts, port reuse), so both sides are summed per 5-tuple before
//! comparing; every packet and byte must still be in the same direction of
//! the same 5-tuple. Fragmented datagrams: xdprobe counts later fragments in
//! the flow of their first fragment (`dataplane/src/flow/frag.rs`), tshark
//! puts all but the reassembling fragment in a port-less IP flow, so captures
//! with fragments are compared per address pair (all protocols together).

mod common;
mod live_support;
mod oracle;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use serde_json::Value;

/// (from endpoint, to endpoint) → [packets, bytes, first µs, last µs]
type Dirs = BTreeMap<(String, String, u64), [u64; 4]>;

fn add(m: &mut Dirs, key: (String, String, u64), pk: u64, by: u64, first: u64, last: u64) {
    if pk == 0 {
        return;
    }
    let e = m.entry(key).or_insert([0, 0, u64::MAX, 0]);
    e[0] += pk;
    e[1] += by;
    e[2] = e[2].min(first);
    e[3] = e[3].max(last);
}

/// Protocol numbers compared for a flow. Port-less flows are compared per
/// address pair whatever the protocol: for IPv6 with extension headers
/// tshark's `ipv6.nxt` is the first next header (0 = hop-by-hop for MLD),
/// xdprobe records the final upper-layer protocol (58), as IPFIX's
/// protocolIdentifier wants.
fn proto_key(proto: u64, from: &str, to: &str) -> u64 {
    if from.ends_with(":0") && to.ends_with(":0") {
        0
    } else {
        proto
    }
}

fn strip_port(ep: &str) -> String {
    ep.rsplit_once(':')
        .map_or(ep.to_string(), |(a, _)| a.to_string())
}

/// Aggregates xdprobe records. Per-direction first/last times are not in the
/// record, so times are compared per flow (both directions) below.
fn ours(recs: &[Value], by_pair: bool) -> Dirs {
    let mut m = Dirs::new();
    for r in recs {
        let mut c = endpoint(&r["client_addr"], &r["client_port"]);
        let mut s = endpoint(&r["server_addr"], &r["server_port"]);
        let mut proto = proto_key(r["proto"].as_u64().unwrap(), &c, &s);
        if by_pair {
            c = strip_port(&c);
            s = strip_port(&s);
            proto = 0;
        }
        let span = (
            r["start_us"].as_u64().unwrap(),
            r["end_us"].as_u64().unwrap(),
        );
        add_both(&mut m, (&c, &s, proto), r, "bytes", span);
    }
    m
}

/// Both directions of one flow (`v["c2s"]`, `v["s2c"]`, their byte count
/// under `bytes`), each keyed by (from, to, proto).
fn add_both(
    m: &mut Dirs,
    (c, s, proto): (&str, &str, u64),
    v: &Value,
    bytes: &str,
    span: (u64, u64),
) {
    for (from, to, d) in [(c, s, "c2s"), (s, c, "s2c")] {
        let key = (from.to_string(), to.to_string(), proto);
        let packets = v[d]["packets"].as_u64().unwrap();
        add(
            m,
            key,
            packets,
            v[d][bytes].as_u64().unwrap(),
            span.0,
            span.1,
        );
    }
}

fn theirs(flows: &[Value], by_pair: bool) -> Dirs {
    let mut m = Dirs::new();
    for f in flows {
        let mut c = endpoint(&f["src_ip"], &f["src_port"]);
        let mut s = endpoint(&f["dst_ip"], &f["dst_port"]);
        let mut proto = proto_key(f["ip_proto"].as_u64().unwrap_or(0), &c, &s);
        if by_pair {
            c = strip_port(&c);
            s = strip_port(&s);
            proto = 0;
        }
        let span = (
            f["first_us"].as_u64().unwrap(),
            f["last_us"].as_u64().unwrap(),
        );
        add_both(&mut m, (&c, &s, proto), f, "ip_bytes", span);
    }
    m
}

/// Flow-level span per unordered 5-tuple: (min start, max end).
fn spans(m: &Dirs) -> BTreeMap<(String, String, u64), (u64, u64)> {
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let k = unordered(k);
        let e = out.entry(k).or_insert((u64::MAX, 0));
        e.0 = e.0.min(v[2]);
        e.1 = e.1.max(v[3]);
    }
    out
}

fn has_fragments(flows: &[Value]) -> bool {
    flows
        .iter()
        .any(|f| f.get("ip_fragments").is_some() || f["ip_proto"].as_u64() == Some(44))
}

/// An ICMP/ICMPv6 error quoting a TCP/UDP packet, as tshark decodes it.
struct IcmpError {
    outer_src: String,
    outer_dst: String,
    ip_len: u64,
    /// The quoted packet's endpoints and protocol.
    inner: (String, String, u64),
}

/// tshark's view of every ICMP error in `file` (a second tshark pass, for
/// the quoted headers; only run when the oracle saw an ICMP error).
fn icmp_errors_of(file: &Path, o: &oracle::Oracle) -> Vec<IcmpError> {
    if o.icmp_errors {
        icmp_errors(file)
    } else {
        Vec::new()
    }
}

/// tshark's view of every ICMP error in `file`. Wireshark counts such a
/// packet in the TCP/UDP stream of the header it quotes (with the outer
/// addresses); xdprobe counts it in the ICMP flow between the outer
/// addresses, as flow probes do (the error is traffic of the router that
/// sent it). `compare` moves them accordingly.
fn icmp_errors(file: &Path) -> Vec<IcmpError> {
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(file)
        .args([
            "-Y",
            "icmp.type == 3 or icmp.type == 4 or icmp.type == 5 or icmp.type == 11 or icmp.type == 12 \
             or icmpv6.type == 1 or icmpv6.type == 2 or icmpv6.type == 3 or icmpv6.type == 4",
        ])
        .args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"])
        .args(["-e", "ip.src", "-e", "ip.dst", "-e", "ipv6.src", "-e", "ipv6.dst"])
        .args(["-e", "ip.len", "-e", "ipv6.plen"])
        .args(["-e", "udp.srcport", "-e", "udp.dstport", "-e", "tcp.srcport", "-e", "tcp.dstport"])
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v = vec![];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<Vec<&str>> = line.split('\t').map(|c| c.split('|').collect()).collect();
        let get = |i: usize, j: usize| f.get(i).and_then(|c| c.get(j)).copied().unwrap_or("");
        let (src, dst) = if get(0, 0).is_empty() { (2, 3) } else { (0, 1) };
        let ip_len = if get(0, 0).is_empty() {
            get(5, 0).parse::<u64>().unwrap_or(0) + 40
        } else {
            get(4, 0).parse().unwrap_or(0)
        };
        let (sp, dp, proto) = if !get(6, 0).is_empty() {
            (6, 7, 17)
        } else if !get(8, 0).is_empty() {
            (8, 9, 6)
        } else {
            continue;
        };
        v.push(IcmpError {
            outer_src: format!("{}:0", get(src, 0)),
            outer_dst: format!("{}:0", get(dst, 0)),
            ip_len,
            inner: (
                format!("{}:{}", get(src, 1), get(sp, 0)),
                format!("{}:{}", get(dst, 1), get(dp, 0)),
                proto,
            ),
        });
    }
    v
}

type Key = (String, String, u64);

/// Sums both directions of a 5-tuple into one key (`<>` marks it).
fn collapse(m: &mut Dirs, x: &str, y: &str, p: u64) -> Key {
    let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
    let ck: Key = (lo.to_string(), format!("<>{hi}"), p);
    let mut sum = m.remove(&ck).unwrap_or([0, 0, u64::MAX, 0]);
    for k in [
        (x.to_string(), y.to_string(), p),
        (y.to_string(), x.to_string(), p),
    ] {
        if let Some(v) = m.remove(&k) {
            sum[0] += v[0];
            sum[1] += v[1];
            sum[2] = sum[2].min(v[2]);
            sum[3] = sum[3].max(v[3]);
        }
    }
    if sum[0] > 0 {
        m.insert(ck.clone(), sum);
    }
    ck
}

fn unordered(k: &Key) -> Key {
    let b = k.1.trim_start_matches("<>").to_string();
    if k.0 <= b {
        (k.0.clone(), b, k.2)
    } else {
        (b, k.0.clone(), k.2)
    }
}

/// ICMP errors quoting a flow: tshark counts each with the flow it
/// quotes, the probe as a flow of the error's own addresses. On both sides
/// the quoted flow's two directions are summed into one key (`collapse`);
/// on tshark's, the error moves from that key to its own addresses. The
/// keys whose spans cannot agree are returned.
fn fold_icmp_errors(
    a: &mut Dirs,
    b: &mut Dirs,
    icmp: &[IcmpError],
    by_pair: bool,
) -> std::collections::BTreeSet<Key> {
    let mut no_span = std::collections::BTreeSet::new();
    for e in icmp {
        let (x, y, p) = if by_pair {
            (strip_port(&e.inner.0), strip_port(&e.inner.1), 0)
        } else {
            e.inner.clone()
        };
        collapse(a, &x, &y, p);
        let ck = collapse(b, &x, &y, p);
        if let Some(v) = b.get_mut(&ck) {
            v[0] -= 1;
            v[1] -= e.ip_len;
            if v[0] == 0 {
                b.remove(&ck);
            }
        }
        let (os, od) = if by_pair {
            (strip_port(&e.outer_src), strip_port(&e.outer_dst))
        } else {
            (e.outer_src.clone(), e.outer_dst.clone())
        };
        let ok: Key = (os, od, 0);
        no_span.insert(unordered(&ok));
        no_span.insert(unordered(&ck));
        add(b, ok, 1, e.ip_len, 0, 0);
    }
    no_span
}

fn compare(name: &str, recs: &[Value], oracle: &[Value], icmp: &[IcmpError]) {
    let by_pair = has_fragments(oracle);
    let (mut a, mut b) = (ours(recs, by_pair), theirs(oracle, by_pair));
    let no_span = fold_icmp_errors(&mut a, &mut b, icmp, by_pair);
    let mut diffs = vec![];
    for k in a
        .keys()
        .chain(b.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let x = a.get(k).map(|v| [v[0], v[1]]);
        let y = b.get(k).map(|v| [v[0], v[1]]);
        if x != y {
            diffs.push(format!("  {k:?}: xdprobe {x:?} tshark {y:?}"));
        }
    }
    let (sa, sb) = (spans(&a), spans(&b));
    for (k, v) in sb.iter().filter(|(k, _)| !no_span.contains(*k)) {
        if sa.get(k) != Some(v) {
            diffs.push(format!(
                "  span {k:?}: xdprobe {:?} tshark {v:?}",
                sa.get(k)
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "{name}: per-direction [packets, bytes] / spans differ:\n{}",
        diffs.join("\n")
    );
    roles_and_vlans(name, recs, oracle);
}

/// Roles and VLAN where tshark is certain (SYN or DNS query seen).
fn roles_and_vlans(name: &str, recs: &[Value], oracle: &[Value]) {
    for f in oracle.iter().filter(|f| f["dir_guess"] == false) {
        let c = endpoint(&f["src_ip"], &f["src_port"]);
        let s = endpoint(&f["dst_ip"], &f["dst_port"]);
        let matching: Vec<&Value> = recs
            .iter()
            .filter(|r| {
                let rc = endpoint(&r["client_addr"], &r["client_port"]);
                let rs = endpoint(&r["server_addr"], &r["server_port"]);
                (rc == c && rs == s) || (rc == s && rs == c)
            })
            .collect();
        assert!(!matching.is_empty(), "{name}: no record for {c} -> {s}");
        // The record holding the flow's first packet knows the roles; a
        // later one (the flow resumed after an idle timeout) starts
        // mid-stream and may only guess them.
        let first = f["first_us"].as_u64();
        for r in matching
            .into_iter()
            .filter(|r| r["start_us"].as_u64() == first)
        {
            assert_eq!(
                endpoint(&r["client_addr"], &r["client_port"]),
                c,
                "{name}: client of {c} -> {s}"
            );
            // tshark knows the roles of a TCP flow without SYN or SYN+ACK
            // from its first DNS query; the probe, which does not decode
            // DNS over TCP, guesses them (and must guess right, above).
            let no_handshake = f["proto"] == "tcp"
                && f["handshake"]["syn_count"] == 0
                && f["handshake"]["synack_count"] == 0;
            assert_eq!(
                r["direction_guessed"], no_handshake,
                "{name}: {c} -> {s} roles are certain"
            );
        }
    }
    for f in oracle {
        let Some(v) = f["vlan"].as_str() else {
            continue;
        };
        let want: u64 = v.parse().unwrap();
        let c = endpoint(&f["src_ip"], &f["src_port"]);
        let found = recs.iter().any(|r| {
            r["vlan"].as_u64() == Some(want)
                && [
                    endpoint(&r["client_addr"], &r["client_port"]),
                    endpoint(&r["server_addr"], &r["server_port"]),
                ]
                .iter()
                .any(|e| strip_port(e) == strip_port(&c))
        });
        assert!(found, "{name}: no record with VLAN {want} for {c}");
    }
}

#[test]
fn corpus_counts_equal_tshark() {
    if !require(have("tshark"), "tshark is not installed") {
        return;
    }
    let mut checked = 0;
    for cap in corpus_captures().into_iter().chain(extra_captures()) {
        let name = cap.file_name().unwrap().to_string_lossy().to_string();
        let o = oracle::run(&cap, false);
        // Long timeouts: tshark has none, so nothing splits a flow here.
        let recs = xdprobe_json(&cap, &["--idle-timeout", "24h", "--active-timeout", "24h"]);
        compare(&name, &recs, &o.flows, &icmp_errors_of(&cap, &o));
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} corpus captures checked");
}

#[test]
fn corpus_counts_hold_with_short_timeouts() {
    // Active/idle timeouts split flows into several records; the sums stay.
    if !require(have("tshark"), "tshark is not installed") {
        return;
    }
    for name in [
        "ipfixprobe_mixed.pcap",
        "zeek_missing-syn.pcap",
        "pk_tcp_dupack.pcapng",
        "zeek_http-bro.org.pcap",
    ] {
        let cap = corpus_dir().join(name);
        let o = oracle::run(&cap, false);
        let recs = xdprobe_json(&cap, &["--idle-timeout", "2s", "--active-timeout", "1s"]);
        compare(name, &recs, &o.flows, &icmp_errors_of(&cap, &o));
    }
}

#[test]
fn demo_capture_counts_equal_tshark() {
    if !require(have("tshark"), "tshark is not installed") {
        return;
    }
    let cap = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo.pcap");
    let o = oracle::run(&cap, true);
    let recs = xdprobe_json(&cap, &["--idle-timeout", "24h", "--active-timeout", "24h"]);
    assert!(
        o.flows.len() >= 10,
        "demo capture has only {} flows",
        o.flows.len()
    );
    compare("demo.pcap", &recs, &o.flows, &icmp_errors_of(&cap, &o));
}

#[test]
fn fresh_capture_with_many_flows_counts_equal_tshark() {
    // Real kernel traffic made now (not a fixed file): bulk TCP both ways,
    // HTTP-like transfers, TLS, DNS, keep-alive, a refused connection and
    // 300 short UDP + 30 short TCP flows, through the project's impairing
    // bridge with loss, reordering and duplication.
    if !live_support::rig::can_run() {
        return;
    }
    let dir = TempDir::new("golden");
    let rig = live_support::rig::Rig {
        seconds: 5,
        bulk_kbit: 2000,
        loss_pct: 2.0,
        reorder_pct: 2.0,
        dup_pct: 1.0,
        short_flows: 300,
        seed: 11,
        ..Default::default()
    };
    let cap = rig.capture(&dir.0, "cap");
    let o = oracle::run(&cap, true);
    assert!(
        o.flows.len() >= 300,
        "only {} flows captured",
        o.flows.len()
    );
    let recs = xdprobe_json(&cap, &["--idle-timeout", "24h", "--active-timeout", "24h"]);
    compare("fresh capture", &recs, &o.flows, &icmp_errors_of(&cap, &o));
}

#[test]
fn corpus_sources_describe_every_file() {
    // Every file of tests/corpus has its origin, licence, size and SHA-256
    // in SOURCES.tsv, and nothing listed is missing or changed.
    let dir = corpus_dir();
    let text = std::fs::read_to_string(dir.join("SOURCES.tsv")).expect("SOURCES.tsv");
    let mut listed = std::collections::BTreeSet::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 6, "SOURCES.tsv line {line:?}");
        let (name, origin, licence, bytes, sha) = (f[0], f[1], f[2], f[3], f[4]);
        assert!(!origin.is_empty() && !licence.is_empty(), "{name}");
        let data = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(bytes, data.len().to_string(), "{name}: size");
        let sum = std::process::Command::new("sha256sum")
            .arg(dir.join(name))
            .output()
            .expect("sha256sum");
        let got = String::from_utf8_lossy(&sum.stdout);
        assert_eq!(got.split_whitespace().next(), Some(sha), "{name}: sha256");
        listed.insert(name.to_string());
    }
    // Sub-folders (captures of one test, with a SOURCES.md of the commands
    // that made them) are listed file by file as `folder/file`.
    let mut files = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().is_dir() {
            for f in std::fs::read_dir(e.path()).unwrap() {
                let f = f.unwrap().file_name().to_string_lossy().into_owned();
                if f != "SOURCES.md" {
                    files.push(format!("{name}/{f}"));
                }
            }
        } else if name != "SOURCES.tsv" {
            files.push(name);
        }
    }
    for name in files {
        assert!(listed.contains(&name), "{name} is not in SOURCES.tsv");
    }
}
