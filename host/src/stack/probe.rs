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
    programs::{
        BtfTracePoint, FEntry, KProbe, ProgramError, RawTracePoint, TracePoint, fentry::FEntryLink,
        kprobe::KProbeLink, raw_trace_point::RawTracePointLink, tp_btf::BtfTracePointLink,
        trace_point::TracePointLink,
    },
};
use xdprobe_common::host::{
    DEV_RX_HOOKS, GATE_ENTRY, GATE_REST, STACK_FILTER_CGROUP, STACK_FILTER_NETNS,
    STACK_FILTER_PORT, STACK_FILTER_TGID, STACK_MAX_CGROUPS, STACK_MAX_NETNS, STACK_MAX_PORTS,
    STACK_MAX_TGIDS, SendSlot, StackCounters, StackEvent, StackSettings, names,
};

use crate::hooks::{CLOSE_EVENT, Hook, Kind, Layer, Policy, SEND_ENTRY_EVENTS};
use crate::kernel::{Kernel, offsets};
use crate::object;

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

/// A layer's chosen hooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerHooks {
    pub layer: Layer,
    pub hooks: Vec<Hook>,
    /// Per hook, the classic tracepoint to attach instead if the kernel
    /// refuses the BTF-typed default chosen for it.
    pub fallback: Vec<Option<Hook>>,
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
    /// The sampling windows the agent keeps (from the options).
    pub windows: Option<crate::stack::agent::Windows>,
    closer: Closer,
    ebpf: Ebpf,
}

/// Layers' hooks after checking them against the kernel.
fn resolve(kernel: &Kernel, opts: &StackOptions) -> Result<Vec<LayerHooks>, ProbeError> {
    let wanted: Vec<Layer> = if opts.layers.is_empty() {
        Layer::ALL.to_vec()
    } else {
        opts.layers.clone()
    };
    let mut out = Vec::new();
    for layer in wanted {
        let (hooks, explicit) = match opts.hooks.get(&layer) {
            Some(h) => (h.clone(), true),
            None => (layer.default_hooks(), false),
        };
        if explicit && hooks.len() > layer.max_hooks() && layer.policy() == Policy::Any {
            return Err(ProbeError::TooManyHooks {
                layer: layer.key(),
                max: layer.max_hooks(),
            });
        }
        let mut ok = Vec::new();
        let mut fallback = Vec::new();
        for h in hooks {
            // Defaults on the skb layers: the BTF-typed twin where this
            // kernel has it. It is cheaper per event (direct skb loads),
            // and the kernel skips a classic tracepoint program whenever
            // another BPF program or a map system call is running on that
            // CPU (`bpf_prog_active`): 1.2 % of the runs in a 2 Gbit/s
            // iperf3 test here, whole packets at once (the same count at
            // IP_TX, DEV_TX and DEV_RX); a BTF-typed one only when it
            // interrupts itself. `tcp:tcp_probe` (the TCP receive layer)
            // has a BTF-typed twin too.
            let twin = (!explicit && (layer.skb_slot(0).is_some() || layer == Layer::TcpRx))
                .then(|| h.btf_twin())
                .flatten()
                .filter(|t| check_hook(kernel, layer, t).is_ok());
            if let Some(t) = twin {
                if check_hook(kernel, layer, &h).is_ok() {
                    fallback.push(Some(h));
                } else {
                    fallback.push(None);
                }
                ok.push(t);
                continue;
            }
            match check_hook(kernel, layer, &h) {
                Ok(()) => {
                    ok.push(h);
                    fallback.push(None);
                }
                Err(reason) if explicit => {
                    return Err(ProbeError::Hook {
                        layer: layer.key(),
                        hook: h.to_string(),
                        reason,
                    });
                }
                Err(reason) => {
                    tracing::debug!(layer = layer.key(), hook = %h, %reason, "default hook not available");
                }
            }
        }
        if layer.policy() == Policy::Any {
            ok.truncate(layer.max_hooks());
            fallback.truncate(layer.max_hooks());
        }
        if !ok.is_empty() {
            out.push(LayerHooks {
                layer,
                hooks: ok,
                fallback,
            });
        }
    }
    Ok(out)
}

/// Why `hook` cannot observe `layer` on this kernel, if it cannot.
fn check_hook(kernel: &Kernel, layer: Layer, hook: &Hook) -> Result<(), String> {
    if !layer.kinds().contains(&hook.kind) {
        let kinds: Vec<_> = layer.kinds().iter().map(|k| k.as_str()).collect();
        return Err(format!(
            "this layer's program is written for {} hooks",
            kinds.join(", ")
        ));
    }
    if let Some(fixed) = layer.fixed_event() {
        let name = fixed.split_once(':').map_or(fixed, |(_, n)| n);
        let target = match hook.kind {
            Kind::Tracepoint => hook.target.as_str(),
            _ => hook.tp_name(),
        };
        if target != fixed && target != name {
            return Err(format!("this layer reads fields only {fixed} has"));
        }
    }
    match hook.kind {
        Kind::Tracepoint => {
            let f = kernel
                .tracefs
                .format(&hook.target)
                .map_err(|e| e.to_string())?;
            if layer.fixed_event().is_none() && f.skb_field().is_none() {
                return Err("the tracepoint carries no skbaddr".to_owned());
            }
            Ok(())
        }
        Kind::TpBtf | Kind::RawTp => {
            let args = kernel
                .btf
                .tracepoint_args(hook.tp_name())
                .ok_or_else(|| format!("this kernel has no tracepoint {}", hook.tp_name()))?;
            let want = if layer == Layer::TcpTx || layer == Layer::TcpRx {
                "struct sock *"
            } else {
                "struct sk_buff *"
            };
            if args.first().map(String::as_str) != Some(want) {
                return Err(format!(
                    "its first argument is {:?}, not {want}",
                    args.first()
                ));
            }
            Ok(())
        }
        Kind::Kprobe | Kind::Fentry => {
            if hook.kind == Kind::Kprobe && !kernel.has_kprobes() {
                return Err("this kernel has no kprobes (no kprobe event source)".to_owned());
            }
            skb_arg(kernel, &hook.target).map(|_| ())
        }
    }
}

/// Which argument of kernel function `name` is the `struct sk_buff *`.
fn skb_arg(kernel: &Kernel, name: &str) -> Result<u8, String> {
    let args = kernel
        .btf
        .func_args(name)
        .ok_or_else(|| format!("the kernel's BTF has no function {name}"))?;
    args.iter()
        .position(|a| a == "struct sk_buff *")
        .filter(|&i| i < 5)
        .map(|i| i as u8)
        .ok_or_else(|| format!("{name} takes no struct sk_buff * among its first five arguments"))
}

/// The program that observes `layer` through its `slot`-th hook.
fn program_name(layer: Layer, kind: Kind, slot: usize) -> &'static str {
    let s = slot.min(2);
    match (layer, kind) {
        (Layer::IpTx, Kind::TpBtf) => "stack_bt_ip_tx",
        (Layer::DevTx, Kind::TpBtf) => "stack_bt_dev_tx",
        (Layer::DevRx, Kind::TpBtf) => {
            ["stack_bt_dev_rx0", "stack_bt_dev_rx1", "stack_bt_dev_rx2"][s]
        }
        (Layer::IpRx, Kind::TpBtf) => "stack_bt_ip_rx",
        (Layer::IpTx, Kind::Kprobe) => "stack_kp_ip_tx",
        (Layer::IpTx, Kind::Fentry) => "stack_fe_ip_tx",
        (Layer::DevTx, Kind::Kprobe) => "stack_kp_dev_tx",
        (Layer::DevTx, Kind::Fentry) => "stack_fe_dev_tx",
        (Layer::DevRx, Kind::Kprobe) => {
            ["stack_kp_dev_rx0", "stack_kp_dev_rx1", "stack_kp_dev_rx2"][s]
        }
        (Layer::DevRx, Kind::Fentry) => {
            ["stack_fe_dev_rx0", "stack_fe_dev_rx1", "stack_fe_dev_rx2"][s]
        }
        (Layer::IpRx, Kind::Kprobe) => "stack_kp_ip_rx",
        (Layer::IpRx, Kind::Fentry) => "stack_fe_ip_rx",
        (Layer::SockTx, _) => "stack_send_length",
        (Layer::TcpTx, Kind::TpBtf) => "stack_tcp_sendmsg_btf",
        (Layer::TcpTx, _) => "stack_tcp_sendmsg_raw",
        (Layer::IpTx, _) => "stack_ip_tx",
        (Layer::DevTx, _) => "stack_dev_tx",
        (Layer::DevRx, _) => ["stack_dev_rx0", "stack_dev_rx1", "stack_dev_rx2"][slot.min(2)],
        (Layer::IpRx, _) => "stack_ip_rx",
        (Layer::TcpRx, Kind::TpBtf) => "stack_tcp_probe_btf",
        (Layer::TcpRx, _) => "stack_tcp_probe",
        (Layer::SockRx, _) => "stack_recv_length",
    }
}

fn settings(
    kernel: &Kernel,
    layers: &[LayerHooks],
    opts: &StackOptions,
) -> Result<StackSettings, ProbeError> {
    let mut needed: Vec<&str> = vec![CLOSE_EVENT];
    for l in layers {
        match l.layer {
            Layer::SockTx => needed.push("sock:sock_send_length"),
            Layer::TcpRx => needed.push("tcp:tcp_probe"),
            Layer::SockRx => needed.push("sock:sock_recv_length"),
            _ => {}
        }
    }
    let mut tp = offsets::stack_tp_offsets(&kernel.tracefs, &needed)?;
    let skb_off = |h: &Hook| -> Result<u32, ProbeError> {
        let f = kernel
            .tracefs
            .format(&h.target)
            .map_err(offsets::OffsetError::from)?;
        Ok(
            f.offset(f.skb_field().map_or("skbaddr", |f| f.name.as_str()), 8)
                .map_err(offsets::OffsetError::from)?,
        )
    };
    let mut skb_args = [0u8; 8];
    for l in layers {
        for (i, h) in l.hooks.iter().take(l.layer.max_hooks()).enumerate() {
            let Some(slot) = l.layer.skb_slot(i) else {
                continue;
            };
            // A BTF-typed hook takes the skb as its first argument; the
            // record offset is for its classic fallback, if any.
            let h = match (h.kind, l.fallback.get(i).and_then(Option::as_ref)) {
                (Kind::TpBtf, Some(classic)) => classic,
                (Kind::TpBtf, None) => continue,
                _ => h,
            };
            if h.kind != Kind::Tracepoint {
                skb_args[slot] = skb_arg(kernel, &h.target).map_err(|reason| ProbeError::Hook {
                    layer: l.layer.key(),
                    hook: h.to_string(),
                    reason,
                })?;
                continue;
            }
            let off = skb_off(h)?;
            match l.layer {
                Layer::IpTx => tp.ip_tx_skb = off,
                Layer::DevTx => tp.dev_tx_skb = off,
                Layer::IpRx => tp.ip_rx_skb = off,
                Layer::DevRx => tp.dev_rx_skb[i.min(DEV_RX_HOOKS - 1)] = off,
                _ => {}
            }
        }
    }
    let mut s = StackSettings {
        off: offsets::kernel_offsets(&kernel.btf)?,
        tp,
        sample_bytes: opts.sample_bytes,
        skb_arg: skb_args,
        ..StackSettings::ZERO
    };
    fill(&mut s.ports, &opts.ports, "ports", STACK_MAX_PORTS)?;
    fill(
        &mut s.netns,
        &opts.netns,
        "network namespaces",
        STACK_MAX_NETNS,
    )?;
    fill(&mut s.tgids, &opts.tgids, "processes", STACK_MAX_TGIDS)?;
    fill(&mut s.cgroups, &opts.cgroups, "cgroups", STACK_MAX_CGROUPS)?;
    s.n_cgroups = opts.cgroups.len() as u32;
    if !opts.cgroups.is_empty() {
        s.flags |= STACK_FILTER_CGROUP;
    }
    s.n_ports = opts.ports.len() as u32;
    s.n_netns = opts.netns.len() as u32;
    s.n_tgids = opts.tgids.len() as u32;
    if !opts.ports.is_empty() {
        s.flags |= STACK_FILTER_PORT;
    }
    if !opts.netns.is_empty() {
        s.flags |= STACK_FILTER_NETNS;
    }
    if !opts.tgids.is_empty() {
        s.flags |= STACK_FILTER_TGID;
    }
    Ok(s)
}

fn fill<T: Copy>(
    dst: &mut [T],
    src: &[T],
    what: &'static str,
    max: usize,
) -> Result<(), ProbeError> {
    if src.len() > max {
        return Err(ProbeError::FilterTooLong { what, max });
    }
    dst[..src.len()].copy_from_slice(src);
    Ok(())
}

/// How a layer program was attached: enough to attach it again after a
/// sampling window closed (the program stays loaded in between).
#[derive(Clone, Debug)]
enum How {
    /// A classic tracepoint, `category:name`.
    Tracepoint(String),
    Btf,
    /// A raw tracepoint by name.
    Raw(String),
    /// A kprobe on this function.
    Kprobe(String),
    Fentry,
}

/// An attached program's link, owned here: dropping it detaches.
#[derive(Debug)]
#[expect(
    dead_code,
    reason = "each link is held for its Drop, which detaches it"
)]
enum Link {
    Tp(TracePointLink),
    Btf(BtfTracePointLink),
    Raw(RawTracePointLink),
    Kp(KProbeLink),
    Fe(FEntryLink),
}

impl Link {
    /// Perf-event links (classic tracepoints, kprobes): closing one waits
    /// for the tracepoint's grace period, 75–95 ms each on this 6.18
    /// kernel, so they are closed off the agent's thread.
    fn slow_to_close(&self) -> bool {
        matches!(self, Link::Tp(_) | Link::Kp(_))
    }
}

/// Closes perf-event links on a thread of its own, all of a batch at
/// once (their grace periods overlap), so a closing window does not stop
/// the agent for a third of a second. The program stops running as the
/// close starts; only the kernel's wait before freeing is left here.
struct Closer {
    tx: Option<std::sync::mpsc::Sender<Vec<Link>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Closer {
    fn new() -> Closer {
        Closer {
            tx: None,
            thread: None,
        }
    }

    fn close(&mut self, links: Vec<Link>) {
        if links.is_empty() {
            return;
        }
        if self.tx.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<Vec<Link>>();
            let spawned = std::thread::Builder::new()
                .name("xdprobe-unlink".into())
                .spawn(move || {
                    for batch in rx {
                        std::thread::scope(|s| {
                            for l in batch {
                                s.spawn(move || drop(l));
                            }
                        });
                    }
                });
            match spawned {
                Ok(t) => {
                    self.tx = Some(tx);
                    self.thread = Some(t);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "no thread to close links on: closing them here");
                    drop(links);
                    return;
                }
            }
        }
        if let Some(tx) = &self.tx
            && let Err(std::sync::mpsc::SendError(links)) = tx.send(links)
        {
            drop(links);
        }
    }
}

impl Drop for Closer {
    /// Every link is closed when the probe is gone (nothing stays
    /// attached after the process's last report).
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One attached layer program.
#[derive(Debug)]
struct Attachment {
    name: &'static str,
    how: How,
    /// The send path's entry (`sys_enter_*`): the first hook a byte
    /// passes. A window closes it first and the rest once the bytes it
    /// let in have passed them.
    entry: bool,
    /// `None` while detached.
    link: Option<Link>,
}

impl Attachment {
    fn new(name: &'static str, how: How, link: Link) -> Attachment {
        Attachment {
            name,
            how,
            entry: false,
            link: Some(link),
        }
    }

    /// Takes the link out (to be dropped: that detaches).
    fn detach(&mut self) -> Option<Link> {
        self.link.take()
    }

    fn attach(&mut self, ebpf: &mut Ebpf) -> Result<(), ProbeError> {
        if self.link.is_some() {
            return Ok(());
        }
        let name = self.name;
        let how = self.how.clone();
        let err = |source| ProbeError::Program {
            name,
            hook: format!("{how:?}"),
            source,
        };
        let p = ebpf.program_mut(name).ok_or(ProbeError::Missing(name))?;
        let link = match &self.how {
            How::Tracepoint(event) => {
                let (sys, ev) = event.split_once(':').unwrap_or(("", event));
                let p = <&mut TracePoint>::try_from(p).map_err(err)?;
                let id = p.attach(sys, ev).map_err(err)?;
                Link::Tp(p.take_link(id).map_err(err)?)
            }
            How::Btf => {
                let p = <&mut BtfTracePoint>::try_from(p).map_err(err)?;
                let id = p.attach().map_err(err)?;
                Link::Btf(p.take_link(id).map_err(err)?)
            }
            How::Raw(tp) => {
                let p = <&mut RawTracePoint>::try_from(p).map_err(err)?;
                let id = p.attach(tp).map_err(err)?;
                Link::Raw(p.take_link(id).map_err(err)?)
            }
            How::Kprobe(f) => {
                let p = <&mut KProbe>::try_from(p).map_err(err)?;
                let id = p.attach(f, 0).map_err(err)?;
                Link::Kp(p.take_link(id).map_err(err)?)
            }
            How::Fentry => {
                let p = <&mut FEntry>::try_from(p).map_err(err)?;
                let id = p.attach().map_err(err)?;
                Link::Fe(p.take_link(id).map_err(err)?)
            }
        };
        self.link = Some(link);
        Ok(())
    }
}

fn tracepoint<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut TracePoint, ProbeError> {
    let p = ebpf.program_mut(name).ok_or(ProbeError::Missing(name))?;
    p.try_into().map_err(|source| ProbeError::Program {
        name,
        hook: String::new(),
        source,
    })
}

fn attach_tracepoint(
    ebpf: &mut Ebpf,
    name: &'static str,
    event: &str,
) -> Result<Attachment, ProbeError> {
    let err = |source| ProbeError::Program {
        name,
        hook: format!("tracepoint:{event}"),
        source,
    };
    let p = tracepoint(ebpf, name)?;
    if p.fd().is_err() {
        p.load().map_err(err)?;
    }
    let (sys, ev) = event.split_once(':').unwrap_or(("", event));
    let id = p.attach(sys, ev).map_err(err)?;
    let link = p.take_link(id).map_err(err)?;
    Ok(Attachment::new(
        name,
        How::Tracepoint(event.to_owned()),
        Link::Tp(link),
    ))
}

/// Loads and attaches a BTF-typed tracepoint program.
fn attach_btf(
    ebpf: &mut Ebpf,
    kernel: &Kernel,
    name: &'static str,
    hook: &Hook,
) -> Result<Attachment, ProbeError> {
    let err = |source| ProbeError::Program {
        name,
        hook: hook.to_string(),
        source,
    };
    let p = ebpf.program_mut(name).ok_or(ProbeError::Missing(name))?;
    let p: &mut BtfTracePoint = p.try_into().map_err(err)?;
    p.load(hook.tp_name(), &kernel.aya_btf).map_err(err)?;
    let id = p.attach().map_err(err)?;
    let link = p.take_link(id).map_err(err)?;
    Ok(Attachment::new(name, How::Btf, Link::Btf(link)))
}

/// Loads and attaches an skb layer's program on a kernel function.
fn attach_function(
    ebpf: &mut Ebpf,
    kernel: &Kernel,
    layer: Layer,
    name: &'static str,
    hook: &Hook,
) -> Result<Attachment, ProbeError> {
    // The kernel refusing a function hook (fentry is EPERM on some
    // kernels, a kprobe blacklisted function) is about what this kernel
    // offers: a setup error naming the hook, like a missing tracepoint.
    let err = |source: ProgramError| {
        let mut reason = format!("the kernel refused it: {source}");
        let mut src = std::error::Error::source(&source);
        while let Some(e) = src {
            reason.push_str(&format!(": {e}"));
            src = e.source();
        }
        ProbeError::Hook {
            layer: layer.key(),
            hook: hook.to_string(),
            reason,
        }
    };
    let p = ebpf.program_mut(name).ok_or(ProbeError::Missing(name))?;
    if hook.kind == Kind::Kprobe {
        let p: &mut KProbe = p.try_into().map_err(err)?;
        p.load().map_err(err)?;
        let id = p.attach(&hook.target, 0).map_err(err)?;
        let link = p.take_link(id).map_err(err)?;
        Ok(Attachment::new(
            name,
            How::Kprobe(hook.target.clone()),
            Link::Kp(link),
        ))
    } else {
        let p: &mut FEntry = p.try_into().map_err(err)?;
        p.load(&hook.target, &kernel.aya_btf).map_err(err)?;
        let id = p.attach().map_err(err)?;
        let link = p.take_link(id).map_err(err)?;
        Ok(Attachment::new(name, How::Fentry, Link::Fe(link)))
    }
}

/// Loads and attaches the TCP-layer send hook: BTF-typed where the kernel
/// accepts it, else raw (same arguments).
fn attach_tcp_tx(ebpf: &mut Ebpf, kernel: &Kernel, hook: &Hook) -> Result<Attachment, ProbeError> {
    let name = program_name(Layer::TcpTx, hook.kind, 0);
    let err = |source| ProbeError::Program {
        name,
        hook: hook.to_string(),
        source,
    };
    let p = ebpf.program_mut(name).ok_or(ProbeError::Missing(name))?;
    match hook.kind {
        Kind::TpBtf => {
            let p: &mut BtfTracePoint = p.try_into().map_err(err)?;
            p.load(hook.tp_name(), &kernel.aya_btf).map_err(err)?;
            let id = p.attach().map_err(err)?;
            let link = p.take_link(id).map_err(err)?;
            Ok(Attachment::new(name, How::Btf, Link::Btf(link)))
        }
        _ => {
            let p: &mut RawTracePoint = p.try_into().map_err(err)?;
            p.load().map_err(err)?;
            let id = p.attach(hook.tp_name()).map_err(err)?;
            let link = p.take_link(id).map_err(err)?;
            Ok(Attachment::new(
                name,
                How::Raw(hook.tp_name().to_owned()),
                Link::Raw(link),
            ))
        }
    }
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
            windows: opts.windows,
            closer: Closer::new(),
            ebpf,
        })
    }

    /// Attaches every layer program a closed window detached, the send
    /// path's entry last (so a byte let in is seen by every layer after
    /// it), and opens the gate of those that stayed attached. Returns how
    /// many were attached.
    pub fn open_window(&mut self) -> Result<usize, ProbeError> {
        let mut n = 0;
        for (entry, gate) in [(false, GATE_REST), (true, GATE_REST | GATE_ENTRY)] {
            for a in self.links.iter_mut().filter(|a| a.entry == entry) {
                if a.link.is_none() {
                    a.attach(&mut self.ebpf)?;
                    n += 1;
                }
            }
            self.set_gate(gate);
        }
        Ok(n)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn has_symbol(obj: &[u8], name: &str) -> bool {
        let pat = format!("\0{name}\0");
        obj.windows(pat.len()).any(|w| w == pat.as_bytes())
    }

    /// The overhead benchmark's floor is only the floor if the empty
    /// object offers every program the loader can pick, under the same
    /// name, so the same hooks get attached.
    #[test]
    fn the_empty_object_has_every_program_the_loader_attaches() {
        if object::STACKLAT.is_empty() || object::STACKFLOOR.is_empty() {
            assert!(
                std::env::var("CI").is_err(),
                "the tracing objects were not built under CI"
            );
            eprintln!("SKIPPED: the tracing objects were not built (AYA_BUILD_SKIP=1)");
            return;
        }
        let mut names = vec!["stack_set_state", "stack_send_enter"];
        for layer in Layer::ALL {
            for &kind in layer.kinds() {
                for slot in 0..layer.max_hooks() {
                    names.push(program_name(layer, kind, slot));
                }
            }
        }
        for n in names {
            assert!(has_symbol(object::STACKLAT, n), "stacklat has no {n}");
            assert!(has_symbol(object::STACKFLOOR, n), "stackfloor has no {n}");
        }
    }
}
