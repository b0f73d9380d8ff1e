//! AF_XDP receive through xdprobe's own XDP program and socket map: every
//! datagram the test sends arrives, byte for byte, with a kernel timestamp
//! from XDP in front of it; the socket statistics and the program's
//! counters agree with the sender.

mod live_support;

use std::{net::UdpSocket, time::Instant};

use live_support::{NetNs, VethOpts, addr, neigh, require_root, veth};
use xdprobe_capture::{
    clock::{TaiClock, unix_now},
    xdp::{AttachMode, XdpFilter, XdpOptions, XdpProgram},
};
use xdprobe_dataplane::source::afxdp::{BindMode, XskOptions, XskSocket};

#[test]
fn af_xdp_receives_every_frame_with_an_xdp_timestamp() {
    if !require_root!() {
        return;
    }
    let tx = NetNs::new("xst");
    let rx = NetNs::new("xsr");
    veth(&tx, "xs0", &rx, "xs1", VethOpts::default());
    addr(&tx, "xs0", "192.0.2.1/24");
    addr(&rx, "xs1", "192.0.2.2/24");
    neigh(&tx, "xs0", "192.0.2.2", &rx.mac("xs1"));

    let (mut prog, mut sock) = rx.run(|| {
        let mut prog = XdpProgram::load(&XdpOptions {
            iface: "xs1".into(),
            mode: AttachMode::Native,
            host_mode: false,
            filter: XdpFilter::default(),
        })
        .expect("load");
        let opts = XskOptions {
            umem_frames: 256,
            frame_size: 2048,
            rx_ring: 128,
            fill_ring: 128,
            completion_ring: 8,
            bind: BindMode::Auto,
            ..XskOptions::default()
        };
        let sock = XskSocket::open("xs1", 0, &opts).expect("AF_XDP socket");
        prog.register_socket(0, sock.fd()).expect("register");
        prog.attach().expect("attach");
        (prog, sock)
    });
    assert_eq!(sock.bind_mode, "copy", "veth has no zero-copy");

    const N: usize = 40;
    let before = unix_now();
    tx.run(|| {
        let s = UdpSocket::bind("192.0.2.1:40000").expect("bind");
        for i in 0..N {
            s.send_to(format!("xsk-{i:04}").as_bytes(), "192.0.2.2:7777")
                .expect("send");
        }
    });
    let after_send = unix_now();

    let clock = TaiClock::new();
    let mut got: Vec<(Vec<u8>, u64)> = Vec::new();
    let deadline = Instant::now() + std::time::Duration::from_secs(3);
    while got.len() < N && Instant::now() < deadline {
        sock.recv_batch(None, |f| {
            got.push((
                f.data.to_vec(),
                f.tai_ns.expect("XDP timestamp in the metadata"),
            ));
        })
        .expect("recv");
    }
    assert_eq!(got.len(), N, "every datagram arrives over AF_XDP");
    let mut last = 0;
    for (i, (frame, tai)) in got.iter().enumerate() {
        // Ethernet 14 + IPv4 20 + UDP 8, then the payload.
        assert_eq!(&frame[42..], format!("xsk-{i:04}").as_bytes(), "frame {i}");
        let ts = clock.to_unix(*tai).as_nanos();
        assert!(
            ts >= before.as_nanos() && ts <= after_send.as_nanos(),
            "XDP stamps the frame while it is sent, not when read: {ts} not in [{before}, {after_send}]"
        );
        assert!(*tai >= last, "timestamps in arrival order");
        last = *tai;
    }
    let c = prog.counters().expect("counters");
    assert_eq!(
        (c.seen, c.redirected, c.meta_failed),
        (N as u64, N as u64, 0),
        "{c:?}"
    );
    let st = sock.stats().expect("stats");
    assert_eq!((st.rx_dropped, st.rx_ring_full), (0, 0), "{st:?}");
    prog.detach().expect("detach");
}
