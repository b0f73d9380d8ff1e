//! Records encoded per second on one core (goal ≥ 2 M/s): the record →
//! bytes path of the exporter thread, message finishing included, no I/O.
//! Setup (templates, records) is outside the timed region.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use xdprobe_dataplane::record::{DirStats, Npm};
use xdprobe_dataplane::{EndReason, FlowRecord, Timestamp};
use xdprobe_exporter::encode::{Encoder, ExportClock};
use xdprobe_exporter::ie::PEN_DOCUMENTATION;
use xdprobe_exporter::template::{Format, Mode, Profile, Templates};

fn record(i: u32, v6: bool) -> FlowRecord {
    let (c, s): (IpAddr, IpAddr) = if v6 {
        (
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
        )
    } else {
        ([192, 0, 2, 1].into(), [198, 51, 100, 2].into())
    };
    let d = DirStats {
        packets: 10,
        bytes: 1000,
        tcp_flags: 0x1b,
        retrans: 1,
        ..DirStats::default()
    };
    FlowRecord {
        client_addr: c,
        client_port: i as u16,
        server_addr: s,
        server_port: 443,
        proto: 6,
        vlan: Some(7),
        direction_guessed: false,
        start: Timestamp::from_nanos(1_700_000_000_000_000_000 + u64::from(i)),
        end: Timestamp::from_nanos(1_700_000_001_000_000_000 + u64::from(i)),
        end_reason: EndReason::Idle,
        tos: 0,
        c2s: d,
        s2c: d,
        npm: Npm {
            rtt_us: Some(100),
            srt_us: Some(50),
            srt_count: 1,
            ..Npm::default()
        },
        seq_in_flow: 0,
        process: None,
        app: None,
        l7: None,
    }
}

fn bench(c: &mut Criterion) {
    let recs: Vec<FlowRecord> = (0..4096).map(|i| record(i, i % 4 == 0)).collect();
    let clock = ExportClock {
        unix_secs: 1_700_000_000,
        uptime_ms: 1,
    };
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(recs.len() as u64));
    for (name, format, mode, profile) in [
        (
            "ipfix_biflow",
            Format::Ipfix,
            Mode::Biflow,
            Profile::Xdprobe,
        ),
        (
            "ipfix_biflow_ntop",
            Format::Ipfix,
            Mode::Biflow,
            Profile::Ntop,
        ),
        (
            "ipfix_uniflow",
            Format::Ipfix,
            Mode::Uniflow,
            Profile::Xdprobe,
        ),
        (
            "nfv9_biflow",
            Format::NetflowV9,
            Mode::Biflow,
            Profile::Xdprobe,
        ),
    ] {
        let t = Templates::new(format, mode, profile, PEN_DOCUMENTATION);
        let mut e = Encoder::new(format, mode, t, 1, 1452).unwrap();
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                let mut bytes = 0usize;
                for _ in 0..iters {
                    for r in &recs {
                        if e.write_record(r, clock).is_err() {
                            bytes += e.finish().map_or(0, <[u8]>::len);
                            let _ = e.write_record(r, clock);
                        }
                    }
                    bytes += e.finish().map_or(0, <[u8]>::len);
                }
                black_box(bytes);
                start.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
