//! The L7 elements on the wire, read by collectors' decoders: tshark's
//! IPFIX/NetFlow dissector shows the IANA HTTP elements and
//! applicationName, and, in the ntop profile, nProbe's SSL server name,
//! HTTP and DNS elements; `netflow_parser` (an independent decoder that,
//! unlike the `ipfix` crate, reads variable-length fields) decodes every
//! record, the enterprise strings included. Separate templates per kind:
//! a DNS record's template has no HTTP element.

mod common;

use std::process::Command;

use common::*;
use xdprobe_exporter::encode::{Encoder, ExportClock};
use xdprobe_exporter::ie::PEN_DOCUMENTATION;
use xdprobe_exporter::template::{Format, Mode, Profile, Templates};
use xdprobe_exporter::template_l7::{L7Kind, TEMPLATE_ID_L7_BASE, covers_every_element};
use xdprobe_test_support::collect::write_udp_pcap;

const CLOCK: ExportClock = ExportClock {
    unix_secs: 1_709_300_000,
    uptime_ms: 5,
};

fn encode(format: Format, profile: Profile, max: usize) -> Vec<Vec<u8>> {
    let t = Templates::new(format, Mode::Biflow, profile, PEN_DOCUMENTATION);
    let mut e = Encoder::new(format, Mode::Biflow, t, 7, max).unwrap();
    let mut out = Vec::new();
    e.write_templates(CLOCK).unwrap();
    for r in l7_records() {
        // A template announced, then the record in the next message if it
        // did not fit: at most two tries past the first.
        let mut tries = 0;
        while e.write_record(&r, CLOCK).is_err() {
            out.push(e.finish().expect("a full message").to_vec());
            tries += 1;
            assert!(tries < 3, "record never fits");
        }
    }
    out.extend(e.finish().map(<[u8]>::to_vec));
    out
}

fn tshark_fields(msgs: &[Vec<u8>], port: u16, decode: &str, fields: &[&str]) -> Vec<String> {
    let dir = xdprobe_test_support::TempDir::new("l7ie");
    let pcap = dir.path().join("m.pcap");
    write_udp_pcap(&pcap, port, msgs);
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(&pcap).args([
        "-o",
        "cflow.max_template_fields:0",
        "-d",
        decode,
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=;",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let o = cmd.output().expect("tshark");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&pcap)
        .args(["-o", "cflow.max_template_fields:0", "-d", decode, "-V"])
        .output()
        .unwrap();
    let verbose = String::from_utf8_lossy(&v.stdout);
    assert!(
        !verbose.contains("Malformed") && !verbose.contains("no template found"),
        "{verbose}"
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn joined(lines: &[String]) -> String {
    lines.join("\n")
}

#[test]
fn l7_templates_per_kind_cover_every_element() {
    for (format, profile) in [
        (Format::Ipfix, Profile::Xdprobe),
        (Format::NetflowV9, Profile::Ntop),
    ] {
        let t = Templates::new(format, Mode::Biflow, profile, PEN_DOCUMENTATION);
        assert_eq!(t.l7.len(), 10);
        assert!(covers_every_element(&t.l7), "{format:?}");
        for (i, l) in t.l7.iter().enumerate() {
            assert_eq!(l.id, TEMPLATE_ID_L7_BASE + i as u16);
        }
        // The DNS template has no HTTP element and vice versa.
        let dns = &t.l7[L7Kind::Dns.index(false)];
        assert!(
            !dns.fields
                .iter()
                .any(|f| [457, 459, 460, 461].contains(&f.id))
        );
        let http = &t.l7[L7Kind::Http.index(false)];
        assert!(http.fields.iter().any(|f| f.id == 460));
    }
}

#[test]
fn tshark_shows_the_iana_and_ntop_l7_elements() {
    if !xdprobe_test_support::require(xdprobe_test_support::have("tshark"), "tshark") {
        return;
    }
    let f = [
        "cflow.appl_name",
        "cflow.http_request_method",
        "cflow.http_request_host",
        "cflow.http_request_target",
        "cflow.http_statuscode",
        "cflow.http_user_agent",
    ];
    let ipfix = joined(&tshark_fields(
        &encode(Format::Ipfix, Profile::Xdprobe, 1452),
        4739,
        "udp.port==4739,cflow",
        &f,
    ));
    for want in [
        "tls/h2",
        "quic/h3",
        "ssh",
        "GET",
        "web.example.net",
        "/orders?id=7",
        "503",
        "curl/7.88.1",
    ] {
        assert!(ipfix.contains(want), "IPFIX: {want} not in\n{ipfix}");
    }
    let n = [
        "cflow.pie.ntop.ssl_server_name",
        "cflow.pie.ntop.http_host",
        "cflow.pie.ntop.http_url",
        "cflow.pie.ntop.http_ret_code",
        "cflow.pie.ntop.dns_query",
        "cflow.pie.ntop.dns_ret_code",
    ];
    for (format, port) in [(Format::Ipfix, 4739), (Format::NetflowV9, 2055)] {
        let msgs = encode(format, Profile::Ntop, 1452);
        let got = joined(&tshark_fields(
            &msgs,
            port,
            &format!("udp.port=={port},cflow"),
            &n,
        ));
        for want in [
            "www.example.com",
            "quic.example.org",
            "web.example.net",
            "/orders?id=7",
            "503",
            "dns.example.org",
        ] {
            assert!(got.contains(want), "{format:?} ntop: {want} not in\n{got}");
        }
    }
}

#[test]
fn netflow_parser_decodes_every_l7_record() {
    for format in [Format::Ipfix, Format::NetflowV9] {
        let msgs = encode(format, Profile::Xdprobe, 1452);
        let mut p = netflow_parser::NetflowParser::default();
        let mut text = String::new();
        for m in &msgs {
            let r = p.parse_bytes(m);
            assert!(r.error.is_none(), "{format:?}: {:?}", r.error);
            text.push_str(&serde_json::to_string(&r.packets).unwrap());
            if std::env::var("L7_DEBUG").is_ok() {
                eprintln!("{}", serde_json::to_string(&r.packets).unwrap());
            }
        }
        // Enterprise strings come out as their bytes (the decoder does not
        // know their type), IANA ones as text.
        let has = |s: &str| {
            let bytes: Vec<String> = s.bytes().map(|b| b.to_string()).collect();
            text.contains(s) || text.contains(&format!("[{}", bytes.join(",")))
        };
        for want in [
            "www.example.com",
            "h2,http/1.1",
            "cert.example.com",
            "t13d1516h2_8daaf6152771_e5627efa2ab1",
            "quic.example.org",
            "dns.example.org",
            "v6.example.org",
            "web.example.net",
            "/orders?id=7",
            "tls/h2",
            "ssh",
        ] {
            assert!(has(want), "{format:?}: {want}");
        }
        assert!(!has("unknown"), "no record is labelled unknown");
    }
}

/// Every format, mode and profile takes a 1472-byte message (a 1500-byte
/// MTU over UDP/IPv4): its templates, and each L7 record at its longest
/// (uniflow: two at once). NetFlow v9's fixed-length strings are sized for
/// this (`ie_l7::v9_len`).
#[test]
fn every_template_set_fits_the_default_message() {
    use xdprobe_exporter::encode::Encoder;
    use xdprobe_exporter::template::{Format, Mode, Profile, Templates};
    for f in [Format::Ipfix, Format::NetflowV9] {
        for m in [Mode::Biflow, Mode::Uniflow] {
            for p in [Profile::Xdprobe, Profile::Ntop] {
                let t = Templates::new(f, m, p, 32473);
                let got = Encoder::new(f, m, t, 1, 1472).map(|_| ());
                assert_eq!(got, Ok(()), "{f:?} {m:?} {p:?}: bytes needed");
            }
        }
    }
}
