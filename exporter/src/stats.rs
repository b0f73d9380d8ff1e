//! Exporter counters. The channel-full count is shared with the senders
//! (one relaxed atomic add on the failure path only); everything else is
//! owned by the exporter thread and returned by `Exporter::shutdown`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the probe itself that its options records report; the data
/// plane stores its running totals here (workers' snapshots summed by the
/// daemon once a second; by `xdprobe pcap` at the end of the file) and the
/// exporter reads them when it writes an options record.
#[derive(Debug, Default)]
pub struct ProbeCounters {
    /// Packets the parser refused (ignoredPacketTotalCount, 164).
    pub ignored_packets: AtomicU64,
    /// Flows ended early by a full flow table (`ie::probe`).
    pub flows_evicted: AtomicU64,
    /// First fragments pushed out of a full fragment table (`ie::probe`).
    pub fragments_evicted: AtomicU64,
}

impl ProbeCounters {
    /// Stores new totals (each only ever grows).
    pub fn store(&self, ignored_packets: u64, flows_evicted: u64, fragments_evicted: u64) {
        self.ignored_packets
            .store(ignored_packets, Ordering::Relaxed);
        self.flows_evicted.store(flows_evicted, Ordering::Relaxed);
        self.fragments_evicted
            .store(fragments_evicted, Ordering::Relaxed);
    }
}

/// Counters the senders update.
#[derive(Debug, Default)]
pub(crate) struct SharedCounters {
    /// Records refused because the channel was full (or the exporter gone).
    pub channel_drops: AtomicU64,
}

impl SharedCounters {
    pub fn channel_drops(&self) -> u64 {
        self.channel_drops.load(Ordering::Relaxed)
    }
}

/// Per-collector totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectorStats {
    pub url: String,
    /// Messages handed to the transport (for TCP: written to the socket).
    pub messages: u64,
    /// Flow data records in those messages (uniflow: two per connection).
    pub records: u64,
    pub octets: u64,
    /// Records that will never reach this collector: TCP buffer overflow,
    /// UDP send errors, file write errors, or still queued at shutdown.
    pub not_sent: u64,
    /// Successful TCP (re)connections.
    pub connects: u64,
    /// Files: messages a write error lost (cut back out of the file; their
    /// records are in `not_sent`). `messages` counts those written whole.
    pub failed_messages: u64,
    /// Records waiting in this collector's queue when the numbers were
    /// taken (a TCP collector that is down keeps up to
    /// `tcp_buffer_records` of them).
    pub queued: u64,
    /// TCP: whether the connection was up; `None` for UDP and files,
    /// whose state has no such meaning.
    pub connected: Option<bool>,
}

/// What `Exporter::shutdown` returns, and what `Exporter::live_stats`
/// holds while it runs (refreshed about once a second).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Records taken from the channel by the exporter thread.
    pub records_received: u64,
    /// Records refused by `RecordSender::send` because the channel was full.
    pub channel_drops: u64,
    pub collectors: Vec<CollectorStats>,
}

impl std::fmt::Display for CollectorStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} messages, {} records, {} octets, {} not sent, {} connects",
            self.url, self.messages, self.records, self.octets, self.not_sent, self.connects
        )?;
        if self.failed_messages > 0 {
            write!(f, ", {} messages failed", self.failed_messages)?;
        }
        Ok(())
    }
}

/// One line for logs and summaries.
impl std::fmt::Display for ExportStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} records received, {} dropped at the full channel",
            self.records_received, self.channel_drops
        )?;
        for c in &self.collectors {
            write!(f, "; {c}")?;
        }
        Ok(())
    }
}
