//! One collector's pipeline inside the exporter thread:
//! bounded record queue → encoder (templates, options, data) → transport.
//!
//! The queue is what keeps records while a TCP collector is down: bounded by
//! `tcp_buffer_records`, oldest dropped first, every drop counted and
//! logged (at most every 10 s). UDP and file links empty it on every pump.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::{Registry, Token};
use tracing::{debug, info, warn};
use xdprobe_dataplane::FlowRecord;

use crate::collector::DEFAULT_UDP_RATE;
use crate::collector::{CollectorSpec, Target};
use crate::encode::{Encoder, ExportClock};
use crate::stats::CollectorStats;
use crate::template::{Format, OptionsValues, Templates};
use crate::transport::Sent;
use crate::transport::file::{FileOut, Flushed};
use crate::transport::pace::Pacer;
use crate::transport::tcp::{Change, TcpOut};
use crate::transport::udp::UdpOut;
use crate::{ExporterConfig, ExporterError};

enum Out {
    Udp(UdpOut),
    Tcp(TcpOut),
    File(FileOut),
}

/// Counters from outside the link that go into its options records.
#[derive(Clone, Copy, Debug, Default)]
pub struct Globals {
    pub ignored_packets: u64,
    pub channel_drops: u64,
    pub flows_evicted: u64,
    pub fragments_evicted: u64,
}

const LOG_EVERY: Duration = Duration::from_secs(10);

pub struct Link {
    pub spec: CollectorSpec,
    pub token: Token,
    enc: Encoder,
    out: Out,
    queue: VecDeque<FlowRecord>,
    queue_cap: usize,
    pub stats: CollectorStats,
    started: Instant,
    domain: u32,
    refresh: Duration,
    refresh_packets: u32,
    last_templates: Option<Instant>,
    msgs_since_templates: u32,
    /// TCP: templates already sent on this connection.
    session_templated: bool,
    /// The observation-domain-name record goes out after every template
    /// (re)send; it waits for the next message if it did not fit.
    domain_name_due: bool,
    pub options_due: bool,
    /// Records in the TCP message the kernel has not fully taken yet.
    pending: u64,
    overflow_unlogged: u64,
    overflow_logged_at: Option<Instant>,
    down_logged: bool,
    /// UDP: (records, octets) of the last datagram sent, until the next one
    /// shows whether an ICMP port unreachable answered it.
    udp_last: Option<(u64, u64)>,
    refused_unlogged: u64,
    refused_logged_at: Option<Instant>,
    file_failed_unlogged: u64,
    file_logged_at: Option<Instant>,
    /// UDP: the datagram rate limit.
    pace: Option<Pacer>,
}

/// Largest message for a target: the MTU minus the IP and transport headers
/// a datagram/segment to that address carries.
pub fn max_message_len(mtu: usize, target: &Target) -> usize {
    let overhead = match target {
        Target::Udp(SocketAddr::V4(_)) => 20 + 8,
        Target::Udp(SocketAddr::V6(_)) | Target::File(_) => 40 + 8,
        Target::Tcp(SocketAddr::V4(_)) => 20 + 32,
        Target::Tcp(SocketAddr::V6(_)) => 40 + 32,
    };
    mtu.saturating_sub(overhead)
}

/// Build the encoder for a spec (also used to validate a spec up front).
pub fn encoder_for(spec: &CollectorSpec, cfg: &ExporterConfig) -> Result<Encoder, ExporterError> {
    let mut templates = Templates::new(spec.format, spec.mode, spec.profile, cfg.pen);
    if cfg.process_fields {
        templates = templates.with_process(spec.format, cfg.pen);
    }
    let mut enc = Encoder::new(
        spec.format,
        spec.mode,
        templates,
        cfg.observation_domain,
        max_message_len(cfg.mtu, &spec.target),
    )
    .map_err(|needed| ExporterError::MtuTooSmall {
        url: spec.url.clone(),
        mtu: cfg.mtu,
        needed,
    })?;
    enc.set_domain_name(&cfg.resolved_observation_name());
    Ok(enc)
}

impl Link {
    pub fn new(
        spec: CollectorSpec,
        cfg: &ExporterConfig,
        token: Token,
    ) -> Result<Self, ExporterError> {
        let enc = encoder_for(&spec, cfg)?;
        let name = cfg.resolved_observation_name();
        if spec.format == Format::Ipfix && enc.domain_name().len() < name.len() {
            warn!(collector = %spec, name, sent = enc.domain_name(),
                "observation name cut to fit next to the templates in one message");
        }
        let io_err = |source| ExporterError::Io {
            url: spec.url.clone(),
            source,
        };
        let out = match &spec.target {
            Target::Udp(a) => Out::Udp(UdpOut::new(*a).map_err(io_err)?),
            Target::File(p) => Out::File(FileOut::create(p).map_err(io_err)?),
            Target::Tcp(a) => Out::Tcp(TcpOut::new(
                *a,
                token,
                cfg.tcp_reconnect_min,
                cfg.tcp_reconnect_max,
            )),
        };
        let stats = CollectorStats {
            url: spec.url.clone(),
            ..CollectorStats::default()
        };
        Ok(Link {
            token,
            enc,
            out,
            queue: VecDeque::with_capacity(cfg.tcp_buffer_records.min(1 << 16)),
            queue_cap: cfg.tcp_buffer_records.max(1),
            stats,
            started: Instant::now(),
            domain: cfg.observation_domain,
            refresh: cfg.template_refresh,
            refresh_packets: cfg.template_refresh_packets.max(1),
            last_templates: None,
            msgs_since_templates: 0,
            session_templated: false,
            domain_name_due: false,
            options_due: false,
            pending: 0,
            overflow_unlogged: 0,
            overflow_logged_at: None,
            down_logged: false,
            udp_last: None,
            refused_unlogged: 0,
            refused_logged_at: None,
            file_failed_unlogged: 0,
            file_logged_at: None,
            pace: match &spec.target {
                Target::Udp(_) => Pacer::new(spec.rate.unwrap_or(DEFAULT_UDP_RATE), Instant::now()),
                _ => None,
            },
            spec,
        })
    }

    /// Queue one record; the oldest queued record makes room if full.
    pub fn push(&mut self, r: &FlowRecord, now: Instant) {
        if self.queue.len() >= self.queue_cap {
            self.queue.pop_front();
            self.stats.not_sent += 1;
            self.overflow_unlogged += 1;
            if self
                .overflow_logged_at
                .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
            {
                warn!(
                    collector = %self.spec,
                    dropped = self.overflow_unlogged,
                    total_dropped = self.stats.not_sent,
                    capacity = self.queue_cap,
                    "collector buffer full: dropping oldest records"
                );
                self.overflow_logged_at = Some(now);
                self.overflow_unlogged = 0;
            }
        }
        self.queue.push_back(r.clone());
    }

    /// The counters with the queue and connection state of this moment.
    pub fn snapshot(&self) -> CollectorStats {
        CollectorStats {
            queued: self.queue.len() as u64,
            connected: match &self.out {
                Out::Tcp(t) => Some(t.is_up()),
                Out::Udp(_) | Out::File(_) => None,
            },
            ..self.stats.clone()
        }
    }

    /// Nothing left to send (for shutdown).
    pub fn idle(&self) -> bool {
        let tcp_pending = matches!(&self.out, Out::Tcp(t) if t.has_pending());
        self.queue.is_empty() && !tcp_pending
    }

    /// When this link wants to be polled again even without events.
    pub fn wake_at(&self) -> Option<Instant> {
        match &self.out {
            Out::Tcp(t) => t.retry_at(),
            Out::Udp(_) if !self.queue.is_empty() => {
                self.pace.as_ref().map(|p| p.next_at(Instant::now()))
            }
            _ => None,
        }
    }

    /// A paced UDP link whose queue is full: the exporter stops taking
    /// records from the workers until it has room (offline, the reader
    /// waits; live, the channel fills and its drops are counted), rather
    /// than the queue dropping its oldest.
    pub fn paced_full(&self) -> bool {
        self.pace.is_some() && self.queue.len() >= self.queue_cap
    }

    /// Only a TCP link's remaining work is bounded by the shutdown
    /// timeout: a paced UDP link always gets through its queue.
    pub fn is_tcp(&self) -> bool {
        matches!(self.out, Out::Tcp(_))
    }

    pub fn on_event(&mut self, reg: &Registry, ev: &mio::event::Event, now: Instant) {
        if let Out::Tcp(t) = &mut self.out
            && let Some(ch) = t.on_event(reg, ev, now)
        {
            self.on_change(ch);
        }
    }

    fn on_change(&mut self, ch: Change) {
        let Out::Tcp(t) = &self.out else { return };
        let addr = t.addr();
        match ch {
            Change::Up => {
                info!(collector = %self.spec, %addr, queued = self.queue.len(), "connected to collector");
                self.enc.reset_session();
                self.session_templated = false;
                self.stats.connects += 1;
                self.down_logged = false;
            }
            Change::Lost(e) => {
                if self.pending > 0 {
                    self.stats.not_sent += self.pending;
                    self.stats.records = self.stats.records.saturating_sub(self.pending);
                    self.stats.messages = self.stats.messages.saturating_sub(1);
                    warn!(collector = %self.spec, records = self.pending, "partially written message lost");
                    self.pending = 0;
                }
                if self.down_logged {
                    debug!(collector = %self.spec, error = %e, "collector still unreachable");
                } else {
                    warn!(collector = %self.spec, error = %e, queued = self.queue.len(),
                        "collector connection down; buffering records and retrying");
                    self.down_logged = true;
                }
            }
        }
    }

    fn templates_due(&self, now: Instant) -> bool {
        match &self.out {
            // RFC 7011 §8.4: over UDP, templates are resent periodically so a
            // collector that (re)starts can decode.
            Out::Udp(_) => {
                self.last_templates
                    .is_none_or(|t| now.duration_since(t) >= self.refresh)
                    || self.msgs_since_templates >= self.refresh_packets
            }
            Out::Tcp(_) => !self.session_templated,
            Out::File(_) => self.last_templates.is_none(),
        }
    }

    /// Encode one message (templates if due, options if due, then as many
    /// queued records as fit). Returns its flow-record count, or None if
    /// there was nothing to send.
    fn build(&mut self, now: Instant, g: Globals) -> Option<u64> {
        let templates = self.templates_due(now);
        if self.queue.is_empty() && !self.options_due && !templates && !self.domain_name_due {
            return None;
        }
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let clock = ExportClock {
            unix_secs: u32::try_from(unix.as_secs()).unwrap_or(u32::MAX),
            uptime_ms: u32::try_from(self.started.elapsed().as_millis() & 0xFFFF_FFFF).unwrap_or(0),
        };
        if templates && self.enc.write_templates(clock).is_ok() {
            self.last_templates = Some(now);
            self.msgs_since_templates = 0;
            self.session_templated = true;
            self.domain_name_due = true;
        }
        // Options records are not flow records in the link's counters.
        let mut options = 0;
        if self.domain_name_due {
            // NoRoom cannot happen after the templates (the name was cut to
            // fit with them); otherwise it waits for the next message.
            if let Ok(written) = self.enc.write_domain_name(clock) {
                self.domain_name_due = false;
                options += u64::from(written);
            }
        }
        if self.options_due {
            let v = OptionsValues {
                observation_domain: self.domain,
                exported_messages: self.stats.messages,
                exported_records: self.stats.records,
                exported_octets: self.stats.octets,
                ignored_packets: g.ignored_packets,
                not_sent_records: self.stats.not_sent + g.channel_drops,
                flows_evicted: g.flows_evicted,
                fragments_evicted: g.fragments_evicted,
            };
            if self.enc.write_options(&v, clock).is_ok() {
                self.options_due = false;
                options += 1;
            }
        }
        while let Some(r) = self.queue.front() {
            if self.enc.write_record(r, clock).is_err() {
                break;
            }
            self.queue.pop_front();
        }
        Some(u64::from(self.enc.pending_records()) - options)
    }

    fn account(&mut self, records: u64, octets: usize) {
        self.stats.messages += 1;
        self.stats.records += records;
        self.stats.octets += octets as u64;
        self.msgs_since_templates = self.msgs_since_templates.saturating_add(1);
    }

    /// Move queued records to the collector as far as the transport allows.
    pub fn pump(&mut self, reg: &Registry, now: Instant, g: Globals) {
        if let Out::Tcp(t) = &mut self.out
            && let Some(ch) = t.tick(reg, now)
        {
            self.on_change(ch);
        }
        // Bounded: each round either sends a message or stops.
        for _ in 0..100_000 {
            if let Out::Tcp(t) = &mut self.out {
                if !t.is_up() {
                    return;
                }
                match t.flush(reg, now) {
                    Ok(true) => self.pending = 0,
                    Ok(false) => return,
                    Err(ch) => return self.on_change(ch),
                }
                if let Some(ch) = t.check_alive(reg, now) {
                    return self.on_change(ch);
                }
            }
            if let Some(p) = self.pace.as_mut()
                && !p.take(now)
            {
                return;
            }
            let Some(records) = self.build(now, g) else {
                // The token goes back: nothing was sent.
                if let Some(p) = self.pace.as_mut() {
                    p.give_back();
                }
                return;
            };
            let Some(msg) = self.enc.finish() else { return };
            let len = msg.len();
            let outcome = match &mut self.out {
                Out::Udp(u) => u.send(msg),
                Out::File(f) => {
                    // Counted when written (flush), not when buffered.
                    if let Some(fl) = f.send(msg, records) {
                        self.apply_file(fl, now);
                    }
                    continue;
                }
                Out::Tcp(t) => {
                    t.push(msg);
                    // Counted as exported now; taken back if the connection
                    // is lost before the kernel has all of it.
                    let flushed = t.flush(reg, now);
                    self.account(records, len);
                    self.pending = records;
                    match flushed {
                        Ok(true) => self.pending = 0,
                        Ok(false) => return,
                        Err(ch) => return self.on_change(ch),
                    }
                    continue;
                }
            };
            match outcome {
                Sent::Ok => {
                    self.account(records, len);
                    self.udp_last = Some((records, len as u64));
                }
                Sent::Dropped(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    // The ICMP port unreachable answered the datagram before
                    // this one: both are lost (nothing listens there).
                    self.stats.not_sent += records;
                    self.take_back_udp_last();
                    self.log_refused(now);
                }
                Sent::Dropped(e) => {
                    self.stats.not_sent += records;
                    self.udp_last = None;
                    debug!(collector = %self.spec, error = %e, records, "message not sent");
                }
            }
        }
    }

    /// The last UDP datagram was refused after all: count it as not sent.
    fn take_back_udp_last(&mut self) {
        if let Some((records, octets)) = self.udp_last.take() {
            self.stats.messages = self.stats.messages.saturating_sub(1);
            self.stats.records = self.stats.records.saturating_sub(records);
            self.stats.octets = self.stats.octets.saturating_sub(octets);
            self.stats.not_sent += records;
        }
    }

    /// At most one line per [`LOG_EVERY`], with the count since the last.
    fn log_refused(&mut self, now: Instant) {
        self.refused_unlogged += 1;
        if self
            .refused_logged_at
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
        {
            warn!(
                collector = %self.spec,
                refusals = self.refused_unlogged,
                not_sent = self.stats.not_sent,
                "collector refused datagrams (ICMP port unreachable): is it listening?"
            );
            self.refused_logged_at = Some(now);
            self.refused_unlogged = 0;
        }
    }

    /// Periodic housekeeping: flush file buffers.
    pub fn flush_file(&mut self) {
        if let Out::File(f) = &mut self.out {
            let fl = f.flush();
            self.apply_file(fl, Instant::now());
        }
    }

    /// What a file flush wrote and lost, into the counters; a failure is
    /// logged at most every [`LOG_EVERY`] with the count since.
    fn apply_file(&mut self, fl: Flushed, now: Instant) {
        self.stats.messages += fl.messages;
        self.stats.records += fl.records;
        self.stats.octets += fl.octets;
        self.msgs_since_templates = self
            .msgs_since_templates
            .saturating_add(u32::try_from(fl.messages).unwrap_or(u32::MAX));
        if fl.failed_messages == 0 {
            return;
        }
        self.stats.failed_messages += fl.failed_messages;
        self.stats.not_sent += fl.failed_records;
        if fl.empty {
            // The templates went with them: write them again first.
            self.last_templates = None;
        }
        self.file_failed_unlogged += fl.failed_messages;
        if self
            .file_logged_at
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
        {
            warn!(
                collector = %self.spec,
                error = ?fl.error.as_ref().map(ToString::to_string),
                failed_messages = self.file_failed_unlogged,
                total_failed = self.stats.failed_messages,
                "file export: messages lost to a write error (the file was cut back to its last whole message)"
            );
            self.file_logged_at = Some(now);
            self.file_failed_unlogged = 0;
        }
    }

    /// Final accounting at shutdown: what is still queued is not sent.
    pub fn close(&mut self, reg: &Registry) {
        self.flush_file();
        if let Out::Udp(u) = &self.out
            && u.refused_since_last_send()
        {
            self.take_back_udp_last();
        }
        let left = self.queue.len() as u64 + self.pending;
        if left > 0 {
            warn!(collector = %self.spec, records = left, "records not sent before shutdown");
            self.stats.not_sent += left;
            self.queue.clear();
            self.pending = 0;
        }
        if let Out::Tcp(t) = &mut self.out {
            t.close(reg);
        }
    }
}
