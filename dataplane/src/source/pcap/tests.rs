//! Reader tests on well-formed hand-built files (see `testutil`): expected
//! values are written out from the specs, never taken from the reader's own
//! output. Damaged files are in `damage_tests`; the helpers here serve both.

use super::testutil::{self as tu, Order};
use super::*;
use crate::parse::LinkType;

/// An owned copy of a packet, for comparisons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Pkt {
    ts: u64,
    link: Option<LinkType>,
    linktype: u32,
    data: Vec<u8>,
    wire_len: u32,
    interface: u32,
}

impl Pkt {
    fn new(ts: u64, linktype: u32, data: &[u8], wire_len: u32, interface: u32) -> Self {
        Pkt {
            ts,
            link: LinkType::from_pcap(linktype),
            linktype,
            data: data.to_vec(),
            wire_len,
            interface,
        }
    }
}

/// Reads until the end or the first error; the loop is bounded so that a
/// reader that stopped advancing fails the test instead of hanging it.
pub(super) fn read_all(buf: &[u8]) -> Result<(Vec<Pkt>, Option<PcapError>), PcapError> {
    let mut r = PcapReader::from_bytes(buf)?;
    let mut out = Vec::new();
    for _ in 0..=buf.len() {
        let before = r.offset();
        match r.next_packet() {
            Ok(Some(p)) => {
                out.push(Pkt {
                    ts: p.ts.as_nanos(),
                    link: p.link,
                    linktype: p.linktype,
                    data: p.data.to_vec(),
                    wire_len: p.wire_len,
                    interface: p.interface,
                });
                assert!(r.offset() > before, "offset did not advance");
            }
            Ok(None) => return Ok((out, None)),
            Err(e) => {
                // The reader stays at the faulty record and repeats itself.
                assert_eq!(e.offset(), Some(r.offset()), "{e}");
                assert!(r.offset() >= before);
                let again = r.next_packet().map(|_| ()).unwrap_err();
                assert_eq!(again.to_string(), e.to_string());
                assert_eq!(e.offset(), Some(r.offset()));
                return Ok((out, Some(e)));
            }
        }
    }
    panic!(
        "reader neither ended nor failed within {} calls",
        buf.len() + 1
    );
}

pub(super) fn read_ok(buf: &[u8]) -> Vec<Pkt> {
    match read_all(buf) {
        Ok((pkts, None)) => pkts,
        Ok((_, Some(e))) | Err(e) => panic!("unexpected error: {e}"),
    }
}

pub(super) fn read_err(buf: &[u8]) -> PcapError {
    match read_all(buf) {
        Ok((_, Some(e))) | Err(e) => e,
        Ok((_, None)) => panic!("expected an error"),
    }
}

pub(super) fn concat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

const S: u64 = 1_000_000_000;

// ---------------- classic pcap ----------------

#[test]
fn pcap_classic_micro_and_nano_both_orders() {
    for order in [Order::Le, Order::Be] {
        for nanos in [false, true] {
            let (f1, f2) = (tu::frame(1, 60), tu::frame(2, 1514));
            let buf = concat(&[
                tu::pcap_header(order, nanos, 65535, 1),
                tu::pcap_record(order, 1_700_000_000, 123_456, &f1, 60),
                tu::pcap_record(order, 1_700_000_001, 999_999, &f2, 1514),
            ]);
            let unit = if nanos { 1 } else { 1_000 };
            let r = PcapReader::from_bytes(&buf[..]).unwrap();
            assert_eq!(r.format(), CaptureFormat::Pcap { nanos });
            assert_eq!(r.offset(), 24);
            assert_eq!(
                read_ok(&buf),
                vec![
                    Pkt::new(1_700_000_000 * S + 123_456 * unit, 1, &f1, 60, 0),
                    Pkt::new(1_700_000_001 * S + 999_999 * unit, 1, &f2, 1514, 0),
                ],
                "{order:?} nanos={nanos}"
            );
        }
    }
}

#[test]
fn pcap_classic_largest_timestamp_is_exact() {
    let buf = concat(&[
        tu::pcap_header(Order::Le, true, 0, 101),
        tu::pcap_record(Order::Le, u32::MAX, 999_999_999, &[0x45], 1),
    ]);
    assert_eq!(read_ok(&buf)[0].ts, 4_294_967_295_999_999_999);
}

#[test]
fn pcap_classic_fcs_bits_are_masked_off_the_link_type() {
    // FCS length 2 (16-bit words) and the "FCS length present" bit.
    let buf = concat(&[
        tu::pcap_header(Order::Be, false, 65535, 0x2400_0001),
        tu::pcap_record(Order::Be, 1, 0, &tu::frame(3, 64), 64),
    ]);
    let p = &read_ok(&buf)[0];
    assert_eq!((p.link, p.linktype), (Some(LinkType::Ethernet), 1));
}

#[test]
fn pcap_classic_link_types() {
    for (lt, link) in [
        (1, Some(LinkType::Ethernet)),
        (101, Some(LinkType::RawIp)),
        (113, Some(LinkType::LinuxSll)),
        (147, None), // LINKTYPE_USER0: not ours, caller counts a drop
    ] {
        let buf = concat(&[
            tu::pcap_header(Order::Le, false, 65535, lt),
            tu::pcap_record(Order::Le, 1, 0, &[0; 20], 20),
        ]);
        let p = &read_ok(&buf)[0];
        assert_eq!((p.link, p.linktype), (link, lt));
    }
}

#[test]
fn pcap_classic_clips_to_snaplen_and_wire_length() {
    let big = tu::frame(4, 200);
    let buf = concat(&[
        tu::pcap_header(Order::Le, false, 100, 1),
        tu::pcap_record(Order::Le, 1, 0, &big, 300), // caplen 200 > snaplen 100
        tu::pcap_record(Order::Le, 2, 0, &big[..80], 50), // caplen 80 > wire 50
        tu::pcap_record(Order::Le, 3, 0, &big[..90], 90), // fine
    ]);
    let mut r = PcapReader::from_bytes(&buf[..]).unwrap();
    let p = r.next_packet().unwrap().unwrap();
    assert_eq!((p.data, p.wire_len), (&big[..100], 300));
    let p = r.next_packet().unwrap().unwrap();
    assert_eq!((p.data, p.wire_len), (&big[..50], 50));
    let p = r.next_packet().unwrap().unwrap();
    assert_eq!(
        (p.data, p.wire_len, p.ts.as_nanos()),
        (&big[..90], 90, 3 * S)
    );
    assert!(r.next_packet().unwrap().is_none());
    assert_eq!(r.clipped_packets(), 2);
}

#[test]
fn pcap_classic_snaplen_zero_means_unlimited() {
    let f = tu::frame(5, 9000);
    let buf = concat(&[
        tu::pcap_header(Order::Le, false, 0, 1),
        tu::pcap_record(Order::Le, 1, 0, &f, 9000),
    ]);
    assert_eq!(read_ok(&buf)[0].data, f);
}

#[test]
fn pcap_classic_truncated_record_names_offset_and_sizes() {
    let buf = concat(&[
        tu::pcap_header(Order::Le, false, 65535, 1),
        tu::pcap_record(Order::Le, 1, 0, &[1; 10], 10),
        tu::pcap_record_raw(Order::Le, 2, 0, 100, 100, &[2; 10]),
    ]);
    let (pkts, err) = read_all(&buf).unwrap();
    assert_eq!(pkts.len(), 1);
    assert_eq!(
        err.unwrap().to_string(),
        "truncated packet record at byte 50: header says 100 bytes, 10 remain"
    );
}

#[test]
fn pcap_classic_absurd_caplen_is_an_error() {
    let buf = concat(&[
        tu::pcap_header(Order::Be, false, 65535, 1),
        tu::pcap_record_raw(Order::Be, 1, 0, 262_145, 262_145, &[0; 64]),
    ]);
    let e = read_err(&buf);
    assert!(
        matches!(
            e,
            PcapError::CaptureTooLarge {
                offset: 24,
                caplen: 262_145
            }
        ),
        "{e}"
    );
}

#[test]
fn pcap_bad_headers() {
    assert!(matches!(
        PcapReader::from_bytes(&[][..]),
        Err(PcapError::Empty)
    ));
    assert!(matches!(
        PcapReader::from_bytes(&b"GIF89a.........................."[..]),
        Err(PcapError::UnknownMagic { magic: 0x4749_4638 })
    ));
    let mut v = tu::pcap_header(Order::Le, false, 65535, 1);
    v[4] = 3; // major version 3
    assert!(matches!(
        PcapReader::from_bytes(&v[..]),
        Err(PcapError::UnsupportedVersion { major: 3, .. })
    ));
    let h = tu::pcap_header(Order::Le, false, 65535, 1);
    let e = PcapReader::from_bytes(&h[..20]).err().unwrap();
    assert_eq!(
        e.to_string(),
        "truncated pcap file header at byte 0: need 24 bytes, 20 remain"
    );
}

// ---------------- pcapng ----------------

#[test]
fn pcapng_interfaces_with_different_link_types_and_resolutions() {
    let o = Order::Le;
    let (f0, f1, f2, f3) = (
        tu::frame(10, 60),
        tu::frame(11, 40),
        tu::frame(12, 54),
        tu::frame(13, 33),
    );
    let buf = concat(&[
        tu::shb(o),
        tu::idb(o, 1, 65535, None, None),  // Ethernet, µs (default)
        tu::idb(o, 101, 0, Some(9), None), // raw IP, ns
        tu::idb(o, 113, 262144, Some(0x94), None), // SLL, 2^-20 s
        tu::idb(o, 1, 65535, Some(3), Some(-3600)), // ms, one hour back
        tu::epb(o, 0, 1_700_000_000_123_456, &f0, 60),
        tu::epb(o, 1, 1_700_000_000_123_456_789, &f1, 40),
        // 2^-20 s units: half a second, and the smallest tick (953.67.. ns).
        tu::epb(o, 2, (1_700_000_000 << 20) + (1 << 19), &f2, 54),
        tu::epb(o, 2, (1_700_000_000 << 20) + 1, &f2, 54),
        tu::epb(o, 3, 1_700_000_000_250, &f3, 33),
    ]);
    assert_eq!(
        read_ok(&buf),
        vec![
            Pkt::new(1_700_000_000_123_456_000, 1, &f0, 60, 0),
            Pkt::new(1_700_000_000_123_456_789, 101, &f1, 40, 1),
            Pkt::new(1_700_000_000_500_000_000, 113, &f2, 54, 2),
            Pkt::new(1_700_000_000_000_000_953, 113, &f2, 54, 2),
            Pkt::new(1_699_996_400_250_000_000, 1, &f3, 33, 3),
        ]
    );
    assert_eq!(
        PcapReader::from_bytes(&buf[..]).unwrap().format(),
        CaptureFormat::PcapNg
    );
}

#[test]
fn pcapng_big_endian_nanoseconds() {
    let o = Order::Be;
    let f = tu::frame(20, 70);
    let buf = concat(&[
        tu::shb(o),
        tu::idb(o, 1, 65535, Some(9), None),
        tu::epb(o, 0, 1_234_567_890_987_654_321, &f, 1500),
    ]);
    assert_eq!(
        read_ok(&buf),
        vec![Pkt::new(1_234_567_890_987_654_321, 1, &f, 1500, 0)]
    );
}

#[test]
fn pcapng_clock_conversions() {
    for (tsresol, offset, raw, ns) in pcapng_clock_cases() {
        let o = Order::Le;
        let buf = concat(&[
            tu::shb(o),
            tu::idb(o, 1, 0, Some(tsresol), offset),
            tu::epb(o, 0, raw, &[0; 14], 14),
        ]);
        assert_eq!(read_ok(&buf)[0].ts, ns, "tsresol {tsresol:#x} raw {raw}");
    }
}

/// (if_tsresol, if_tsoffset, raw timestamp, expected Unix ns), worked out by hand.
fn pcapng_clock_cases() -> Vec<(u8, Option<i64>, u64, u64)> {
    vec![
        (6, None, 1_000_001, S + 1_000),
        (0, None, 1_700_000_000, 1_700_000_000 * S),
        (12, None, 1_000_000_000_001_999, 1_000 * S + 1_999 / 1_000), // ps: rounds down
        (19, None, u64::MAX, 1_844_674_407),                          // 10^-19 s
        (0x80, None, 5, 5 * S),                                       // 2^0
        (0x89, None, 512 * 3 + 1, 3 * S + 1_953_125),                 // 2^-9: exact ns
        (0xbf, None, 1 << 62, S / 2),                                 // 2^-63
        (9, Some(1), 1, S + 1),
        // Out of range: handed out as OUT_OF_RANGE, which the worker drops
        // as timestamp_out_of_range (never a wrapped or clamped time).
        (6, Some(-10), 5_000_000, u64::MAX), // before 1970
        (0, None, u64::MAX, u64::MAX),       // 10^0: year 584e9
        (0x80, None, u64::MAX, u64::MAX),    // 2^0: the same
        (9, None, u64::MAX, u64::MAX),       // ns: year 2554
        (9, None, i64::MAX as u64, i64::MAX as u64), // the last time accepted
        (9, None, i64::MAX as u64 + 1, u64::MAX),
        (9, Some(i64::MAX), 0, u64::MAX),
        (9, Some(i64::MIN), u64::MAX, u64::MAX),
    ]
}

#[test]
fn classic_fraction_of_a_second_or_more_is_out_of_range() {
    for (nanos, frac, ns) in [
        (false, 999_999, 7 * S + 999_999_000),
        (false, 1_000_000, u64::MAX),
        (true, 999_999_999, 7 * S + 999_999_999),
        (true, 1_000_000_000, u64::MAX),
        (true, u32::MAX, u64::MAX),
    ] {
        let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        let mut buf = Vec::new();
        buf.extend_from_slice(&magic.to_le_bytes());
        buf.extend_from_slice(&[2, 0, 4, 0]);
        buf.extend_from_slice(&[0; 8]);
        buf.extend_from_slice(&65535u32.to_le_bytes());
        buf.extend_from_slice(&1u32.to_le_bytes());
        for v in [7u32, frac, 14, 14] {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        buf.extend_from_slice(&[0; 14]);
        assert_eq!(read_ok(&buf)[0].ts, ns, "nanos {nanos} fraction {frac}");
    }
}

#[test]
fn pcapng_simple_packet_blocks_take_the_previous_timestamp() {
    let o = Order::Le;
    let f = tu::frame(30, 100);
    let buf = concat(&[
        tu::shb(o),
        tu::idb(o, 1, 64, None, None), // snaplen 64
        tu::spb(o, &f[..64], 100),     // first packet: no earlier time
        tu::epb(o, 0, 7_000_001, &f[..64], 100),
        tu::spb(o, &f[..64], 100),
        tu::spb(o, &f[..30], 30), // shorter than snaplen: padding not data
    ]);
    assert_eq!(
        read_ok(&buf),
        vec![
            Pkt::new(0, 1, &f[..64], 100, 0),
            Pkt::new(7 * S + 1_000, 1, &f[..64], 100, 0),
            Pkt::new(7 * S + 1_000, 1, &f[..64], 100, 0),
            Pkt::new(7 * S + 1_000, 1, &f[..30], 30, 0),
        ]
    );
}

#[test]
fn pcapng_simple_packet_block_without_interface_is_an_error() {
    let o = Order::Be;
    let shb = tu::shb(o);
    let buf = concat(&[shb.clone(), tu::spb(o, &[1; 20], 20)]);
    let e = read_err(&buf);
    assert_eq!(
        e.to_string(),
        format!(
            "simple packet block at byte {} refers to interface 0, but its section has 0 interface(s)",
            shb.len()
        )
    );
}

#[test]
fn pcapng_obsolete_packet_block() {
    let o = Order::Be;
    let f = tu::frame(40, 42);
    let buf = concat(&[
        tu::shb(o),
        tu::idb(o, 1, 65535, None, None),
        tu::idb(o, 101, 65535, Some(9), None),
        tu::obsolete_pb(o, 1, 42 * S + 7, &f, 42),
    ]);
    assert_eq!(read_ok(&buf), vec![Pkt::new(42 * S + 7, 101, &f, 42, 1)]);
}

#[test]
fn pcapng_skips_other_blocks() {
    let o = Order::Le;
    let f = tu::frame(50, 60);
    let buf = concat(&[
        tu::shb(o),
        tu::nrb(o),
        tu::idb(o, 1, 65535, None, None),
        tu::custom(o, b"vendor data"),
        tu::epb(o, 0, 1, &f, 60),
        tu::block(o, 0x0000_000a, &[7; 40]), // decryption secrets
        tu::block(o, 0x1234_5678, &[]),      // unknown, empty body
        tu::isb(o, 2),
        tu::epb(o, 0, 3, &f, 60),
        tu::isb(o, 4),
    ]);
    let pkts = read_ok(&buf);
    let ts: Vec<u64> = pkts.iter().map(|p| p.ts).collect();
    assert_eq!(ts, [1_000, 3_000]);
}

#[test]
fn pcapng_sections_with_different_byte_orders() {
    let f = tu::frame(60, 48);
    let s1 = concat(&[
        tu::shb(Order::Le),
        tu::idb(Order::Le, 1, 65535, None, None),
        tu::epb(Order::Le, 0, 1_000_000, &f, 48),
    ]);
    let s2 = concat(&[
        tu::shb(Order::Be),
        tu::idb(Order::Be, 101, 65535, Some(9), None),
        tu::idb(Order::Be, 113, 65535, None, None),
        tu::epb(Order::Be, 1, 2_000_000, &f, 48),
        tu::epb(Order::Be, 0, 3, &f, 48),
    ]);
    let s3 = concat(&[
        tu::shb(Order::Le),
        tu::idb(Order::Le, 228, 65535, Some(0), None),
        tu::epb(Order::Le, 0, 4, &f, 48),
    ]);
    let buf = concat(&[s1.clone(), s2, s3]);
    assert_eq!(
        read_ok(&buf),
        vec![
            Pkt::new(S, 1, &f, 48, 0),
            Pkt::new(2 * S, 113, &f, 48, 1),
            Pkt::new(3, 101, &f, 48, 0),
            Pkt::new(4 * S, 228, &f, 48, 0),
        ]
    );
    // A section does not inherit the previous section's interfaces.
    let bad = concat(&[s1, tu::shb(Order::Be), tu::epb(Order::Be, 0, 1, &f, 48)]);
    assert!(matches!(
        read_err(&bad),
        PcapError::UnknownInterface {
            interface: 0,
            count: 0,
            ..
        }
    ));
}
