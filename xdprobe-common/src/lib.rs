#![no_std]
//! Types shared by the XDP program (`xdp-prog`, built for `bpfel-unknown-none`)
//! and user space (`xdprobe run`).
//!
//! Every struct is `#[repr(C)]` with its padding spelled out as named fields,
//! so the kernel-side and user-side layouts cannot drift apart silently and
//! no uninitialised byte ever crosses a map (pping's `pping.h` does the same).
//! The `user` feature adds `aya::Pod` impls; the eBPF build leaves it off.
//!
//! [`headers`] is the header policy (encapsulations walked and their
//! depth limits) that the XDP program and the parser share; [`host`] holds
//! the types of the host-side tracing programs, [`trace`] those of the
//! kernel packet path tracer, [`sync`] those of the clock-sync responder.

pub mod headers;
pub mod host;
pub mod sync;
pub mod trace;

/// Names of the maps and globals in the XDP object. Both sides use these
/// constants so a rename is a compile error, not a runtime "map not found".
pub mod names {
    /// The XDP program's function name.
    pub const PROGRAM: &str = "xdprobe_xdp";
    /// `XskMap`: RX queue index → AF_XDP socket.
    pub const XSKS: &str = "XSKS";
    /// `PerCpuArray<XdpCounters>` with one entry.
    pub const COUNTERS: &str = "COUNTERS";
    /// `HashMap<u16, u8>`: VLAN IDs to capture (host byte order).
    pub const VLANS: &str = "VLAN_FILTER";
    /// `LpmTrie<[u8; 4], u8>`: IPv4 prefixes to capture.
    pub const PREFIXES_V4: &str = "PREFIX4_FILTER";
    /// `LpmTrie<[u8; 16], u8>`: IPv6 prefixes to capture.
    pub const PREFIXES_V6: &str = "PREFIX6_FILTER";
    /// `HashMap<u16, u8>`: L4 ports to capture (host byte order).
    pub const PORTS: &str = "PORT_FILTER";
    /// Read-only global `XdpSettings`, set by the loader before load.
    pub const SETTINGS: &str = "SETTINGS";
}

/// Capacity of the filter maps (entries each).
pub const FILTER_MAX_ENTRIES: u32 = 1024;
/// Capacity of the socket map: the highest RX queue index the probe can
/// serve, plus one.
pub const MAX_QUEUES: u32 = 64;

/// `XdpSettings::flags`: not redirected frames go to the host stack
/// (`XDP_PASS`) instead of being dropped. Off for a mirror port (appliance
/// mode), where the host stack has no business with the mirrored traffic.
pub const SETTING_HOST_MODE: u32 = 1 << 0;
/// Only frames whose VLAN ID (outermost tag; 0 when untagged) is in
/// `VLAN_FILTER` are captured.
pub const SETTING_FILTER_VLAN: u32 = 1 << 1;
/// Only frames whose source or destination address lies in a prefix of
/// `PREFIX4_FILTER`/`PREFIX6_FILTER` are captured.
pub const SETTING_FILTER_PREFIX: u32 = 1 << 2;
/// Only TCP/UDP/SCTP frames whose source or destination port is in
/// `PORT_FILTER` are captured.
pub const SETTING_FILTER_PORT: u32 = 1 << 3;

/// Read-only settings of the XDP program, written into its `.rodata` by the
/// loader (`EbpfLoader::override_global`), so the verifier sees them as
/// constants and prunes the branches of disabled filters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpSettings {
    /// `SETTING_*` bits.
    pub flags: u32,
    /// Explicit padding: keeps the struct free of uninitialised bytes.
    pub _pad: u32,
}

/// Per-CPU packet counters of the XDP program (one `PerCpuArray` entry).
/// User space sums the CPUs when it reads them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpCounters {
    /// Every frame the program ran on.
    pub seen: u64,
    /// Frames handed to `bpf_redirect_map` on the socket map successfully
    /// (the kernel may still drop them later when the socket's RX ring is
    /// full: that shows in the socket's `rx_ring_full`).
    pub redirected: u64,
    /// Frames rejected by a configured filter.
    pub filtered: u64,
    /// Frames that are not IPv4/IPv6 (ARP, LLDP, PPPoE discovery, PPP
    /// control, …): never captured. Exactly what the parser would count as
    /// `not_ip`.
    pub non_ip: u64,
    /// Frames for a queue with no socket in the socket map.
    pub redirect_failed: u64,
    /// Frames whose timestamp could not be written in front of them
    /// (no metadata room); they are still redirected, and user space stamps
    /// them at read time.
    pub meta_failed: u64,
    /// Frames the program could not classify and passed on to user space
    /// for the parser to decide (an MPLS payload that is not IP directly,
    /// such as an Ethernet pseudowire; a header cut short; a limit of
    /// [`headers`] exceeded, which the parser then counts by name). Also
    /// counted in `redirected` or `redirect_failed`; with an address or
    /// port filter on they are `filtered` instead, since the filter cannot
    /// be evaluated.
    pub unclassified: u64,
}

impl XdpCounters {
    /// Field-wise sum, for adding up the per-CPU values.
    pub const fn add(self, o: XdpCounters) -> XdpCounters {
        XdpCounters {
            seen: self.seen.wrapping_add(o.seen),
            redirected: self.redirected.wrapping_add(o.redirected),
            filtered: self.filtered.wrapping_add(o.filtered),
            non_ip: self.non_ip.wrapping_add(o.non_ip),
            redirect_failed: self.redirect_failed.wrapping_add(o.redirect_failed),
            meta_failed: self.meta_failed.wrapping_add(o.meta_failed),
            unclassified: self.unclassified.wrapping_add(o.unclassified),
        }
    }
}

/// `XdpMeta::magic`: marks a metadata area written by this program, so user
/// space never mistakes stale bytes in front of a frame for a timestamp.
pub const META_MAGIC: u32 = 0x7864_7062; // "xdpb"

/// Written by the XDP program into the metadata area directly in front of
/// each redirected frame (`bpf_xdp_adjust_meta`); AF_XDP copies it along, so
/// user space finds it at `frame_addr - size_of::<XdpMeta>()`.
///
/// The timestamp is taken when the frame enters XDP, not when user space
/// happens to read its batch: RTTs measured from it do not include the
/// probe's own scheduling delay.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpMeta {
    /// `bpf_ktime_get_tai_ns()`: CLOCK_TAI in nanoseconds. User space subtracts
    /// the TAI−UTC offset (`clock_gettime(CLOCK_TAI) − CLOCK_REALTIME`) to get
    /// Unix time; TAI follows NTP steps and slews like CLOCK_REALTIME, so the
    /// offset only changes at a leap second.
    pub tai_ns: u64,
    /// `META_MAGIC`.
    pub magic: u32,
    /// Explicit padding; keeps the size a multiple of 8 (the kernel wants a
    /// multiple of 4 and at most 32 bytes).
    pub _pad: u32,
}

/// Size of `XdpMeta` in bytes as the XDP program reserves it.
pub const META_LEN: usize = core::mem::size_of::<XdpMeta>();

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), only integer fields, no implicit padding (checked by
    // the size assertions below): every bit pattern is a valid value.
    unsafe impl aya::Pod for super::XdpCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::XdpSettings {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::XdpMeta {}
    // SAFETY: as above (host-side types, sizes asserted in `host`).
    unsafe impl aya::Pod for super::host::StackSettings {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::host::StackCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::host::StackEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::host::SendSlot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::host::SockId {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::host::ConnSettings {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::host::ConnStart {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::host::ConnEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::host::ConnCounters {}
    // SAFETY: as above (sizes asserted in `sync`).
    unsafe impl aya::Pod for super::sync::SyncSettings {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::sync::SyncCounters {}
}

const _: () = assert!(core::mem::size_of::<XdpCounters>() == 7 * 8);
const _: () = assert!(core::mem::size_of::<XdpSettings>() == 8);
const _: () = assert!(META_LEN == 16);
