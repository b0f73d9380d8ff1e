//! Helpers for the host-side tests: two namespaces joined by a veth pair
//! with the kernel's default offloads (TSO/GSO on, as the issue demands),
//! the real `xdprobe` binary as the probe, and applications that time
//! themselves (the independent reference).
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::live_support::{NetNs, neigh, sh, topo::ChildGuard};

pub mod probed;

pub const CLIENT_IP: &str = "192.0.2.1";
pub const SERVER_IP: &str = "192.0.2.2";
pub const CLIENT_IP6: &str = "2001:db8::1";
pub const SERVER_IP6: &str = "2001:db8::2";

/// Host tests run one at a time: they count the programs loaded on the
/// whole kernel, and each probe watches every flow of its ports.
pub use xdprobe_test_support::serial;

/// `CLOCK_MONOTONIC` in ns: the clock the kernel programs stamp with.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Client namespace `c` (c0: 192.0.2.1, 2001:db8::1) and server namespace
/// `s` (s0: 192.0.2.2, 2001:db8::2), one veth pair, offloads as the kernel
/// sets them, static neighbours.
pub struct Pair {
    pub c: NetNs,
    pub s: NetNs,
}

impl Pair {
    pub fn new() -> Pair {
        let c = NetNs::new("hsc");
        let s = NetNs::new("hss");
        sh(&[
            "ip", "-n", &c.name, "link", "add", "c0", "type", "veth", "peer", "name", "s0",
            "netns", &s.name,
        ]);
        for (ns, dev, v4, v6) in [
            (&c, "c0", CLIENT_IP, CLIENT_IP6),
            (&s, "s0", SERVER_IP, SERVER_IP6),
        ] {
            ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0"]);
            ns.exec(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{dev}.disable_ipv6=0"),
            ]);
            ns.exec(&["ip", "addr", "add", &format!("{v4}/24"), "dev", dev]);
            ns.exec(&[
                "ip",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            ns.exec(&["ip", "link", "set", dev, "up"]);
        }
        let cmac = c.mac("c0");
        let smac = s.mac("s0");
        for (ns, dev, ip, mac) in [
            (&c, "c0", SERVER_IP, &smac),
            (&c, "c0", SERVER_IP6, &smac),
            (&s, "s0", CLIENT_IP, &cmac),
            (&s, "s0", CLIENT_IP6, &cmac),
        ] {
            neigh(ns, dev, ip, mac);
        }
        Pair { c, s }
    }

    /// The namespace's inode (what the probe reports as `netns`).
    pub fn inode(ns: &NetNs) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/run/netns/{}", ns.name))
            .expect("netns file")
            .ino()
    }
}

/// A running `xdprobe host`, stopped with SIGTERM on [`HostProbe::stop`]
/// (killed on drop if a test fails first).
pub struct HostProbe {
    child: ChildGuard,
    pub json: PathBuf,
    stderr: PathBuf,
}

impl HostProbe {
    /// Starts `xdprobe host ARGS --json FILE` and waits until every layer
    /// is attached.
    pub fn start(dir: &Path, args: &[&str]) -> HostProbe {
        let json = dir.join("host.jsonl");
        let stderr = dir.join("host.err");
        let child = Command::new(env!("CARGO_BIN_EXE_xdprobe"))
            .arg("host")
            .args(args)
            .arg("--json")
            .arg(&json)
            .env("XDPROBE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("spawn xdprobe host");
        let mut p = HostProbe {
            child: ChildGuard::new(child),
            json,
            stderr,
        };
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let err = std::fs::read_to_string(&p.stderr).unwrap_or_default();
            if err.contains("sock_rx") && err.contains("attached") {
                break;
            }
            if let Some(st) = p.child.child().try_wait().ok().flatten() {
                panic!("xdprobe host exited early ({st}): {err}");
            }
            assert!(Instant::now() < end, "xdprobe host not attached: {err}");
            std::thread::sleep(Duration::from_millis(20));
        }
        p
    }

    /// SIGTERM, wait, and the reports it wrote.
    pub fn stop(self) -> Vec<Value> {
        self.stop_with_stderr().0
    }

    /// As [`HostProbe::stop`], with what it printed on stderr.
    pub fn stop_with_stderr(mut self) -> (Vec<Value>, String) {
        self.child.signal(libc::SIGTERM);
        let st = self.child.wait(Duration::from_secs(60), "xdprobe host");
        let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(st.success(), "xdprobe host failed ({st}): {err}");
        let reports = std::fs::read_to_string(&self.json)
            .expect("json output")
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        (reports, err)
    }

    /// The probe's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

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

/// Real-time priority for the calling thread, so that the other work on
/// the machine (builds, other tests) cannot preempt it between a system
/// call and the clock read next to it: the reference then times the
/// system calls, as the probe does, not the scheduler's whims.
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
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one valid pollfd with a bounded timeout.
    unsafe { libc::poll(&mut p, 1, 5000) };
}

/// Median of `v` (sorted copy), nearest rank.
pub fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[s.len().div_ceil(2) - 1]
}

/// The report of the flow `src:sport → dst:dport` (any sport when 0).
pub fn flow<'a>(reports: &'a [Value], dst_port: u16, src: &str) -> Vec<&'a Value> {
    reports
        .iter()
        .filter(|r| r["dport"] == dst_port && r["src"] == src)
        .collect()
}

/// A segment's figure in a report, µs.
pub fn seg(r: &Value, name: &str, what: &str) -> f64 {
    r["segments"][name][what]
        .as_f64()
        .unwrap_or_else(|| panic!("no segments.{name}.{what} in {r}"))
}

/// Reads the `--samples` file: per timed byte of the flow to `dport`, its
/// stream position and layer → time (ns).
pub fn raw_samples(path: &Path, dport: u16) -> Vec<(u64, Vec<(String, u64)>)> {
    std::fs::read_to_string(path)
        .expect("samples file")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|v| v["dport"] == dport)
        .map(|v| {
            let times = v["times"]
                .as_array()
                .expect("times")
                .iter()
                .map(|t| (t[0].as_str().unwrap().to_owned(), t[1].as_u64().unwrap()))
                .collect();
            (v["pos"].as_u64().unwrap(), times)
        })
        .collect()
}

/// Pairs the probe's T8 of each message's last byte with the message's
/// own timing: (application T8, probe T8) in ns, for every message the
/// probe timed. Messages are `size` bytes back to back, so the k-th one
/// ends at `first_end + k·size`.
pub fn paired_t8(
    samples: &[(u64, Vec<(String, u64)>)],
    timed: &[Timed],
    size: usize,
) -> Vec<(u64, u64)> {
    let t8 = |times: &[(String, u64)]| {
        let get = |n: &str| times.iter().find(|(l, _)| l == n).map(|(_, t)| *t);
        get("sock_rx")?.checked_sub(get("sock_tx")?)
    };
    let Some(first) = samples.iter().map(|s| s.0).min() else {
        return Vec::new();
    };
    let mut by_index = std::collections::HashMap::new();
    for (pos, times) in samples {
        let off = pos - first;
        if off % size as u64 == 0
            && let Some(v) = t8(times)
        {
            by_index.insert((off / size as u64) as u32, v);
        }
    }
    let first_index = timed.iter().map(|t| t.index).min().unwrap_or(0);
    timed
        .iter()
        .filter_map(|t| {
            by_index
                .get(&(t.index - first_index))
                .map(|&p| (t.t8_ns(), p))
        })
        .collect()
}

/// Pairs samples with messages by time, for a probe that did not see the
/// stream from its start (time sampling): a sample's socket-layer send
/// time is the entry of the write(2) that carried it, a few µs after the
/// sender read its clock for the message. Messages `gap` apart pair
/// unambiguously within `gap / 4`. Returns (application T8, probe T8).
pub fn paired_t8_by_time(
    samples: &[(u64, Vec<(String, u64)>)],
    timed: &[Timed],
    gap: Duration,
) -> Vec<(u64, u64)> {
    let mut sent: Vec<&Timed> = timed.iter().collect();
    sent.sort_by_key(|t| t.sent_ns);
    let near = gap.as_nanos() as u64 / 4;
    samples
        .iter()
        .filter_map(|(_, times)| {
            let get = |n: &str| times.iter().find(|(l, _)| l == n).map(|(_, t)| *t);
            let (tx, rx) = (get("sock_tx")?, get("sock_rx")?);
            let i = sent.partition_point(|t| t.sent_ns <= tx).checked_sub(1)?;
            let m = sent[i];
            let probe = rx.checked_sub(tx)?;
            (tx - m.sent_ns <= near).then_some((m.t8_ns(), probe))
        })
        .collect()
}

/// The host programs loaded now that were not loaded at `before`, once the
/// kernel has released those of a probe that just exited: a program's last
/// reference goes with its link, and the kernel frees it after an RCU grace
/// period, so `bpftool` may list it for a while after the process is gone.
/// BTF-typed (`tp_btf`) programs wait for an RCU-tasks grace period, which
/// took over 3 s on a loaded CI machine. Waits up to 30 s for there to be
/// none (returning as soon as there are none), then returns them.
/// Programs are told apart by ID, so another process's probe that comes or
/// goes meanwhile is not counted.
pub fn left_loaded(before: &[String]) -> Vec<String> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let new: Vec<String> = loaded_host_programs()
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        if new.is_empty() || std::time::Instant::now() > until {
            return new;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The host programs process `pid` holds open, as `name#id`: the program
/// IDs of its descriptors (`/proc/PID/fdinfo`, `prog_id:`), so programs
/// other processes load meanwhile (other tests on the machine) are never
/// among them.
pub fn host_programs_of(pid: u32) -> Vec<String> {
    let mut ids = std::collections::HashSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) {
        for e in dir.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            ids.extend(text.lines().filter_map(|l| {
                l.strip_prefix("prog_id:")
                    .and_then(|v| v.trim().parse::<u64>().ok())
            }));
        }
    }
    loaded_host_programs()
        .into_iter()
        .filter(|p| {
            p.rsplit('#')
                .next()
                .and_then(|id| id.parse::<u64>().ok())
                .is_some_and(|id| ids.contains(&id))
        })
        .collect()
}

/// Of `ours` (from [`host_programs_of`]), those still loaded after up to
/// 30 s (see [`left_loaded`] for why a wait).
pub fn still_loaded(ours: &[String]) -> Vec<String> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left: Vec<String> = loaded_host_programs()
            .into_iter()
            .filter(|p| ours.contains(p))
            .collect();
        if left.is_empty() || std::time::Instant::now() > until {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The host programs loaded now (bpftool), as `name#id`.
pub fn loaded_host_programs() -> Vec<String> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]));
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p["name"].as_str()?, p["id"].as_u64()?)))
                .filter(|(n, _)| n.starts_with("stack_") || n.starts_with("conn_"))
                .map(|(n, id)| format!("{n}#{id}"))
                .collect()
        })
        .unwrap_or_default()
}
