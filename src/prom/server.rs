//! HTTP for the metrics endpoint: hyper's HTTP/1.1 server on a
//! single-threaded tokio runtime of its own thread, with the accept loop
//! ours so that no client can hold the endpoint:
//!
//! - every connection is its own task, so an idle or slow one delays no
//!   other (the old server answered one connection at a time, and one idle
//!   client delayed every scrape by its 2 s read timeout);
//! - a client must send a whole request head within `header_timeout`
//!   (hyper's header read timeout, restarted for each keep-alive request),
//!   or the connection is closed; no connection lives past `lifetime`
//!   (slow readers of the response);
//! - at most `max_connections` at once; one more closes the oldest, so a
//!   flood of idle connections cannot lock a scraper out;
//! - a request head above `max_head_bytes` is refused (431) and closed.
//!
//! The endpoint's own outcomes are metric families too
//! (`xdprobe_metrics_http_connections_total{outcome}`); a failing accept is
//! logged once per interval with a count.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use tokio::sync::oneshot;

use super::Metrics;
use xdprobe_capture::lograte::{ERROR_LOG_EVERY, LogEvery};

/// Connection limits and timeouts.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub lifetime: Duration,
    /// hyper's read buffer bound, which caps a request head (at least 8 KiB).
    pub max_head_bytes: usize,
}

impl Default for Limits {
    /// 256 connections (a scraper needs one; 50 idle clients leave 200
    /// free), 5 s for a request head (a scrape's arrives at once), 30 s per
    /// connection (Prometheus' default scrape timeout is 10 s), 8 KiB heads.
    fn default() -> Self {
        Limits {
            max_connections: 256,
            header_timeout: Duration::from_secs(5),
            lifetime: Duration::from_secs(30),
            max_head_bytes: 8 * 1024,
        }
    }
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Counts of what became of connections.
#[derive(Debug, Default)]
struct HttpStats {
    accepted: AtomicU64,
    /// Closed to make room under `max_connections`.
    evicted: AtomicU64,
    /// Closed for exceeding `lifetime`.
    expired: AtomicU64,
    /// Ended by an HTTP error: header timeout, oversized or malformed head.
    failed: AtomicU64,
    accept_errors: AtomicU64,
}

#[derive(Debug)]
struct HttpCollector(Arc<HttpStats>);

impl Collector for HttpCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let mut fam = enc.encode_descriptor(
            "xdprobe_metrics_http_connections",
            "Connections to this endpoint, by outcome.",
            None,
            MetricType::Counter,
        )?;
        for (outcome, v) in [
            ("accepted", &s.accepted),
            ("evicted", &s.evicted),
            ("expired", &s.expired),
            ("failed", &s.failed),
            ("accept_error", &s.accept_errors),
        ] {
            let labels = [("outcome", outcome)];
            ConstCounter::new(v.load(Ordering::Relaxed)).encode(fam.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The running endpoint; dropping it stops the server and joins its thread.
pub struct MetricsServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds now (before privileges are dropped); serves once `start`ed.
    pub fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
        let l = TcpListener::bind(addr)?;
        let a = l.local_addr()?;
        l.set_nonblocking(true)?;
        Ok((l, a))
    }

    /// Serves `metrics` on `listener` from a thread of its own.
    pub fn start(listener: TcpListener, metrics: Metrics, limits: Limits) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stats = Arc::new(HttpStats::default());
        metrics.register(HttpCollector(stats.clone()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("xdprobe-metrics".into())
            .spawn(move || {
                runtime.block_on(serve(listener, metrics, limits, stats, stopped));
            })?;
        tracing::info!(%addr, "Prometheus metrics at http://{addr}/metrics");
        Ok(MetricsServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    limits: Limits,
    stats: Arc<HttpStats>,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "metrics endpoint cannot serve its socket");
            return;
        }
    };
    let mut live: VecDeque<tokio::task::AbortHandle> = VecDeque::new();
    let mut accept_log = LogEvery::new(ERROR_LOG_EVERY);
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                if let Some(n) = accept_log.due(Instant::now()) {
                    tracing::warn!(error = %e, occurrences = n, "metrics accept failed");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        live.retain(|h| !h.is_finished());
        while live.len() >= limits.max_connections.max(1) {
            if let Some(oldest) = live.pop_front() {
                oldest.abort();
                stats.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (metrics, stats) = (metrics.clone(), stats.clone());
        let task = tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(limits.max_head_bytes.max(8192))
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |req| answer(req, metrics.clone())),
                );
            match tokio::time::timeout(limits.lifetime, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "metrics connection ended");
                }
                Err(_) => {
                    stats.expired.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        live.push_back(task.abort_handle());
    }
    for h in live {
        h.abort();
    }
}

async fn answer(
    req: Request<Incoming>,
    metrics: Metrics,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, ctype: &'static str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(ctype),
        );
        r
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET /metrics\n".into(),
        ));
    }
    if req.uri().path() != "/metrics" {
        return Ok(reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics\n".into(),
        ));
    }
    Ok(match metrics.render() {
        Ok(text) => reply(StatusCode::OK, OPENMETRICS, text),
        Err(_) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            "encoding failed\n".into(),
        ),
    })
}
