//! `Worker::on_batch` (prepare all, then process: speculative lookups that
//! are confirmed later) must give exactly the records of `on_frame` one
//! packet at a time, also when a batch ends and reuses flows (tiny table,
//! short timeouts: evictions and expiries inside batches).

use std::path::Path;
use std::time::Duration;

use xdprobe_dataplane::source::{Frame, pcap::PcapReader};
use xdprobe_dataplane::worker::BATCH;
use xdprobe_dataplane::{FlowConfig, FlowRecord, Worker};

fn capture() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo.pcap");
    std::fs::read(p).expect("assets/demo.pcap")
}

fn one_by_one(bytes: &[u8], cfg: &FlowConfig) -> Vec<FlowRecord> {
    let mut r = PcapReader::from_bytes(bytes).unwrap();
    let mut w = Worker::new(cfg);
    let mut out = vec![];
    while let Some(p) = r.next_packet().unwrap() {
        w.on_frame(p.link, p.data, p.wire_len, p.ts, &mut |x| out.push(x));
    }
    w.flush(&mut |x| out.push(x));
    out
}

fn batched(bytes: &[u8], cfg: &FlowConfig) -> Vec<FlowRecord> {
    let mut r = PcapReader::from_bytes(bytes).unwrap();
    let mut w = Worker::new(cfg);
    let mut out = vec![];
    loop {
        let mut batch = [Frame::default(); BATCH];
        match r.next_batch(&mut batch).unwrap() {
            0 => break,
            n => w.on_batch(&batch[..n], &mut |x| out.push(x)),
        }
    }
    w.flush(&mut |x| out.push(x));
    out
}

#[test]
fn batched_equals_one_by_one() {
    let bytes = capture();
    let configs = [
        FlowConfig::default(),
        FlowConfig {
            capacity: 3,
            idle_timeout: Duration::from_millis(50),
            active_timeout: Duration::from_millis(200),
            tcp_linger: Duration::from_millis(1),
            ..FlowConfig::default()
        },
    ];
    for cfg in &configs {
        let a = one_by_one(&bytes, cfg);
        let b = batched(&bytes, cfg);
        assert!(a.len() > 10, "{} records", a.len());
        assert_eq!(a.len(), b.len());
        assert!(a == b, "records differ for {cfg:?}");
    }
}
