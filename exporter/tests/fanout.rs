//! Several collectors at once, and SIGHUP-style reconfiguration.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::*;
use xdprobe_exporter::{CollectorSpec, Exporter, ExporterConfig};

/// IPv4 flow records in the datagrams: data set (ID 256) bytes divided by
/// the record length announced in the first message's template. Decoding
/// itself is checked elsewhere (ipfix crate, tshark, collectors); this test
/// only counts who received what.
fn v4_records(dgrams: &[Vec<u8>]) -> usize {
    let rec_len = {
        // Template 256 of the first message: sum of field lengths.
        let m = &dgrams[0];
        let mut off = 16;
        let mut len = 0;
        while off + 4 <= m.len() {
            let id = u16::from_be_bytes([m[off], m[off + 1]]);
            let slen = usize::from(u16::from_be_bytes([m[off + 2], m[off + 3]]));
            if id == 2 {
                let count = u16::from_be_bytes([m[off + 6], m[off + 7]]);
                let mut p = off + 8;
                for _ in 0..count {
                    let fid = u16::from_be_bytes([m[p], m[p + 1]]);
                    len += usize::from(u16::from_be_bytes([m[p + 2], m[p + 3]]));
                    p += if fid & 0x8000 != 0 { 8 } else { 4 };
                }
                break;
            }
            off += slen;
        }
        len
    };
    let mut n = 0;
    for m in dgrams {
        let mut off = 16;
        while off + 4 <= m.len() {
            let id = u16::from_be_bytes([m[off], m[off + 1]]);
            let slen = usize::from(u16::from_be_bytes([m[off + 2], m[off + 3]]));
            if id == 256 {
                n += (slen - 4) / rec_len;
            }
            off += slen;
        }
    }
    n
}

#[test]
fn fan_out_and_reconfigure() {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let url = |s: &UdpSocket| {
        CollectorSpec::parse(&format!("udp://{}", s.local_addr().unwrap())).unwrap()
    };
    let cfg = ExporterConfig {
        collectors: vec![url(&a)],
        ..ExporterConfig::default()
    };
    let ex = Exporter::spawn(cfg).unwrap();
    let tx = ex.sender();
    for i in 0..100 {
        tx.send_blocking(tcp_record(i));
    }
    // A has the first 100 before B is added, and both have the next 150
    // before A is taken away.
    wait_stats(&ex, |s| {
        s.collectors.first().is_some_and(|c| c.records == 100)
    });
    ex.reconfigure(vec![url(&a), url(&b)]).unwrap();
    for i in 100..250 {
        tx.send_blocking(tcp_record(i));
    }
    wait_stats(&ex, |s| {
        s.collectors.len() == 2 && s.collectors.iter().all(|c| c.records >= 150)
    });
    // A bad URL is refused and leaves the running set alone.
    let bad = CollectorSpec {
        mode: xdprobe_exporter::Mode::Biflow,
        ..url(&a)
    };
    let tiny = ExporterConfig {
        mtu: 100,
        ..ExporterConfig::default()
    };
    assert!(
        xdprobe_exporter::Exporter::spawn(ExporterConfig {
            collectors: vec![bad],
            ..tiny
        })
        .is_err()
    );
    ex.reconfigure(vec![url(&b)]).unwrap();
    for i in 250..300 {
        tx.send_blocking(tcp_record(i));
    }
    drop(tx);
    let stats = ex.shutdown().unwrap();
    let da = recv_all(&a, Duration::from_millis(200));
    let db = recv_all(&b, Duration::from_millis(200));
    assert_eq!(
        v4_records(&da),
        250,
        "collector A: before and during the overlap"
    );
    assert_eq!(v4_records(&db), 200, "collector B: from when it was added");
    assert_eq!(stats.collectors.len(), 1);
}
