//! L7 fields of the real `xdprobe` binary against tshark (Wireshark 4.0)
//! on every capture of `tests/corpus` and `tests/corpus/l7` (and the
//! optional `$XDPROBE_SHARED/corpus`): per flow, the TLS server name, JA3,
//! ALPN offered, negotiated version and cipher, certificate name; QUIC's
//! version, server name and ALPN; HTTP's first request, last status,
//! request count and responses by class, and the per-transaction response
//! times; DNS's first question, first response code, answer count and
//! address, and responses by code. A flow `xdprobe` labels with a
//! protocol tshark does not see is a difference too.
//!
//! Every difference is named by a rule (`Rule`, docs/l7.md "Where tshark
//! and xdprobe differ") and listed exactly: a listed difference that does
//! not happen fails, so does one not listed.

mod common;
mod l7_support;
mod live_support;

use std::path::PathBuf;

use common::*;
use l7_support::oracle::{Diff, as_tshark, diffs};

/// Why `xdprobe` and tshark differ on a field (docs/l7.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// The probe does not reassemble IP fragments: a DNS response in
    /// fragments is read from its first fragment, whose answers are cut.
    DnsFragmentedResponse,
    /// A response counts from its head; tshark reports it only once its
    /// body reassembles, which a lost body segment prevents.
    HttpResponseBodyLost,
    /// An HTTP/0.9 request (`GET /` without a version) is not HTTP/1.x:
    /// no label, no fields; tshark decodes it.
    Http09,
    /// The response time starts at the request's last packet; tshark,
    /// timing each message from its first segment, times a request with a
    /// body from its head.
    HttpSrtRequestBody,
    /// ... and a request whose head spans segments from its first one.
    HttpSrtSplitRequestHead,
    /// Without reassembly tshark does not see a response whose head
    /// follows the previous body in the same segment (pipelining): it has
    /// fewer response times.
    HttpSrtPipelinedResponses,
    /// `dns_answer_addr` is the first A/AAAA of the answer section;
    /// tshark's `dns.a` also lists those of the additional section (an MX
    /// answer's glue).
    DnsAddressInAdditionalSection,
}

/// Every difference in the corpus: (capture, a port of the flow, field
/// prefix, rule).
const EXCEPTIONS: &[(&str, u16, &str, Rule)] = &[
    // Query and answer for AAAA records in 3 IPv6 fragments (frames 6-8
    // and 11-13): the first fragment ends before the answers.
    (
        "zeek_ipv6-fragmented-dns.pcap",
        51850,
        "dns_answer_addr",
        Rule::DnsFragmentedResponse,
    ),
    (
        "zeek_ipv6-fragmented-dns.pcap",
        51851,
        "dns_answer_addr",
        Rule::DnsFragmentedResponse,
    ),
    // The first response's body lost a segment (frame 179: "previous
    // segment not captured"): tshark never completes it.
    (
        "zeek_http-bro.org.pcap",
        55081,
        "http_classes",
        Rule::HttpResponseBodyLost,
    ),
    // An MX query (in three VLANs): A records only as glue.
    (
        "ipfixprobe_vlan.pcap",
        32795,
        "dns_answer_addr",
        Rule::DnsAddressInAdditionalSection,
    ),
    // This project's own capture (tests/l7_live.rs, the same rules there):
    // a POST of 3000 bytes, a head in three segments 10 ms apart, three
    // pipelined requests.
    (
        "xdprobe_l7-traffic.pcap",
        37816,
        "http_srt",
        Rule::HttpSrtRequestBody,
    ),
    (
        "xdprobe_l7-traffic.pcap",
        37852,
        "http_srt",
        Rule::HttpSrtSplitRequestHead,
    ),
    (
        "xdprobe_l7-traffic.pcap",
        37836,
        "http_srt",
        Rule::HttpSrtPipelinedResponses,
    ),
    // "GET /\r\n" and a bare body.
    ("zeek_mixed-vlan-mpls.pcap", 50343, "http_", Rule::Http09),
];

fn captures() -> Vec<PathBuf> {
    let mut v = corpus_captures();
    let l7 = corpus_dir().join("l7");
    let mut more: Vec<PathBuf> = std::fs::read_dir(&l7)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    more.retain(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"));
    more.sort();
    v.extend(more);
    v.extend(extra_captures());
    v
}

/// Every capture compared, two at a time (tshark is most of the time).
fn compare_all(caps: Vec<PathBuf>) -> Vec<(PathBuf, (usize, Vec<Diff>))> {
    let one = |cap: &PathBuf| {
        let args = [
            "--idle-timeout",
            "24h",
            "--active-timeout",
            "24h",
            "--workers",
            "1",
            "--no-progress",
        ];
        let recs = xdprobe_json(cap, &args);
        (cap.clone(), diffs(cap, &recs))
    };
    let (a, b): (Vec<_>, Vec<_>) = caps.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    std::thread::scope(|s| {
        let h = s.spawn(|| b.iter().map(|(_, c)| one(c)).collect::<Vec<_>>());
        let mut out: Vec<_> = a.iter().map(|(_, c)| one(c)).collect();
        out.extend(h.join().expect("comparison thread"));
        out
    })
}

fn listed(d: &Diff) -> Option<Rule> {
    EXCEPTIONS.iter().find_map(|(cap, port, field, rule)| {
        let port_in = d.flow.2.1 == *port || d.flow.3.1 == *port;
        (d.capture == *cap && port_in && d.field.starts_with(field)).then_some(*rule)
    })
}

#[test]
fn l7_fields_equal_tshark_on_the_corpus() {
    if !require(have("tshark"), "tshark (the L7 oracle)") {
        return;
    }
    let mut unexplained = Vec::new();
    let mut hit = vec![false; EXCEPTIONS.len()];
    let mut flows = 0;
    for (cap, (n, diffs)) in compare_all(captures()) {
        flows += n;
        eprintln!(
            "{}: {n} flows with L7, {} differences",
            cap.display(),
            diffs.len()
        );
        for d in diffs {
            match listed(&d) {
                Some(_) => {
                    let i = EXCEPTIONS.iter().position(|(c, p, f, _)| {
                        d.capture == *c
                            && (d.flow.2.1 == *p || d.flow.3.1 == *p)
                            && d.field.starts_with(f)
                    });
                    if let Some(i) = i {
                        hit[i] = true;
                    }
                }
                None => unexplained.push(d),
            }
        }
    }
    assert!(flows > 100, "the corpus has L7 flows to compare ({flows})");
    for d in &unexplained {
        eprintln!(
            "UNEXPLAINED {} {:?} {}: tshark {} xdprobe {}",
            d.capture, d.flow, d.field, d.want, d.got
        );
    }
    let stale: Vec<_> = EXCEPTIONS
        .iter()
        .zip(&hit)
        .filter(|(_, h)| !**h)
        .map(|(e, _)| e)
        .collect();
    assert!(
        stale.is_empty(),
        "listed differences that did not happen: {stale:?}"
    );
    assert!(
        unexplained.is_empty(),
        "{} differences no rule names",
        unexplained.len()
    );
}

#[test]
fn l7_non_utf8_names_are_escaped_where_tshark_replaces() {
    assert_eq!(
        as_tshark(Some("\\xba\\xad".into())),
        Some("\u{fffd}\u{fffd}".into())
    );
    assert_eq!(
        as_tshark(Some("a\\x01b".into())),
        Some("a\\x01b".into()),
        "controls stay escaped"
    );
    assert_eq!(as_tshark(Some("plain".into())), Some("plain".into()));
}
