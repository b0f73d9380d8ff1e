//! The messages as decoded by an independent IPFIX parser (the `ipfix`
//! crate, RFC 7011). It keys fields by element ID only and prints only IANA
//! elements it knows, so values are checked in uniflow mode (no reverse
//! elements sharing an ID) and the NPM elements are checked by tshark and
//! pmacct instead (tests/collectors.rs).
//!
//! The crate panics on variable-length fields, so the observation-domain-name
//! sets (template 259) are cut out of each message first and decoded by the
//! small reader in `common::strip_domain_name`; tshark checks them too.

mod common;

use common::*;
use serde_json::Value;
use xdprobe_exporter::encode::{Encoder, ExportClock};
use xdprobe_exporter::ie::PEN_DOCUMENTATION;
use xdprobe_exporter::template::{Format, Mode, OptionsValues, Profile, Templates};
use xdprobe_exporter::{CollectorSpec, Exporter, ExporterConfig};

/// Over 255 bytes with multi-byte characters: the 3-byte length form.
const NAME: &str = "xdprobe tëst-host: \
    eth0,eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8,eth9,eth10,eth11,eth12,eth13,eth14,\
    eth15,eth16,eth17,eth18,eth19,eth20,eth21,eth22,eth23,eth24,eth25,eth26,eth27,eth28,\
    eth29,eth30,eth31,eth32,eth33,eth34,eth35,eth36,eth37,eth38,eth39 → uplink ✓";

const CLOCK: ExportClock = ExportClock {
    unix_secs: 1_709_300_000,
    uptime_ms: 5,
};

/// Encode `recs` into as many messages as the size cap needs; templates in
/// the first one.
fn encode_all(
    mode: Mode,
    profile: Profile,
    recs: &[xdprobe_dataplane::FlowRecord],
    max: usize,
) -> Vec<Vec<u8>> {
    let t = Templates::new(Format::Ipfix, mode, profile, PEN_DOCUMENTATION);
    let mut e = Encoder::new(Format::Ipfix, mode, t, 7, max).unwrap();
    e.set_domain_name(NAME);
    let mut out = Vec::new();
    e.write_templates(CLOCK).unwrap();
    assert_eq!(e.write_domain_name(CLOCK), Ok(true));
    for r in recs {
        if e.write_record(r, CLOCK).is_err() {
            out.push(e.finish().unwrap().to_vec());
            e.write_record(r, CLOCK).unwrap();
        }
    }
    let v = OptionsValues {
        observation_domain: 7,
        exported_messages: 3,
        exported_records: 42,
        ..Default::default()
    };
    if e.write_options(&v, CLOCK).is_err() {
        out.push(e.finish().unwrap().to_vec());
        e.write_options(&v, CLOCK).unwrap();
    }
    out.push(e.finish().unwrap().to_vec());
    out
}

fn decode(msgs: Vec<Vec<u8>>) -> Vec<Value> {
    decode_all(msgs).0
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn uniflow_values_match_the_records() {
    let recs: Vec<_> = (0..40).map(tcp_record).collect();
    let msgs = encode_all(Mode::Uniflow, Profile::Xdprobe, &recs, 1452);
    assert!(
        msgs.len() > 3,
        "40 × 2 records must need several 1452-byte messages"
    );
    for m in &msgs {
        assert!(m.len() <= 1452, "message of {} bytes over the cap", m.len());
    }
    let got = decode(msgs);
    let flows: Vec<&Value> = got
        .iter()
        .filter(|v| v.get("sourceTransportPort").is_some())
        .collect();
    assert_eq!(flows.len(), 80, "two uniflow records per connection");
    for (i, r) in recs.iter().enumerate() {
        let (c2s, s2c) = (flows[2 * i], flows[2 * i + 1]);
        assert_eq!(c2s["sourceIPv4Address"], "192.0.2.10");
        assert_eq!(c2s["destinationIPv4Address"], "198.51.100.20");
        assert_eq!(u(c2s, "sourceTransportPort"), u64::from(r.client_port));
        assert_eq!(u(c2s, "destinationTransportPort"), 443);
        assert_eq!(u(c2s, "protocolIdentifier"), 6);
        assert_eq!(u(c2s, "vlanId"), 100);
        assert_eq!(u(c2s, "octetDeltaCount"), r.c2s.bytes);
        assert_eq!(u(c2s, "packetDeltaCount"), r.c2s.packets);
        assert_eq!(u(c2s, "tcpControlBits"), u64::from(r.c2s.tcp_flags));
        assert_eq!(u(c2s, "flowEndReason"), 3);
        assert_eq!(u(c2s, "flowStartMilliSeconds"), r.start.as_micros() / 1_000);
        assert_eq!(u(c2s, "flowEndMilliSeconds"), r.end.as_micros() / 1_000);
        // NTP seconds: Unix + 2208988800 (RFC 7011 §6.1.9), high 32 bits.
        assert_eq!(
            u(c2s, "flowStartMicroSeconds") >> 32,
            r.start.as_nanos() / 1_000_000_000 + 2_208_988_800
        );
        assert_eq!(s2c["sourceIPv4Address"], "198.51.100.20");
        assert_eq!(u(s2c, "sourceTransportPort"), 443);
        assert_eq!(u(s2c, "destinationTransportPort"), u64::from(r.client_port));
        assert_eq!(u(s2c, "octetDeltaCount"), r.s2c.bytes);
        assert_eq!(u(s2c, "packetDeltaCount"), r.s2c.packets);
    }
    let opts: Vec<&Value> = got
        .iter()
        .filter(|v| v.get("exportedFlowTotalCount").is_some())
        .collect();
    assert_eq!(opts.len(), 1);
    assert_eq!(u(opts[0], "exportedFlowTotalCount"), 42);
    assert_eq!(u(opts[0], "exportedMessageTotalCount"), 3);
}

#[test]
fn biflow_v4_and_v6_records_all_parse() {
    let recs = mixed_records(50);
    for profile in [Profile::Xdprobe, Profile::Ntop] {
        let msgs = encode_all(Mode::Biflow, profile, &recs, 1452);
        let got = decode(msgs);
        let v4 = got
            .iter()
            .filter(|v| v.get("sourceIPv4Address").is_some())
            .count();
        let v6: Vec<&Value> = got
            .iter()
            .filter(|v| v.get("sourceIPv6Address").is_some())
            .collect();
        assert_eq!(v4 + v6.len(), 50, "one biflow record per connection");
        assert_eq!(v6.len(), recs.iter().filter(|r| r.is_ipv6()).count());
        assert_eq!(
            v6[0]["sourceIPv6Address"],
            "2001:0db8:0000:0000:0000:0000:0000:0001"
        );
        assert_eq!(u(v6[0], "destinationTransportPort"), 53);
    }
}

#[test]
fn sequence_numbers_count_data_records() {
    let recs: Vec<_> = (0..30).map(tcp_record).collect();
    let msgs = encode_all(Mode::Biflow, Profile::Xdprobe, &recs, 1452);
    let first = decode(msgs[..1].to_vec()).len();
    let (_, names) = decode_all(msgs.clone());
    assert_eq!(
        names,
        vec![(7, NAME.to_string())],
        "one name record, 3-byte length form"
    );
    assert!(NAME.len() > 255);
    let mut expected = 0u32;
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(u16::from_be_bytes([m[0], m[1]]), 10);
        assert_eq!(usize::from(u16::from_be_bytes([m[2], m[3]])), m.len());
        assert_eq!(
            u32::from_be_bytes([m[4], m[5], m[6], m[7]]),
            CLOCK.unix_secs
        );
        assert_eq!(u32::from_be_bytes([m[8], m[9], m[10], m[11]]), expected);
        assert_eq!(u32::from_be_bytes([m[12], m[13], m[14], m[15]]), 7);
        // Data records the independent parser finds in this message (it
        // needs the templates of the first one), plus the name record(s)
        // cut out for it.
        let n = if i == 0 {
            first
        } else {
            decode(vec![msgs[0].clone(), m.clone()]).len() - first
        };
        expected += (n + strip_domain_name(m).1.len()) as u32;
    }
    assert_eq!(
        expected, 32,
        "30 flow records + 1 statistics record + 1 name record"
    );
}

#[test]
fn file_collector_writes_parseable_rfc5655_file() {
    let dir = std::env::temp_dir().join(format!("xdprobe-exp-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out.ipfix");
    let cfg = ExporterConfig {
        collectors: vec![
            CollectorSpec::parse(&format!("file://{}?mode=uniflow", path.display())).unwrap(),
        ],
        ..ExporterConfig::default()
    };
    let ex = Exporter::spawn(cfg).unwrap();
    let tx = ex.sender();
    let recs: Vec<_> = (0..500).map(tcp_record).collect();
    for r in &recs {
        tx.send_blocking(r.clone());
    }
    drop(tx);
    let stats = ex.shutdown().unwrap();
    assert_eq!(stats.records_received, 500);
    assert_eq!(stats.collectors[0].records, 1000);
    assert_eq!(stats.collectors[0].not_sent, 0);
    let bytes = std::fs::read(&path).unwrap();
    let msgs = split_ipfix(&bytes);
    let (got, names) = decode_all(msgs);
    // Default name; the host name as `uname -n` reports it.
    let host = std::process::Command::new("uname")
        .arg("-n")
        .output()
        .unwrap();
    let want = format!(
        "xdprobe on {}",
        String::from_utf8_lossy(&host.stdout).trim()
    );
    assert_eq!(
        names,
        vec![(1, want)],
        "file: templates and name once, at the start"
    );
    let ports: Vec<u64> = got
        .iter()
        .filter(|v| v.get("destinationTransportPort").is_some_and(|p| p == 443))
        .map(|v| u(v, "sourceTransportPort"))
        .collect();
    let want: Vec<u64> = recs.iter().map(|r| u64::from(r.client_port)).collect();
    assert_eq!(ports, want, "every record once, in order");
    let _ = std::fs::remove_dir_all(&dir);
}
