//! Server response time bookkeeping shared by TCP, TLS and DNS
//! (`docs/spec/npm-metrics.md` §2): the request/response turn and the per-interval
//! statistics a record exports.

use crate::record::Npm;
use crate::time::ns_to_us;

/// One request/response turn (TCP/TLS): the request is the *latest* client
/// data packet before the *first* server data packet that follows it
/// (§2 TCP step 2). Server data with no request pending (a banner, or a
/// response captured before its request) measures nothing.
///
/// 8 bytes: no request pending is `NONE`, a time no capture has (they end
/// at `i64::MAX` ns, `time.rs`), instead of a flag that would pad it to 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    req_ts: u64,
}

const NONE: u64 = u64::MAX;

impl Default for Turn {
    fn default() -> Self {
        Turn { req_ts: NONE }
    }
}

impl Turn {
    /// A client packet carrying request data.
    #[inline]
    pub fn request(&mut self, ts_ns: u64) {
        debug_assert!(ts_ns != NONE);
        self.req_ts = ts_ns;
    }

    /// A request is waiting for its response.
    #[inline]
    pub fn pending(&self) -> bool {
        self.req_ts != NONE
    }

    /// A server packet carrying response data: `Δt_rr` in ns if it answers
    /// a pending request (0 if its timestamp precedes the request's).
    #[inline]
    pub fn response(&mut self, ts_ns: u64) -> Option<u64> {
        if self.req_ts == NONE {
            return None;
        }
        let req = std::mem::replace(&mut self.req_ts, NONE);
        Some(ts_ns.saturating_sub(req))
    }
}

/// SRT values of one reporting interval (24 bytes). Each value is rounded
/// to µs exactly once, when it is added; the mean is the ns sum divided and
/// rounded once at export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrtStats {
    sum_ns: u64,
    count: u32,
    first_us: u32,
    min_us: u32,
    max_us: u32,
}

#[inline]
fn us_u32(ns: u64) -> u32 {
    u32::try_from(ns_to_us(ns)).unwrap_or(u32::MAX)
}

impl SrtStats {
    /// Adds one measured SRT (ns, already corrected per the flow's rules).
    #[inline]
    pub fn add(&mut self, srt_ns: u64) {
        let us = us_u32(srt_ns);
        if self.count == 0 {
            self.first_us = us;
            self.min_us = us;
            self.max_us = us;
        } else {
            self.min_us = self.min_us.min(us);
            self.max_us = self.max_us.max(us);
        }
        self.count = self.count.saturating_add(1);
        self.sum_ns = self.sum_ns.saturating_add(srt_ns);
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// Writes `srt_*`: `srt_us` is the interval's first pair (0 when none,
    /// §2 "no measurement ⇒ 0"); min/mean/max are absent when count is 0.
    pub fn fill(&self, npm: &mut Npm) {
        npm.srt_count = self.count;
        if self.count == 0 {
            npm.srt_us = Some(0);
            npm.srt_min_us = None;
            npm.srt_mean_us = None;
            npm.srt_max_us = None;
        } else {
            npm.srt_us = Some(self.first_us);
            npm.srt_min_us = Some(self.min_us);
            npm.srt_mean_us = Some(us_u32(self.sum_ns / u64::from(self.count)));
            npm.srt_max_us = Some(self.max_us);
        }
    }

    pub fn reset(&mut self) {
        *self = SrtStats::default();
    }
}

#[cfg(test)]
mod tests {
    use super::{SrtStats, Turn};
    use crate::record::Npm;

    #[test]
    fn metrics_srt_turn_latest_request_first_response() {
        let mut t = Turn::default();
        assert_eq!(t.response(5), None, "response before any request");
        t.request(100);
        t.request(200); // the request spans two packets: the last counts
        assert_eq!(t.response(1200), Some(1000));
        assert_eq!(
            t.response(1300),
            None,
            "second response packet of the same turn"
        );
        t.request(2000);
        assert_eq!(
            t.response(1500),
            Some(0),
            "clock went backwards: 0, not a panic"
        );
    }

    #[test]
    fn metrics_srt_stats_min_mean_max() {
        let mut s = SrtStats::default();
        let mut npm = Npm::default();
        s.fill(&mut npm);
        assert_eq!(
            (npm.srt_us, npm.srt_count, npm.srt_mean_us),
            (Some(0), 0, None)
        );
        s.add(3_000_400); // 3000.4 µs -> 3000
        s.add(1_000_500); // 1000.5 µs -> 1001
        s.add(2_000_000);
        s.fill(&mut npm);
        assert_eq!(npm.srt_us, Some(3000));
        assert_eq!(npm.srt_count, 3);
        assert_eq!(npm.srt_min_us, Some(1001));
        assert_eq!(npm.srt_max_us, Some(3000));
        // (3_000_400 + 1_000_500 + 2_000_000) / 3 = 2_000_300 ns -> 2000 µs
        assert_eq!(npm.srt_mean_us, Some(2000));
        s.reset();
        s.fill(&mut npm);
        assert_eq!(
            (npm.srt_us, npm.srt_count, npm.srt_min_us),
            (Some(0), 0, None)
        );
    }
}
