//! The endpoints' own view of a TCP connection's RTT: `tcp:tcp_probe`
//! events (the sending socket's smoothed RTT on every segment it
//! receives), read from a tracefs instance of the test's own through its
//! trace pipe (clock `mono`, converted to Unix time), independent of the
//! probe.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// One `tcp:tcp_probe` event: the socket (local and remote `addr:port`),
/// its smoothed RTT and when (Unix µs).
#[derive(Clone, Debug)]
pub struct Probed {
    pub at_us: u64,
    pub src: String,
    pub dest: String,
    pub srtt_us: u64,
}

/// A tracefs instance with `tcp:tcp_probe` enabled for the test's ports,
/// read by a thread; removed on drop.
pub struct Trace {
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Vec<Probed>>>,
}

/// `id`'s time in seconds.
pub fn clock(id: libc::clockid_t) -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `t`, which lives for
    // the call.
    unsafe { libc::clock_gettime(id, &raw mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

impl Trace {
    /// Starts the instance, `tcp_probe` filtered to the sockets with one
    /// of `ports` at either end.
    pub fn start(ports: &[u16]) -> Trace {
        let root = Path::new("/sys/kernel/tracing");
        if !root.join("instances").is_dir() {
            super::sh(&["mount", "-t", "tracefs", "tracefs", "/sys/kernel/tracing"]);
        }
        let dir = root
            .join("instances")
            .join(format!("xdprobe-tsrtt-{}", std::process::id()));
        let filter = ports
            .iter()
            .map(|p| format!("sport == {p} || dport == {p}"))
            .collect::<Vec<_>>()
            .join(" || ");
        std::fs::create_dir(&dir).expect("create a tracefs instance");
        let mut t = Trace {
            dir: dir.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            reader: None,
        };
        write(&dir.join("trace_clock"), "mono");
        write(&dir.join("buffer_size_kb"), "8192");
        let ev = dir.join("events/tcp/tcp_probe");
        write(&ev.join("filter"), &filter);
        write(&ev.join("enable"), "1");
        // Unix time = mono + offset, sampled back to back.
        let offset = clock(libc::CLOCK_REALTIME) - clock(libc::CLOCK_MONOTONIC);
        let pipe = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(dir.join("trace_pipe"))
            .expect("open trace_pipe");
        let stop = t.stop.clone();
        t.reader = Some(std::thread::spawn(move || read_pipe(pipe, &stop, offset)));
        t
    }

    /// Stops the reader: the events read until now.
    pub fn finish(mut self) -> Vec<Probed> {
        self.stop.store(true, Ordering::Release);
        self.reader
            .take()
            .map(|r| r.join().expect("trace reader"))
            .unwrap_or_default()
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let _ = std::fs::write(self.dir.join("events/tcp/tcp_probe/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn read_pipe(mut pipe: File, stop: &AtomicBool, offset: f64) -> Vec<Probed> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut partial = String::new();
    // Drain until stopped, then once more.
    let mut last = false;
    while !last {
        last = stop.load(Ordering::Acquire);
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    partial.push_str(&String::from_utf8_lossy(&buf[..n]));
                    while let Some(i) = partial.find('\n') {
                        let line: String = partial.drain(..=i).collect();
                        out.extend(parse_probe(&line, offset));
                    }
                }
                Err(_) => break, // EAGAIN: nothing pending.
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    out
}

/// `… 1234.567890: tcp_probe: family=AF_INET src=A:P dest=B:Q … srtt=N …`
fn parse_probe(line: &str, offset: f64) -> Option<Probed> {
    let (head, body) = line.split_once(" tcp_probe: ")?;
    let mono: f64 = head
        .split_whitespace()
        .last()?
        .trim_end_matches(':')
        .parse()
        .ok()?;
    let kv = |k: &str| {
        body.split_whitespace()
            .find_map(|t| t.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_owned)
    };
    Some(Probed {
        at_us: ((mono + offset) * 1e6) as u64,
        src: kv("src")?,
        dest: kv("dest")?,
        srtt_us: kv("srtt")?.parse().ok()?,
    })
}
