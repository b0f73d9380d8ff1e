//! A whole capture file through everything a packet meets: pcap/pcapng
//! reader (mapped and streamed, which must agree) → worker (flow table
//! with eviction and expiry, fragments, NPM
//! trackers with TLS and DNS) → JSON/CSV/table writers and the IPFIX and
//! NetFlow v9 encoders. No input may panic (overflow checks are on in fuzz
//! builds), hang or break the invariants below.
//!
//! Input layout: one byte of knobs (flow capacity 1–16, fragment capacity
//! 1–4, short or long timeouts, NPM on/off), then the file. `seeds.py
//! pipeline` writes the test captures in this layout. Tiny tables make
//! eviction, expiry and fragment-table churn happen within a few packets.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use xdprobe_dataplane::l7::L7Config;
use xdprobe_dataplane::output::{Format, RecordWriter};
use xdprobe_dataplane::source::{
    Frame,
    pcap::{PcapReader, StreamReader},
};
use xdprobe_dataplane::worker::BATCH;
use xdprobe_dataplane::{FlowConfig, FlowRecord, Worker};
use xdprobe_exporter::encode::record::ntp_micros;
use xdprobe_exporter::encode::{Encoder, ExportClock};
use xdprobe_exporter::template::{Format as Wire, Mode, OptionsValues, Profile, Templates};

fn config(knobs: u8) -> FlowConfig {
    let short = knobs & 0x40 != 0;
    let ms = |long: u64, short_ms: u64| Duration::from_millis(if short { short_ms } else { long });
    FlowConfig {
        capacity: 1 + usize::from(knobs & 0x0f),
        frag_capacity: 1 + usize::from((knobs >> 4) & 0x03),
        idle_timeout: ms(30_000, 3),
        active_timeout: ms(300_000, 7),
        tcp_linger: ms(2_000, 1),
        npm: knobs & 0x80 == 0,
        // Shares a bit with the fragment capacity: both settings of each
        // get fuzzed with both of the other.
        ts_rtt: knobs & 0x20 == 0,
        // With NPM: the L7 parsers, their pools small enough to fill.
        l7: (knobs & 0x80 == 0).then(|| L7Config {
            max_flows: 4,
            buffers: 2,
            ..L7Config::default()
        }),
    }
}

/// Runs the file through a worker, batched or one frame at a time.
fn run(file: &[u8], cfg: &FlowConfig, batched: bool) -> Option<(Vec<FlowRecord>, Worker)> {
    let mut reader = PcapReader::from_bytes(file).ok()?;
    let mut worker = Worker::new(cfg);
    let mut out = Vec::new();
    loop {
        if batched {
            let mut batch = [Frame::default(); BATCH];
            match reader.next_batch(&mut batch) {
                Ok(0) | Err(_) => break,
                Ok(n) => worker.on_batch(&batch[..n], &mut |r| out.push(r)),
            }
        } else {
            match reader.next_packet() {
                Ok(Some(p)) => {
                    worker.on_frame(p.link, p.data, p.wire_len, p.ts, &mut |r| out.push(r))
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
    worker.flush(&mut |r| out.push(r));
    Some((out, worker))
}

/// Hands out at most `piece` bytes per read, as a pipe does.
struct Pieces<'a> {
    data: &'a [u8],
    piece: usize,
}

impl std::io::Read for Pieces<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.piece.min(out.len()).min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fn run_streamed(file: &[u8], cfg: &FlowConfig, piece: usize) -> Vec<FlowRecord> {
    let mut reader = StreamReader::new(Pieces { data: file, piece })
        .expect("the mapped reader read this header");
    let mut worker = Worker::new(cfg);
    let mut out = Vec::new();
    loop {
        let mut batch = [Frame::default(); BATCH];
        match reader.next_batch(&mut batch) {
            Ok(0) | Err(_) => break,
            Ok(n) => worker.on_batch(&batch[..n], &mut |r| out.push(r)),
        }
    }
    worker.flush(&mut |r| out.push(r));
    out
}

/// The set lengths of one message add up to the header's length.
fn check_message(format: Wire, msg: &[u8]) {
    let (header, version) = match format {
        Wire::Ipfix => (16, 10),
        Wire::NetflowV9 => (20, 9),
    };
    assert!(msg.len() >= header);
    assert_eq!(u16::from_be_bytes([msg[0], msg[1]]), version);
    if format == Wire::Ipfix {
        assert_eq!(usize::from(u16::from_be_bytes([msg[2], msg[3]])), msg.len());
    }
    let mut at = header;
    while at < msg.len() {
        let len = usize::from(u16::from_be_bytes([msg[at + 2], msg[at + 3]]));
        assert!(len >= 4, "set of {len} bytes at {at}");
        at += len;
    }
    assert_eq!(at, msg.len(), "sets overrun the message");
}

fn encode_all(records: &[FlowRecord], ignored: u64, evicted: (u64, u64)) {
    let clock = ExportClock {
        unix_secs: 1,
        uptime_ms: 1,
    };
    for format in [Wire::Ipfix, Wire::NetflowV9] {
        for mode in [Mode::Biflow, Mode::Uniflow] {
            let t = Templates::new(format, mode, Profile::Ntop, 32473);
            let mut e = Encoder::new(format, mode, t, 1, 1472).expect("templates fit");
            e.write_templates(clock)
                .expect("templates fit a fresh message");
            for r in records {
                // As the link does: a full message goes out and the record
                // is tried again. An L7 record whose template is announced
                // in a fresh message may need one more: the template goes
                // out alone, then the record fits (`Encoder::new` checks
                // both fit a message of their own).
                let mut tries = 0;
                while e.write_record(r, clock).is_err() {
                    tries += 1;
                    assert!(tries <= 2, "a record fits a message after its template");
                    let msg = e.finish().expect("a full message has content");
                    check_message(format, msg);
                }
            }
            // The options record with the run's own counters.
            let v = OptionsValues {
                observation_domain: 1,
                exported_records: records.len() as u64,
                ignored_packets: ignored,
                flows_evicted: evicted.0,
                fragments_evicted: evicted.1,
                ..OptionsValues::default()
            };
            if e.write_options(&v, clock).is_err() {
                let msg = e.finish().expect("a full message has content");
                check_message(format, msg);
                e.write_options(&v, clock)
                    .expect("options fit a fresh message");
            }
            if let Some(msg) = e.finish() {
                check_message(format, msg);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, file)) = data.split_first() else {
        return;
    };
    let cfg = config(knobs);
    let Some((records, worker)) = run(file, &cfg, true) else {
        return;
    };
    let s = worker.stats();
    // Every frame is used or dropped for a named reason; every used packet
    // is in exactly one record; one frame never counts more bytes than it
    // held (lengths are cut to the frame).
    assert_eq!(s.frames, s.table.packets + s.drops.total());
    let packets: u64 = records.iter().map(|r| r.c2s.packets + r.s2c.packets).sum();
    let bytes: u64 = records.iter().map(|r| r.c2s.bytes + r.s2c.bytes).sum();
    assert_eq!(packets, s.table.packets);
    assert_eq!(bytes, s.table.bytes);
    assert_eq!(s.table.records, records.len() as u64);
    assert!(s.active_flows <= cfg.capacity as u64);
    for r in &records {
        assert!(r.start <= r.end, "{r:?}");
        assert!(r.end.in_range(), "{r:?}");
        assert!(r.start.as_micros() <= r.end.as_micros());
        let _ = (ntp_micros(r.start), ntp_micros(r.end));
        if r.seq_in_flow == 0 {
            // A flow's first record spans every packet its metrics saw:
            // no duration can be longer.
            let span_us = r.end.nanos_since(r.start) / 1_000 + 1;
            for v in [r.npm.rtt_us, r.npm.srt_us, r.npm.srt_max_us]
                .into_iter()
                .flatten()
            {
                assert!(
                    u64::from(v) <= span_us,
                    "{v} µs in a {span_us} µs record: {r:?}"
                );
            }
        }
    }
    // Batched and frame-at-a-time processing agree exactly.
    let (one_by_one, _) = run(file, &cfg, false).expect("the header parsed once already");
    assert_eq!(records, one_by_one);
    // So does the stream reader (stdin, pipes), fed in uneven pieces.
    let piece = 1 + usize::from(knobs.rotate_left(3) & 0x3f) * 97;
    assert_eq!(records, run_streamed(file, &cfg, piece));

    for f in [Format::Json, Format::Csv, Format::Table] {
        let mut w = RecordWriter::new(Vec::new(), f);
        for r in &records {
            w.write(r).expect("writing to memory");
        }
        if f == Format::Json {
            for line in w
                .into_inner()
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
            {
                let v: serde_json::Value = serde_json::from_slice(line).expect("valid JSON");
                assert!(v["start_us"].as_u64() <= v["end_us"].as_u64());
            }
        }
    }
    encode_all(
        &records,
        s.drops.total(),
        (s.table.evicted, s.frags.evicted),
    );
});
