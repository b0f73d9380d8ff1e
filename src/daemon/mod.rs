//! `xdprobe run`: the foreground daemon (for systemd `Type=simple`).
//!
//! Start-up, in this order: read the config; per interface load the XDP
//! program, open one AF_XDP socket per configured queue, put the sockets
//! into the program's socket map, then attach (so no frame meets an empty
//! map); bind the metrics port; drop privileges (see `privs`); only then
//! start threads (exporter, JSON writer, metrics, one worker per queue),
//! which inherit the reduced capabilities.
//!
//! Signals: SIGTERM/SIGINT detach XDP, let every worker drain its ring and
//! the hand-off rings, flush every active flow to the exporter (blocking:
//! nothing is dropped at exit), shut the exporter down and return. A second
//! SIGTERM/SIGINT during that exits at once with status 1. SIGHUP re-reads
//! the config and applies what needs no re-attach: collectors (the exporter
//! keeps unchanged ones connected), flow timeouts (each worker applies them
//! at its next tick) and the log interval; other changes are logged as
//! needing a restart.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use xdprobe_config::{Config, Mode};
use xdprobe_dataplane::FlowConfig;
use xdprobe_dataplane::source::afxdp::{BindMode, XskError, XskOptions, XskSocket};
use xdprobe_exporter::{CollectorSpec, Exporter, ExporterConfig, ExporterError, ProbeCounters};

use xdprobe_capture::{
    sink::{JsonSender, RecordSink, spawn_json_writer},
    worker::queue::{Control, QueueWorker, Snapshot},
    xdp::{AttachMode, XdpError, XdpFilter, XdpOptions, XdpProgram},
};

use crate::prom::{Limits, Metrics, MetricsServer};
use export::ExportCollector;
use join::{HostLine, Joining, JsonItem};
use privs::PrivError;
use reload::reload;
use report::{QueueReport, Report, ReportCollector, TsRttSummary};

pub mod export;
pub mod host;
pub mod join;
pub mod privs;
mod reload;
pub mod report;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("invalid configuration:\n{0}")]
    Config(#[from] xdprobe_config::ConfigErrors),
    #[error("XDP on {iface}")]
    Xdp {
        iface: String,
        #[source]
        source: Box<XdpError>,
    },
    #[error(transparent)]
    Xsk(#[from] XskError),
    #[error("metrics endpoint")]
    Metrics(#[source] std::io::Error),
    #[error("dropping privileges")]
    Privs(#[from] PrivError),
    #[error("exporter")]
    Exporter(#[from] ExporterError),
    #[error("installing signal handlers")]
    Signals(#[source] std::io::Error),
    #[error("starting a thread")]
    Thread(#[source] std::io::Error),
    #[error(transparent)]
    Memory(#[from] crate::budget::TooLarge),
    #[error(transparent)]
    Host(#[from] host::HostError),
    #[error("JSON output {path}")]
    Json {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where JSON records go, besides the exporter.
#[derive(Clone, Debug)]
pub enum JsonOut {
    Stdout,
    File(PathBuf),
}

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub config: PathBuf,
    pub json: Option<JsonOut>,
    /// `--no-handoff`: never hand frames between workers, whatever the
    /// interfaces' `handoff` keys say.
    pub no_handoff: bool,
    /// Worker tick: flow expiry on quiet queues and snapshot publishing.
    pub tick: Duration,
    /// Stamp frames at read time instead of using the XDP timestamps (for
    /// measuring the difference only).
    pub read_time_stamps: bool,
}

/// The flags the signal handlers set.
struct Signals {
    term: Arc<AtomicBool>,
    hup: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> Result<Self, DaemonError> {
        let term = Arc::new(AtomicBool::new(false));
        let hup = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            // A second signal while `term` is already set exits at once.
            signal_hook::flag::register_conditional_shutdown(sig, 1, term.clone())
                .map_err(DaemonError::Signals)?;
            signal_hook::flag::register(sig, term.clone()).map_err(DaemonError::Signals)?;
        }
        signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())
            .map_err(DaemonError::Signals)?;
        Ok(Signals { term, hup })
    }
}

pub fn flow_config(cfg: &Config) -> FlowConfig {
    FlowConfig {
        capacity: cfg.flow.capacity,
        idle_timeout: cfg.flow.idle_timeout,
        active_timeout: cfg.flow.active_timeout,
        tcp_linger: cfg.flow.tcp_end_linger,
        npm: cfg.flow.npm,
        ts_rtt: cfg.flow.tcp_ts_rtt,
        l7: crate::l7_settings::l7_config(&cfg.l7),
        ..FlowConfig::default()
    }
}

fn exporter_config(cfg: &Config) -> Result<ExporterConfig, DaemonError> {
    let collectors = collectors(cfg)?;
    Ok(ExporterConfig {
        collectors,
        pen: cfg.export.pen,
        mtu: usize::from(cfg.export.mtu),
        template_refresh: cfg.export.template_refresh,
        options_interval: cfg.export.options_interval,
        tcp_buffer_records: cfg.export.tcp_buffer_records,
        channel_capacity: cfg.export.channel_capacity,
        observation_domain: cfg.export.observation_domain,
        process_fields: cfg.host.connlat,
        observation_name: Some(format!(
            "xdprobe {}: {}",
            xdprobe_exporter::hostname(),
            cfg.interfaces
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        )),
        ..ExporterConfig::default()
    })
}

fn collectors(cfg: &Config) -> Result<Vec<CollectorSpec>, DaemonError> {
    cfg.export
        .collectors
        .iter()
        .map(|u| CollectorSpec::parse(u).map_err(DaemonError::from))
        .collect()
}

fn xdp_options(cfg: &Config, iface: &xdprobe_config::Interface) -> XdpOptions {
    XdpOptions {
        iface: iface.name.clone(),
        mode: match iface.xdp_mode {
            xdprobe_config::XdpMode::Native => AttachMode::Native,
            xdprobe_config::XdpMode::Generic => AttachMode::Generic,
            xdprobe_config::XdpMode::Auto => AttachMode::Auto,
        },
        host_mode: cfg.probe.mode == Mode::Host,
        filter: XdpFilter {
            vlans: cfg.filter.vlans.clone(),
            prefixes: cfg
                .filter
                .prefixes
                .iter()
                .map(|p| (p.addr(), p.prefix_len()))
                .collect(),
            ports: cfg.filter.ports.clone(),
        },
    }
}

fn xsk_options(iface: &xdprobe_config::Interface) -> XskOptions {
    XskOptions {
        umem_frames: iface.umem_frames,
        frame_size: iface.frame_size,
        rx_ring: iface.rx_ring,
        fill_ring: iface.fill_ring,
        completion_ring: iface.completion_ring,
        bind: match iface.xsk_bind {
            xdprobe_config::XskBind::Auto => BindMode::Auto,
            xdprobe_config::XskBind::Copy => BindMode::Copy,
            xdprobe_config::XskBind::ZeroCopy => BindMode::ZeroCopy,
        },
        busy_poll: iface.busy_poll,
        poll_timeout: iface.poll_timeout,
        ..XskOptions::default()
    }
}

/// Whether `iface`'s workers hand frames to the worker owning their flow,
/// and why (for the log): needed unless one queue gets both directions of
/// every flow (one queue, or symmetric RSS).
fn handoff_for(iface: &xdprobe_config::Interface, no_handoff: bool) -> (bool, String) {
    use xdprobe_config::Handoff;
    if iface.queues.len() <= 1 {
        return (false, "one queue".into());
    }
    if no_handoff {
        return (false, "--no-handoff".into());
    }
    match iface.handoff {
        Handoff::On => (true, "handoff = \"on\"".into()),
        Handoff::Off => (false, "handoff = \"off\"".into()),
        Handoff::Auto => match xdprobe_capture::rss::query(&iface.name) {
            Ok(rss @ xdprobe_capture::rss::Rss::Symmetric(_)) => (false, rss.to_string()),
            Ok(rss) => (true, rss.to_string()),
            Err(e) => (true, format!("RSS configuration unreadable: {e}")),
        },
    }
}

/// One capture interface once set up.
struct Capture {
    /// Frames are handed between this interface's workers.
    handoff: bool,
    prog: XdpProgram,
    /// (queue, core, socket) until the workers take the sockets.
    sockets: Vec<(u32, usize, XskSocket)>,
}

fn set_up(cfg: &Config, no_handoff: bool) -> Result<Vec<Capture>, DaemonError> {
    let mut out = Vec::with_capacity(cfg.interfaces.len());
    for iface in &cfg.interfaces {
        let (handoff, why) = handoff_for(iface, no_handoff);
        tracing::info!(iface = %iface.name, handoff, reason = %why, "hand-off between workers");
        let xerr = |source| DaemonError::Xdp {
            iface: iface.name.clone(),
            source: Box::new(source),
        };
        let mut prog = XdpProgram::load(&xdp_options(cfg, iface)).map_err(xerr)?;
        let xo = xsk_options(iface);
        let mut sockets = Vec::with_capacity(iface.queues.len());
        for q in &iface.queues {
            let s = XskSocket::open(&iface.name, q.queue, &xo)?;
            prog.register_socket(q.queue, s.fd()).map_err(xerr)?;
            tracing::info!(iface = %iface.name, queue = q.queue, core = q.core, bind = s.bind_mode, "AF_XDP socket ready");
            sockets.push((q.queue, q.core, s));
        }
        prog.attach().map_err(xerr)?;
        out.push(Capture {
            handoff,
            prog,
            sockets,
        });
    }
    Ok(out)
}

struct Running {
    threads: Vec<JoinHandle<Snapshot>>,
    /// (iface, published snapshot) per worker.
    queues: Vec<(String, Arc<Mutex<Snapshot>>)>,
}

fn spawn_workers(
    cfg: &Config,
    captures: &mut [Capture],
    opts: &RunOptions,
    exporter: Option<&Exporter>,
    json: Option<&crossbeam_channel::Sender<JsonItem>>,
    conns: Option<&Arc<host::Conns>>,
    control: &Arc<Control>,
) -> Result<Running, DaemonError> {
    let flow = flow_config(cfg);
    let mut run = Running {
        threads: Vec::new(),
        queues: Vec::new(),
    };
    let mut index_base = 0;
    let total: usize = captures.iter().map(|c| c.sockets.len()).sum();
    for (cap, iface) in captures.iter_mut().zip(&cfg.interfaces) {
        let n = cap.sockets.len();
        let ways = if cap.handoff { n } else { 1 };
        let (mut producers, mut merges) = xdprobe_capture::handoff::merge::mesh(ways);
        for (i, (queue, core, socket)) in cap.sockets.drain(..).enumerate() {
            let published = Arc::new(Mutex::new(Snapshot {
                queue,
                core: Some(core),
                ..Snapshot::default()
            }));
            let w = QueueWorker {
                index: i,
                workers: ways,
                core: Some(core),
                socket,
                flow: flow.clone(),
                sink: RecordSink::new(exporter.map(Exporter::sender), json.cloned())
                    .with_conns(conns.map(|c| c.clone() as _)),
                producers: producers.get_mut(i).map(std::mem::take).unwrap_or_default(),
                merge: merges.get_mut(i).and_then(Option::take),
                control: control.clone(),
                published: published.clone(),
                tick: opts.tick,
                read_time_stamps: opts.read_time_stamps,
            };
            let t = std::thread::Builder::new()
                .name(format!("xdprobe-w{}", index_base + i))
                .spawn(move || w.run())
                .map_err(DaemonError::Thread)?;
            run.threads.push(t);
            run.queues.push((iface.name.clone(), published));
        }
        index_base += n;
    }
    // Shutdown waits for every worker of every interface.
    control.rx_done.store(0, Ordering::Release);
    control.workers.store(total, Ordering::Release);
    Ok(run)
}

fn refresh_report(report: &Mutex<Report>, captures: &[Capture], running: &Running) {
    let xdp = captures
        .iter()
        .map(|c| {
            (
                c.prog.iface().to_owned(),
                c.prog.counters().unwrap_or_default(),
            )
        })
        .collect();
    let queues = running
        .queues
        .iter()
        .map(|(iface, snap)| QueueReport {
            iface: iface.clone(),
            worker: snap.lock().map(|s| s.clone()).unwrap_or_default(),
        })
        .collect();
    if let Ok(mut r) = report.lock() {
        *r = Report { xdp, queues };
    }
}

fn log_line(report: &Mutex<Report>) {
    let Ok(r) = report.lock() else { return };
    let (xdp_seen, frames, flows, records, sock_drops, lost) = r.totals();
    tracing::info!(
        xdp_seen,
        frames,
        active_flows = flows,
        records,
        socket_drops = sock_drops,
        handoff_or_export_drops = lost,
        "capture stats"
    );
}

/// Runs the daemon until SIGTERM/SIGINT.
pub fn run(opts: &RunOptions) -> Result<(), DaemonError> {
    let signals = Signals::install()?;
    let cfg = xdprobe_config::load(&opts.config)?;
    // Before anything is loaded or allocated: refuse what cannot fit.
    crate::budget::for_daemon(&cfg, &flow_config(&cfg), opts.no_handoff)
        .check(crate::budget::available())?;
    let mut captures = set_up(&cfg, opts.no_handoff)?;
    // The host probes attach while the privileges are still held.
    let host_probes = host::HostProbes::open(&cfg)?;
    let metrics = if cfg.metrics.enabled {
        Some(MetricsServer::bind(cfg.metrics.listen).map_err(DaemonError::Metrics)?)
    } else {
        None
    };
    let json_file = match &opts.json {
        Some(JsonOut::File(p)) => Some(open_json(p)?),
        _ => None,
    };
    privs::drop_privileges(cfg.probe.user.as_deref())?;

    // Threads from here on.
    let probe_counters = Arc::new(ProbeCounters::default());
    let exporter = Exporter::spawn(ExporterConfig {
        probe_counters: Some(probe_counters.clone()),
        ..exporter_config(&cfg)?
    })?;
    let out: Option<Box<dyn Write + Send>> = match (&opts.json, json_file) {
        (Some(JsonOut::Stdout), _) => Some(Box::new(std::io::stdout())),
        (Some(JsonOut::File(_)), Some(f)) => Some(Box::new(f)),
        _ => None,
    };
    let json = out
        .map(|out| {
            let joining = Joining::new(host_probes.is_some());
            spawn_json_writer(out, cfg.export.channel_capacity, joining)
        })
        .transpose()
        .map_err(DaemonError::Thread)?;
    let control = Arc::new(Control::default());
    let conns = host_probes
        .as_ref()
        .map(|_| Arc::new(host::Conns::default()));
    let running = spawn_workers(
        &cfg,
        &mut captures,
        opts,
        Some(&exporter),
        json.as_ref().map(|(tx, _)| tx),
        conns.as_ref().filter(|_| cfg.host.connlat),
        &control,
    )?;
    let host = match (host_probes, conns) {
        (Some(p), Some(c)) => Some(host::HostAgent::spawn(
            p,
            json.as_ref().map(|(tx, _)| tx.clone()),
            c,
        )?),
        _ => None,
    };
    let report = Arc::new(Mutex::new(Report::default()));
    let _prom = serve_metrics(metrics, &report, &exporter, host.as_ref())?;
    tracing::info!(workers = running.threads.len(), "xdprobe running");
    let daemon = Daemon {
        cfg,
        captures,
        running,
        report,
        exporter,
        control,
        host,
        json,
    };
    daemon.supervise(opts, &signals, &probe_counters);
    daemon.stop()
}

/// What runs once the daemon is up: what the loop watches and the
/// shutdown takes down, in that order.
struct Daemon {
    cfg: Config,
    captures: Vec<Capture>,
    running: Running,
    report: Arc<Mutex<Report>>,
    exporter: Exporter,
    control: Arc<Control>,
    host: Option<host::HostAgent>,
    json: Option<(JsonSender<HostLine>, JoinHandle<u64>)>,
}

/// The metrics endpoint over the report, the exporter's and the host
/// agent's counters; `None` when `[metrics]` is off (`bound` is `None`).
fn serve_metrics(
    bound: Option<(std::net::TcpListener, std::net::SocketAddr)>,
    report: &Arc<Mutex<Report>>,
    exporter: &Exporter,
    host: Option<&host::HostAgent>,
) -> Result<Option<MetricsServer>, DaemonError> {
    let Some((l, _)) = bound else {
        return Ok(None);
    };
    let registry = Metrics::new();
    registry.register(ReportCollector(report.clone()));
    registry.register_summary(TsRttSummary(report.clone()));
    registry.register(ExportCollector(exporter.live_stats()));
    if let Some(h) = host {
        registry.register(host::HostCollector(h.metrics.clone()));
    }
    MetricsServer::start(l, registry, Limits::default())
        .map(Some)
        .map_err(DaemonError::Metrics)
}

impl Daemon {
    /// Until SIGTERM/SIGINT: the report every second, the log line every
    /// `log_interval`, a reload on SIGHUP.
    fn supervise(&self, opts: &RunOptions, signals: &Signals, probe_counters: &ProbeCounters) {
        let Daemon {
            cfg,
            captures,
            running,
            report,
            exporter,
            control,
            ..
        } = self;
        let mut log_interval = cfg.probe.log_interval;
        let mut last_log = Instant::now();
        let mut last_report = Instant::now();
        while !signals.term.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50));
            if last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                refresh_report(report, captures, running);
                if let Ok(r) = report.lock() {
                    let (ignored, evicted, frag_evicted) = r.probe_totals();
                    probe_counters.store(ignored, evicted, frag_evicted);
                }
            }
            if last_log.elapsed() >= log_interval {
                last_log = Instant::now();
                log_line(report);
            }
            if signals.hup.swap(false, Ordering::AcqRel) {
                reload(&opts.config, cfg, exporter, control, &mut log_interval);
            }
        }
    }

    /// Detaches XDP, lets the workers flush their flows, then stops the
    /// host agent, the exporter and the JSON writer, in that order.
    fn stop(self) -> Result<(), DaemonError> {
        let Daemon {
            mut captures,
            running,
            report,
            exporter,
            control,
            host,
            json,
            ..
        } = self;
        tracing::info!("stopping: detaching XDP, flushing flows");
        for c in &mut captures {
            if let Err(e) = c.prog.detach() {
                tracing::warn!(iface = c.prog.iface(), error = %e, "detach failed");
            }
        }
        control.stop_rx.store(true, Ordering::Release);
        for t in running.threads {
            if t.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
        let joined = Running {
            threads: Vec::new(),
            queues: running.queues,
        };
        refresh_report(&report, &captures, &joined);
        log_line(&report);
        if let Some(h) = host {
            h.stop();
        }
        let stats = exporter.shutdown()?;
        tracing::info!(%stats, "exporter stopped");
        if let Some((tx, handle)) = json {
            drop(tx);
            if let Ok(n) = handle.join() {
                tracing::info!(records = n, "JSON output closed");
            }
        }
        let _ = std::io::stdout().flush();
        Ok(())
    }
}

fn open_json(p: &Path) -> Result<std::fs::File, DaemonError> {
    // Never through a planted symlink (the daemon runs as root).
    xdprobe_exporter::safe_file::create_new_or_truncate(p).map_err(|e| DaemonError::Json {
        path: p.display().to_string(),
        source: e.into(),
    })
}
