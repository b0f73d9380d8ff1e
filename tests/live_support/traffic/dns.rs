//! DNS traffic for the capture rig: just enough of the wire format (RFC
//! 1035 §4.1) for a resolver and a responder, the UDP responder and
//! client, and DNS over TCP (§4.2.2).

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, TcpStream, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use super::{
    DNS_PORT, NetNs, Plan, Rng, SERVER, Servers, connect, in_ns, serve, timeout, wait_listening,
    wait_listening_udp,
};

/// An A query for `name`.
pub fn build(id: u16, name: &str, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.extend_from_slice(&[0, 0, 1, 0, 1]);
}

/// A query's ID and the end of its question, if it is one.
pub fn query(m: &[u8]) -> Option<(u16, usize)> {
    if m.len() < 17 || m[2] & 0x80 != 0 {
        return None;
    }
    let mut i = 12;
    while *m.get(i)? != 0 {
        i += usize::from(m[i]) + 1;
        if i > 300 {
            return None;
        }
    }
    let end = i + 5;
    (end <= m.len()).then(|| (u16::from_be_bytes([m[0], m[1]]), end))
}

/// The answer to `q` (header + question): one A record.
pub fn answer(q: &[u8], id: u16, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
    out.extend_from_slice(q.get(12..).unwrap_or_default());
    out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
    out.extend_from_slice(&[192, 0, 2, 100 + (id % 50) as u8]);
}

/// The ID of a response, if it is one.
pub fn response_id(m: &[u8]) -> Option<u16> {
    (m.len() >= 12 && m[2] & 0x80 != 0).then(|| u16::from_be_bytes([m[0], m[1]]))
}

/// Only the DNS responder (for benches with traffic of their own).
pub fn start_dns(s: &NetNs) -> Servers {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let t = in_ns(s, move || dns_server(&st));
    // An early query would be retried by nobody and stay unanswered.
    wait_listening_udp(s, &[DNS_PORT]);
    Servers {
        stop,
        threads: vec![t],
        children: Vec::new(),
    }
}

/// The DNS client of `plan` alone, in `c`; returns the unanswered count.
pub fn dns_queries(c: &NetNs, plan: &Plan) -> usize {
    let p = *plan;
    in_ns(c, move || dns_client(&p))
        .join()
        .unwrap_or(p.dns_queries)
}

/// Answers A queries after 3 + (ID mod 7) ms; a query whose ID is a
/// multiple of 17 stays unanswered.
pub(super) fn dns_server(stop: &AtomicBool) {
    let u = UdpSocket::bind((SERVER, DNS_PORT)).expect("bind :53/udp");
    u.set_read_timeout(Some(Duration::from_millis(100))).ok();
    let mut buf = [0u8; 512];
    let mut out = Vec::with_capacity(512);
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, peer)) = u.recv_from(&mut buf) else {
            continue;
        };
        let Some((id, qend)) = query(buf.get(..n).unwrap_or_default()) else {
            continue;
        };
        if id % 17 == 0 {
            continue;
        }
        std::thread::sleep(Duration::from_millis(3 + u64::from(id % 7)));
        answer(&buf[..qend], id, &mut out);
        let _ = u.send_to(&out, peer);
    }
}

/// `plan.dns_queries` lookups, one every `dns_interval`; even ones from one
/// fixed socket (one flow of many transactions), odd ones from a fresh
/// socket each. Returns the unanswered count.
pub(super) fn dns_client(p: &Plan) -> usize {
    let mut rng = Rng(p.dns_seed);
    let Ok(fixed) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) else {
        return p.dns_queries;
    };
    let mut q = Vec::new();
    let mut buf = [0u8; 512];
    let mut unanswered = 0;
    for k in 0..p.dns_queries {
        let id = (rng.next_u64() % 65534 + 1) as u16;
        build(id, &format!("host{k}.example.test"), &mut q);
        let fresh;
        let s = if k % 2 == 0 {
            &fixed
        } else {
            match UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) {
                Ok(u) => {
                    fresh = u;
                    &fresh
                }
                Err(_) => continue,
            }
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let answered = s.send_to(&q, (SERVER, DNS_PORT)).is_ok()
            && matches!(s.recv_from(&mut buf), Ok((n, _)) if response_id(&buf[..n]).is_some());
        unanswered += usize::from(!answered);
        std::thread::sleep(p.dns_interval);
    }
    unanswered
}

/// DNS over TCP (RFC 1035 §4.2.2: each message after a two-byte length) on
/// :53, answering after 5 ms.
pub fn start_dns_tcp(s: &NetNs) -> Servers {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let t = in_ns(s, move || {
        serve(DNS_PORT, st, |mut c| {
            let mut out = Vec::new();
            while let Some(q) = read_framed(&mut c) {
                let Some((id, qend)) = query(&q) else {
                    return;
                };
                std::thread::sleep(Duration::from_millis(5));
                answer(&q[..qend], id, &mut out);
                let mut framed = (out.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&out);
                if c.write_all(&framed).is_err() {
                    return;
                }
            }
        })
    });
    wait_listening(s, &[DNS_PORT]);
    Servers {
        stop,
        threads: vec![t],
        children: Vec::new(),
    }
}

/// One length-prefixed DNS message, or `None` at EOF or after 5 s.
fn read_framed(c: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    read_exact_by(c, &mut len)?;
    let mut m = vec![0u8; usize::from(u16::from_be_bytes(len))];
    read_exact_by(c, &mut m)?;
    Some(m)
}

/// `read_exact` with the socket's short read timeout, bounded to 5 s.
fn read_exact_by(c: &mut TcpStream, buf: &mut [u8]) -> Option<()> {
    let mut have = 0;
    let end = Instant::now() + Duration::from_secs(5);
    while have < buf.len() {
        if Instant::now() > end {
            return None;
        }
        match c.read(&mut buf[have..]) {
            Ok(0) => return None,
            Ok(n) => have += n,
            Err(e) if timeout(&e) => {}
            Err(_) => return None,
        }
    }
    Some(())
}

/// A DNS-over-TCP client connection made from `c` (the socket stays in
/// the client namespace whichever thread uses it).
pub fn dns_tcp_connect(c: &NetNs) -> TcpStream {
    in_ns(c, || connect(DNS_PORT).expect("connect :53/tcp"))
        .join()
        .expect("connect thread")
}

/// One query on a DNS-over-TCP connection; true when answered.
pub fn dns_tcp_query(s: &mut TcpStream, id: u16, name: &str) -> bool {
    let mut q = Vec::new();
    build(id, name, &mut q);
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    s.write_all(&framed).is_ok() && read_framed(s).is_some_and(|a| response_id(&a) == Some(id))
}
