//! Loads the path tracer with the running kernel's offsets, the chosen
//! points and the flow filter, attaches it, and hands out finished
//! trails: from the ring buffer as the kernel ends them, from the trail
//! map when they sit idle (missed frees), and whatever is open at stop.
//!
//! Everything that can fail is checked before the first attach (points,
//! struct members, the filter program); the attached programs belong to
//! the [`TraceProbe`], and dropping it (any exit path) detaches them.

use std::os::fd::{AsRawFd, RawFd};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, RingBuf},
    programs::{ProgramError, TracePoint},
};
use xdprobe_common::host::names;
use xdprobe_common::trace::{
    CbpfInsn, TRACE_FILTER_MARK, TRACE_FILTER_MAX, TRACE_FILTER_NETNS, TRACE_FILTER_PROG,
    TRACE_MAX_NETNS, TRACE_PKT_BYTES, TraceCounters, TraceOffsets, TracePoint as PointValue,
    TraceSettings, Trail, end,
};
use xdprobe_filter::{LinkType, Program, cbpf::ProgramError as CbpfError};

use crate::kernel::{Kernel, btf::BtfError, offsets};
use crate::object;
use crate::trace::attach;
use crate::trace::points::Point;

const PROGRAM: &str = "trace_point";

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("the host tracing programs are not in this binary (built with AYA_BUILD_SKIP=1)")]
    NotBuilt,
    #[error(transparent)]
    Points(#[from] crate::trace::points::PointError),
    #[error("{0}")]
    Offsets(#[from] offsets::OffsetError),
    #[error("kernel struct layout: {0}")]
    Btf(#[from] BtfError),
    #[error(transparent)]
    Filter(#[from] xdprobe_filter::FilterError),
    #[error("--flow {expr:?}: {source}")]
    FilterProgram {
        expr: String,
        #[source]
        source: CbpfError,
    },
    #[error("at most {max} network namespaces")]
    TooManyNetns { max: usize },
    #[error("--max-trails must be between 16 and 1048576")]
    MaxTrails,
    #[error("loading the path tracer")]
    Load(#[source] aya::EbpfError),
    #[error("attaching to tracepoint {point}")]
    Attach {
        point: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the path tracer program")]
    Program(#[source] ProgramError),
    #[error("the object has no {0}")]
    Missing(&'static str),
    #[error("map {0}")]
    Map(&'static str, #[source] aya::maps::MapError),
}

impl TraceError {
    /// Errors about what the kernel or the command line offers (exit 2).
    pub fn is_setup_error(&self) -> bool {
        matches!(
            self,
            TraceError::Points(_)
                | TraceError::Offsets(_)
                | TraceError::Btf(_)
                | TraceError::Filter(_)
                | TraceError::FilterProgram { .. }
                | TraceError::TooManyNetns { .. }
                | TraceError::MaxTrails
        )
    }
}

/// What to trace.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    pub points: Vec<Point>,
    /// pcap-filter expression over the packet from its IP header; empty:
    /// every IP packet.
    pub flow: String,
    /// Network namespace inodes a trail may start in; empty: any.
    pub netns: Vec<u32>,
    /// `(value, mask)`: `skb->mark & mask == value` to start a trail.
    pub mark: Option<(u32, u32)>,
    /// Trails followed at once (the trail map's size).
    pub max_trails: u32,
    /// Ring buffer bytes (power of two); 0: 4 MiB.
    pub ring_bytes: u32,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            points: Vec::new(),
            flow: String::new(),
            netns: Vec::new(),
            mark: None,
            max_trails: 4096,
            ring_bytes: 0,
        }
    }
}

/// Compiles and checks the flow filter for the in-kernel interpreter.
pub fn flow_program(expr: &str) -> Result<Option<Program>, TraceError> {
    if expr.trim().is_empty() {
        return Ok(None);
    }
    let p = xdprobe_filter::compile(expr, LinkType::Raw, TRACE_PKT_BYTES as u32)?;
    p.check(TRACE_FILTER_MAX)
        .map_err(|source| TraceError::FilterProgram {
            expr: expr.to_owned(),
            source,
        })?;
    Ok(Some(p))
}

fn settings(kernel: &Kernel, opts: &TraceOptions) -> Result<TraceSettings, TraceError> {
    let m = |s: &'static str, f: &'static str, size: u32| -> Result<u32, TraceError> {
        let mm = kernel.btf.member(s, f)?;
        if mm.size != size {
            return Err(offsets::OffsetError::Size {
                strukt: s,
                member: f,
                size: mm.size,
                want: size,
            }
            .into());
        }
        Ok(mm.offset)
    };
    let mut s = TraceSettings {
        off: offsets::kernel_offsets(&kernel.btf)?,
        xoff: TraceOffsets {
            skb_data_len: m("sk_buff", "data_len", 4)?,
            // sk_buff_data_t is an offset from head on 64-bit kernels.
            skb_end: m("sk_buff", "end", 4)?,
            shinfo_dataref: m("skb_shared_info", "dataref", 4)?,
            skb_mark: m("sk_buff", "mark", 4)?,
        },
        ..TraceSettings::ZERO
    };
    if opts.netns.len() > TRACE_MAX_NETNS {
        return Err(TraceError::TooManyNetns {
            max: TRACE_MAX_NETNS,
        });
    }
    if !opts.netns.is_empty() {
        s.flags |= TRACE_FILTER_NETNS;
        s.n_netns = opts.netns.len() as u32;
        s.netns[..opts.netns.len()].copy_from_slice(&opts.netns);
    }
    if let Some((value, mask)) = opts.mark {
        s.flags |= TRACE_FILTER_MARK;
        s.mark_value = value & mask;
        s.mark_mask = mask;
    }
    if let Some(p) = flow_program(&opts.flow)? {
        s.flags |= TRACE_FILTER_PROG;
        s.filter_len = p.insns.len() as u32;
        for (d, i) in s.filter.iter_mut().zip(&p.insns) {
            *d = CbpfInsn {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            };
        }
    }
    Ok(s)
}

/// The attached tracer.
pub struct TraceProbe {
    ring: RingBuf<MapData>,
    counters: PerCpuArray<MapData, TraceCounters>,
    trails: HashMap<MapData, u64, Trail>,
    skbs: HashMap<MapData, u64, u64>,
    /// The points, by `TracePoint::id` (index).
    pub points: Vec<Point>,
    /// One per point; dropped (detached) before the programs unload.
    links: Vec<attach::Link>,
    /// `None` once stopped (programs detached and unloaded).
    ebpf: Option<Ebpf>,
}

fn take<T>(
    ebpf: &mut Ebpf,
    name: &'static str,
    conv: impl FnOnce(aya::maps::Map) -> Result<T, aya::maps::MapError>,
) -> Result<T, TraceError> {
    let m = ebpf.take_map(name).ok_or(TraceError::Missing(name))?;
    conv(m).map_err(|e| TraceError::Map(name, e))
}

impl TraceProbe {
    /// Checks, loads and attaches. On error nothing stays attached.
    pub fn start(kernel: &Kernel, opts: &TraceOptions) -> Result<TraceProbe, TraceError> {
        if object::PATHTRACE.is_empty() {
            return Err(TraceError::NotBuilt);
        }
        if opts.points.is_empty() {
            return Err(crate::trace::points::PointError::Empty.into());
        }
        if !(16..=1 << 20).contains(&opts.max_trails) {
            return Err(TraceError::MaxTrails);
        }
        let settings = settings(kernel, opts)?;
        let ring = if opts.ring_bytes == 0 {
            16 << 20
        } else {
            opts.ring_bytes
        };
        let mut ebpf = EbpfLoader::new()
            .override_global(names::TRACE_SETTINGS, &settings, true)
            .map_max_entries(names::TRACE_TRAILS, opts.max_trails)
            .map_max_entries(names::TRACE_SKBS, opts.max_trails * 2)
            .map_max_entries(names::TRACE_EVENTS, ring)
            .load(object::PATHTRACE)
            .map_err(TraceError::Load)?;
        {
            let m = ebpf
                .map_mut(names::TRACE_POINTS)
                .ok_or(TraceError::Missing(names::TRACE_POINTS))?;
            let mut pts: Array<&mut MapData, PointValue> =
                Array::try_from(m).map_err(|e| TraceError::Map(names::TRACE_POINTS, e))?;
            for (i, p) in opts.points.iter().enumerate() {
                let v = PointValue {
                    id: i as u16,
                    flags: p.flags,
                    skb_off: p.skb_off,
                    reason_off: p.reason_off,
                };
                pts.set(i as u32, v, 0)
                    .map_err(|e| TraceError::Map(names::TRACE_POINTS, e))?;
            }
        }
        let prog: &mut TracePoint = ebpf
            .program_mut(PROGRAM)
            .ok_or(TraceError::Missing(PROGRAM))?
            .try_into()
            .map_err(TraceError::Program)?;
        prog.load().map_err(TraceError::Program)?;
        // Free points first: a trail started while the rest attach still
        // ends. The cookie is the point's index.
        let mut order: Vec<(usize, &Point)> = opts.points.iter().enumerate().collect();
        order.sort_by_key(|(_, p)| p.flags & xdprobe_common::trace::POINT_FREE == 0);
        let fd = prog.fd().map_err(TraceError::Program)?;
        let mut links = Vec::with_capacity(order.len());
        for (i, p) in order {
            let link =
                attach::attach(fd, p.event_id, i as u64).map_err(|source| TraceError::Attach {
                    point: p.name.clone(),
                    source,
                })?;
            links.push(link);
        }
        let ring = take(&mut ebpf, names::TRACE_EVENTS, RingBuf::try_from)?;
        let counters = take(&mut ebpf, names::TRACE_COUNTERS, PerCpuArray::try_from)?;
        let trails = take(&mut ebpf, names::TRACE_TRAILS, HashMap::try_from)?;
        let skbs = take(&mut ebpf, names::TRACE_SKBS, HashMap::try_from)?;
        Ok(TraceProbe {
            ring,
            counters,
            trails,
            skbs,
            points: opts.points.clone(),
            links,
            ebpf: Some(ebpf),
        })
    }

    /// Hands every trail the kernel finished to `f`; returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(&Trail)) -> usize {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            if item.len() >= size_of::<Trail>() {
                // SAFETY: the program writes whole `Trail`s (repr(C),
                // integers only: every bit pattern is valid); the item
                // holds that many bytes; unaligned read.
                let t = unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<Trail>()) };
                f(&t);
                n += 1;
            }
        }
        n
    }

    /// Ends trails whose last step is older than `idle_ns` before
    /// `now_ns` (their free was missed), handing each to `f`, and forgets
    /// skbs whose trail is gone. Returns how many trails it ended.
    pub fn collect_idle(&mut self, now_ns: u64, idle_ns: u64, f: &mut dyn FnMut(&Trail)) -> usize {
        self.collect(
            |t| now_ns.saturating_sub(t.last_ns) >= idle_ns,
            end::IDLE,
            f,
        )
    }

    fn collect(
        &mut self,
        mut pick: impl FnMut(&Trail) -> bool,
        why: u8,
        f: &mut dyn FnMut(&Trail),
    ) -> usize {
        let keys: Vec<u64> = self.trails.keys().filter_map(Result::ok).collect();
        let mut n = 0;
        for k in keys {
            let Ok(mut t) = self.trails.get(&k, 0) else {
                continue;
            };
            if !pick(&t) {
                continue;
            }
            // Removed first: if the kernel ended it meanwhile, the ring
            // buffer has it and this copy is not handed out twice.
            if self.trails.remove(&k).is_err() {
                continue;
            }
            let _ = self.skbs.remove(&t.skb);
            t.end = why;
            f(&t);
            n += 1;
        }
        let stale: Vec<u64> = self
            .skbs
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, head)| self.trails.get(head, 0).is_err())
            .map(|(skb, _)| skb)
            .collect();
        for s in stale {
            let _ = self.skbs.remove(&s);
        }
        n
    }

    /// Detaches the programs, then hands out what the kernel finished
    /// and every trail still open (`end::STOPPED`).
    pub fn stop(&mut self, f: &mut dyn FnMut(&Trail)) {
        self.links.clear();
        self.ebpf = None;
        self.drain(&mut *f);
        self.collect(|_| true, end::STOPPED, f);
    }

    /// The programs' counters, summed over CPUs.
    pub fn counters(&self) -> TraceCounters {
        self.counters
            .get(&0, 0)
            .map(|v| v.iter().fold(TraceCounters::default(), |a, c| a.add(*c)))
            .unwrap_or_default()
    }

    /// Runs of the attached programs the kernel skipped, summed.
    pub fn kernel_skipped(&self) -> u64 {
        let Some(ebpf) = self.ebpf.as_ref() else {
            return 0;
        };
        ebpf.programs()
            .filter_map(|(_, p)| p.fd().ok())
            .filter_map(|fd| crate::kernel::progstats::prog_stats(std::os::fd::AsFd::as_fd(fd)))
            .map(|s| s.recursion_misses)
            .sum()
    }

    /// Trails open in the kernel now.
    pub fn open_trails(&self) -> usize {
        self.trails.keys().count()
    }

    /// The ring buffer's fd, readable when trails wait (poll/epoll).
    pub fn fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}

/// What a tracing run did, for its summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunStats {
    pub kernel: TraceCounters,
    /// Runs of the point programs the kernel skipped (their
    /// `recursion_misses`, `kernel::progstats`): hits no trail got. The
    /// idle sweep's map calls are one cause.
    pub kernel_skipped: u64,
    /// Trails handed out, by how they ended.
    pub trails: u64,
    pub idle_collected: u64,
}

/// Runs the tracer until `done()` says so: trails the kernel finishes are
/// handed to `out` as they come, idle ones (no step for `idle`) every
/// 100 ms, and every trail still open once `done()` — after detaching.
pub fn run(
    probe: &mut TraceProbe,
    idle: std::time::Duration,
    done: &mut dyn FnMut() -> bool,
    out: &mut dyn FnMut(&Trail),
) -> RunStats {
    use std::time::{Duration, Instant};
    let idle_ns = idle.as_nanos() as u64;
    let mut st = RunStats::default();
    let mut last_gc = Instant::now();
    loop {
        if done() {
            break;
        }
        let n = probe.drain(|t| {
            st.trails += 1;
            out(t);
        });
        if last_gc.elapsed() >= Duration::from_millis(100) {
            let now = crate::clock::monotonic_ns();
            let c = probe.collect_idle(now, idle_ns, &mut |t| {
                st.trails += 1;
                out(t);
            });
            st.idle_collected += c as u64;
            last_gc = Instant::now();
        }
        if n == 0 {
            crate::poll::wait_readable(probe.fd(), Duration::from_millis(50));
        }
    }
    st.kernel = probe.counters();
    st.kernel_skipped = probe.kernel_skipped();
    probe.stop(&mut |t| {
        st.trails += 1;
        out(t);
    });
    st
}
