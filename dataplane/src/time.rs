//! Capture timestamps.

use std::fmt;

/// A packet's capture time: nanoseconds since the Unix epoch.
///
/// Kept in nanoseconds because pcapng and the XDP clock both give them; the
/// records round to microseconds only at output, so a difference of two
/// timestamps is exact before it is rounded once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub const ZERO: Timestamp = Timestamp(0);

    pub const fn from_nanos(ns: u64) -> Self {
        Timestamp(ns)
    }

    pub const fn from_micros(us: u64) -> Self {
        Timestamp(us.saturating_mul(1_000))
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Unix microseconds, rounded to nearest.
    pub const fn as_micros(self) -> u64 {
        (self.0 + 500) / 1_000
    }

    /// `self - earlier` in nanoseconds, 0 if `earlier` is later (capture
    /// clocks can step back; a passive probe must not panic on that).
    pub const fn nanos_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    pub const fn saturating_add_nanos(self, ns: u64) -> Self {
        Timestamp(self.0.saturating_add(ns))
    }
}

/// Nanoseconds → microseconds, rounded to nearest (the unit of every exported
/// duration).
pub const fn ns_to_us(ns: u64) -> u64 {
    (ns + 500) / 1_000
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}
