//! The eBPF build pipeline end to end: the XDP object that capture's
//! build.rs compiled loads, attaches natively to a veth in a private namespace, and
//! its per-CPU counters count exactly the packets the test sent (the sender
//! and the kernel's own receive path are the references), and its filters
//! see through every encapsulation of the header policy (crafted frames).
//!
//! Needs root; skips loudly otherwise (never under CI=true).

mod live_support;

use std::{
    net::{SocketAddr, UdpSocket},
    time::Duration,
};

use aya::programs::XdpMode;
use live_support::{
    NetNs, VethOpts, addr,
    frames::{ALL, C2S, Encap, Ip, S2C, all_frames, send_raw, server_port},
    neigh, require_root, veth,
};
use xdprobe_capture::xdp::{AttachMode, XdpFilter, XdpOptions, XdpProgram};
use xdprobe_common::XdpCounters;

/// Two namespaces joined by a veth: `tx` sends, `rx` carries the XDP
/// program on its end.
struct Pair {
    tx: NetNs,
    rx: NetNs,
}

const TX_DEV: &str = "xt0";
const RX_DEV: &str = "xr0";
const TX_IP: &str = "192.0.2.1";
const RX_IP: &str = "192.0.2.2";

fn pair() -> Pair {
    let tx = NetNs::new("xlt");
    let rx = NetNs::new("xlr");
    veth(&tx, TX_DEV, &rx, RX_DEV, VethOpts::default());
    addr(&tx, TX_DEV, "192.0.2.1/24");
    addr(&rx, RX_DEV, "192.0.2.2/24");
    neigh(&tx, TX_DEV, RX_IP, &rx.mac(RX_DEV));
    neigh(&rx, RX_DEV, TX_IP, &tx.mac(TX_DEV));
    Pair { tx, rx }
}

/// Sends `n` UDP datagrams from the tx namespace to `RX_IP:port`.
fn send_udp(p: &Pair, port: u16, n: usize) {
    p.tx.run(|| {
        let s = UdpSocket::bind("192.0.2.1:0").expect("bind sender");
        let dst: SocketAddr = format!("{RX_IP}:{port}").parse().expect("addr");
        for i in 0..n {
            s.send_to(format!("probe {i}").as_bytes(), dst)
                .expect("send");
        }
    });
}

/// Counts datagrams arriving at a socket bound in the rx namespace until
/// the line goes quiet.
fn receiver(p: &Pair, port: u16) -> UdpSocket {
    p.rx.run(|| {
        let s = UdpSocket::bind(format!("{RX_IP}:{port}")).expect("bind receiver");
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        s
    })
}

fn drain(s: &UdpSocket) -> usize {
    let mut buf = [0u8; 64];
    let mut n = 0;
    while s.recv(&mut buf).is_ok() {
        n += 1;
    }
    n
}

fn attach(p: &Pair, host_mode: bool, filter: XdpFilter) -> XdpProgram {
    p.rx.run(|| {
        XdpProgram::load_and_attach(&XdpOptions {
            iface: RX_DEV.into(),
            mode: AttachMode::Native,
            host_mode,
            filter,
        })
        .expect("load and attach the XDP program")
    })
}

#[test]
fn xdp_program_counts_exactly_the_packets_sent() {
    if !require_root!() {
        return;
    }
    let p = pair();
    let sink = receiver(&p, 5000);
    let mut prog = attach(&p, true, XdpFilter::default());
    assert_eq!(
        prog.attached,
        Some(XdpMode::Driver),
        "veth supports native XDP"
    );

    const N: usize = 25;
    send_udp(&p, 5000, N);
    let delivered = drain(&sink);
    let c = prog.counters().expect("read counters");

    // No socket is registered: every IP frame is a redirect failure, which
    // host mode passes to the stack, so the kernel delivers all of them.
    assert_eq!(c.seen, N as u64, "{c:?}");
    assert_eq!(c.redirect_failed, N as u64, "{c:?}");
    assert_eq!((c.redirected, c.filtered, c.non_ip), (0, 0, 0), "{c:?}");
    assert_eq!(c.meta_failed, 0, "veth has metadata room: {c:?}");
    assert_eq!(delivered, N, "host mode must pass what it does not capture");

    prog.detach().expect("detach");
    send_udp(&p, 5000, 3);
    assert_eq!(drain(&sink), 3);
    assert_eq!(
        prog.counters().expect("counters").seen,
        N as u64,
        "a detached program must not run"
    );
}

#[test]
fn port_filter_and_appliance_mode_drop() {
    if !require_root!() {
        return;
    }
    let p = pair();
    let wanted = receiver(&p, 5001);
    let other = receiver(&p, 6001);
    let prog = attach(
        &p,
        false,
        XdpFilter {
            ports: vec![5001],
            ..XdpFilter::default()
        },
    );

    send_udp(&p, 5001, 7);
    send_udp(&p, 6001, 11);
    let c = prog.counters().expect("read counters");
    assert_eq!(c.seen, 18, "{c:?}");
    assert_eq!(c.filtered, 11, "{c:?}");
    assert_eq!(c.redirect_failed, 7, "{c:?}");
    // Appliance mode: nothing reaches the host stack.
    assert_eq!(drain(&wanted), 0);
    assert_eq!(drain(&other), 0);
}

#[test]
fn prefix_and_vlan_filters() {
    if !require_root!() {
        return;
    }
    let p = pair();
    let sink = receiver(&p, 5002);
    // 192.0.2.0/25 holds both ends: captured (then a redirect failure).
    let inside = attach(
        &p,
        true,
        XdpFilter {
            prefixes: vec![("192.0.2.0".parse().expect("ip"), 25)],
            vlans: vec![0],
            ..XdpFilter::default()
        },
    );
    send_udp(&p, 5002, 5);
    let c = inside.counters().expect("counters");
    assert_eq!((c.seen, c.filtered, c.redirect_failed), (5, 0, 5), "{c:?}");
    drop(inside);

    // 198.51.100.0/24 and VLAN 7 match nothing sent here: all filtered,
    // and host mode still delivers them.
    let outside = attach(
        &p,
        true,
        XdpFilter {
            prefixes: vec![("198.51.100.0".parse().expect("ip"), 24)],
            ..XdpFilter::default()
        },
    );
    send_udp(&p, 5002, 4);
    let c = outside.counters().expect("counters");
    assert_eq!((c.seen, c.filtered, c.redirect_failed), (4, 4, 0), "{c:?}");
    drop(outside);

    let vlan = attach(
        &p,
        true,
        XdpFilter {
            vlans: vec![7],
            ..XdpFilter::default()
        },
    );
    send_udp(&p, 5002, 3);
    let c = vlan.counters().expect("counters");
    assert_eq!((c.seen, c.filtered), (3, 3), "{c:?}");
    assert_eq!(drain(&sink), 12, "host mode passes everything here");
}

/// Sends every crafted frame (`live_support::frames`: an ARP frame and one
/// flow per encapsulation) and returns the counters once the program has
/// seen them all.
fn send_crafted(p: &Pair, prog: &XdpProgram) -> XdpCounters {
    let frames = all_frames();
    p.tx.run(|| send_raw(TX_DEV, &frames));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let c = prog.counters().expect("counters");
        if c.seen >= frames.len() as u64 || std::time::Instant::now() > deadline {
            assert_eq!(c.seen, frames.len() as u64, "{c:?}");
            return c;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const PER_FLOW: u64 = (C2S + S2C) as u64;

/// The filters find VLAN IDs, addresses and ports behind every
/// encapsulation the walk takes (VLAN stacks, MPLS, PPPoE, IPv6 extension
/// headers); a frame it leaves unclassified (the MPLS pseudowire) passes
/// the VLAN filter by its outer tag but cannot be matched by address or
/// port, so it is filtered there; ARP is `non_ip` throughout.
#[test]
fn filters_see_through_every_encapsulation() {
    if !require_root!() {
        return;
    }
    let p = pair();
    let flows = ALL.len() as u64;

    // Ports behind 3 tags, 3 labels, PPPoE and 3 IPv6 extension headers.
    let wanted = [
        Encap::ThreeTags,
        Encap::Mpls3,
        Encap::PppoeV4,
        Encap::Ipv6Ext,
    ];
    let ports = attach(
        &p,
        false,
        XdpFilter {
            ports: wanted.map(server_port).to_vec(),
            ..XdpFilter::default()
        },
    );
    let c = send_crafted(&p, &ports);
    let hit = wanted.len() as u64 * PER_FLOW;
    assert_eq!(c.non_ip, 1, "{c:?}");
    // No socket is registered: a captured frame is a redirect failure.
    assert_eq!(c.redirect_failed, hit, "{c:?}");
    assert_eq!(
        c.filtered,
        flows * PER_FLOW - hit,
        "pseudowire included: {c:?}"
    );
    assert_eq!(c.unclassified, 0, "{c:?}");
    drop(ports);

    // Addresses: the IPv6 flows, whatever carries them.
    let v6 = ALL.iter().filter(|e| matches!(e.ip(0), Ip::V6(..))).count() as u64;
    assert_eq!(v6, 3, "MPLS, PPPoE and extension headers carry IPv6");
    let prefix = attach(
        &p,
        false,
        XdpFilter {
            prefixes: vec![("2001:db8::".parse().expect("ip"), 32)],
            ..XdpFilter::default()
        },
    );
    let c = send_crafted(&p, &prefix);
    assert_eq!(c.redirect_failed, v6 * PER_FLOW, "{c:?}");
    assert_eq!(c.filtered, (flows - v6) * PER_FLOW, "{c:?}");
    assert_eq!((c.non_ip, c.unclassified), (1, 0), "{c:?}");
    drop(prefix);

    // VLAN 0 (untagged): everything but the four tagged flows; the
    // pseudowire is untagged, so it passes, unclassified.
    let untagged = attach(
        &p,
        false,
        XdpFilter {
            vlans: vec![0],
            ..XdpFilter::default()
        },
    );
    let c = send_crafted(&p, &untagged);
    let tagged = 4 * PER_FLOW;
    assert_eq!(c.filtered, tagged, "{c:?}");
    assert_eq!(c.redirect_failed, flows * PER_FLOW - tagged, "{c:?}");
    assert_eq!((c.non_ip, c.unclassified), (1, PER_FLOW), "{c:?}");
}
