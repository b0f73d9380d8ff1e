//! What the running kernel offers the host tools, found out before
//! anything is attached: its BTF (struct layouts, tracepoint prototypes),
//! its tracepoints (tracefs), its function symbols (kallsyms) and which
//! program kinds it accepts.

pub mod agents;
pub mod btf;
pub mod kallsyms;
pub mod offsets;
pub mod progstats;
pub mod tracefs;

use std::path::Path;

pub use btf::Btf;
pub use tracefs::Tracefs;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(transparent)]
    Btf(#[from] btf::BtfError),
    #[error(transparent)]
    Tracefs(#[from] tracefs::TracefsError),
    #[error(
        "this kernel publishes no BTF ({}): the host probes take struct layouts from it (CONFIG_DEBUG_INFO_BTF)",
        btf::VMLINUX
    )]
    NoBtf,
}

/// The kernel, as far as the host tools care.
pub struct Kernel {
    pub btf: Btf,
    pub tracefs: Tracefs,
    /// aya's parse of the same BTF, which `tp_btf` loading needs.
    pub aya_btf: aya::Btf,
}

impl Kernel {
    pub fn open() -> Result<Kernel, KernelError> {
        if !Path::new(btf::VMLINUX).exists() {
            return Err(KernelError::NoBtf);
        }
        let btf = Btf::from_file(btf::VMLINUX)?;
        let tracefs = Tracefs::open()?;
        let aya_btf = aya::Btf::from_sys_fs().map_err(|_| KernelError::NoBtf)?;
        Ok(Kernel {
            btf,
            tracefs,
            aya_btf,
        })
    }

    /// Whether kprobes can be created (the perf `kprobe` event source, or
    /// the legacy tracefs interface).
    pub fn has_kprobes(&self) -> bool {
        Path::new("/sys/bus/event_source/devices/kprobe/type").exists()
            || self.tracefs.root().join("kprobe_events").exists()
    }
}
