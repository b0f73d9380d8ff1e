//! Loads the stack-latency programs with the running kernel's offsets,
//! attaches one hook set, and drains their ring buffer.
//!
//! Everything that can fail is checked before the first attach: the hooks
//! named in the config exist and fit their layer, every struct member and
//! tracepoint field is where BTF and tracefs say, with the expected size.
//! What is attached belongs to the [`StackProbe`]: dropping it (on any exit
//! path) closes the links and unloads the programs; nothing is pinned.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, RawFd};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData, PerCpuArray, RingBuf},
    programs::ProgramError,
};
use xdprobe_common::host::{GATE_ENTRY, GATE_REST, SendSlot, StackCounters, StackEvent, names};

use crate::hooks::{CLOSE_EVENT, Hook, Kind, Layer, SEND_ENTRY_EVENTS};
use crate::kernel::{Kernel, offsets};
use crate::object;
pub use crate::stack::hookset::LayerHooks;
use crate::stack::hookset::{program_name, resolve, settings};
use crate::stack::links::{
    Attachment, Closer, Link, attach_btf, attach_function, attach_tcp_tx, attach_tracepoint,
};

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("the host tracing programs are not in this binary (built with AYA_BUILD_SKIP=1)")]
    NotBuilt,
    #[error("host.hooks.{layer}: {hook}: {reason}")]
    Hook {
        layer: &'static str,
        hook: String,
        reason: String,
    },
    #[error("host.hooks.{layer}: at most {max} hooks")]
    TooManyHooks { layer: &'static str, max: usize },
    #[error("{0}")]
    Offsets(#[from] offsets::OffsetError),
    #[error("at most {max} {what} in the in-kernel filter")]
    FilterTooLong { what: &'static str, max: usize },
    #[error("loading the stack-latency programs")]
    Load(#[source] aya::EbpfError),
    #[error("program {name} ({hook})")]
    Program {
        name: &'static str,
        hook: String,
        #[source]
        source: ProgramError,
    },
    #[error("the object has no {0}")]
    Missing(&'static str),
    #[error("map {0}")]
    Map(&'static str, #[source] aya::maps::MapError),
}

impl ProbeError {
    /// True for errors about what the kernel or the config offers (exit
    /// code 2 at the command line), as opposed to failures while loading.
    pub fn is_setup_error(&self) -> bool {
        matches!(
            self,
            ProbeError::Hook { .. }
                | ProbeError::TooManyHooks { .. }
                | ProbeError::Offsets(_)
                | ProbeError::FilterTooLong { .. }
        )
    }
}

/// What to observe and report.
#[derive(Clone, Debug, Default)]
pub struct StackOptions {
    /// Per layer, hooks replacing the defaults (`[host.hooks]`). A hook
    /// named here must exist; a default that the kernel lacks just leaves
    /// its layer out.
    pub hooks: BTreeMap<Layer, Vec<Hook>>,
    /// Layers to observe; empty: all.
    pub layers: Vec<Layer>,
    /// Sampling grid in stream bytes (0: every observation).
    pub sample_bytes: u32,
    /// In-kernel scope: ports (either end), network namespace inodes,
    /// processes (socket layers).
    pub ports: Vec<u16>,
    pub netns: Vec<u32>,
    pub tgids: Vec<u32>,
    /// cgroup v2 IDs (the inode of the cgroup's directory).
    pub cgroups: Vec<u64>,
    /// Ring buffer size in bytes (power of two, ≥ one page); 0: 4 MiB.
    pub ring_bytes: u32,
    /// Time sampling: the layer programs attached only `window` out of
    /// every `every` ([`crate::stack::agent::Windows`]); `None`: always.
    pub windows: Option<crate::stack::agent::Windows>,
    /// Benchmark only: attach programs that return at once
    /// ([`object::STACKFLOOR`]) at the hooks the real ones would take, to
    /// measure what the kernel charges for running any program there.
    /// Nothing is observed.
    pub empty_programs: bool,
}

/// The attached probe.
pub struct StackProbe {
    // The maps hold their own fds: drop order does not matter.
    ring: RingBuf<MapData>,
    counters: PerCpuArray<MapData, StackCounters>,
    send_slots: Array<MapData, SendSlot>,
    /// Which hook observes each layer; layers the kernel offers no hook
    /// for are absent.
    pub attached: Vec<LayerHooks>,
    /// Every layer program's link, for the sampling windows to detach
    /// and attach again.
    links: Vec<Attachment>,
    /// The socket-close hook's link (attached as long as the probe is:
    /// it also drops the kernel's per-socket identities).
    #[expect(dead_code, reason = "held for its Drop, which detaches it")]
    close: Attachment,
    /// Which programs may observe ([`GATE_ENTRY`], [`GATE_REST`]);
    /// `None` for the empty programs.
    gate: Option<Array<MapData, u32>>,
    /// When the send path's entry last opened (`names::STACK_EPOCH`):
    /// the programs pair no send call entered before it. `None` for the
    /// empty programs.
    epoch: Option<Array<MapData, u64>>,
    /// The sampling windows the agent keeps (from the options).
    pub windows: Option<crate::stack::agent::Windows>,
    closer: Closer,
    ebpf: Ebpf,
}

impl StackProbe {
    /// Checks, loads and attaches. On error nothing stays attached.
    pub fn start(kernel: &Kernel, opts: &StackOptions) -> Result<StackProbe, ProbeError> {
        let object = if opts.empty_programs {
            object::STACKFLOOR
        } else {
            object::STACKLAT
        };
        if object.is_empty() {
            return Err(ProbeError::NotBuilt);
        }
        let mut layers = resolve(kernel, opts)?;
        let ring = if opts.ring_bytes == 0 {
            4 << 20
        } else {
            opts.ring_bytes
        };
        let mut settings = settings(kernel, &layers, opts)?;
        settings.wakeup_bytes = ring / 4;
        let mut ebpf = EbpfLoader::new()
            .override_global(names::STACK_SETTINGS, &settings, true)
            .map_max_entries(names::STACK_EVENTS, ring)
            .load(object)
            .map_err(ProbeError::Load)?;

        // The gate opens before anything is attached: a program that finds
        // it shut observes nothing. The empty programs have none.
        let gate = match ebpf.take_map(names::STACK_GATE) {
            Some(m) => {
                let mut g = Array::<MapData, u32>::try_from(m)
                    .map_err(|e| ProbeError::Map(names::STACK_GATE, e))?;
                g.set(0, GATE_ENTRY | GATE_REST, 0)
                    .map_err(|e| ProbeError::Map(names::STACK_GATE, e))?;
                Some(g)
            }
            None => None,
        };
        let epoch = match ebpf.take_map(names::STACK_EPOCH) {
            Some(m) => Some(
                Array::<MapData, u64>::try_from(m)
                    .map_err(|e| ProbeError::Map(names::STACK_EPOCH, e))?,
            ),
            None => None,
        };
        // Close first: a flow that ends while we attach the rest is still
        // flushed. It stays attached between sampling windows.
        let close = attach_tracepoint(&mut ebpf, "stack_set_state", CLOSE_EVENT)?;
        let mut links = Vec::new();
        for l in &mut layers {
            match l.layer {
                Layer::TcpTx => {
                    // First that loads: tp_btf, else raw_tp.
                    let mut last = None;
                    let mut chosen = None;
                    for h in &l.hooks {
                        match attach_tcp_tx(&mut ebpf, kernel, h) {
                            Ok(a) => {
                                links.push(a);
                                chosen = Some(h.clone());
                                break;
                            }
                            Err(e) => last = Some(e),
                        }
                    }
                    match (chosen, last) {
                        (Some(h), _) => l.hooks = vec![h],
                        (None, Some(e)) => return Err(e),
                        (None, None) => {}
                    }
                }
                Layer::SockTx => {
                    for ev in SEND_ENTRY_EVENTS {
                        if kernel.tracefs.has(ev) {
                            let mut a = attach_tracepoint(&mut ebpf, "stack_send_enter", ev)?;
                            a.entry = true;
                            links.push(a);
                        }
                    }
                    links.push(attach_tracepoint(
                        &mut ebpf,
                        "stack_send_length",
                        &l.hooks[0].target,
                    )?);
                }
                layer => {
                    for slot in 0..l.hooks.len() {
                        let h = l.hooks[slot].clone();
                        let name = program_name(layer, h.kind, slot);
                        match h.kind {
                            Kind::Kprobe | Kind::Fentry => {
                                links.push(attach_function(&mut ebpf, kernel, layer, name, &h)?)
                            }
                            Kind::TpBtf => {
                                let e = match attach_btf(&mut ebpf, kernel, name, &h) {
                                    Ok(a) => {
                                        links.push(a);
                                        continue;
                                    }
                                    Err(e) => e,
                                };
                                let Some(classic) = l.fallback.get(slot).cloned().flatten() else {
                                    return Err(e);
                                };
                                tracing::info!(layer = layer.key(), hook = %h, error = %e, fallback = %classic, "BTF-typed hook refused: using the classic tracepoint");
                                let name = program_name(layer, classic.kind, slot);
                                links.push(attach_tracepoint(&mut ebpf, name, &classic.target)?);
                                l.hooks[slot] = classic;
                            }
                            _ => links.push(attach_tracepoint(&mut ebpf, name, &h.target)?),
                        }
                    }
                }
            }
        }

        let ring = ebpf
            .take_map(names::STACK_EVENTS)
            .ok_or(ProbeError::Missing(names::STACK_EVENTS))?;
        let ring = RingBuf::try_from(ring).map_err(|e| ProbeError::Map(names::STACK_EVENTS, e))?;
        let counters = ebpf
            .take_map(names::STACK_COUNTERS)
            .ok_or(ProbeError::Missing(names::STACK_COUNTERS))?;
        let counters = PerCpuArray::try_from(counters)
            .map_err(|e| ProbeError::Map(names::STACK_COUNTERS, e))?;
        let map = |ebpf: &mut Ebpf, n: &'static str| ebpf.take_map(n).ok_or(ProbeError::Missing(n));
        let send_slots = Array::try_from(map(&mut ebpf, names::SEND_SLOTS)?)
            .map_err(|e| ProbeError::Map(names::SEND_SLOTS, e))?;
        Ok(StackProbe {
            ring,
            counters,
            send_slots,
            attached: layers,
            links,
            close,
            gate,
            epoch,
            windows: opts.windows,
            closer: Closer::new(),
            ebpf,
        })
    }

    /// Attaches every layer program a closed window detached, the send
    /// path's entry last (so a byte let in is seen by every layer after
    /// it), and opens the gate of those that stayed attached. Returns when
    /// the entry opened (monotonic ns): send calls entered before it are
    /// not timed.
    pub fn open_window(&mut self) -> Result<u64, ProbeError> {
        let mut opened = 0;
        for (entry, gate) in [(false, GATE_REST), (true, GATE_REST | GATE_ENTRY)] {
            for a in self.links.iter_mut().filter(|a| a.entry == entry) {
                if a.link.is_none() {
                    a.attach(&mut self.ebpf)?;
                }
            }
            if entry {
                // Before the entry opens: every call stamped after this
                // is the window's; one stamped before it (its return
                // fell between windows, unseen) is never paired.
                opened = crate::stack::agent::monotonic_ns();
                self.set_epoch(opened);
            }
            self.set_gate(gate);
        }
        Ok(opened)
    }

    fn set_epoch(&mut self, ns: u64) {
        if let Some(e) = self.epoch.as_mut()
            && let Err(err) = e.set(0, ns, 0)
        {
            tracing::warn!(error = %err, "setting the window's epoch");
        }
    }

    /// Closes the send path's entry: no new send call is timed; the
    /// bytes already let in go on being observed at the other layers.
    pub fn close_entry(&mut self) {
        self.set_gate(GATE_REST);
        self.detach(true);
    }

    /// Closes every layer program (the socket-close hook stays): between
    /// windows the probe costs the kernel nothing per packet. BTF-typed
    /// and raw tracepoints (the default hooks of the skb and TCP layers)
    /// are detached; programs on classic tracepoints and kprobes (the
    /// socket layers) stay attached behind the gate, which costs one
    /// dispatch and one array lookup per call instead of a 75–95 ms close
    /// per link (the kernel closes perf links one at a time).
    pub fn close_window(&mut self) {
        self.set_gate(0);
        self.detach(false);
    }

    /// Detaches the entry's links (`entry_only`) or all, except those the
    /// gate holds.
    fn detach(&mut self, entry_only: bool) {
        let gated = self.gate.is_some();
        let links = self
            .links
            .iter_mut()
            .filter(|a| a.entry || !entry_only)
            .filter(|a| !(gated && a.link.as_ref().is_some_and(Link::slow_to_close)))
            .filter_map(Attachment::detach);
        let (slow, fast): (Vec<Link>, Vec<Link>) = links.partition(Link::slow_to_close);
        drop(fast);
        self.closer.close(slow);
    }

    fn set_gate(&mut self, bits: u32) {
        if let Some(g) = self.gate.as_mut()
            && let Err(e) = g.set(0, bits, 0)
        {
            tracing::warn!(error = %e, bits, "setting the programs' gate");
        }
    }

    /// How many layer programs are attached now.
    pub fn attached_programs(&self) -> usize {
        self.links.iter().filter(|a| a.link.is_some()).count()
    }

    /// Hands every event waiting in the ring buffer to `f`; returns how many.
    pub fn drain(&mut self, f: impl FnMut(&StackEvent)) -> usize {
        self.drain_some(usize::MAX, f)
    }

    /// Hands at most `max` waiting events to `f`; returns how many.
    pub fn drain_some(&mut self, max: usize, mut f: impl FnMut(&StackEvent)) -> usize {
        let mut n = 0;
        while n < max
            && let Some(item) = self.ring.next()
        {
            if item.len() >= size_of::<StackEvent>() {
                // SAFETY: the program writes whole `StackEvent`s (repr(C),
                // plain integers: every bit pattern is valid); the item
                // holds at least that many bytes; unaligned read.
                let ev = unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<StackEvent>()) };
                f(&ev);
                n += 1;
            }
        }
        n
    }

    /// The programs' counters, summed over CPUs.
    pub fn counters(&self) -> StackCounters {
        self.counters
            .get(&0, 0)
            .map(|v| v.iter().fold(StackCounters::default(), |a, c| a.add(*c)))
            .unwrap_or_default()
    }

    /// Runs of the attached programs the kernel skipped, summed (their
    /// `recursion_misses`, `kernel::progstats`): observations no program
    /// saw, so none of the counters above can hold them. The send-slot
    /// sweep's map calls ([`Self::gc`]) are one cause for the classic
    /// tracepoint programs.
    pub fn kernel_skipped(&self) -> u64 {
        self.ebpf
            .programs()
            .filter_map(|(_, p)| p.fd().ok())
            .filter_map(|fd| crate::kernel::progstats::prog_stats(std::os::fd::AsFd::as_fd(fd)))
            .map(|s| s.recursion_misses)
            .sum()
    }

    /// Clears send-slot entries older than `max_age_ns` at `now_ns`
    /// (monotonic): left by threads that exited in a write to a file, or
    /// by send paths that never return through the socket layer. Returns
    /// how many it cleared. One lookup per slot (65536 a minute: tens of
    /// ms of this thread's time).
    pub fn gc(&mut self, now_ns: u64, max_age_ns: u64) -> usize {
        let cutoff = now_ns.saturating_sub(max_age_ns);
        let mut n = 0;
        for i in 0..self.send_slots.len() {
            let Ok(mut s) = self.send_slots.get(&i, 0) else {
                continue;
            };
            let old_entry = s.entry_ns != 0 && s.entry_ns < cutoff;
            let old_tcp = s.tcp_sk != 0 && s.tcp_ts_ns < cutoff;
            if !old_entry && !old_tcp {
                continue;
            }
            if old_entry {
                s.entry_ns = 0;
            }
            if old_tcp {
                s.tcp_sk = 0;
            }
            if self.send_slots.set(i, s, 0).is_ok() {
                n += 1;
            }
        }
        n
    }

    /// The ring buffer's fd, readable when events wait (for poll/epoll).
    pub fn fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}
