//! `Exporter::live_stats`, what the metrics endpoint shows of the export
//! while it runs: the datagrams a real UDP socket receives, and a TCP
//! collector nobody listens on seen as down with its records queued.

mod common;

use std::net::{TcpListener, UdpSocket};
use std::time::Duration;

use common::{tcp_record, wait_stats};
use xdprobe_exporter::{CollectorSpec, Exporter, ExporterConfig};

#[test]
fn live_stats_follow_the_collectors() {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // A port that was free a moment ago: connecting to it is refused.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let urls = [
        format!("udp://{}", udp.local_addr().unwrap()),
        format!("tcp://{dead}"),
    ];
    let ex = Exporter::spawn(ExporterConfig {
        collectors: urls
            .iter()
            .map(|u| CollectorSpec::parse(u).unwrap())
            .collect(),
        ..ExporterConfig::default()
    })
    .unwrap();
    let tx = ex.sender();
    for i in 0..40 {
        tx.send(tcp_record(i)).unwrap();
    }
    let s = wait_stats(&ex, |s| {
        s.records_received == 40 && s.collectors.len() == 2 && s.collectors[0].records == 40
    });
    let (u, t) = (&s.collectors[0], &s.collectors[1]);
    assert_eq!((u.url.as_str(), u.connected), (urls[0].as_str(), None));
    assert!(u.messages >= 1, "{u:?}");
    assert_eq!(t.connected, Some(false), "{t:?}");
    assert_eq!((t.records, t.connects, t.queued), (0, 0, 40), "{t:?}");
    drop(tx);
    let end = ex.shutdown().unwrap();
    assert_eq!(end.collectors[1].not_sent, 40, "queued records never sent");
    // Every message the exporter counted is a datagram the socket got.
    let mut datagrams = 0u64;
    let mut buf = [0u8; 65_536];
    while udp.recv(&mut buf).is_ok() {
        datagrams += 1;
    }
    assert_eq!(datagrams, end.collectors[0].messages);
}
