//! Live-capture benchmark (BENCHMARKS.md, "Live capture"). Ignored by
//! default; run as root with
//! `cargo test --release -p xdprobe --test live_bench -- --ignored --nocapture`.
//!
//! A bounded raw-socket `sendmmsg` sender in one namespace blasts 60-byte
//! UDP frames (1024 flows) over a veth at its top rate for a fixed time;
//! on the other end the XDP program redirects them to one AF_XDP socket
//! (copy mode). Measured: the bare receive loop (rx-drop: read and recycle,
//! nothing else) and the probe's worker (parse, flow table, NPM) on the
//! same setup, each as frames read per second of sending, and the probe's
//! loss with the sender paced at 80 % of the rx-drop rate.

mod live_support;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use live_support::{NetNs, VethOpts, neigh, require_root, veth};
use xdprobe::live::{
    sink::RecordSink,
    worker::{Control, QueueWorker, Snapshot},
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
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(
        fd >= 0,
        "packet socket: {}",
        std::io::Error::last_os_error()
    );
    let cname = std::ffi::CString::new(ifname).expect("name");
    // SAFETY: valid C string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    // SAFETY: sockaddr_ll is plain data; zero is a valid start.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: binding our own socket to a valid sockaddr_ll.
    let rc = unsafe {
        libc::bind(
            fd,
            (&raw const sll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
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
    // SAFETY: closing our own fd.
    unsafe { libc::close(fd) };
    sent
}

struct Setup {
    sender: NetNs,
    rx: NetNs,
    dst: [u8; 6],
    src: [u8; 6],
}

fn setup() -> Setup {
    let sender = NetNs::new("bg");
    let rx = NetNs::new("br");
    veth(&sender, "g0", &rx, "r0", VethOpts::default());
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

fn open(s: &Setup) -> (XdpProgram, XskSocket) {
    s.rx.run(|| {
        let mut prog = XdpProgram::load(&XdpOptions {
            iface: "r0".into(),
            mode: AttachMode::Native,
            host_mode: false,
            filter: XdpFilter::default(),
        })
        .expect("load");
        let sock = XskSocket::open(
            "r0",
            0,
            &XskOptions {
                bind: BindMode::Copy,
                poll_timeout: Duration::from_millis(10),
                // Sized as docs/operations.md advises for a mirror port:
                // ~10 ms of frames at 1 Mpps between the kernel and a worker
                // that the scheduler briefly takes off its core.
                umem_frames: 16384,
                fill_ring: 8192,
                rx_ring: 8192,
                ..XskOptions::default()
            },
        )
        .expect("socket");
        prog.register_socket(0, sock.fd()).expect("register");
        prog.attach().expect("attach");
        (prog, sock)
    })
}

/// Bare rx-drop: read and recycle. Returns (sent, read, seen by XDP).
fn rx_drop(s: &Setup, pps: Option<f64>) -> (u64, u64, u64) {
    let (prog, mut sock) = open(s);
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

/// The probe's worker on the same socket setup. Returns (sent, read, seen).
fn probe(s: &Setup, pps: Option<f64>) -> (u64, u64, u64, Snapshot) {
    let (prog, sock) = open(s);
    let control = Arc::new(Control::default());
    control.workers.store(1, Ordering::Release);
    let published = Arc::new(Mutex::new(Snapshot::default()));
    let w = QueueWorker {
        index: 0,
        workers: 1,
        core: Some(1),
        socket: sock,
        flow: FlowConfig {
            capacity: 65536,
            ..FlowConfig::default()
        },
        sink: RecordSink::new(None, None),
        producers: Vec::new(),
        merge: None,
        control: control.clone(),
        published,
        tick: Duration::from_millis(100),
        read_time_stamps: false,
    };
    let t = std::thread::spawn(move || w.run());
    let sent = s.sender.run(|| {
        let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
        blast("g0", s.dst, s.src, pps)
    });
    std::thread::sleep(Duration::from_millis(200));
    control.stop_rx.store(true, Ordering::Release);
    let snap = t.join().expect("worker");
    (
        sent,
        snap.live.rx_frames,
        prog.counters().expect("counters").seen,
        snap,
    )
}

fn mpps(n: u64) -> f64 {
    n as f64 / SEND_FOR.as_secs_f64() / 1e6
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn live_capture_rates() {
    if !require_root("live_capture_rates") {
        return;
    }
    let s = setup();
    let (sent_d, read_d, seen_d) = rx_drop(&s, None);
    eprintln!(
        "rx-drop, top rate: sent {:.3} Mpps, XDP saw {:.3}, AF_XDP read {:.3} ({:.2} % of sent)",
        mpps(sent_d),
        mpps(seen_d),
        mpps(read_d),
        100.0 * read_d as f64 / sent_d.max(1) as f64
    );
    let (sent_p, read_p, seen_p, snap) = probe(&s, None);
    eprintln!(
        "probe,   top rate: sent {:.3} Mpps, XDP saw {:.3}, worker read {:.3} ({:.2} % of sent); \
         flows {}, socket rx_dropped {} ring_full {} fill_empty {}",
        mpps(sent_p),
        mpps(seen_p),
        mpps(read_p),
        100.0 * read_p as f64 / sent_p.max(1) as f64,
        snap.flows.table.flows_created,
        snap.socket.rx_dropped,
        snap.socket.rx_ring_full,
        snap.socket.rx_fill_ring_empty,
    );
    let ratio = mpps(read_p) / mpps(read_d);
    eprintln!("probe / rx-drop received rate: {:.1} %", 100.0 * ratio);
    let pace = 0.8 * read_d as f64 / SEND_FOR.as_secs_f64();
    let (sent_80, read_80, seen_80, snap80) = probe(&s, Some(pace));
    eprintln!(
        "probe at 80 % ({:.3} Mpps paced): sent {}, XDP saw {seen_80}, worker read {read_80}, lost {} \
         (socket rx_dropped {} ring_full {})",
        pace / 1e6,
        sent_80,
        seen_80 - read_80.min(seen_80),
        snap80.socket.rx_dropped,
        snap80.socket.rx_ring_full,
    );
    assert!(read_p > 0 && read_d > 0);
}
