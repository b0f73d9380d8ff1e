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
        self.render_ts_rtt(&mut o);
        o
    }

    /// Timestamp RTT per worker and leg: a summary (quantiles of the last
    /// complete 10 s window of packet time, NaN when there is none; sum and
    /// count since start) and the counted events.
    fn render_ts_rtt(&self, o: &mut String) {
        let name = "xdprobe_tcp_ts_rtt_seconds";
        let _ = writeln!(
            o,
            "# HELP {name} RTT from TCP timestamps, probe -> endpoint -> probe, by leg (server: probe -> server -> probe); quantiles over the last complete 10 s window.\n# TYPE {name} summary"
        );
        let secs = |us: Option<u32>| us.map_or(f64::NAN, |v| f64::from(v) / 1e6);
        for r in &self.queues {
            let ts = &r.worker.flows.ts_rtt;
            for (leg, t) in [("server", ts.server()), ("client", ts.client())] {
                let labels = format!(
                    "iface=\"{}\",queue=\"{}\",leg=\"{leg}\"",
                    r.iface, r.worker.queue
                );
                let w = t.last_window.map(|(s, _)| s).unwrap_or_default();
                for (q, v) in [("0.5", w.p50_us), ("0.9", w.p90_us)] {
                    let _ = writeln!(o, "{name}{{{labels},quantile=\"{q}\"}} {}", secs(v));
                }
                let _ = writeln!(o, "{name}_sum{{{labels}}} {}", t.sum_us as f64 / 1e6);
                let _ = writeln!(o, "{name}_count{{{labels}}} {}", t.count);
            }
        }
        counter(
            o,
            "xdprobe_tcp_ts_rtt_events_total",
            "Timestamp-RTT events by kind: TSvals not remembered (untracked), dropped unanswered (expired), echoes of unremembered TSvals (missed), bad input (echo_unseen, tsval_backwards, time_backwards), one-sided flows.",
        );
        for r in &self.queues {
            for (event, v) in r.worker.flows.ts_rtt.counters.iter() {
                let _ = writeln!(
                    o,
                    "xdprobe_tcp_ts_rtt_events_total{{iface=\"{}\",queue=\"{}\",event=\"{event}\"}} {v}",
                    r.iface, r.worker.queue
                );
            }
        }
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
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xdprobe-metrics".into())
            .spawn(move || serve(&listener, &report, &s))?;
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

fn serve(l: &TcpListener, report: &Mutex<Report>, stop: &AtomicBool) {
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

fn answer(mut conn: TcpStream, report: &Mutex<Report>) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    conn.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 1024];
    let n = conn.read(&mut buf)?;
    let req = buf.get(..n).unwrap_or(&[]);
    let ok = req.starts_with(b"GET /metrics ") || req.starts_with(b"GET /metrics?");
    let (status, body) = if ok {
        let text = report.lock().map(|r| r.render()).unwrap_or_default();
        ("200 OK", text)
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
