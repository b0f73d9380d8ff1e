//! Truncated, corrupt and randomly damaged files: the reader must end in a
//! clean error naming the offset (or a clean end), never panic or spin.

use super::tests::{concat, read_all, read_err, read_ok};
use super::testutil::{self as tu, Order};
use super::*;

/// A small pcapng file built from `parts` plus the byte offsets where a
/// reader may cleanly stop (after the header and after every block).
pub(super) fn pcapng_sample() -> (Vec<Vec<u8>>, Vec<u8>) {
    let f = tu::frame(70, 37);
    let parts = vec![
        tu::shb(Order::Le),
        tu::idb(Order::Le, 1, 65535, None, None),
        tu::epb(Order::Le, 0, 1, &f, 37),
        tu::nrb(Order::Le),
        tu::spb(Order::Le, &f, 37),
        tu::shb(Order::Be),
        tu::idb(Order::Be, 101, 30, Some(0x8a), Some(5)),
        tu::obsolete_pb(Order::Be, 0, 2048, &f[..30], 37),
        tu::epb(Order::Be, 0, 1, &f, 37),
    ];
    let buf = parts.concat();
    (parts, buf)
}

#[test]
fn truncated_at_every_length_never_panics() {
    let classic: Vec<Vec<Vec<u8>>> = [Order::Le, Order::Be]
        .into_iter()
        .map(|o| {
            vec![
                tu::pcap_header(o, false, 65535, 1),
                tu::pcap_record(o, 1, 2, &tu::frame(1, 21), 21),
                tu::pcap_record(o, 3, 4, &[], 60),
                tu::pcap_record(o, 5, 6, &tu::frame(2, 8), 8),
            ]
        })
        .collect();
    let samples = [classic[0].clone(), classic[1].clone(), pcapng_sample().0];
    for parts in samples {
        let full = parts.concat();
        let all = read_ok(&full);
        let mut boundaries = Vec::new();
        let mut end = 0;
        for p in &parts {
            end += p.len();
            boundaries.push(end);
        }
        for n in 0..=full.len() {
            let prefix = &full[..n];
            let (pkts, err) = match read_all(prefix) {
                Ok(r) => r,
                Err(_) => {
                    assert!(n < boundaries[0], "header error at {n}");
                    continue;
                }
            };
            assert_eq!(pkts[..], all[..pkts.len()], "prefix {n}");
            match err {
                None => assert!(boundaries.contains(&n), "clean end at {n}"),
                Some(e) => {
                    assert!(!boundaries.contains(&n), "error at a boundary {n}: {e}");
                    assert!(e.to_string().contains(" at byte "), "{e}");
                }
            }
        }
    }
}

/// Byte offsets of each part of a file made of `parts`.
fn offsets(parts: &[Vec<u8>]) -> Vec<usize> {
    parts
        .iter()
        .scan(0, |at, p| {
            let here = *at;
            *at += p.len();
            Some(here)
        })
        .collect()
}

#[test]
fn pcapng_corrupt_block_lengths() {
    let (parts, good) = pcapng_sample();
    let at = offsets(&parts);
    let epb_at = at[2]; // little-endian EPB
    let set_u32 = |buf: &mut Vec<u8>, off: usize, v: u32| {
        buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
    };
    let len = parts[2].len() as u32;

    let mut b = good.clone();
    set_u32(&mut b, epb_at + 4, len + 2);
    let e = read_err(&b);
    assert!(
        matches!(e, PcapError::BadBlockLength { offset, reason: "not a multiple of 4", .. } if offset == epb_at as u64),
        "{e}"
    );

    let mut b = good.clone();
    set_u32(&mut b, epb_at + 4, 8);
    assert!(matches!(
        read_err(&b),
        PcapError::BadBlockLength { len: 8, .. }
    ));

    let mut b = good.clone();
    set_u32(&mut b, epb_at + 4, 0);
    assert!(matches!(
        read_err(&b),
        PcapError::BadBlockLength { len: 0, .. }
    ));

    let mut b = good.clone();
    set_u32(&mut b, epb_at + 4, 0xffff_fff0);
    let e = read_err(&b);
    assert!(
        matches!(e, PcapError::TruncatedBlock { offset, .. } if offset == epb_at as u64),
        "{e}"
    );

    // Leading length still valid but pointing elsewhere: trailing differs.
    let mut b = good.clone();
    set_u32(&mut b, epb_at + 4, len + 4);
    let e = read_err(&b);
    assert!(
        matches!(e, PcapError::BlockLengthMismatch { offset, .. } if offset == epb_at as u64),
        "{e}"
    );

    // Trailing length damaged.
    let mut b = good.clone();
    set_u32(&mut b, epb_at + len as usize - 4, len + 4);
    assert!(matches!(
        read_err(&b),
        PcapError::BlockLengthMismatch { .. }
    ));

    // EPB body too short for its fixed fields.
    let short = tu::block(Order::Le, 6, &[0; 12]);
    let b = concat(&[parts[0].clone(), parts[1].clone(), short]);
    assert!(matches!(
        read_err(&b),
        PcapError::BadBlockLength { len: 24, .. }
    ));

    // Bad byte-order magic in a later section header.
    let mut b = good.clone();
    b[at[5] + 8] ^= 0xff;
    let e = read_err(&b);
    assert!(
        matches!(e, PcapError::BadByteOrderMagic { offset, .. } if offset == at[5] as u64),
        "{e}"
    );
    let (pkts, _) = read_all(&b).unwrap();
    assert_eq!(pkts.len(), 2, "packets before the bad section still read");
}

#[test]
fn pcapng_corrupt_packet_and_interface_fields() {
    let o = Order::Le;
    let head = concat(&[tu::shb(o), tu::idb(o, 1, 65535, None, None)]);
    let at = head.len() as u64;

    let b = concat(&[head.clone(), tu::epb_raw(o, 0, 1, 200, 200, &[0; 40])]);
    let e = read_err(&b);
    assert_eq!(
        e.to_string(),
        format!(
            "enhanced packet block at byte {at}: captured length 200 does not fit in the block's 52 data bytes"
        )
    );

    let b = concat(&[
        head.clone(),
        tu::epb_raw(o, 0, 1, 300_000, 300_000, &[0; 40]),
    ]);
    assert!(
        matches!(read_err(&b), PcapError::CaptureTooLarge { offset, caplen: 300_000 } if offset == at)
    );

    let b = concat(&[head.clone(), tu::epb(o, 7, 1, &[0; 40], 40)]);
    assert!(matches!(
        read_err(&b),
        PcapError::UnknownInterface {
            interface: 7,
            count: 1,
            ..
        }
    ));

    // if_tsresol 10^-20 does not fit in 64 bits.
    let b = concat(&[tu::shb(o), tu::idb(o, 1, 0, Some(20), None)]);
    assert!(matches!(
        read_err(&b),
        PcapError::BadTsResol { value: 20, .. }
    ));
    let b = concat(&[tu::shb(o), tu::idb(o, 1, 0, Some(0xc0), None)]);
    assert!(matches!(
        read_err(&b),
        PcapError::BadTsResol { value: 0xc0, .. }
    ));

    // An option claiming more bytes than the block holds.
    let body = tu::W::new(o)
        .u16(1)
        .u16(0)
        .u32(0)
        .u16(2)
        .u16(200)
        .u32(0)
        .out;
    let b = concat(&[tu::shb(o), tu::block(o, 1, &body)]);
    assert!(matches!(
        read_err(&b),
        PcapError::BadOption {
            code: 2,
            len: 200,
            ..
        }
    ));

    // Unsupported major version.
    let mut b = tu::shb(o);
    b[12] = 2;
    assert!(matches!(
        PcapReader::from_bytes(&b[..]),
        Err(PcapError::UnsupportedVersion { major: 2, .. })
    ));
}

#[test]
fn random_damage_never_panics_or_hangs() {
    let (_, ng) = pcapng_sample();
    let classic = concat(&[
        tu::pcap_header(Order::Le, true, 100, 1),
        tu::pcap_record(Order::Le, 1, 2, &tu::frame(1, 120), 120),
        tu::pcap_record(Order::Le, 3, 4, &tu::frame(2, 8), 8),
    ]);
    // A fixed-seed xorshift: reproducible without a rand dependency.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for good in [ng, classic] {
        for _ in 0..3000 {
            let mut b = good.clone();
            for _ in 0..(next() % 4 + 1) {
                let i = (next() % b.len() as u64) as usize;
                b[i] = next() as u8;
            }
            let _ = read_all(&b);
        }
    }
}

#[test]
fn open_reports_missing_and_empty_files() {
    let dir = std::env::temp_dir().join(format!("xdprobe-pcap-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.pcap");
    let e = PcapReader::open(&missing).err().unwrap();
    assert!(matches!(e, PcapError::Open { .. }), "{e}");
    assert!(e.to_string().contains("missing.pcap"));

    let empty = dir.join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let e = PcapReader::open(&empty).err().unwrap();
    assert!(matches!(e, PcapError::Empty), "{e}");

    let file = dir.join("one.pcapng");
    let f = tu::frame(80, 60);
    std::fs::write(
        &file,
        concat(&[
            tu::shb(Order::Le),
            tu::idb(Order::Le, 1, 0, None, None),
            tu::epb(Order::Le, 0, 5, &f, 60),
        ]),
    )
    .unwrap();
    let mut r = PcapReader::open(&file).unwrap();
    assert_eq!(r.next_packet().unwrap().unwrap().data, &f[..]);
    assert!(r.next_packet().unwrap().is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file of several page-in chunks, opened shared (its pages mapped by a
/// thread of their own while it is read), gives every packet with the
/// same bytes as the same file read from memory; an empty one is still
/// `Empty`.
#[test]
fn shared_open_of_a_file_larger_than_a_page_in_chunk_reads_every_packet() {
    let dir = std::env::temp_dir().join(format!("xdprobe-pcap-shared-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut buf = tu::pcap_header(Order::Le, false, 65535, 1);
    let mut n = 0u32;
    while buf.len() < 2 * PAGE_IN_CHUNK + 12_345 {
        let f = tu::frame(n as u8, 1000 + (n as usize % 500));
        buf.extend(tu::pcap_record(Order::Le, n, 0, &f, f.len() as u32));
        n += 1;
    }
    let file = dir.join("big.pcap");
    std::fs::write(&file, &buf).unwrap();
    let mut r = PcapReader::open_shared(&file).unwrap();
    let mut got = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        got.push((p.ts, p.data.to_vec()));
    }
    let mut mem = PcapReader::from_bytes(&buf[..]).unwrap();
    let mut want = Vec::new();
    while let Some(p) = mem.next_packet().unwrap() {
        want.push((p.ts, p.data.to_vec()));
    }
    assert_eq!(got.len(), n as usize);
    assert!(got == want, "the shared map read other bytes than memory");

    let empty = dir.join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let e = PcapReader::open_shared(&empty).err().unwrap();
    assert!(matches!(e, PcapError::Empty), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
