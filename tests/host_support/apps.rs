//! Applications that time themselves, the host tests' independent
//! reference: a timed message stream, a timed `connect()`, and the
//! scheduling (pinning, real-time priority) that keeps their clock reads
//! next to the system calls they time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use super::mono_ns;
use crate::live_support::NetNs;

/// How the receiving application reads.
#[derive(Clone, Copy, Debug)]
pub enum Reader {
    /// read() as soon as data is there.
    Eager,
    /// Waits until the socket is readable, then sleeps this long before
    /// reading: every message waits that long in the receive queue.
    Lazy(Duration),
}

/// One message's own timing: the sender's clock just before write(), the
/// receiver's just after the read() that completed it.
#[derive(Clone, Copy, Debug)]
pub struct Timed {
    pub index: u32,
    pub sent_ns: u64,
    pub read_ns: u64,
    /// How long a lazy reader held readable data before its read
    /// returned, as it timed itself (its sleep as it really took, which a
    /// busy machine stretches); 0 for an eager reader.
    pub held_ns: u64,
}

impl Timed {
    pub fn t8_ns(&self) -> u64 {
        self.read_ns.saturating_sub(self.sent_ns)
    }
}

/// Message layout: send time (u64), index (u32), length (u32), then filler.
pub const HEADER: usize = 16;

/// What the timed application sends.
#[derive(Clone, Copy, Debug)]
pub struct Messages {
    pub count: u32,
    /// Bytes per message (at least [`HEADER`]).
    pub size: usize,
    /// Pause after each message.
    pub gap: Duration,
    pub reader: Reader,
}

/// A timed server: a thread in `s` (real-time scheduling, as the
/// applications timing themselves run) that accepts one connection on
/// `server` and hands it to `serve`; returns once it listens.
pub fn serve_one<'s, T: Send + 's>(
    sc: &'s std::thread::Scope<'s, '_>,
    s: &'s NetNs,
    server: SocketAddr,
    serve: impl FnOnce(TcpStream) -> T + Send + 's,
) -> std::thread::ScopedJoinHandle<'s, T> {
    let (tx, rx) = mpsc::channel();
    let srv = sc.spawn(move || {
        s.enter_current_thread();
        realtime();
        let l = TcpListener::bind(server).expect("bind");
        tx.send(()).expect("ready");
        let (conn, _) = l.accept().expect("accept");
        serve(conn)
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("server ready");
    srv
}

/// Its client: a thread in `c` (real-time scheduling) connected to
/// `server`, handing the connection to `talk`.
pub fn connect_one<'s, T: Send + 's>(
    sc: &'s std::thread::Scope<'s, '_>,
    c: &'s NetNs,
    server: SocketAddr,
    talk: impl FnOnce(TcpStream) -> T + Send + 's,
) -> std::thread::ScopedJoinHandle<'s, T> {
    sc.spawn(move || {
        c.enter_current_thread();
        realtime();
        let conn = TcpStream::connect_timeout(&server, Duration::from_secs(5)).expect("connect");
        talk(conn)
    })
}

/// The client in `c` sends `m.count` messages of `m.size` bytes to
/// `server`, one every `m.gap`, each carrying its own send time; the server
/// in `s` reads them as `m.reader` says and records when it read each.
/// `before_each(i)` runs in the client (its namespace) before message `i`.
/// Returns the messages' timings, parsed by the receiver from the stream.
pub fn timed_messages(
    c: &NetNs,
    s: &NetNs,
    server: SocketAddr,
    m: &Messages,
    before_each: &(dyn Fn(u32) + Sync),
) -> Vec<Timed> {
    let Messages {
        count,
        size,
        gap,
        reader,
    } = *m;
    assert!(size >= HEADER);
    std::thread::scope(|sc| {
        let srv = serve_one(sc, s, server, |mut conn| {
            conn.set_read_timeout(Some(Duration::from_secs(20))).ok();
            let mut out = Vec::new();
            let mut pending: Vec<u8> = Vec::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let mut readable_ns = None;
                if let Reader::Lazy(d) = reader {
                    wait_readable(&conn);
                    readable_ns = Some(mono_ns());
                    std::thread::sleep(d);
                }
                let n = match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let read_ns = mono_ns();
                let held_ns = readable_ns.map_or(0, |r| read_ns.saturating_sub(r));
                pending.extend_from_slice(&buf[..n]);
                while pending.len() >= size {
                    let sent_ns = u64::from_le_bytes(pending[0..8].try_into().unwrap());
                    let index = u32::from_le_bytes(pending[8..12].try_into().unwrap());
                    let len = u32::from_le_bytes(pending[12..16].try_into().unwrap());
                    assert_eq!(len as usize, size, "stream framing");
                    out.push(Timed {
                        index,
                        sent_ns,
                        read_ns,
                        held_ns,
                    });
                    pending.drain(..size);
                }
            }
            out
        });
        connect_one(sc, c, server, |mut conn| {
            conn.set_nodelay(true).ok();
            let mut msg = vec![0x5au8; size];
            for i in 0..count {
                before_each(i);
                let t = mono_ns();
                msg[0..8].copy_from_slice(&t.to_le_bytes());
                msg[8..12].copy_from_slice(&i.to_le_bytes());
                msg[12..16].copy_from_slice(&(size as u32).to_le_bytes());
                conn.write_all(&msg).expect("write");
                std::thread::sleep(gap);
            }
        })
        .join()
        .expect("client");
        srv.join().expect("server")
    })
}

/// One blocking `connect()` to `to`, timed around that system call alone
/// (the socket is made before the clock starts): (local port, µs). What the
/// probe times, → SYN_SENT inside the call to → ESTABLISHED in softirq,
/// lies inside it; the rest is the call's entry and the caller's wake-up.
pub fn timed_connect(to: std::net::SocketAddr) -> (u16, f64) {
    use std::os::fd::FromRawFd;
    let v6 = to.is_ipv6();
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: socket(2) with constant arguments; the descriptor is owned
    // by the TcpStream made from it below, which closes it.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh, open socket that nothing else owns.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        std::net::SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a
            // sockaddr_in; we write it through a correctly typed pointer.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            size_of::<libc::sockaddr_in6>()
        }
    };
    let t0 = mono_ns();
    // SAFETY: connect(2) on our socket with an address of `len` valid bytes.
    let rc = unsafe {
        libc::connect(
            fd,
            &ss as *const _ as *const libc::sockaddr,
            len as libc::socklen_t,
        )
    };
    let t1 = mono_ns();
    assert_eq!(rc, 0, "connect {to}: {}", std::io::Error::last_os_error());
    let port = stream.local_addr().expect("local address").port();
    (port, (t1 - t0) as f64 / 1000.0)
}

/// Pins the calling thread (and the threads it starts from now on) to `cpu`.
pub fn pin_to(cpu: usize) {
    // SAFETY: an all-zero cpu_set_t is an empty set; CPU_SET writes a bit
    // inside it; sched_setaffinity reads it by pointer for this thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// Real-time priority for the calling thread, so that the other work on
/// the machine (builds, other tests) cannot preempt it between a system
/// call and the clock read next to it: the reference then times the
/// system calls, as the probe does, not the scheduler's whims.
pub fn realtime() {
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: sets this thread's policy; a plain struct passed by pointer.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
    assert_eq!(rc, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
}

/// Waits at most `ms` for `s` to be readable.
pub fn wait_readable_ms(s: &TcpStream, ms: i32) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one valid pollfd with a bounded timeout.
    unsafe { libc::poll(&mut p, 1, ms) };
}

fn wait_readable(s: &TcpStream) {
    wait_readable_ms(s, 5000);
}
