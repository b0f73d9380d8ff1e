//! The encoder's domain-name record: its options template, both length
//! forms, the cut to the message cap, and its place in the sequence.

use super::*;
use crate::ie::PEN_DOCUMENTATION;
use crate::template::{Profile, TEMPLATE_ID_DOMAIN_NAME};

const CLOCK: ExportClock = ExportClock {
    unix_secs: 1_709_300_000,
    uptime_ms: 1,
};

fn encoder(format: Format, max_len: usize) -> Encoder {
    let t = Templates::new(format, Mode::Biflow, Profile::Xdprobe, PEN_DOCUMENTATION);
    Encoder::new(format, Mode::Biflow, t, 0x0102_0304, max_len).unwrap()
}

/// (set ID, set body) of every set of an IPFIX message.
fn sets(m: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut off = ipfix::HEADER_LEN;
    while off + 4 <= m.len() {
        let id = u16::from_be_bytes([m[off], m[off + 1]]);
        let len = usize::from(u16::from_be_bytes([m[off + 2], m[off + 3]]));
        assert!(
            len >= 4 && off + len <= m.len(),
            "set length {len} at {off}"
        );
        out.push((id, &m[off + 4..off + len]));
        off += len;
    }
    assert_eq!(off, m.len(), "sets fill the message exactly");
    out
}

/// Templates + name record; returns the message.
fn first_message(e: &mut Encoder) -> Vec<u8> {
    e.write_templates(CLOCK).unwrap();
    e.write_domain_name(CLOCK).unwrap();
    e.finish().unwrap().to_vec()
}

#[test]
fn domain_name_template_announces_a_variable_length_string() {
    let mut e = encoder(Format::Ipfix, 1452);
    e.set_domain_name("xdprobe test");
    let m = first_message(&mut e);
    let opt: Vec<&[u8]> = sets(&m)
        .into_iter()
        .filter(|(id, _)| *id == ipfix::SET_OPTIONS_TEMPLATE)
        .map(|(_, b)| b)
        .collect();
    assert_eq!(opt.len(), 2, "statistics, then domain-name template set");
    // ID 259, 2 fields, 1 scope; 149 len 4; 300 len 65535 (RFC 7011 §7).
    assert_eq!(
        opt[1],
        &[1, 3, 0, 2, 0, 1, 0, 149, 0, 4, 1, 44, 0xFF, 0xFF][..]
    );
}

#[test]
fn domain_name_record_uses_short_and_long_length_forms() {
    for (n, prefix) in [
        (1usize, vec![1u8]),
        (254, vec![254]),
        (255, vec![255, 0, 255]),
        (256, vec![255, 1, 0]),
        (1000, vec![255, 3, 232]),
    ] {
        let name: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let mut e = encoder(Format::Ipfix, 9000);
        assert_eq!(e.set_domain_name(&name), name, "{n} bytes fit");
        let m = first_message(&mut e);
        let data: Vec<&[u8]> = sets(&m)
            .into_iter()
            .filter(|(id, _)| *id == TEMPLATE_ID_DOMAIN_NAME)
            .map(|(_, b)| b)
            .collect();
        assert_eq!(data.len(), 1, "one name record");
        let mut want = vec![1, 2, 3, 4];
        want.extend_from_slice(&prefix);
        want.extend_from_slice(name.as_bytes());
        assert_eq!(data[0], &want[..], "{n}-byte name");
    }
}

#[test]
fn oversized_name_is_cut_to_the_message_cap_on_a_char_boundary() {
    // 70 000 bytes: over the 16-bit length and over any message.
    let name = format!("xdprobe {}", "é".repeat(35_000));
    for max in [1452usize, 9000, 65_535] {
        let mut e = encoder(Format::Ipfix, max);
        let kept = e.set_domain_name(&name).to_string();
        assert!(name.starts_with(&kept) && kept.len() < name.len());
        let m = first_message(&mut e);
        assert!(m.len() <= max, "{} bytes over the {max} cap", m.len());
        // Tight: at most one byte lost to the character boundary.
        assert!(m.len() + 1 >= max, "{} bytes, cap {max}", m.len());
        assert!(
            sets(&m)
                .iter()
                .any(|(id, _)| *id == TEMPLATE_ID_DOMAIN_NAME)
        );
    }
}

#[test]
fn default_mtu_leaves_room_for_a_long_name() {
    // Largest templates (ntop profile, biflow), tightest cap (TCP/IPv6
    // at MTU 1500): the measured room was 665 bytes before the window
    // and table-eviction elements, 585 with them, less 2 x 96 bytes for
    // the 12 timestamp-RTT elements. A name must fit whole up to the
    // longest DNS name (253 bytes).
    let t = Templates::new(
        Format::Ipfix,
        Mode::Biflow,
        Profile::Ntop,
        PEN_DOCUMENTATION,
    );
    let mut e = Encoder::new(Format::Ipfix, Mode::Biflow, t, 1, 1428).unwrap();
    let n = e.set_domain_name(&"a".repeat(5000)).len();
    assert!(n >= 253, "room for the name: {n} bytes");
}

#[test]
fn nfv9_and_empty_names_send_nothing() {
    let mut v9 = encoder(Format::NetflowV9, 1452);
    let before = v9.template_sets_len();
    assert_eq!(v9.set_domain_name("xdprobe test"), "");
    assert_eq!(v9.template_sets_len(), before);
    assert_eq!(v9.write_domain_name(CLOCK), Ok(false));

    let mut e = encoder(Format::Ipfix, 1452);
    let before = e.template_sets_len();
    e.set_domain_name("x");
    assert_eq!(e.template_sets_len(), before + 18);
    e.set_domain_name("");
    assert_eq!(e.template_sets_len(), before);
    let m = first_message(&mut e);
    assert_eq!(sets(&m).len(), 2, "template set and statistics only");
}

#[test]
fn name_record_counts_in_the_sequence_number() {
    let mut e = encoder(Format::Ipfix, 1452);
    e.set_domain_name("xdprobe test");
    first_message(&mut e);
    e.write_options(&OptionsValues::default(), CLOCK).unwrap();
    let m = e.finish().unwrap();
    assert_eq!(u32::from_be_bytes([m[8], m[9], m[10], m[11]]), 1);
}
