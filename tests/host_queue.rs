//! A shaper on the sender's device queue must land in T3 and nowhere else.
//!
//! The reference for how long the message waited is the shaper itself, as
//! a receiver sees it: the frames queued ahead of each message leave the
//! token bucket one at a time, and their spacing at the far end is the
//! bucket's real pace on this kernel (its watchdog timer may fire late
//! under load, and with a bucket of one frame the lateness is never made
//! up). The nominal rate is checked too, loosely, so that a shaper that
//! did nothing cannot pass.

mod common;
mod host_support;
mod live_support;

use std::net::{SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use host_support::probed::{one_flow, probed_messages};
use host_support::{Messages, Pair, Reader, SERVER_IP, mono_ns, realtime, seg};
use live_support::{require_root, topo::TempDir};

fn no_op(_: u32) {}

/// Token bucket on the client's device: 10 Mbit/s, one frame of burst.
const RATE_BPS: f64 = 10e6;
const BUCKET: f64 = 1600.0;
/// Frames queued ahead of each message.
const FRAMES: usize = 16;
/// 1472 B of UDP payload + UDP/IP/Ethernet headers.
const FRAME_WIRE: f64 = 1514.0;
const PAYLOAD: usize = 1472;
const SINK_PORT: u16 = 9;

/// Receives the queued-ahead frames in the server namespace and notes
/// when each arrived: (message, frame, ns).
fn sink(pair: &Pair, stop: &AtomicBool, seen: &Mutex<Vec<(u32, u32, u64)>>) {
    pair.s.enter_current_thread();
    realtime();
    let u = UdpSocket::bind((SERVER_IP, SINK_PORT)).expect("bind sink");
    u.set_read_timeout(Some(Duration::from_millis(50))).ok();
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        if let Ok(n) = u.recv(&mut buf) {
            let t = mono_ns();
            if n >= 8 {
                let msg = u32::from_le_bytes(buf[0..4].try_into().unwrap());
                let frame = u32::from_le_bytes(buf[4..8].try_into().unwrap());
                seen.lock().unwrap().push((msg, frame, t));
            }
        }
    }
}

/// The bucket's real time per frame: the median, over the messages whose
/// queued frames all arrived, of the first-to-last spacing per frame.
fn measured_frame_us(seen: &[(u32, u32, u64)]) -> f64 {
    let mut per_msg: std::collections::BTreeMap<u32, Vec<(u32, u64)>> = Default::default();
    for &(m, f, t) in seen {
        per_msg.entry(m).or_default().push((f, t));
    }
    let mut paces: Vec<f64> = per_msg
        .values()
        .filter(|v| v.len() == FRAMES)
        .map(|v| {
            let first = v.iter().find(|(f, _)| *f == 0).map(|x| x.1);
            let last = v
                .iter()
                .find(|(f, _)| *f as usize == FRAMES - 1)
                .map(|x| x.1);
            match (first, last) {
                (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e3 / (FRAMES - 1) as f64,
                _ => f64::NAN,
            }
        })
        .filter(|p| p.is_finite())
        .collect();
    assert!(
        paces.len() >= 20,
        "the queued frames of most messages arrived: {} of 30",
        paces.len()
    );
    paces.sort_by(f64::total_cmp);
    paces[paces.len() / 2]
}

#[test]
fn a_shaped_device_queue_grows_t3_by_the_queueing_delay() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let pair = Pair::new();
    let server: SocketAddr = format!("{SERVER_IP}:5304").parse().unwrap();
    let args = ["--port", "5304", "--sample-bytes", "0"];
    let m = Messages {
        count: 30,
        size: 1000,
        gap: Duration::from_millis(40),
        reader: Reader::Eager,
    };
    let d = TempDir::new("host_t3a");
    let (plain, _) = probed_messages(&pair, &d, server, &args, &m, &no_op);

    // Before each message the client queues FRAMES datagrams on the
    // shaped device, so the message's segment waits behind them.
    pair.c.exec(&[
        "tc", "qdisc", "add", "dev", "c0", "root", "tbf", "rate", "10mbit", "burst", "1600",
        "limit", "200000",
    ]);
    let burst = |i: u32| {
        let u = UdpSocket::bind("192.0.2.1:0").expect("udp");
        let mut payload = [0u8; PAYLOAD];
        payload[0..4].copy_from_slice(&i.to_le_bytes());
        for f in 0..FRAMES as u32 {
            payload[4..8].copy_from_slice(&f.to_le_bytes());
            let _ = u.send_to(&payload, (SERVER_IP, SINK_PORT));
        }
    };
    let stop = AtomicBool::new(false);
    let seen = Mutex::new(Vec::new());
    let d = TempDir::new("host_t3b");
    let shaped = std::thread::scope(|sc| {
        sc.spawn(|| sink(&pair, &stop, &seen));
        let out = probed_messages(&pair, &d, server, &args, &m, &burst).0;
        stop.store(true, Ordering::Relaxed);
        out
    });
    let (plain, shaped) = (
        one_flow(&plain, 5304, "192.0.2.1"),
        one_flow(&shaped, 5304, "192.0.2.1"),
    );

    let frame_us = measured_frame_us(&seen.lock().unwrap());
    let nominal_frame_us = FRAME_WIRE * 8.0 / RATE_BPS * 1e6;
    eprintln!("the bucket sends a frame every {frame_us:.0} µs (nominal {nominal_frame_us:.0} µs)");
    assert!(
        frame_us >= 0.95 * nominal_frame_us && frame_us <= 1.5 * nominal_frame_us,
        "the shaper paces at about its rate: {frame_us} µs per frame, nominal {nominal_frame_us}"
    );
    // The bytes ahead of the message's own frame (1000 B + TCP with
    // timestamps, IP, Ethernet) less the bucket's one burst, at the pace
    // the bucket really kept.
    let own = 1000.0 + 32.0 + 20.0 + 14.0;
    let want_us = (FRAMES as f64 * FRAME_WIRE + own - BUCKET) / FRAME_WIRE * frame_us;
    let grow = |n: &str| seg(&shaped, n, "p50_us") - seg(&plain, n, "p50_us");
    let t3 = grow("T3");
    eprintln!("T3 p50 grew by {t3:.0} µs; the queue ahead drains in {want_us:.0} µs");
    assert!(
        (t3 - want_us).abs() <= 0.1 * want_us,
        "T3 grew {t3} µs, the queue ahead takes {want_us} µs"
    );
    let moved: Vec<(&str, f64)> = ["T1", "T2", "T4", "T5", "T6", "T7"]
        .into_iter()
        .map(|n| (n, grow(n)))
        .collect();
    eprintln!("the other segments' p50 moved by (µs): {moved:.1?}");
    for (n, g) in moved {
        assert!(g.abs() < 100.0, "{n} moved by {g} µs");
    }
}
