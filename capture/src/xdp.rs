//! Loads xdprobe's XDP program, sets its filters, attaches it to the
//! capture interface and reads its counters.
//!
//! The object is built by this crate's `build.rs` (aya_build) and embedded
//! here.
//! Filters are data, not code: VLANs, prefixes and ports go into maps, the
//! switches into a read-only global, so a new filter never means a rebuild.

use std::{
    net::IpAddr,
    os::fd::{AsRawFd, RawFd},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap, LpmTrie, MapData, MapError, PerCpuArray, XskMap, lpm_trie::Key},
    programs::{ProgramError, Xdp, XdpMode, xdp::XdpLinkId},
};
use xdprobe_common::{
    SETTING_FILTER_PORT, SETTING_FILTER_PREFIX, SETTING_FILTER_VLAN, SETTING_HOST_MODE,
    XdpCounters, XdpSettings, names,
};

/// The XDP object, compiled for `bpfel-unknown-none` by `build.rs`.
static XDP_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp-prog"));

#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error("the XDP object is empty: this binary was built with AYA_BUILD_SKIP=1")]
    NotBuilt,
    #[error("loading the XDP object")]
    Load(#[source] aya::EbpfError),
    #[error("the XDP object has no {0}")]
    Missing(&'static str),
    #[error("map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: MapError,
    },
    #[error("XDP program")]
    Program(#[source] ProgramError),
    #[error("attaching XDP to {iface} ({mode:?} mode)")]
    Attach {
        iface: String,
        mode: AttachMode,
        #[source]
        source: ProgramError,
    },
    #[error("prefix {addr}/{len}: length exceeds the address size")]
    BadPrefix { addr: IpAddr, len: u8 },
}

/// How the program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AttachMode {
    /// Native (driver) mode, falling back to generic mode with a warning.
    #[default]
    Auto,
    /// Native mode only: fail if the driver has no XDP support.
    Native,
    /// Generic (skb) mode: works on any device, slower.
    Generic,
}

/// What the program lets through to the sockets. Empty lists mean "no
/// filter on this field"; a non-empty list captures only frames matching it
/// (source or destination for prefixes and ports).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XdpFilter {
    /// Outermost VLAN IDs; 0 stands for untagged frames.
    pub vlans: Vec<u16>,
    /// (network address, prefix length).
    pub prefixes: Vec<(IpAddr, u8)>,
    pub ports: Vec<u16>,
}

#[derive(Clone, Debug, Default)]
pub struct XdpOptions {
    pub iface: String,
    pub mode: AttachMode,
    /// Host mode: frames not captured go to the host stack. Otherwise
    /// (appliance mode, mirror port) they are dropped.
    pub host_mode: bool,
    pub filter: XdpFilter,
}

/// A loaded and attached XDP program. Dropping it detaches the program
/// (the attachment is a bpf_link owned by this process, so it also goes
/// away if the process dies).
pub struct XdpProgram {
    ebpf: Ebpf,
    link: Option<XdpLinkId>,
    xsks: XskMap<MapData>,
    counters: PerCpuArray<MapData, XdpCounters>,
    iface: String,
    mode: AttachMode,
    /// The mode the program is attached in (`None`: not attached).
    pub attached: Option<XdpMode>,
}

impl XdpProgram {
    /// Loads the program into the kernel and fills the filter maps,
    /// without attaching it: the daemon registers its sockets first, so no
    /// frame meets an empty socket map.
    pub fn load(opts: &XdpOptions) -> Result<Self, XdpError> {
        if XDP_OBJECT.is_empty() {
            return Err(XdpError::NotBuilt);
        }
        let settings = settings_for(opts);
        let mut ebpf = EbpfLoader::new()
            .override_global(names::SETTINGS, &settings, true)
            .load(XDP_OBJECT)
            .map_err(XdpError::Load)?;
        fill_filters(&mut ebpf, &opts.filter)?;

        let xsks = take_map(&mut ebpf, names::XSKS)?;
        let xsks = XskMap::try_from(xsks).map_err(map_err(names::XSKS))?;
        let counters = take_map(&mut ebpf, names::COUNTERS)?;
        let counters = PerCpuArray::try_from(counters).map_err(map_err(names::COUNTERS))?;
        program(&mut ebpf)?.load().map_err(XdpError::Program)?;
        Ok(Self {
            ebpf,
            link: None,
            xsks,
            counters,
            iface: opts.iface.clone(),
            mode: opts.mode,
            attached: None,
        })
    }

    /// Attaches the loaded program to the interface (native mode, or as
    /// `XdpOptions::mode` says). No-op when already attached.
    pub fn attach(&mut self) -> Result<XdpMode, XdpError> {
        if let Some(m) = self.attached {
            return Ok(m);
        }
        let prog = program(&mut self.ebpf)?;
        let (link, mode) = attach_with_fallback(prog, &self.iface, self.mode)?;
        self.link = Some(link);
        self.attached = Some(mode);
        tracing::info!(iface = %self.iface, mode = ?mode, "XDP program attached");
        Ok(mode)
    }

    /// [`load`](Self::load) then [`attach`](Self::attach).
    pub fn load_and_attach(opts: &XdpOptions) -> Result<Self, XdpError> {
        let mut p = Self::load(opts)?;
        p.attach()?;
        Ok(p)
    }

    /// Puts an AF_XDP socket into the socket map for `queue`: from now on
    /// frames arriving on that RX queue go to it.
    pub fn register_socket(&mut self, queue: u32, fd: RawFd) -> Result<(), XdpError> {
        self.xsks
            .set(queue, RawFdRef(fd), 0)
            .map_err(map_err(names::XSKS))
    }

    /// Removes the socket of `queue` (its frames are then counted as
    /// `redirect_failed` and dropped or passed).
    pub fn unregister_socket(&mut self, queue: u32) -> Result<(), XdpError> {
        self.xsks.unset(queue).map_err(map_err(names::XSKS))
    }

    /// The program's counters, summed over all CPUs.
    pub fn counters(&self) -> Result<XdpCounters, XdpError> {
        let per_cpu = self.counters.get(&0, 0).map_err(map_err(names::COUNTERS))?;
        Ok(per_cpu
            .iter()
            .fold(XdpCounters::default(), |acc, c| acc.add(*c)))
    }

    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Detaches the program now (also done on drop). Idempotent.
    pub fn detach(&mut self) -> Result<(), XdpError> {
        let Some(link) = self.link.take() else {
            return Ok(());
        };
        self.attached = None;
        program(&mut self.ebpf)?
            .detach(link)
            .map_err(XdpError::Program)?;
        tracing::info!(iface = %self.iface, "XDP program detached");
        Ok(())
    }
}

impl Drop for XdpProgram {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            tracing::warn!(iface = %self.iface, error = %e, "detaching XDP failed");
        }
    }
}

/// `XskMap::set` wants an `AsRawFd`; the socket itself is owned elsewhere.
struct RawFdRef(RawFd);

impl AsRawFd for RawFdRef {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

fn settings_for(opts: &XdpOptions) -> XdpSettings {
    let f = &opts.filter;
    let mut flags = 0;
    if opts.host_mode {
        flags |= SETTING_HOST_MODE;
    }
    if !f.vlans.is_empty() {
        flags |= SETTING_FILTER_VLAN;
    }
    if !f.prefixes.is_empty() {
        flags |= SETTING_FILTER_PREFIX;
    }
    if !f.ports.is_empty() {
        flags |= SETTING_FILTER_PORT;
    }
    XdpSettings { flags, _pad: 0 }
}

fn program(ebpf: &mut Ebpf) -> Result<&mut Xdp, XdpError> {
    ebpf.program_mut(names::PROGRAM)
        .ok_or(XdpError::Missing(names::PROGRAM))?
        .try_into()
        .map_err(XdpError::Program)
}

fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, XdpError> {
    ebpf.take_map(name).ok_or(XdpError::Missing(name))
}

fn map_err(name: &'static str) -> impl Fn(MapError) -> XdpError {
    move |source| XdpError::Map { name, source }
}

fn fill_filters(ebpf: &mut Ebpf, f: &XdpFilter) -> Result<(), XdpError> {
    if !f.vlans.is_empty() {
        let map = ebpf
            .map_mut(names::VLANS)
            .ok_or(XdpError::Missing(names::VLANS))?;
        let mut map: HashMap<_, u16, u8> = HashMap::try_from(map).map_err(map_err(names::VLANS))?;
        for &v in &f.vlans {
            map.insert(v, 1, 0).map_err(map_err(names::VLANS))?;
        }
    }
    if !f.ports.is_empty() {
        let map = ebpf
            .map_mut(names::PORTS)
            .ok_or(XdpError::Missing(names::PORTS))?;
        let mut map: HashMap<_, u16, u8> = HashMap::try_from(map).map_err(map_err(names::PORTS))?;
        for &p in &f.ports {
            map.insert(p, 1, 0).map_err(map_err(names::PORTS))?;
        }
    }
    for &(addr, len) in &f.prefixes {
        match addr {
            IpAddr::V4(a) => {
                if len > 32 {
                    return Err(XdpError::BadPrefix { addr, len });
                }
                let map = ebpf
                    .map_mut(names::PREFIXES_V4)
                    .ok_or(XdpError::Missing(names::PREFIXES_V4))?;
                let mut map: LpmTrie<_, [u8; 4], u8> =
                    LpmTrie::try_from(map).map_err(map_err(names::PREFIXES_V4))?;
                map.insert(&Key::new(u32::from(len), a.octets()), 1, 0)
                    .map_err(map_err(names::PREFIXES_V4))?;
            }
            IpAddr::V6(a) => {
                if len > 128 {
                    return Err(XdpError::BadPrefix { addr, len });
                }
                let map = ebpf
                    .map_mut(names::PREFIXES_V6)
                    .ok_or(XdpError::Missing(names::PREFIXES_V6))?;
                let mut map: LpmTrie<_, [u8; 16], u8> =
                    LpmTrie::try_from(map).map_err(map_err(names::PREFIXES_V6))?;
                map.insert(&Key::new(u32::from(len), a.octets()), 1, 0)
                    .map_err(map_err(names::PREFIXES_V6))?;
            }
        }
    }
    Ok(())
}

fn attach_with_fallback(
    prog: &mut Xdp,
    iface: &str,
    mode: AttachMode,
) -> Result<(XdpLinkId, XdpMode), XdpError> {
    let err = |mode, source| XdpError::Attach {
        iface: iface.to_owned(),
        mode,
        source,
    };
    match mode {
        AttachMode::Native => prog
            .attach(iface, XdpMode::Driver)
            .map(|l| (l, XdpMode::Driver))
            .map_err(|e| err(mode, e)),
        AttachMode::Generic => prog
            .attach(iface, XdpMode::Skb)
            .map(|l| (l, XdpMode::Skb))
            .map_err(|e| err(mode, e)),
        AttachMode::Auto => match prog.attach(iface, XdpMode::Driver) {
            Ok(l) => Ok((l, XdpMode::Driver)),
            Err(e) => {
                tracing::warn!(
                    iface,
                    error = %e,
                    "native XDP attach failed; falling back to generic (skb) mode, expect lower rates"
                );
                prog.attach(iface, XdpMode::Skb)
                    .map(|l| (l, XdpMode::Skb))
                    .map_err(|e| err(mode, e))
            }
        },
    }
}
