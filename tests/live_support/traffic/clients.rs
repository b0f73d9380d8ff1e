//! The rig's clients: every client of a plan at once, the keep-alive
//! connection, and a receiver that stalls its sender.

use std::{
    io::{self, Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    process::Stdio,
    sync::atomic::AtomicBool,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::{
    DOWNLOAD_PORT, HTTP_PORT, KEEPALIVE_PORT, NetNs, Plan, REFUSED_PORT, SERVER, SHORT_TCP_PORT,
    SHORT_UDP_PORT, STALL_PORT, TLS_PORT, UPLOAD_PORT, connect, dns::dns_client, drain, in_ns,
    paced, set_int, timeout, wait_listening,
};

/// Runs every client of `plan` in `c` at once and waits for all (each is
/// bounded). Failures of single exchanges are expected under loss and only
/// counted.
pub fn run_clients(c: &NetNs, plan: &Plan) -> usize {
    let p = *plan;
    let mut jobs: Vec<JoinHandle<usize>> = Vec::new();
    if p.bulk_kbit > 0 {
        jobs.push(in_ns(c, move || {
            let Ok(mut s) = connect(UPLOAD_PORT) else {
                return 1;
            };
            paced(&mut s, p.bulk, p.bulk_kbit);
            let _ = s.shutdown(std::net::Shutdown::Write);
            drain(&mut s, &AtomicBool::new(false));
            0
        }));
        jobs.push(in_ns(c, move || {
            let Ok(mut s) = connect(DOWNLOAD_PORT) else {
                return 1;
            };
            let line = format!("SEND {} {}\n", p.bulk.as_millis(), p.bulk_kbit);
            if s.write_all(line.as_bytes()).is_err() {
                return 1;
            }
            drain(&mut s, &AtomicBool::new(false));
            0
        }));
    }
    jobs.push(in_ns(c, move || {
        let mut failed = 0;
        for _ in 0..p.http_gets {
            let ok = connect(HTTP_PORT).is_ok_and(|mut s| {
                let got = s
                    .write_all(format!("GET {}\n", p.http_bytes).as_bytes())
                    .is_ok()
                    .then(|| read_n(&mut s, p.http_bytes));
                got == Some(p.http_bytes)
            });
            failed += usize::from(!ok);
        }
        // Refused: SYN, RST.
        let _ = TcpStream::connect_timeout(
            &SocketAddr::from((SERVER, REFUSED_PORT)),
            Duration::from_secs(2),
        );
        failed
    }));
    jobs.push(in_ns(c, move || dns_client(&p)));
    jobs.push(in_ns(c, move || {
        usize::from(keepalive_client(p.keepalive_idle).is_err())
    }));
    if p.short_flows > 0 {
        jobs.push(in_ns(c, move || {
            for _ in 0..p.short_flows {
                if let Ok(u) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) {
                    let _ = u.send_to(&[b'u'; 64], (SERVER, SHORT_UDP_PORT));
                    let _ = u.send_to(&[b'v'; 64], (SERVER, SHORT_UDP_PORT));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let mut failed = 0;
            for k in 0..p.short_flows / 10 {
                let ok = connect(SHORT_TCP_PORT).is_ok_and(|mut s| {
                    s.write_all(format!("GET {k}\r\n").as_bytes()).is_ok()
                        && read_n(&mut s, 2000) == 2000
                });
                failed += usize::from(!ok);
            }
            failed
        }));
    }
    let mut tls = Vec::new();
    for _ in 0..p.tls_gets {
        tls.push(
            c.command("curl")
                .args(["-sk", "--max-time", "4", "-o", "/dev/null"])
                .arg(format!("https://{SERVER}:{TLS_PORT}/"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status(),
        );
    }
    let mut failed = tls
        .iter()
        .filter(|s| !s.as_ref().is_ok_and(|s| s.success()))
        .count();
    for j in jobs {
        failed += j.join().unwrap_or(1);
    }
    failed
}

/// Reads up to `n` bytes (until EOF or 5 s); returns how many came.
pub(super) fn read_n(s: &mut TcpStream, n: usize) -> usize {
    let mut buf = [0u8; 16384];
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(5);
    while got < n && Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if timeout(&e) => {}
            Err(_) => break,
        }
    }
    got
}

/// Three request/response turns, then idle with 1 s keep-alives.
fn keepalive_client(idle: Duration) -> io::Result<()> {
    let mut s = connect(KEEPALIVE_PORT)?;
    let fd = s.as_raw_fd();
    set_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 1);
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 1);
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 5);
    for _ in 0..3 {
        s.write_all(&[b'Q'; 100])?;
        if read_n(&mut s, 1000) < 1000 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    std::thread::sleep(idle);
    Ok(())
}

/// A receiver that stops reading: the client sends `bytes` as fast as it
/// can; the server reads nothing for `stall`, then 4 KiB every 10 ms for
/// `slow`, then everything. The sender fills the advertised window (window
/// full), the receiver advertises a zero window and the sender probes it.
pub fn stalled_receiver(s: &NetNs, c: &NetNs, bytes: usize, stall: Duration, slow: Duration) {
    let server = in_ns(s, move || {
        let l = TcpListener::bind((SERVER, STALL_PORT)).expect("listen :7100");
        l.set_nonblocking(true).ok();
        let end = Instant::now() + Duration::from_secs(10);
        let mut conn = None;
        while conn.is_none() && Instant::now() < end {
            match l.accept() {
                Ok((c, _)) => conn = Some(c),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let Some(mut c) = conn else { return 0 };
        c.set_nonblocking(false).ok();
        c.set_read_timeout(Some(Duration::from_millis(200))).ok();
        std::thread::sleep(stall);
        let mut got = 0;
        let mut buf = [0u8; 4096];
        let slow_end = Instant::now() + slow;
        while Instant::now() < slow_end {
            match c.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => got += n,
                Err(e) if timeout(&e) => {}
                Err(_) => return got,
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        got + read_n(&mut c, usize::MAX / 2)
    });
    wait_listening(s, &[STALL_PORT]);
    let client = in_ns(c, move || {
        let Ok(mut s) = connect(STALL_PORT) else {
            return 0;
        };
        let data = vec![b'z'; bytes];
        let sent = s.write_all(&data).map_or(0, |()| bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        sent
    });
    let sent = client.join().unwrap_or(0);
    let got = server.join().unwrap_or(0);
    assert_eq!(sent, bytes, "the stalled receiver's sender did not finish");
    assert_eq!(got, bytes, "the stalled receiver did not read everything");
}
