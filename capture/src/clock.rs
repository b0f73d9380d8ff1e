//! Converts the XDP program's timestamps (CLOCK_TAI, `bpf_ktime_get_tai_ns`)
//! to Unix time.
//!
//! Why TAI and not CLOCK_MONOTONIC (`bpf_ktime_get_ns`): the kernel keeps
//! CLOCK_TAI = CLOCK_REALTIME + tai_offset, so NTP steps and slews of the
//! wall clock reach the XDP timestamps at once, and the only offset user
//! space must know, tai_offset, is a whole number of seconds that changes
//! at a leap second at most. A monotonic-clock offset would have to be
//! re-sampled continually and would jump whenever NTP stepped the clock.
//! The offset is still re-read on every worker tick (cheap: two vDSO
//! reads), so a leap-second change is picked up within a tick.

use xdprobe_dataplane::Timestamp;

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; both clocks exist on every
    // kernel this program loads on (>= 6.1 for the XDP TAI helper).
    unsafe { libc::clock_gettime(clock, &mut ts) };
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// Unix time now.
pub fn unix_now() -> Timestamp {
    Timestamp::from_nanos(now_ns(libc::CLOCK_REALTIME))
}

/// TAI → Unix conversion with a periodically refreshed offset.
#[derive(Clone, Copy, Debug)]
pub struct TaiClock {
    /// CLOCK_TAI − CLOCK_REALTIME in ns, rounded to whole seconds (the
    /// kernel's tai_offset is an integer number of seconds; rounding
    /// removes the few ns between the two reads).
    offset_ns: u64,
}

impl TaiClock {
    pub fn new() -> Self {
        let mut c = TaiClock { offset_ns: 0 };
        c.refresh();
        c
    }

    /// Re-reads the TAI offset (call off the per-packet path).
    pub fn refresh(&mut self) {
        let real = now_ns(libc::CLOCK_REALTIME);
        let tai = now_ns(libc::CLOCK_TAI);
        let diff = tai.saturating_sub(real);
        self.offset_ns = (diff + 500_000_000) / 1_000_000_000 * 1_000_000_000;
    }

    pub fn offset_ns(&self) -> u64 {
        self.offset_ns
    }

    /// A TAI timestamp from XDP as Unix time.
    #[inline]
    pub fn to_unix(&self, tai_ns: u64) -> Timestamp {
        Timestamp::from_nanos(tai_ns.saturating_sub(self.offset_ns))
    }
}

impl Default for TaiClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tai_now_converts_to_realtime_now() {
        let c = TaiClock::new();
        let before = unix_now().as_nanos();
        let conv = c.to_unix(now_ns(libc::CLOCK_TAI)).as_nanos();
        let after = unix_now().as_nanos();
        assert!(before <= conv && conv <= after, "{before} {conv} {after}");
        assert_eq!(c.offset_ns() % 1_000_000_000, 0);
    }
}
