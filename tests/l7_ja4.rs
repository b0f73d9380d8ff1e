//! JA4 of the real `xdprobe` binary against FoxIO's published vectors: the
//! JA4 each stream's first ClientHello has in FoxIO-LLC/ja4's own test
//! snapshots (`tests/corpus/l7/foxio_ja4.expected.tsv`, taken from
//! `rust/ja4/src/snapshots`), on the captures they were made from (TLS over
//! TCP and QUIC, IPv4 and IPv6).
//!
//! One vector differs, by a named rule: FoxIO's snapshot of
//! `tls-non-ascii-alpn` has `99` for an ALPN whose first protocol is two
//! non-ASCII bytes (its implementations replace such characters by `9`);
//! JA4.md, the specification, says to use the first and last hex digits
//! of the protocol's bytes instead, which is what the probe does.

mod common;

use common::*;

/// (capture, client port, the spec's JA4 where FoxIO's snapshot differs).
const SPEC_OVER_SNAPSHOT: &[(&str, u16, &str)] = &[(
    "foxio_tls-non-ascii-alpn.pcapng",
    50112,
    // ALPN 0xba 0xad: first hex digit of 0xba, last of 0xad.
    "t13d1516bd_8daaf6152771_e5627efa2ab1",
)];

#[test]
fn ja4_equals_foxio_vectors() {
    let dir = corpus_dir().join("l7");
    let text = std::fs::read_to_string(dir.join("foxio_ja4.expected.tsv")).expect("vectors");
    let mut by_file: std::collections::BTreeMap<&str, Vec<Vec<&str>>> = Default::default();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 8, "{line}");
        by_file.entry(f[0]).or_default().push(f);
    }
    let (mut checked, mut by_rule) = (0, 0);
    for (file, vectors) in by_file {
        let recs = xdprobe_json(&dir.join(file), &["--idle-timeout", "24h", "--no-progress"]);
        for v in vectors {
            let (proto, sport) = (
                if v[1] == "tcp" { 6 } else { 17 },
                v[3].parse::<u64>().unwrap(),
            );
            let dport: u64 = v[5].parse().unwrap();
            let rec = recs
                .iter()
                .find(|r| {
                    r["proto"] == proto
                        && r["client_port"] == sport
                        && r["server_port"] == dport
                        && r["client_addr"]
                            .as_str()
                            .unwrap()
                            .parse::<std::net::IpAddr>()
                            .ok()
                            == v[2].parse().ok()
                })
                .unwrap_or_else(|| panic!("{file}: no record for {v:?}"));
            let want = match SPEC_OVER_SNAPSHOT
                .iter()
                .find(|(f, p, _)| *f == file && u64::from(*p) == sport)
            {
                Some((_, _, spec)) => {
                    by_rule += 1;
                    *spec
                }
                None => v[7],
            };
            assert_eq!(rec["tls_ja4"], want, "{file} {v:?}");
            let sni = if proto == 6 {
                &rec["tls_sni"]
            } else {
                &rec["quic_sni"]
            };
            if v[6] != "-" {
                assert_eq!(sni, v[6], "{file} {v:?}");
            }
            checked += 1;
        }
    }
    assert_eq!(by_rule, SPEC_OVER_SNAPSHOT.len(), "every rule applies");
    assert!(checked >= 90, "{checked} vectors");
    eprintln!("{checked} JA4 vectors equal, {by_rule} by the spec's ALPN rule");
}
