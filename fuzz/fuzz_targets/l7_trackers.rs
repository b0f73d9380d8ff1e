//! The NPM trackers on their own, fed arbitrary segment sequences: TCP
//! (handshake, retransmission classes, TLS record walking through gaps,
//! overlaps and wraps) and DNS (transaction matching). Timestamps jump
//! forwards and backwards; lengths disagree with the captured bytes. No
//! sequence may panic, overflow or report a duration longer than the span
//! of the timestamps it was fed.
//!
//! Input: a selector byte (bit 0: TCP or DNS), then 12-byte segment
//! headers, each followed by its captured bytes: direction (bit 0) and TCP
//! flags (the other bits), seq (4), ack (4), timestamp step (2, signed, in
//! ms; its lowest bit is the FIN flag), captured payload length (1; 255
//! also ends the reporting interval). The on-wire length is the captured
//! one plus 1000 × the top three flag bits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xdprobe_dataplane::metrics::dns::DnsTracker;
use xdprobe_dataplane::metrics::tcp::{TcpTracker, TsCtx};
use xdprobe_dataplane::metrics::tsrtt::{TsRtt, TsRttWorker};
use xdprobe_dataplane::parse::{TcpFlags, TcpMeta, TcpOptions};
use xdprobe_dataplane::record::FlowRecord;
use xdprobe_dataplane::{Dir, Timestamp};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let tcp_mode = sel & 1 == 0;
    let mut tcp = TcpTracker::default();
    let mut ts_flow = TsRtt::default();
    let mut ts_worker = TsRttWorker::default();
    let mut dns = DnsTracker::default();
    // Start mid-range so steps both ways stay inside the accepted range.
    let mut now: u64 = 1 << 62;
    let (mut lo, mut hi) = (now, now);
    while let Some((h, tail)) = rest.split_first_chunk::<12>() {
        let dir = if h[0] & 1 == 0 { Dir::C2S } else { Dir::S2C };
        let flags = TcpFlags::from_bits_retain((h[0] & 0xfe) | (h[9] & 1));
        let seq = u32::from_be_bytes([h[1], h[2], h[3], h[4]]);
        let ack = u32::from_be_bytes([h[5], h[6], h[7], h[8]]);
        let step = i64::from(i16::from_be_bytes([h[9], h[10]])) * 1_000;
        now = now.saturating_add_signed(step);
        lo = lo.min(now);
        hi = hi.max(now);
        let cap = usize::from(h[11]).min(tail.len());
        let (payload, next) = tail.split_at(cap);
        rest = next;
        let wire = cap as u32 + u32::from(h[0] >> 5) * 1000;
        let ts = Timestamp(now);
        if tcp_mode {
            let meta = TcpMeta {
                seq,
                ack,
                flags,
                window: u16::from_be_bytes([h[2], h[7]]),
                // Timestamp option on most segments, TSval/TSecr from the
                // same bytes (so echoes of earlier TSvals happen).
                options: TcpOptions {
                    timestamp: (h[0] & 0x10 == 0).then(|| (seq >> 8, ack >> 8)),
                    ..TcpOptions::default()
                },
            };
            let ctx = TsCtx {
                flow: &mut ts_flow,
                worker: &mut ts_worker,
            };
            tcp.on_segment(dir, &meta, wire, payload, ts, Some(ctx));
        } else {
            dns.on_datagram(dir, payload, ts);
        }
        if h[11] == 0xff {
            tcp.reset_interval(Some(&mut ts_flow));
            dns.reset_interval();
        }
    }
    let mut r = FlowRecord::blank(6);
    if tcp_mode {
        tcp.fill(&mut r, Some(&ts_flow));
    } else {
        dns.fill(&mut r);
    }
    let span_us = (hi - lo) / 1_000 + 1;
    let n = r.npm;
    for v in [
        n.rtt_us,
        n.server_net_us,
        n.client_net_us,
        n.srt_us,
        n.srt_min_us,
        n.srt_mean_us,
        n.srt_max_us,
    ]
    .into_iter()
    .flatten()
    {
        assert!(
            u64::from(v) <= span_us,
            "{v} µs from a {span_us} µs span: {n:?}"
        );
    }
    if let (Some(a), Some(m), Some(b)) = (n.srt_min_us, n.srt_mean_us, n.srt_max_us) {
        assert!(a <= m && m <= b, "{n:?}");
    }
    // Timestamp RTT: every sample is a span of capture time; the sketch's
    // estimates lie between the exact extremes.
    for leg in n.ts_rtt.iter().flat_map(|t| [t.server, t.client]) {
        if let (Some(a), Some(b)) = (leg.min_us, leg.max_us) {
            assert!(a <= b && u64::from(b) <= span_us, "{leg:?} in {span_us} µs");
            for v in [leg.mean_us, leg.p50_us, leg.p90_us].into_iter().flatten() {
                assert!(a <= v && v <= b, "{leg:?}");
            }
        }
    }
    for d in [&r.c2s, &r.s2c] {
        assert_eq!(
            u64::from(d.retrans),
            u64::from(d.retrans_fast) + u64::from(d.retrans_spurious) + u64::from(d.retrans_other)
        );
    }
});
