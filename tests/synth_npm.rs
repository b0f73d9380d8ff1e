//! The synthetic NPM captures (`tests/corpus/synth_npm_{v4,v6,vlan}.pcap`)
//! against the values their generator built into them
//! (`tests/corpus/synth_npm.expected.json`, `SOURCES.tsv`): timestamps and
//! segments were chosen so that each metric of `docs/spec/npm-metrics.md`
//! has one exact value. The reference is the generator's, not xdprobe's;
//! tshark's view of the same captures is `tests/npm_oracle.rs`.

mod common;

use common::{corpus_dir, xdprobe_json};
use serde_json::Value;

/// IP + TCP header bytes per packet (the generator sets no IP or TCP
/// options; a record's bytes are IP bytes).
const V4_HEADERS: u64 = 20 + 20;
const V6_HEADERS: u64 = 40 + 20;

fn expected() -> Value {
    let path = corpus_dir().join("synth_npm.expected.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("synth_npm.expected.json is JSON")
}

fn n(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

#[test]
fn synth_npm_records_carry_the_values_built_into_the_captures() {
    let e = expected();
    let vlan = n(&e, "vlan");
    for (file, headers, vlan) in [
        ("synth_npm_v4.pcap", V4_HEADERS, None),
        ("synth_npm_v6.pcap", V6_HEADERS, None),
        ("synth_npm_vlan.pcap", V4_HEADERS, Some(vlan)),
    ] {
        let recs = xdprobe_json(&corpus_dir().join(file), &[]);
        assert_eq!(recs.len(), 2, "{file}: one TCP and one DNS flow: {recs:?}");
        let proto = |p: u64| {
            recs.iter()
                .find(|r| r["proto"] == p)
                .unwrap_or_else(|| panic!("{file}: no flow of protocol {p}"))
        };
        let (tcp, dns) = (proto(6), proto(17));
        for r in [tcp, dns] {
            assert_eq!(r["vlan"].as_u64(), vlan, "{file}: {r}");
        }

        // §1: the handshake's two halves and their sum.
        assert_eq!(n(tcp, "server_net_us"), n(&e, "server_nt_us"), "{file}");
        assert_eq!(n(tcp, "client_net_us"), n(&e, "client_nt_us"), "{file}");
        assert_eq!(n(tcp, "rtt_us"), n(&e, "initial_rtt_us"), "{file}");
        // §2: the generator's `srt_first_us` is Δt_rr, the first response
        // (50 ms) less the request before it (16 ms); the spec's SRT takes
        // the server network time off it.
        let srt = n(&e, "srt_first_us").saturating_sub(n(&e, "server_nt_us"));
        assert_eq!(n(tcp, "srt_us"), srt, "{file}");
        assert_eq!(n(tcp, "srt_count"), 1, "{file}");
        assert_eq!(n(dns, "srt_us"), n(&e, "dns_time_us"), "{file}: DNS");

        let (c2s, s2c) = (&tcp["c2s"], &tcp["s2c"]);
        let c2s_packets = n(&e, "tcp_packets_c2s");
        let s2c_packets = n(&e, "tcp_packets_s2c");
        assert_eq!(n(c2s, "packets"), c2s_packets, "{file}");
        assert_eq!(n(s2c, "packets"), s2c_packets, "{file}");
        // The retransmitted segment counts on the wire, once more.
        assert_eq!(
            n(s2c, "bytes"),
            n(&e, "s2c_payload_on_wire") + s2c_packets * headers,
            "{file}"
        );
        assert_eq!(
            n(c2s, "bytes"),
            n(&e, "c2s_payload") + c2s_packets * headers,
            "{file}"
        );

        // §3: one segment reordered (out of order, not a retransmission),
        // one sent again 200 ms later (an ordinary retransmission); the
        // client's direction has neither.
        assert!(e["reordered_segment"].is_string() && e["retransmitted_segment"].is_string());
        assert_eq!(
            (n(s2c, "ooo"), n(s2c, "retrans"), n(s2c, "retrans_other")),
            (1, 1, 1),
            "{file}: {s2c}"
        );
        assert_eq!((n(c2s, "ooo"), n(c2s, "retrans")), (0, 0), "{file}: {c2s}");
    }
}
