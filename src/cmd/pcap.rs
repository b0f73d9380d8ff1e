//! `xdprobe pcap FILE`: a capture file through the same worker the live path
//! uses, records printed and/or exported.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::ValueEnum;
use xdprobe::budget::{self, Estimate};
use xdprobe_dataplane::output::{Format, RecordWriter};
use xdprobe_dataplane::source::{Capture, Frame};
use xdprobe_dataplane::{FlowConfig, FlowRecord, Worker, WorkerStats};
use xdprobe_exporter::{CollectorSpec, Exporter, ExporterConfig, ProbeCounters};

use super::parse_duration;
use super::pcap_filter::FrameFilter;
use super::pcap_progress::Progress;
use xdprobe_capture::worker::file::{self, ReadStop};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    /// One JSON object per record per line.
    Json,
    /// Aligned columns for a terminal.
    Table,
    /// CSV with a header line.
    Csv,
    /// No record output (export only, or just the summary).
    None,
}

#[derive(clap::Args, Debug)]
pub struct PcapArgs {
    /// pcap or pcapng file; `-` reads standard input. Pipes, FIFOs and
    /// devices are read as streams, regular files are mapped.
    pub file: PathBuf,
    /// Record output on stdout [default: table on a terminal, json
    /// when stdout is a pipe or a file].
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    #[command(flatten)]
    pub flow: FlowArgs,
    /// Print a summary (packets, flows, drop reasons) to stderr at the end.
    #[arg(long)]
    pub stats: bool,
    /// Export records to a collector: udp://HOST:PORT, tcp://HOST:PORT or
    /// file:///PATH, optionally with ?format=nfv9, ?mode=uniflow,
    /// ?profile=ntop (see docs/exporter.md). Repeat for several collectors.
    #[arg(long = "export", value_name = "URL")]
    pub export: Vec<String>,
    /// Private enterprise number of the NPM elements in IPFIX.
    #[arg(long, default_value_t = 32473)]
    pub pen: u32,
    /// Keep only frames matching this capture filter, in tcpdump's
    /// (pcap-filter) syntax: `--filter 'tcp port 443'`. The same words may
    /// instead follow FILE, as tcpdump takes them. Needs libpcap.
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,
    /// The filter as trailing words (`xdprobe pcap FILE tcp port 443`).
    #[arg(value_name = "EXPRESSION", conflicts_with = "filter")]
    pub expression: Vec<String>,
    /// No progress bar (it is drawn on stderr only when stderr is a
    /// terminal the records are not printed on, and the input is a file of
    /// known size).
    #[arg(long)]
    pub no_progress: bool,
    /// Flow workers (threads, each with its own flow table of `--capacity`
    /// flows); they take turns at reading and hand each frame to its owner
    /// by a symmetric hash of the IP addresses. Default: the cores this
    /// process may run on.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
}

/// A person at a terminal reads the table; a pipe or a file gets JSON
/// lines, the schema scripts read.
fn default_format() -> FormatArg {
    if io::stdout().is_terminal() {
        FormatArg::Table
    } else {
        FormatArg::Json
    }
}

/// The cores this process may run on (its affinity mask, as
/// `available_parallelism` reads it), at least 1.
fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Flow-table settings shared by the offline commands.
#[derive(clap::Args, Debug, Clone)]
pub struct FlowArgs {
    /// End a flow after this long without packets (e.g. 30s, 2m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Report long flows every this long; they go on.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub active_timeout: Duration,
    /// Linger after TCP FIN both ways / RST for late packets.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub tcp_linger: Duration,
    /// Flows held at once (1 to 67108864, as `[flow] capacity`); the least
    /// recently seen is evicted beyond it. Memory is checked up front.
    #[arg(long, default_value_t = 262_144,
          value_parser = clap::value_parser!(u64).range(1..=MAX_CAPACITY))]
    pub capacity: u64,
    /// Do not compute NPM metrics (to measure their cost).
    #[arg(long)]
    pub no_npm: bool,
    /// Do not compute RTT from TCP timestamps (the rest of NPM stays on).
    #[arg(long)]
    pub no_ts_rtt: bool,
    #[command(flatten)]
    pub l7: L7Args,
}

/// What each flow is (`[l7]` in the config file, docs/l7.md).
#[derive(clap::Args, Debug, Clone)]
pub struct L7Args {
    /// No application labels or TLS/QUIC/HTTP/DNS fields (to measure their
    /// cost).
    #[arg(long)]
    pub no_l7: bool,
    /// Do not parse TLS (its flows are still labelled).
    #[arg(long)]
    pub no_l7_tls: bool,
    /// Do not decrypt QUIC Initials (its flows are still labelled).
    #[arg(long)]
    pub no_l7_quic: bool,
    /// Do not parse HTTP/1.x (its flows are still labelled).
    #[arg(long)]
    pub no_l7_http: bool,
    /// Do not parse DNS (its flows are still labelled).
    #[arg(long)]
    pub no_l7_dns: bool,
    /// Payload packets per direction inspected while a flow matched nothing
    /// or its hellos are awaited.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..))]
    pub l7_packets: u8,
    /// Flows with L7 parser state at once, per worker.
    #[arg(long, default_value_t = 16_384,
          value_parser = clap::value_parser!(u64).range(1..=1 << 24))]
    pub l7_max_flows: u64,
    /// 16 KiB reassembly buffers per worker.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(0..=65_536))]
    pub l7_buffers: u64,
    /// Bytes a TLS hello flight, QUIC CRYPTO stream or DNS-over-TCP message
    /// may take.
    #[arg(long, default_value_t = 16_384,
          value_parser = clap::value_parser!(u64).range(256..=16_384))]
    pub l7_reassembly_bytes: u64,
    /// Bytes an HTTP head may take.
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(256..=16_384))]
    pub http_max_head: u64,
    /// Bytes of the HTTP request target kept.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(0..=1024))]
    pub http_target_len: u64,
    /// Keep the first request's User-Agent.
    #[arg(long)]
    pub http_user_agent: bool,
}

impl L7Args {
    /// As the config file's `[l7]`.
    pub fn settings(&self) -> xdprobe_config::L7Settings {
        let n = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        xdprobe_config::L7Settings {
            enabled: !self.no_l7,
            tls: !self.no_l7_tls,
            quic: !self.no_l7_quic,
            http: !self.no_l7_http,
            dns: !self.no_l7_dns,
            packets: self.l7_packets,
            max_flows: n(self.l7_max_flows),
            buffers: n(self.l7_buffers),
            reassembly_bytes: n(self.l7_reassembly_bytes),
            http_max_head: n(self.http_max_head),
            http_target_len: n(self.http_target_len),
            http_user_agent: self.http_user_agent,
        }
    }
}

/// The largest `--capacity`, as the config file's `[flow] capacity`.
const MAX_CAPACITY: u64 = 1 << 26;

impl FlowArgs {
    pub fn flow_config(&self) -> FlowConfig {
        FlowConfig {
            capacity: usize::try_from(self.capacity).unwrap_or(usize::MAX),
            idle_timeout: self.idle_timeout,
            active_timeout: self.active_timeout,
            tcp_linger: self.tcp_linger,
            npm: !self.no_npm,
            ts_rtt: !self.no_ts_rtt,
            l7: xdprobe::l7_settings::l7_config(&self.l7.settings()),
            ..FlowConfig::default()
        }
    }
}

pub fn run(args: PcapArgs) -> anyhow::Result<ExitCode> {
    let flow = args.flow.flow_config();
    let expr = args
        .filter
        .clone()
        .or_else(|| (!args.expression.is_empty()).then(|| args.expression.join(" ")));
    let mut filter = match expr.map(FrameFilter::new).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("xdprobe: error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let n_workers = args.workers.map_or_else(default_workers, usize::from);
    let mut reader =
        Capture::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    check_memory(&args, &flow, n_workers, &reader)?;
    let format = output_format(args.format.unwrap_or_else(default_format));
    let exporter = start_exporter(&args)?;
    let sender = exporter.as_ref().map(|(e, _)| e.sender());
    let stdout = io::stdout().lock();
    let mut writer =
        format.map(|f| RecordWriter::new(BufWriter::with_capacity(1 << 16, stdout), f));
    let mut out_err: Option<io::Error> = None;
    let started = Instant::now();
    let mut progress = Progress::new(&args.file, !args.no_progress, format.is_some());
    let workers = (0..n_workers)
        .map(|_| Worker::try_new(&flow))
        .collect::<Result<Vec<_>, _>>()?;
    let (stats, read_result) = {
        // `Some(record)`: write and export it; `None` (several workers, no
        // record waiting): flush what was written, so a stream's records
        // appear as its flows end (a table holds its rows to size them).
        let mut output = |rec: Option<FlowRecord>| {
            let Some(rec) = rec else {
                if let Some(w) = writer.as_mut()
                    && out_err.is_none()
                    && let Err(e) = w.flush_written()
                {
                    out_err = Some(e);
                }
                return;
            };
            if out_err.is_none()
                && let Some(w) = writer.as_mut()
                && let Err(e) = w.write(&rec)
            {
                out_err = Some(e);
            }
            // Offline: never drop a record, wait for the exporter instead.
            if let Some(tx) = &sender {
                tx.send_blocking(rec);
            }
        };
        // Before the workers: the capture filter, then the progress bar.
        let mut hook = |batch: &mut [Frame<'_>], offset: u64| {
            let kept = match filter.as_mut() {
                None => batch.len(),
                Some(f) => f.retain(batch)?,
            };
            progress.batch(|| offset);
            Ok::<usize, xdprobe_filter::FilterError>(kept)
        };
        // Nothing reads the records with `--format none` and no collector:
        // the workers drop them where they end.
        let keep = format.is_some() || sender.is_some();
        // Flows seen so far are emitted even when the file is cut or corrupt.
        let o = file::run(&mut reader, workers, &mut output, keep, &mut hook);
        let read_result = o.read_result.map_err(|e| match e {
            ReadStop::Capture(e) => ReadError::Capture(e),
            ReadStop::Hook(e) => ReadError::Filter(e),
        });
        (o.workers, read_result)
    };
    let elapsed = started.elapsed();
    progress.finish();
    // The exporter drains its channel once every sender is gone.
    drop(sender);
    if let Some(w) = writer.as_mut()
        && out_err.is_none()
        && let Err(e) = w.flush()
    {
        out_err = Some(e);
    }
    match out_err {
        Some(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Some(e) => return Err(e).context("writing records"),
        None => {}
    }
    let total = WorkerStats::total(&stats);
    if args.stats {
        print_stats(&total, &stats, filter.as_ref(), &reader, elapsed);
    }
    if let Some(ex) = exporter
        && !finish_export(ex, &total, args.stats)?
    {
        return Ok(ExitCode::FAILURE);
    }
    Ok(exit_code(read_result, &args, &total))
}

fn output_format(f: FormatArg) -> Option<Format> {
    match f {
        FormatArg::Json => Some(Format::Json),
        FormatArg::Table => Some(Format::Table),
        FormatArg::Csv => Some(Format::Csv),
        FormatArg::None => None,
    }
}

/// Flushes the exporter; false when a file export lost messages, a failed
/// run whatever the rest did (the file holds the whole ones).
fn finish_export(
    (exporter, counters): (Exporter, Arc<ProbeCounters>),
    total: &WorkerStats,
    stats: bool,
) -> anyhow::Result<bool> {
    counters.store(
        total.drops.total(),
        total.table.evicted,
        total.frags.evicted,
    );
    let es = exporter.shutdown().context("flushing the exporter")?;
    if stats {
        eprintln!("export: {es}");
    }
    if let Some(c) = es.collectors.iter().find(|c| c.failed_messages > 0) {
        eprintln!(
            "xdprobe: export to {} failed: {} messages written, {} lost ({} records)",
            c.url, c.messages, c.failed_messages, c.not_sent
        );
        return Ok(false);
    }
    Ok(true)
}

/// Refuses to start when the flow tables, rings and queues this run sets
/// up would not fit in the memory available (`budget`).
fn check_memory(
    args: &PcapArgs,
    flow: &FlowConfig,
    n_workers: usize,
    reader: &Capture,
) -> anyhow::Result<()> {
    let exporter_defaults = ExporterConfig::default();
    let mut estimate = Estimate::default();
    estimate.flow_tables(n_workers as u64, flow);
    if !args.export.is_empty() {
        estimate.record_queue(
            "exporter channel",
            1,
            exporter_defaults.channel_capacity as u64,
        );
        estimate.record_queue(
            "collector queues",
            args.export.len() as u64,
            exporter_defaults.tcp_buffer_records as u64,
        );
    }
    if n_workers > 1 {
        let ring = xdprobe_capture::handoff::file::bytes_per_ring(reader.is_stream());
        estimate.add("worker rings", n_workers as u64, ring as u64);
    }
    estimate.check(budget::available())?;
    Ok(())
}

/// The exporter thread for `--export`, with the counters its options
/// records carry; `None` without collectors.
fn start_exporter(args: &PcapArgs) -> anyhow::Result<Option<(Exporter, Arc<ProbeCounters>)>> {
    if args.export.is_empty() {
        return Ok(None);
    }
    let collectors = args
        .export
        .iter()
        .map(|u| CollectorSpec::parse(u).with_context(|| format!("--export {u}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let counters = Arc::new(ProbeCounters::default());
    let cfg = ExporterConfig {
        collectors,
        pen: args.pen,
        probe_counters: Some(counters.clone()),
        observation_name: Some(format!(
            "xdprobe pcap {}",
            args.file
                .file_name()
                .unwrap_or(args.file.as_os_str())
                .to_string_lossy()
        )),
        ..ExporterConfig::default()
    };
    let exporter = Exporter::spawn(cfg).context("starting the exporter")?;
    Ok(Some((exporter, counters)))
}

/// `--stats`: the summary, what the filter took out, per worker, and the
/// capture's time-order repairs.
fn print_stats(
    total: &WorkerStats,
    stats: &[WorkerStats],
    filter: Option<&FrameFilter>,
    reader: &Capture,
    elapsed: Duration,
) {
    print_summary(total, elapsed);
    if let Some(f) = filter {
        eprintln!(
            "  filtered out: {} frames (filter {:?})",
            f.rejected,
            f.expr()
        );
    }
    if stats.len() > 1 {
        print_per_worker(stats);
    }
    let r = reader.reorder_stats();
    if r != Default::default() {
        eprintln!(
            "  time order: {} packets put before earlier-written ones, {} late by more than 2 ms (kept in file order; {} dropped as strays over 10 s off, {} clock steps kept), {} let out early (hold ring full)",
            r.reordered, r.late, r.late_dropped, r.steps, r.overflow
        );
    }
}

/// 0 when the whole file was read, 2 for a filter the file's link type
/// cannot take (as for a bad expression), 1 for a cut or corrupt file
/// (its flows so far were emitted).
fn exit_code(read_result: Result<(), ReadError>, args: &PcapArgs, total: &WorkerStats) -> ExitCode {
    match read_result {
        Ok(()) => ExitCode::SUCCESS,
        Err(ReadError::Filter(e)) => {
            eprintln!("xdprobe: error: {e}");
            ExitCode::from(2)
        }
        Err(ReadError::Capture(e)) => {
            eprintln!(
                "xdprobe: error: {}: {e} ({} packets read before it; their flows were emitted)",
                args.file.display(),
                total.frames
            );
            ExitCode::FAILURE
        }
    }
}

/// Why reading stopped early.
enum ReadError {
    /// The file is cut or corrupt (exit 1, flows so far emitted).
    Capture(xdprobe_dataplane::source::pcap::PcapError),
    /// The filter has no meaning for a link type the file uses (exit 2, as
    /// for a bad expression).
    Filter(xdprobe_filter::FilterError),
}

fn print_per_worker(all: &[WorkerStats]) {
    let mut e = io::stderr().lock();
    for (i, s) in all.iter().enumerate() {
        let _ = writeln!(
            e,
            "  worker {i}: frames {}  flows {}  records {}  evicted {}",
            s.frames, s.table.flows_created, s.table.records, s.table.evicted
        );
    }
}

pub fn print_summary(s: &WorkerStats, elapsed: Duration) {
    let mut e = io::stderr().lock();
    let secs = elapsed.as_secs_f64().max(1e-9);
    let _ = writeln!(
        e,
        "frames {}  used {}  flows {}  records {}  evicted {}  in {:.3} s ({:.2} Mpps)",
        s.frames,
        s.table.packets,
        s.table.flows_created,
        s.table.records,
        s.table.evicted,
        secs,
        s.frames as f64 / secs / 1e6
    );
    for (name, n) in s.drops.iter().filter(|(_, n)| *n > 0) {
        let _ = writeln!(e, "  dropped {name}: {n}");
    }
    let ts = &s.ts_rtt;
    let events = ts.counters.iter();
    if ts.server().count + ts.client().count > 0 || events.iter().any(|(_, n)| *n > 0) {
        let ev: Vec<String> = events
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            e,
            "  ts_rtt samples: server leg {}, client leg {}{}{}",
            ts.server().count,
            ts.client().count,
            if ev.is_empty() { "" } else { "; " },
            ev.join(", ")
        );
    }
    if s.l7 != Default::default() {
        let _ = writeln!(e, "  l7: {}; state {} bytes", s.l7, s.l7_bytes);
    }
    if s.ip_length_clamped > 0 {
        let _ = writeln!(
            e,
            "  IP length beyond the frame (bytes counted as the frame held): {}",
            s.ip_length_clamped
        );
    }
    let f = &s.frags;
    if f.unattributed > 0 {
        let _ = writeln!(
            e,
            "  fragments without their first fragment: {}",
            f.unattributed
        );
    }
    if f.evicted + f.expired > 0 {
        let _ = writeln!(
            e,
            "  fragment table: {} evicted (table full), {} expired",
            f.evicted, f.expired
        );
    }
}
