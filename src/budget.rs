//! Memory before anything is allocated: what a configuration will take
//! (flow tables, fragment tables, UMEM, hand-off rings, the exporter's
//! queues) against what this machine can give, so a configuration that
//! cannot start is refused with a sentence instead of an allocation
//! failure, a backtrace and SIGABRT (or the OOM killer an hour later: the
//! flow slab is reserved at start but its pages are touched as flows come).
//!
//! "Available" is the kernel's `MemAvailable`, lowered to the cgroup's
//! `memory.max` minus `memory.current` when the probe runs in a limited
//! cgroup (systemd `MemoryMax=`, containers).

use std::fmt::{self, Write as _};

use xdprobe_dataplane::{FlowConfig, FlowRecord};

/// One named part of an estimate, `count` times `each` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub what: &'static str,
    pub count: u64,
    pub each: u64,
}

/// What a configuration will allocate, in parts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Estimate {
    pub parts: Vec<Part>,
}

impl Estimate {
    pub fn add(&mut self, what: &'static str, count: u64, each: u64) -> &mut Self {
        if count > 0 && each > 0 {
            self.parts.push(Part { what, count, each });
        }
        self
    }

    /// The worker flow tables (flow slab, its TCP, DNS and timestamp-RTT
    /// columns, index, fragment table).
    pub fn flow_tables(&mut self, workers: u64, cfg: &FlowConfig) -> &mut Self {
        self.add("flow tables", workers, cfg.memory_bytes())
    }

    /// Records waiting in a bounded queue of `capacity` (channels, the TCP
    /// collector buffers).
    pub fn record_queue(&mut self, what: &'static str, count: u64, capacity: u64) -> &mut Self {
        self.add(
            what,
            count,
            capacity.saturating_mul(size_of::<FlowRecord>() as u64),
        )
    }

    pub fn total(&self) -> u64 {
        self.parts.iter().fold(0u64, |a, p| {
            a.saturating_add(p.count.saturating_mul(p.each))
        })
    }

    /// Refuses the estimate when it exceeds `available` bytes.
    pub fn check(&self, available: Option<u64>) -> Result<(), TooLarge> {
        match available {
            Some(avail) if self.total() > avail => Err(TooLarge {
                estimate: self.clone(),
                available: avail,
            }),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Estimate {
    /// `about 27.9 GiB (flow tables 1 × 27.9 GiB, …)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = String::new();
        for (i, p) in self.parts.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            if p.count == 1 {
                let _ = write!(parts, "{sep}{} {}", p.what, bytes(p.each));
            } else {
                let _ = write!(parts, "{sep}{} {} × {}", p.what, p.count, bytes(p.each));
            }
        }
        write!(f, "about {} ({parts})", bytes(self.total()))
    }
}

/// What `xdprobe run` with `cfg` allocates: per worker a flow table and a
/// UMEM, the hand-off rings and lanes of an interface's workers
/// (`handoff::bytes_for`: n(n−1) rings and n lanes for n queues; counted
/// unless `handoff = "off"` or `--no-handoff`, so `auto` is counted as on,
/// an upper bound), the exporter's channel and the TCP collectors' buffers.
pub fn for_daemon(cfg: &xdprobe_config::Config, flow: &FlowConfig, no_handoff: bool) -> Estimate {
    let mut e = Estimate::default();
    e.flow_tables(cfg.workers().count() as u64, flow);
    e.add("UMEM", 1, cfg.umem_bytes());
    if !no_handoff {
        let total: usize = cfg
            .interfaces
            .iter()
            .filter(|i| i.handoff != xdprobe_config::Handoff::Off)
            .map(|i| xdprobe_capture::handoff::queue::bytes_for(i.queues.len()))
            .sum();
        e.add("hand-off rings and lanes", 1, total as u64);
    }
    e.record_queue("exporter channel", 1, cfg.export.channel_capacity as u64);
    let tcp = cfg
        .export
        .collectors
        .iter()
        .filter(|c| c.starts_with("tcp://"))
        .count();
    e.record_queue(
        "TCP collector buffers",
        tcp as u64,
        cfg.export.tcp_buffer_records as u64,
    );
    e
}

/// The estimate does not fit the machine.
#[derive(Debug, thiserror::Error)]
#[error(
    "not enough memory: this configuration needs {estimate}, but this machine has {} available; lower the flow capacity (`[flow] capacity`, `--capacity`) or the queue sizes",
    bytes(*available)
)]
pub struct TooLarge {
    pub estimate: Estimate,
    pub available: u64,
}

/// Bytes for people: `27.9 GiB`, `64.0 MiB`, `512 B`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// Bytes this process can still allocate: `MemAvailable`, lowered to the
/// cgroup (v2) limit's headroom. `None` when neither can be read.
pub fn available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let mem = meminfo.as_deref().and_then(mem_available);
    let cgroup = cgroup_headroom();
    match (mem, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `MemAvailable:` of `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `memory.max − memory.current` of this process's cgroup (v2), if limited.
fn cgroup_headroom() -> Option<u64> {
    let rel = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = rel.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let max = std::fs::read_to_string(dir.join("memory.max")).ok()?;
    let max: u64 = max.trim().parse().ok()?; // "max": unlimited, None
    let current: u64 = std::fs::read_to_string(dir.join("memory.current"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(max.saturating_sub(current))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_add_up_and_read_well() {
        let mut e = Estimate::default();
        e.add("flow tables", 4, 3 << 30)
            .add("UMEM", 4, 64 << 20)
            .add("nothing", 0, 5);
        assert_eq!(e.total(), 4 * (3 << 30) + 4 * (64 << 20));
        assert_eq!(
            e.to_string(),
            "about 12.2 GiB (flow tables 4 × 3.0 GiB, UMEM 4 × 64.0 MiB)"
        );
        assert!(e.check(Some(13 << 30)).is_ok());
        assert!(e.check(None).is_ok());
        let err = e.check(Some(1 << 30)).unwrap_err().to_string();
        assert!(
            err.starts_with("not enough memory: this configuration needs about 12.2 GiB"),
            "{err}"
        );
        assert!(err.contains("this machine has 1.0 GiB available"), "{err}");
    }

    #[test]
    fn meminfo_is_read_in_kib() {
        let text = "MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(mem_available(text), Some(20_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert!(available().is_some(), "this machine has /proc/meminfo");
    }

    #[test]
    fn the_largest_flow_table_is_estimated_far_beyond_this_machine() {
        // Robustness finding 5: 2^26 flows per worker is what the config
        // accepts at most; it needs tens of GiB, which the check must see.
        let cfg = FlowConfig {
            capacity: 1 << 26,
            ..FlowConfig::default()
        };
        let mut e = Estimate::default();
        e.flow_tables(1, &cfg);
        assert!(e.total() > 20 << 30, "{e}");
        assert!(e.check(Some(24 << 30)).is_err());
    }
}
