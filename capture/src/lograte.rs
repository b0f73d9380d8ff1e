//! Rate-limited logging for errors that can repeat every few milliseconds
//! (a receive error on a queue, a failing accept): the first occurrence is
//! logged at once, later ones at most once per interval with how many
//! there were, so a persistent fault costs one line per interval, not a
//! hundred per second.

use std::time::{Duration, Instant};

/// The interval persistent errors are logged at.
pub const ERROR_LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct LogEvery {
    every: Duration,
    last: Option<Instant>,
    /// Occurrences since the last line, this one included.
    pending: u64,
}

impl LogEvery {
    pub const fn new(every: Duration) -> Self {
        LogEvery {
            every,
            last: None,
            pending: 0,
        }
    }

    /// Counts one occurrence at `now`; `Some(n)` when a line is due, `n`
    /// being the occurrences it stands for.
    pub fn due(&mut self, now: Instant) -> Option<u64> {
        self.pending += 1;
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < self.every)
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_every_10ms_logs_once_per_interval_with_the_count() {
        let start = Instant::now();
        let mut l = LogEvery::new(Duration::from_secs(10));
        let mut lines = Vec::new();
        // 30 s of an error every 10 ms (the old receive loop's pace).
        for i in 0..3000u64 {
            if let Some(n) = l.due(start + Duration::from_millis(10 * i)) {
                lines.push(n);
            }
        }
        assert_eq!(lines, [1, 1000, 1000], "{lines:?}");
        // After a quiet spell the next one is logged at once.
        assert_eq!(l.due(start + Duration::from_secs(60)), Some(1000));
    }
}
