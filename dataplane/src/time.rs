//! Capture timestamps.
//!
//! Every capture time lies in `[Timestamp::ZERO, Timestamp::MAX]` (1970 to
//! 2262, the range of signed 64-bit nanoseconds that most time libraries
//! share). A source that meets a time it cannot place there (a pcapng
//! timestamp beyond 2262 or before 1970 through `if_tsoffset`, a classic
//! pcap fraction of a second or more) hands out [`Timestamp::OUT_OF_RANGE`],
//! and the worker drops such a packet as `timestamp_out_of_range`
//! (counted, like every other drop). So every duration the flow and metric
//! code computes is at most `MAX`, and conversions below saturate rather than
//! wrap even for values outside that range.

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
    /// The latest capture time accepted: `i64::MAX` ns, 2262-04-11
    /// 23:47:16.854775807 UTC.
    pub const MAX: Timestamp = Timestamp(i64::MAX as u64);
    /// What a source hands out for a time it cannot represent; above
    /// [`MAX`](Self::MAX), so the worker drops the packet.
    pub const OUT_OF_RANGE: Timestamp = Timestamp(u64::MAX);

    pub const fn from_nanos(ns: u64) -> Self {
        Timestamp(ns)
    }

    pub const fn from_micros(us: u64) -> Self {
        Timestamp(us.saturating_mul(1_000))
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Unix microseconds, rounded to nearest (never overflows).
    pub const fn as_micros(self) -> u64 {
        ns_to_us(self.0)
    }

    /// Within `[ZERO, MAX]`: a time the flow code accepts.
    pub const fn in_range(self) -> bool {
        self.0 <= Self::MAX.0
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
/// duration). Written without `ns + 500`, which overflows for the last 500
/// nanoseconds of the `u64` range.
pub const fn ns_to_us(ns: u64) -> u64 {
    ns / 1_000 + (ns % 1_000 >= 500) as u64
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_saturate_at_the_top_of_the_range() {
        assert_eq!(ns_to_us(0), 0);
        assert_eq!(ns_to_us(499), 0);
        assert_eq!(ns_to_us(500), 1);
        assert_eq!(ns_to_us(1_499), 1);
        assert_eq!(ns_to_us(u64::MAX), u64::MAX / 1_000 + 1);
        assert_eq!(ns_to_us(u64::MAX - 115), u64::MAX / 1_000 + 1);
        assert_eq!(ns_to_us(u64::MAX - 116), u64::MAX / 1_000);
        assert_eq!(Timestamp(u64::MAX).as_micros(), 18_446_744_073_709_552);
        assert_eq!(Timestamp::MAX.as_micros(), 9_223_372_036_854_776);
        assert!(Timestamp::MAX.in_range());
        assert!(!Timestamp::OUT_OF_RANGE.in_range());
        assert!(!Timestamp(Timestamp::MAX.0 + 1).in_range());
        assert_eq!(
            Timestamp::MAX.saturating_add_nanos(u64::MAX),
            Timestamp(u64::MAX)
        );
        assert_eq!(Timestamp::ZERO.nanos_since(Timestamp::MAX), 0);
    }
}
