//! The Prometheus endpoint (`GET /metrics`, text exposition format 0.0.4)
//! and the periodic log line, both rendered from one [`Report`] that the
//! daemon refreshes about once a second from the XDP counters, the
//! sockets' kernel statistics and the workers' published snapshots. Nothing
//! here touches a worker's hot path.

use std::{
    fmt::Write as _,
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use xdprobe_common::XdpCounters;

use super::worker::Snapshot;

/// One queue's view: its worker's snapshot (with its socket's statistics).
#[derive(Clone, Debug, Default)]
pub struct QueueReport {
    pub iface: String,
    pub worker: Snapshot,
}

/// Everything the endpoint and the log line show.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Per interface: name and the XDP program's counters (all CPUs).
    pub xdp: Vec<(String, XdpCounters)>,
    pub queues: Vec<QueueReport>,
}

fn counter(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
}

fn gauge(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
}

impl Report {
    /// The exposition text.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(4096);
        counter(
            &mut o,
            "xdprobe_xdp_packets_total",
            "Frames seen by the XDP program, by outcome.",
        );
        for (iface, c) in &self.xdp {
            for (result, v) in [
                ("seen", c.seen),
                ("redirected", c.redirected),
                ("filtered", c.filtered),
                ("non_ip", c.non_ip),
                ("redirect_failed", c.redirect_failed),
                ("meta_failed", c.meta_failed),
            ] {
                let _ = writeln!(
                    o,
                    "xdprobe_xdp_packets_total{{iface=\"{iface}\",result=\"{result}\"}} {v}"
                );
            }
        }
        let q = |o: &mut String, name: &str, help: &str, f: &dyn Fn(&QueueReport) -> u64| {
            counter(o, name, help);
            for r in &self.queues {
                let _ = writeln!(
                    o,
                    "{name}{{iface=\"{}\",queue=\"{}\"}} {}",
                    r.iface,
                    r.worker.queue,
                    f(r)
                );
            }
        };
        q(
            &mut o,
            "xdprobe_xsk_rx_dropped_total",
            "AF_XDP socket: frames dropped by the kernel.",
            &|r| r.worker.socket.rx_dropped,
        );
        q(
            &mut o,
            "xdprobe_xsk_rx_ring_full_total",
            "AF_XDP socket: RX ring full (user space too slow).",
            &|r| r.worker.socket.rx_ring_full,
        );
        q(
            &mut o,
            "xdprobe_xsk_rx_fill_ring_empty_total",
            "AF_XDP socket: fill ring empty when a frame arrived.",
            &|r| r.worker.socket.rx_fill_ring_empty,
        );
        q(
            &mut o,
            "xdprobe_xsk_rx_invalid_descs_total",
            "AF_XDP socket: invalid RX descriptors.",
            &|r| r.worker.socket.rx_invalid_descs,
        );
        q(
            &mut o,
            "xdprobe_worker_rx_frames_total",
            "Frames read from the queue's socket.",
            &|r| r.worker.live.rx_frames,
        );
        q(
            &mut o,
            "xdprobe_worker_rx_bytes_total",
            "Bytes read from the queue's socket.",
            &|r| r.worker.live.rx_bytes,
        );
        q(
            &mut o,
            "xdprobe_worker_handoff_out_total",
            "Frames handed to the worker owning their flow.",
            &|r| r.worker.live.handed_off,
        );
        q(
            &mut o,
            "xdprobe_worker_handoff_full_total",
            "Frames lost to a full hand-off ring.",
            &|r| r.worker.live.handoff_full,
        );
        q(
            &mut o,
            "xdprobe_worker_handoff_in_total",
            "Frames received from other workers.",
            &|r| r.worker.live.handoff_in,
        );
        q(
            &mut o,
            "xdprobe_worker_ts_fallback_total",
            "Frames stamped at read time (no XDP timestamp).",
            &|r| r.worker.live.ts_fallback,
        );
        q(
            &mut o,
            "xdprobe_worker_records_total",
            "Flow records sent to the exporter.",
            &|r| r.worker.live.records_out,
        );
        q(
            &mut o,
            "xdprobe_worker_records_dropped_total",
            "Flow records dropped at a full exporter channel.",
            &|r| r.worker.live.records_dropped,
        );
        q(
            &mut o,
            "xdprobe_worker_frames_total",
            "Frames accounted by the flow worker.",
            &|r| r.worker.flows.frames,
        );
        q(
            &mut o,
            "xdprobe_worker_flows_created_total",
            "Flows created.",
            &|r| r.worker.flows.table.flows_created,
        );
        q(
            &mut o,
            "xdprobe_worker_flows_evicted_total",
            "Flows ended early by a full table.",
            &|r| r.worker.flows.table.evicted,
        );
        gauge(
            &mut o,
            "xdprobe_worker_active_flows",
            "Flows in the table now.",
        );
        for r in &self.queues {
            let _ = writeln!(
                o,
                "xdprobe_worker_active_flows{{iface=\"{}\",queue=\"{}\"}} {}",
                r.iface, r.worker.queue, r.worker.flows.active_flows
            );
        }
        counter(
            &mut o,
            "xdprobe_worker_parse_drops_total",
            "Frames the parser refused, by reason.",
        );
        for r in &self.queues {
            for (reason, v) in r.worker.flows.drops.iter() {
                let _ = writeln!(
                    o,
                    "xdprobe_worker_parse_drops_total{{iface=\"{}\",queue=\"{}\",reason=\"{reason}\"}} {v}",
                    r.iface, r.worker.queue
                );
            }
        }
        o
    }

    /// The periodic log line's fields, summed over queues.
    pub fn totals(&self) -> (u64, u64, u64, u64, u64, u64) {
        let xdp_seen = self.xdp.iter().map(|(_, c)| c.seen).sum();
        let frames = self.queues.iter().map(|q| q.worker.live.rx_frames).sum();
        let flows = self
            .queues
            .iter()
            .map(|q| q.worker.flows.active_flows)
            .sum();
        let records = self.queues.iter().map(|q| q.worker.live.records_out).sum();
        let sock_drops = self
            .queues
            .iter()
            .map(|q| q.worker.socket.rx_dropped + q.worker.socket.rx_ring_full)
            .sum();
        let lost = self
            .queues
            .iter()
            .map(|q| q.worker.live.handoff_full + q.worker.live.records_dropped)
            .sum();
        (xdp_seen, frames, flows, records, sock_drops, lost)
    }
}

/// The exposition text of the moment.
pub type Render = Box<dyn Fn() -> String + Send>;

/// The HTTP endpoint: a small blocking server on its own thread, one
/// request per connection.
pub struct PromServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PromServer {
    /// Binds now (before privileges are dropped); serves once `start`ed.
    pub fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
        let l = TcpListener::bind(addr)?;
        let a = l.local_addr()?;
        l.set_nonblocking(true)?;
        Ok((l, a))
    }

    pub fn start(listener: TcpListener, report: Arc<Mutex<Report>>) -> std::io::Result<Self> {
        Self::start_with(
            listener,
            Box::new(move || report.lock().map(|r| r.render()).unwrap_or_default()),
        )
    }

    /// Serves whatever `render` returns (`xdprobe manager`'s metrics).
    pub fn start_with(listener: TcpListener, render: Render) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xdprobe-metrics".into())
            .spawn(move || serve(&listener, &*render, &s))?;
        tracing::info!(%addr, "Prometheus metrics at http://{addr}/metrics");
        Ok(PromServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for PromServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(l: &TcpListener, report: &dyn Fn() -> String, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        match l.accept() {
            Ok((conn, _)) => {
                if let Err(e) = answer(conn, report) {
                    tracing::debug!(error = %e, "metrics request failed");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

fn answer(mut conn: TcpStream, report: &dyn Fn() -> String) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    conn.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 1024];
    let n = conn.read(&mut buf)?;
    let req = buf.get(..n).unwrap_or(&[]);
    let ok = req.starts_with(b"GET /metrics ") || req.starts_with(b"GET /metrics?");
    let (status, body) = if ok {
        ("200 OK", report())
    } else {
        ("404 Not Found", "try /metrics\n".to_owned())
    };
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body.as_bytes())
}
