//! Per-process TCP connect latency (`xdprobe connlat`, and the daemon's
//! flow-record enrichment): the program in `host-prog/src/bin/connlat.rs`
//! reports each outgoing connection attempt when it ends; this side loads
//! it, decodes its events and keeps its socket map bounded.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, TracePoint},
};
use serde::Serialize;
use xdprobe_common::host::{
    ConnCounters, ConnEvent, ConnSettings, ConnStart, STACK_MAX_TGIDS, conn_result, names,
};

use crate::hooks::CLOSE_EVENT;
use crate::kernel::{Kernel, offsets, progstats};
use crate::object;
use crate::stack::error::ProbeError;

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Established,
    Refused,
    TimedOut,
    /// Any other failure; the socket error is in `Connection::err`.
    Failed,
}

/// One outgoing connection attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Connection {
    pub pid: u32,
    pub comm: String,
    pub src: IpAddr,
    pub sport: u16,
    pub dst: IpAddr,
    pub dport: u16,
    /// `connect()` → ESTABLISHED (or → the failure).
    #[serde(rename = "latency_us", serialize_with = "as_us")]
    pub latency: Duration,
    /// When `connect()` began, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    pub outcome: Outcome,
    /// The socket error of a failure (errno), 0 otherwise.
    pub err: i32,
}

fn as_us<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_nanos() as f64 / 1000.0)
}

impl Connection {
    pub fn from_event(e: &ConnEvent) -> Option<Connection> {
        let (src, dst) = match u16::from(e.family) {
            2 => (
                IpAddr::V4(Ipv4Addr::new(
                    e.saddr[0], e.saddr[1], e.saddr[2], e.saddr[3],
                )),
                IpAddr::V4(Ipv4Addr::new(
                    e.daddr[0], e.daddr[1], e.daddr[2], e.daddr[3],
                )),
            ),
            10 => (
                IpAddr::V6(Ipv6Addr::from(e.saddr)),
                IpAddr::V6(Ipv6Addr::from(e.daddr)),
            ),
            _ => return None,
        };
        let n = e.comm.iter().position(|&b| b == 0).unwrap_or(e.comm.len());
        let outcome = match e.result {
            conn_result::ESTABLISHED => Outcome::Established,
            conn_result::REFUSED => Outcome::Refused,
            conn_result::TIMED_OUT => Outcome::TimedOut,
            _ => Outcome::Failed,
        };
        Some(Connection {
            pid: e.tgid,
            comm: String::from_utf8_lossy(&e.comm[..n]).into_owned(),
            src,
            sport: e.sport,
            dst,
            dport: e.dport,
            latency: Duration::from_nanos(e.latency_ns),
            start_ns: e.start_ns,
            outcome,
            err: e.err,
        })
    }
}

#[derive(Clone, Debug, Default)]
pub struct ConnOptions {
    /// Only connections of these processes (at most 8).
    pub pids: Vec<u32>,
    /// Successful connections faster than this are not reported (failures
    /// always are).
    pub min_latency: Duration,
}

/// SYN_SENT entries older than this are removed by [`ConnProbe::expire`]:
/// longer than Linux's default SYN retry schedule (1+2+4+8+16+32+64 s).
pub const MAX_PENDING: Duration = Duration::from_secs(180);

pub struct ConnProbe {
    ring: RingBuf<MapData>,
    counters: PerCpuArray<MapData, ConnCounters>,
    starts: BpfHashMap<MapData, u64, ConnStart>,
    /// The attached program and its hook, for the log and the kernel's
    /// counters.
    prog: &'static str,
    hook: &'static str,
    ebpf: Ebpf,
}

const PROG_BTF: &str = "conn_set_state_btf";
const PROG_CLASSIC: &str = "conn_set_state";

impl ConnProbe {
    pub fn start(kernel: &Kernel, opts: &ConnOptions) -> Result<ConnProbe, ProbeError> {
        if object::CONNLAT.is_empty() {
            return Err(ProbeError::NotBuilt);
        }
        if opts.pids.len() > STACK_MAX_TGIDS {
            return Err(ProbeError::FilterTooLong {
                what: "processes",
                max: STACK_MAX_TGIDS,
            });
        }
        let tp = offsets::stack_tp_offsets(&kernel.tracefs, &[CLOSE_EVENT])?;
        let sk_err = kernel
            .btf
            .member("sock", "sk_err")
            .map_err(offsets::OffsetError::from)?
            .offset;
        // The BTF-typed program needs the socket's layout; without it the
        // classic tracepoint's record carries everything.
        let sk = offsets::conn_sock_offsets(&kernel.btf);
        let mut s = ConnSettings {
            tp,
            sk_err,
            min_ns: opts.min_latency.as_nanos() as u64,
            wakeup_bytes: 1 << 16,
            n_tgids: opts.pids.len() as u32,
            sk: sk.as_ref().copied().unwrap_or_default(),
            ..ConnSettings::ZERO
        };
        s.tgids[..opts.pids.len()].copy_from_slice(&opts.pids);
        let mut ebpf = EbpfLoader::new()
            .override_global(names::CONN_SETTINGS, &s, true)
            .load(object::CONNLAT)
            .map_err(ProbeError::Load)?;
        let btf = match &sk {
            Ok(_) => attach_btf(&mut ebpf, kernel),
            Err(e) => Err(e.to_string()),
        };
        let (prog, hook) = match btf {
            Ok(()) => (PROG_BTF, "tp_btf:inet_sock_set_state"),
            Err(why) => {
                tracing::info!(
                    reason = %why,
                    "no BTF-typed inet_sock_set_state: using the classic tracepoint, which the kernel skips while other BPF programs or map calls run on the same CPU"
                );
                attach_classic(&mut ebpf)?;
                (PROG_CLASSIC, "tracepoint:sock:inet_sock_set_state")
            }
        };
        let take =
            |ebpf: &mut Ebpf, n: &'static str| ebpf.take_map(n).ok_or(ProbeError::Missing(n));
        let ring = RingBuf::try_from(take(&mut ebpf, names::CONN_EVENTS)?)
            .map_err(|e| ProbeError::Map(names::CONN_EVENTS, e))?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, names::CONN_COUNTERS)?)
            .map_err(|e| ProbeError::Map(names::CONN_COUNTERS, e))?;
        let starts = BpfHashMap::try_from(take(&mut ebpf, names::CONN_START)?)
            .map_err(|e| ProbeError::Map(names::CONN_START, e))?;
        Ok(ConnProbe {
            ring,
            counters,
            starts,
            prog,
            hook,
            ebpf,
        })
    }

    /// Where the program is attached (`tp_btf:…` or `tracepoint:…`).
    pub fn hook(&self) -> &'static str {
        self.hook
    }

    /// Runs of the program the kernel skipped (`recursion_misses`): state
    /// changes this probe could not see. `None` if the kernel does not say.
    pub fn kernel_skipped(&self) -> Option<u64> {
        let p = self.ebpf.program(self.prog)?;
        let fd = p.fd().ok()?;
        progstats::prog_stats(std::os::fd::AsFd::as_fd(fd)).map(|s| s.recursion_misses)
    }

    /// Hands every finished attempt waiting in the ring buffer to `f`.
    pub fn drain(&mut self, mut f: impl FnMut(Connection)) -> usize {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            if item.len() < size_of::<ConnEvent>() {
                continue;
            }
            // SAFETY: the program writes whole `ConnEvent`s (repr(C), plain
            // integers); the item holds that many bytes; unaligned read.
            let ev = unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<ConnEvent>()) };
            if let Some(c) = Connection::from_event(&ev) {
                f(c);
                n += 1;
            }
        }
        n
    }

    /// Removes SYN_SENT entries older than [`MAX_PENDING`] at `now_ns`
    /// (monotonic); returns how many are left.
    pub fn expire(&mut self, now_ns: u64) -> usize {
        let cutoff = now_ns.saturating_sub(MAX_PENDING.as_nanos() as u64);
        let stale: Vec<u64> = self
            .starts
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, s)| s.ts_ns < cutoff)
            .map(|(k, _)| k)
            .collect();
        for k in &stale {
            let _ = self.starts.remove(k);
        }
        self.pending()
    }

    /// Connections in SYN_SENT the kernel map holds now.
    pub fn pending(&self) -> usize {
        self.starts.keys().filter(Result::is_ok).count()
    }

    pub fn counters(&self) -> ConnCounters {
        self.counters
            .get(&0, 0)
            .map(|v| v.iter().fold(ConnCounters::default(), |a, c| a.add(*c)))
            .unwrap_or_default()
    }

    pub fn fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}

/// The BTF-typed program on the raw tracepoint; the reason as text if the
/// kernel refuses it (no `tp_btf`, or the prototype differs).
fn attach_btf(ebpf: &mut Ebpf, kernel: &Kernel) -> Result<(), String> {
    let p = ebpf
        .program_mut(PROG_BTF)
        .ok_or_else(|| format!("no program {PROG_BTF} in the object"))?;
    let p: &mut BtfTracePoint = p.try_into().map_err(|e| format!("{e}"))?;
    p.load("inet_sock_set_state", &kernel.aya_btf)
        .map_err(|e| format!("loading {PROG_BTF}: {e}"))?;
    p.attach()
        .map_err(|e| format!("attaching {PROG_BTF}: {e}"))?;
    Ok(())
}

fn attach_classic(ebpf: &mut Ebpf) -> Result<(), ProbeError> {
    let name = PROG_CLASSIC;
    let err = |source| ProbeError::Program {
        name,
        hook: format!("tracepoint:{CLOSE_EVENT}"),
        source,
    };
    let p: &mut TracePoint = ebpf
        .program_mut(name)
        .ok_or(ProbeError::Missing(name))?
        .try_into()
        .map_err(err)?;
    p.load().map_err(err)?;
    p.attach("sock", "inet_sock_set_state").map_err(err)?;
    Ok(())
}
