//! The layer programs' links: how each was attached (to attach it again
//! when a sampling window opens), and closing the slow ones off the
//! agent's thread.

use aya::{
    Ebpf,
    programs::{
        BtfTracePoint, FEntry, KProbe, ProgramError, RawTracePoint, TracePoint, fentry::FEntryLink,
        kprobe::KProbeLink, raw_trace_point::RawTracePointLink, tp_btf::BtfTracePointLink,
        trace_point::TracePointLink,
    },
};

use crate::hooks::{Hook, Kind, Layer};
use crate::kernel::Kernel;
use crate::stack::hookset::program_name;
use crate::stack::probe::ProbeError;

/// How a layer program was attached: enough to attach it again after a
/// sampling window closed (the program stays loaded in between).
#[derive(Clone, Debug)]
pub(crate) enum How {
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
pub(crate) enum Link {
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
    pub(crate) fn slow_to_close(&self) -> bool {
        matches!(self, Link::Tp(_) | Link::Kp(_))
    }
}

/// Closes perf-event links on a thread of its own, all of a batch at
/// once (their grace periods overlap), so a closing window does not stop
/// the agent for a third of a second. The program stops running as the
/// close starts; only the kernel's wait before freeing is left here.
pub(crate) struct Closer {
    tx: Option<std::sync::mpsc::Sender<Vec<Link>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Closer {
    pub(crate) fn new() -> Closer {
        Closer {
            tx: None,
            thread: None,
        }
    }

    pub(crate) fn close(&mut self, links: Vec<Link>) {
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
pub(crate) struct Attachment {
    pub(crate) name: &'static str,
    pub(crate) how: How,
    /// The send path's entry (`sys_enter_*`): the first hook a byte
    /// passes. A window closes it first and the rest once the bytes it
    /// let in have passed them.
    pub(crate) entry: bool,
    /// `None` while detached.
    pub(crate) link: Option<Link>,
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
    pub(crate) fn detach(&mut self) -> Option<Link> {
        self.link.take()
    }

    pub(crate) fn attach(&mut self, ebpf: &mut Ebpf) -> Result<(), ProbeError> {
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

pub(crate) fn tracepoint<'a>(
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

pub(crate) fn attach_tracepoint(
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
pub(crate) fn attach_btf(
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
pub(crate) fn attach_function(
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
pub(crate) fn attach_tcp_tx(
    ebpf: &mut Ebpf,
    kernel: &Kernel,
    hook: &Hook,
) -> Result<Attachment, ProbeError> {
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
