//! Types shared by the clock-sync XDP responder (`host-prog`, bin
//! `clocksync`) and user space (the agent that loads it, the manager that
//! sends the probes).
//!
//! A timing probe is one UDP datagram whose payload is [`PROBE_LEN`] bytes
//! laid out as the `PROBE_*` offsets say, every field big-endian (network
//! order). The manager fills `t1` (its own send time; the responder never
//! reads it) and leaves the rest zero; the responder stamps `t2` when the
//! frame enters XDP and `t3` just before it hands the frame back
//! (`XDP_TX`), sets [`PROBE_FLAG_ANSWERED`] and swaps the addresses. A
//! frame that already carries the flag is never answered again, so two
//! responders facing each other cannot ping-pong a probe forever.

/// Names of the program, maps and globals in the clock-sync object.
pub mod names {
    /// The XDP program's function name.
    pub const PROGRAM: &str = "xdprobe_clocksync";
    /// Read-only global [`super::SyncSettings`].
    pub const SETTINGS: &str = "SYNC_SETTINGS";
    /// `PerCpuArray<SyncCounters>`, one entry.
    pub const COUNTERS: &str = "SYNC_COUNTERS";
}

/// `"xdcs"`: marks a timing probe.
pub const PROBE_MAGIC: u32 = 0x7864_6373;
/// Wire format version in [`PROBE_VERSION`]'s slot.
pub const PROBE_VERSION_1: u16 = 1;
/// Bytes of a probe's UDP payload.
pub const PROBE_LEN: usize = 40;
/// u32 [`PROBE_MAGIC`].
pub const PROBE_MAGIC_OFF: usize = 0;
/// u16 version.
pub const PROBE_VERSION: usize = 4;
/// u16 flags (`PROBE_FLAG_*`).
pub const PROBE_FLAGS: usize = 6;
/// u32 sequence number, chosen by the manager.
pub const PROBE_SEQ: usize = 8;
/// u32 the manager's session (tells its probes from a restarted manager's).
pub const PROBE_SESSION: usize = 12;
/// u64 ns: the manager's send time, its own clock.
pub const PROBE_T1: usize = 16;
/// u64 ns: the responder's receive time (`CLOCK_MONOTONIC` + test offset).
pub const PROBE_T2: usize = 24;
/// u64 ns: the responder's transmit time.
pub const PROBE_T3: usize = 32;
/// Set by the responder on the reply.
pub const PROBE_FLAG_ANSWERED: u16 = 1 << 0;

/// `SyncSettings::flags`: answer only IPv4 probes from `allow_v4`.
pub const SYNC_ALLOW_V4: u32 = 1 << 0;
/// Answer only IPv6 probes from `allow_v6`.
pub const SYNC_ALLOW_V6: u32 = 1 << 1;
/// Answer IPv4 probes at all.
pub const SYNC_V4: u32 = 1 << 2;
/// Answer IPv6 probes at all.
pub const SYNC_V6: u32 = 1 << 3;

/// Read-only settings of the responder, written by the loader.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncSettings {
    /// Added to both stamps: only the test suite sets it (namespaces share
    /// one kernel clock, so skew must be simulated). The production config
    /// has no key for it.
    pub offset_ns: i64,
    /// `SYNC_*` bits.
    pub flags: u32,
    /// UDP destination port of the probes, host order.
    pub port: u16,
    pub _pad: u16,
    /// The only source address answered when `SYNC_ALLOW_V4` is set.
    pub allow_v4: [u8; 4],
    pub _pad2: u32,
    /// The only source address answered when `SYNC_ALLOW_V6` is set.
    pub allow_v6: [u8; 16],
}

impl SyncSettings {
    pub const ZERO: SyncSettings = SyncSettings {
        offset_ns: 0,
        flags: 0,
        port: 0,
        _pad: 0,
        allow_v4: [0; 4],
        _pad2: 0,
        allow_v6: [0; 16],
    };
}

/// Per-CPU counters of the responder; user space sums them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncCounters {
    /// Frames the program ran on.
    pub seen: u64,
    /// Probes stamped and sent back.
    pub answered: u64,
    /// UDP to the probe port that is not a well-formed, unanswered probe
    /// (too short, wrong magic or version, already answered): passed on.
    pub malformed: u64,
    /// Probes from a source that is not allowed: passed on.
    pub refused: u64,
}

impl SyncCounters {
    pub const fn add(self, o: SyncCounters) -> SyncCounters {
        SyncCounters {
            seen: self.seen.wrapping_add(o.seen),
            answered: self.answered.wrapping_add(o.answered),
            malformed: self.malformed.wrapping_add(o.malformed),
            refused: self.refused.wrapping_add(o.refused),
        }
    }
}

const _: () = assert!(core::mem::size_of::<SyncSettings>() == 8 + 4 + 4 + 8 + 16);
const _: () = assert!(core::mem::size_of::<SyncCounters>() == 4 * 8);
const _: () = assert!(PROBE_T3 + 8 == PROBE_LEN);
