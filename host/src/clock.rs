//! The host side's two clocks: `CLOCK_MONOTONIC`, which the eBPF programs
//! stamp events with (`bpf_ktime_get_ns`), and the offset that turns those
//! stamps into Unix time for reports. Used by the stack agent, the packet
//! path tracer, the clock-sync prober and the manager alike.

/// `CLOCK_MONOTONIC` now, in ns: the clock `bpf_ktime_get_ns` reads.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Converts monotonic event times to Unix time: the offset between
/// `CLOCK_REALTIME` and `CLOCK_MONOTONIC`, taken once at start (it only
/// changes when the wall clock is stepped).
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    offset_ns: i128,
}

impl WallClock {
    pub fn now() -> WallClock {
        let mono = clock_ns(libc::CLOCK_MONOTONIC);
        let real = clock_ns(libc::CLOCK_REALTIME);
        WallClock {
            offset_ns: i128::from(real) - i128::from(mono),
        }
    }

    /// Unix microseconds of a monotonic ns time.
    pub fn unix_us(&self, mono_ns: u64) -> u64 {
        ((i128::from(mono_ns) + self.offset_ns).max(0) / 1000) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_maps_now_to_now() {
        let wall = WallClock::now();
        let unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let ours = wall.unix_us(monotonic_ns());
        assert!(ours.abs_diff(unix_us) < 1_000_000, "{ours} vs {unix_us}");
    }
}
