//! Live-capture benchmark (benches/LOG.md, "Live capture"). Ignored by
//! default; run as root with
//! `cargo test --release -p xdprobe --test live_bench -- --ignored --nocapture`.
//!
//! A bounded raw-socket `sendmmsg` sender in one namespace blasts 60-byte
//! UDP frames (1024 flows) over a veth at its top rate for a fixed time;
//! on the other end the XDP program redirects them to one AF_XDP socket
//! (copy mode). Measured: the bare receive loop (rx-drop: read and recycle,
//! nothing else) and the probe's worker (parse, flow table, NPM) on the
//! same setup, each as frames read per second of sending, and the probe's
//! loss with the sender paced at 80 % of the rx-drop rate. Then the same
//! over a veth with two RX queues and two workers, with and without the
//! hand-off between them; every probe run also reports its workers' CPU
//! time per frame read.

mod live_support;

use std::{
    os::fd::AsRawFd,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use live_support::{NetNs, VethOpts, neigh, require_root, veth};
use xdprobe_capture::{
    sink::RecordSink,
    worker::queue::{Control, QueueWorker, Snapshot},
    xdp::{AttachMode, XdpFilter, XdpOptions, XdpProgram},
};
use xdprobe_dataplane::FlowConfig;
use xdprobe_dataplane::source::afxdp::{BindMode, XskOptions, XskSocket};

const SEND_FOR: Duration = Duration::from_secs(3);
const FLOWS: u16 = 1024;
const BATCH: usize = 64;

fn mac(s: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (i, p) in s.split(':').take(6).enumerate() {
        m[i] = u8::from_str_radix(p, 16).unwrap_or(0);
    }
    m
}

fn frame(dst: [u8; 6], src: [u8; 6], sport: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [
        0x45u8, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
    ];
    let sum = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum::<u32>();
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&26u16.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(60, 0);
    f
}

/// Sends for `SEND_FOR` from the current thread (inside the sender's
/// namespace); `pps` = None: as fast as possible. Returns frames sent.
fn blast(ifname: &str, dst: [u8; 6], src: [u8; 6], pps: Option<f64>) -> u64 {
    let frames: Vec<Vec<u8>> = (0..FLOWS).map(|i| frame(dst, src, 1024 + i)).collect();
    let sock = live_support::frames::packet_socket(ifname);
    let fd = sock.as_raw_fd();
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(BATCH);
    let mut sent = 0u64;
    let start = Instant::now();
    let mut i = 0usize;
    while start.elapsed() < SEND_FOR {
        if let Some(pps) = pps {
            let due = (start.elapsed().as_secs_f64() * pps) as u64;
            if sent >= due {
                std::hint::spin_loop();
                continue;
            }
        }
        iov.clear();
        for k in 0..BATCH {
            let f = &frames[(i + k) % frames.len()];
            iov.push(libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            });
        }
        // Each message points at one iovec above.
        let mut msgs: Vec<libc::mmsghdr> = (0..BATCH)
            .map(|k| {
                // SAFETY: mmsghdr is plain data; all-zero is a valid value.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = iov.as_mut_ptr().wrapping_add(k);
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // SAFETY: msgs/iov/frames outlive the call.
        let n = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), BATCH as u32, 0) };
        if n > 0 {
            sent += n as u64;
            i += n as usize;
        }
    }
    sent
}

struct Setup {
    sender: NetNs,
    rx: NetNs,
    dst: [u8; 6],
    src: [u8; 6],
}

fn setup(queues: u32) -> Setup {
    let sender = NetNs::new("bg");
    let rx = NetNs::new("br");
    veth(&sender, "g0", &rx, "r0", VethOpts { queues });
    neigh(&sender, "g0", "192.0.2.2", &rx.mac("r0"));
    let dst = mac(&rx.mac("r0"));
    let src = mac(&sender.mac("g0"));
    Setup {
        sender,
        rx,
        dst,
        src,
    }
}

/// The XDP program and one socket per RX queue `0..queues`.
fn open(s: &Setup, queues: u32) -> (XdpProgram, Vec<XskSocket>) {
    s.rx.run(|| {
        let mut prog = XdpProgram::load(&XdpOptions {
            iface: "r0".into(),
            mode: AttachMode::Native,
            host_mode: false,
            filter: XdpFilter::default(),
        })
        .expect("load");
        let mut socks = Vec::new();
        for q in 0..queues {
            let sock = XskSocket::open(
                "r0",
                q,
                &XskOptions {
                    bind: BindMode::Copy,
                    poll_timeout: Duration::from_millis(10),
                    // Sized as docs/operations.md advises for a mirror port:
                    // ~10 ms of frames at 1 Mpps between the kernel and a
                    // worker that the scheduler briefly takes off its core.
                    umem_frames: 16384,
                    fill_ring: 8192,
                    rx_ring: 8192,
                    ..XskOptions::default()
                },
            )
            .expect("socket");
            prog.register_socket(q, sock.fd()).expect("register");
            socks.push(sock);
        }
        prog.attach().expect("attach");
        (prog, socks)
    })
}

/// CPU time (user + system, clock-tick resolution) so far of this
/// process's thread named `name`.
fn thread_cpu(name: &str) -> Duration {
    // SAFETY: plain sysconf(3) call.
    let tck = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100);
    let mut ticks = 0u64;
    for e in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let dir = e.path();
        if !std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim_end() == name) {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // After the ")" closing the name: field 3 (state) first; utime and
        // stime are fields 14 and 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        ticks += f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    }
    Duration::from_nanos(ticks * 1_000_000_000 / tck.max(1))
}

/// Bare rx-drop: read and recycle. Returns (sent, read, seen by XDP).
fn rx_drop(s: &Setup, pps: Option<f64>) -> (u64, u64, u64) {
    let (prog, mut socks) = open(s, 1);
    let mut sock = socks.pop().expect("one socket");
    let stop = AtomicBool::new(false);
    let (sent, read) = std::thread::scope(|sc| {
        let r = sc.spawn(|| {
            let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 1 });
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += sock.recv_batch(None, |_| {}).unwrap_or(0) as u64;
            }
            // Drain what is left.
            while let Ok(k) = sock.recv_batch(Some(Duration::from_millis(50)), |_| {}) {
                if k == 0 {
                    break;
                }
                n += k as u64;
            }
            n
        });
        let sent = s.sender.run(|| {
            let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
            blast("g0", s.dst, s.src, pps)
        });
        stop.store(true, Ordering::Relaxed);
        (sent, r.join().expect("rx"))
    });
    (sent, read, prog.counters().expect("counters").seen)
}

/// One probe run: what was sent, read, handed over, and what it cost.
struct Run {
    sent: u64,
    read: u64,
    seen: u64,
    handed: u64,
    full: u64,
    /// CPU time of all worker threads, read after the sender stopped.
    cpu: Duration,
    snaps: Vec<Snapshot>,
}

impl Run {
    fn ns_per_frame(&self) -> f64 {
        self.cpu.as_nanos() as f64 / self.read.max(1) as f64
    }
}

/// The probe's workers on `s` (one per RX queue; queue i's worker on core
/// i, or core 1 with one queue), handing frames between them when
/// `handoff`, exactly as the daemon wires them.
fn probe(s: &Setup, queues: u32, handoff: bool, pps: Option<f64>) -> Run {
    let (prog, socks) = open(s, queues);
    let n = socks.len();
    let control = Arc::new(Control::default());
    control.workers.store(n, Ordering::Release);
    let ways = if handoff { n } else { 1 };
    let (mut producers, mut merges) = xdprobe_capture::handoff::merge::mesh(ways);
    let mut threads = Vec::new();
    for (i, sock) in socks.into_iter().enumerate() {
        let w: QueueWorker = QueueWorker {
            index: i,
            workers: ways,
            core: Some(if n == 1 { 1 } else { i }),
            socket: sock,
            flow: FlowConfig {
                capacity: 65536,
                ..FlowConfig::default()
            },
            sink: RecordSink::new(None, None),
            producers: producers.get_mut(i).map(std::mem::take).unwrap_or_default(),
            merge: merges.get_mut(i).and_then(Option::take),
            control: control.clone(),
            published: Arc::new(Mutex::new(Snapshot::default())),
            tick: Duration::from_millis(100),
            read_time_stamps: false,
        };
        let t = std::thread::Builder::new()
            .name(format!("bench-w{i}"))
            .spawn(move || w.run())
            .expect("spawn worker");
        threads.push(t);
    }
    let sent = s.sender.run(|| {
        let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
        blast("g0", s.dst, s.src, pps)
    });
    std::thread::sleep(Duration::from_millis(200));
    let cpu = (0..n).map(|i| thread_cpu(&format!("bench-w{i}"))).sum();
    control.stop_rx.store(true, Ordering::Release);
    let snaps: Vec<Snapshot> = threads
        .into_iter()
        .map(|t| t.join().expect("worker"))
        .collect();
    Run {
        sent,
        read: snaps.iter().map(|s| s.live.rx_frames).sum(),
        seen: prog.counters().expect("counters").seen,
        handed: snaps.iter().map(|s| s.live.handed_off).sum(),
        full: snaps.iter().map(|s| s.live.handoff_full).sum(),
        cpu,
        snaps,
    }
}

fn mpps(n: u64) -> f64 {
    n as f64 / SEND_FOR.as_secs_f64() / 1e6
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn live_capture_rates() {
    if !require_root!() {
        return;
    }
    let s = setup(1);
    let (sent_d, read_d, seen_d) = rx_drop(&s, None);
    eprintln!(
        "rx-drop, top rate: sent {:.3} Mpps, XDP saw {:.3}, AF_XDP read {:.3} ({:.2} % of sent)",
        mpps(sent_d),
        mpps(seen_d),
        mpps(read_d),
        100.0 * read_d as f64 / sent_d.max(1) as f64
    );
    let p = probe(&s, 1, true, None);
    let snap = &p.snaps[0];
    eprintln!(
        "probe,   top rate: sent {:.3} Mpps, XDP saw {:.3}, worker read {:.3} ({:.2} % of sent); \
         flows {}, socket rx_dropped {} ring_full {} fill_empty {}; worker CPU {:.0} ns/frame",
        mpps(p.sent),
        mpps(p.seen),
        mpps(p.read),
        100.0 * p.read as f64 / p.sent.max(1) as f64,
        snap.flows.table.flows_created,
        snap.socket.rx_dropped,
        snap.socket.rx_ring_full,
        snap.socket.rx_fill_ring_empty,
        p.ns_per_frame(),
    );
    let ratio = mpps(p.read) / mpps(read_d);
    eprintln!("probe / rx-drop received rate: {:.1} %", 100.0 * ratio);
    let pace = 0.8 * read_d as f64 / SEND_FOR.as_secs_f64();
    let p80 = probe(&s, 1, true, Some(pace));
    let snap80 = &p80.snaps[0];
    eprintln!(
        "probe at 80 % ({:.3} Mpps paced): sent {}, XDP saw {}, worker read {}, lost {} \
         (socket rx_dropped {} ring_full {})",
        pace / 1e6,
        p80.sent,
        p80.seen,
        p80.read,
        p80.seen - p80.read.min(p80.seen),
        snap80.socket.rx_dropped,
        snap80.socket.rx_ring_full,
    );
    assert!(p.read > 0 && read_d > 0);
    drop(s);

    // Two RX queues: veth delivers each frame on the RX queue matching the
    // sender's TX queue, which the kernel picks by its own flow hash, and
    // the probe's steering hash picks the owner, so about half the frames
    // are handed over. Sender and worker 0 share core 0.
    let s2 = setup(2);
    for (what, handoff) in [("hand-off", true), ("no hand-off", false)] {
        let r = probe(&s2, 2, handoff, None);
        let per_q: Vec<u64> = r.snaps.iter().map(|s| s.live.rx_frames).collect();
        eprintln!(
            "probe, 2 queues, {what}, top rate: sent {:.3} Mpps, XDP saw {:.3}, workers read {:.3} \
             ({:.2} % of sent; per queue {per_q:?}), handed over {} ({:.1} %), ring/lane full {}; \
             workers' CPU {:.0} ns/frame",
            mpps(r.sent),
            mpps(r.seen),
            mpps(r.read),
            100.0 * r.read as f64 / r.sent.max(1) as f64,
            r.handed,
            100.0 * r.handed as f64 / r.read.max(1) as f64,
            r.full,
            r.ns_per_frame(),
        );
        eprintln!(
            "2 queues ({what}) / 1 queue received rate: {:.1} %, / rx-drop: {:.1} %; \
             CPU per frame / 1 queue: {:.2}",
            100.0 * mpps(r.read) / mpps(p.read),
            100.0 * mpps(r.read) / mpps(read_d),
            r.ns_per_frame() / p.ns_per_frame(),
        );
        assert!(r.read > 0);
    }
}
