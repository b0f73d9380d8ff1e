//! Time-ordered merge of the frames a worker owns, when frames are handed
//! between workers.
//!
//! Each worker reads frames in timestamp order from its own queue, but the
//! two directions of a connection can arrive on different queues: without
//! care, the owner could account a SYN+ACK handed over from another queue
//! after the ACK that answers it from its own. So, with hand-off on, every
//! frame (its own ones too) goes through a per-source FIFO ring, and the
//! owner takes the oldest head among its rings, but only once no source
//! can still produce an older frame: each source publishes a watermark,
//! "every frame I read stamped up to here is already in the rings". A
//! source that stays quiet longer than `HOLD` is not waited for any more,
//! so a stuck or idle queue delays accounting by at most that.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use xdprobe_dataplane::Timestamp;

use super::{clock::unix_now, handoff::Consumer};

/// Longest a frame waits for a silent source's watermark: the same window
/// capture files are put in order within (`source::reorder`).
pub const HOLD_NS: u64 = xdprobe_dataplane::source::reorder::WINDOW_NS;
/// How long after its XDP timestamp a frame can still be on its way into
/// the RX ring (softirq copy): an empty ring only vouches for frames
/// stamped before `now - SLACK_NS`.
pub const SLACK_NS: u64 = 1_000_000;

/// Watermarks of all workers of one interface (Unix ns).
#[derive(Clone)]
pub struct Marks(Arc<[AtomicU64]>);

impl Marks {
    pub fn new(workers: usize) -> Marks {
        Marks((0..workers).map(|_| AtomicU64::new(0)).collect())
    }

    /// Worker `me` has pushed every frame it read with a timestamp ≤ `ts`.
    pub fn publish(&self, me: usize, ts: Timestamp) {
        if let Some(m) = self.0.get(me) {
            m.fetch_max(ts.as_nanos(), Ordering::Release);
        }
    }

    /// Worker `me` found its RX ring empty just now.
    pub fn publish_idle(&self, me: usize) {
        self.publish(
            me,
            Timestamp::from_nanos(unix_now().as_nanos().saturating_sub(SLACK_NS)),
        );
    }

    fn get(&self, src: usize) -> u64 {
        self.0
            .get(src)
            .map_or(u64::MAX, |m| m.load(Ordering::Acquire))
    }
}

/// One worker's inputs: (source worker, ring from it), itself included.
pub struct Merge {
    /// The worker these inputs belong to.
    pub me: usize,
    pub inputs: Vec<(usize, Consumer)>,
    pub marks: Marks,
}

impl Merge {
    /// True when some frame waits.
    pub fn pending(&mut self) -> bool {
        self.inputs.iter_mut().any(|(_, c)| c.peek_ts().is_some())
    }

    /// Hands frames to `f` in timestamp order for as long as that order is
    /// certain (or, with `force`, until every ring is empty). Returns how
    /// many came from other workers.
    pub fn run(&mut self, force: bool, mut f: impl FnMut(&[u8], u32, Timestamp)) -> usize {
        let mut n = 0;
        let mut now: Option<u64> = None;
        loop {
            let mut best: Option<(Timestamp, usize)> = None;
            for (k, (_, c)) in self.inputs.iter_mut().enumerate() {
                if let Some(t) = c.peek_ts()
                    && best.is_none_or(|(bt, _)| t < bt)
                {
                    best = Some((t, k));
                }
            }
            let Some((t, k)) = best else { break };
            if !force && !self.safe(t, k) {
                let now = *now.get_or_insert_with(|| unix_now().as_nanos());
                if now.saturating_sub(t.as_nanos()) < HOLD_NS {
                    break;
                }
            }
            let Some((src, c)) = self.inputs.get_mut(k) else {
                break;
            };
            let got = c.drain(1, &mut f);
            if *src != self.me {
                n += got;
            }
        }
        n
    }

    /// No other source can still deliver a frame older than `t`. The
    /// watermark is read before the ring, so a frame pushed before the
    /// watermark was raised is seen in the ring.
    fn safe(&mut self, t: Timestamp, chosen: usize) -> bool {
        let marks = &self.marks;
        self.inputs.iter_mut().enumerate().all(|(j, (src, c))| {
            if j == chosen {
                return true;
            }
            let mark = marks.get(*src);
            match c.peek_ts() {
                Some(head) => head >= t,
                None => mark >= t.as_nanos(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::handoff::ring;

    fn ts(ns: u64) -> Timestamp {
        Timestamp::from_nanos(unix_now().as_nanos() + ns)
    }

    #[test]
    fn waits_for_a_source_that_may_still_send_older_frames() {
        let marks = Marks::new(2);
        let (mut p0, c0) = ring(8);
        let (mut p1, c1) = ring(8);
        let mut m = Merge {
            me: 0,
            inputs: vec![(0, c0), (1, c1)],
            marks: marks.clone(),
        };
        let base = ts(1_000_000_000); // in the future: HOLD never expires here
        let at = |d: u64| Timestamp::from_nanos(base.as_nanos() + d);
        assert!(p0.push(b"b", 60, at(20)));
        marks.publish(0, at(20));
        let mut seen = Vec::new();
        // Source 1 has vouched for nothing yet: hold.
        assert_eq!(m.run(false, |f, _, _| seen.push(f.to_vec())), 0);
        assert!(p1.push(b"a", 60, at(10)));
        marks.publish(1, at(10));
        // a (10) is safe; b (20) needs source 1 to vouch up to 20.
        assert_eq!(m.run(false, |f, _, _| seen.push(f.to_vec())), 1);
        marks.publish(1, at(25));
        assert_eq!(
            m.run(false, |f, _, _| seen.push(f.to_vec())),
            0,
            "b is our own: not counted"
        );
        assert_eq!(seen, vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(p1.push(b"c", 60, at(30)));
        assert_eq!(
            m.run(true, |f, _, _| seen.push(f.to_vec())),
            1,
            "force drains"
        );
        assert!(!m.pending());
    }

    #[test]
    fn a_silent_source_is_not_waited_for_beyond_hold() {
        let marks = Marks::new(2);
        let (mut p0, c0) = ring(8);
        let (_p1, c1) = ring(8);
        let mut m = Merge {
            me: 1,
            inputs: vec![(0, c0), (1, c1)],
            marks,
        };
        let old = Timestamp::from_nanos(unix_now().as_nanos() - 10 * HOLD_NS);
        assert!(p0.push(b"x", 60, old));
        assert_eq!(m.run(false, |_, _, _| {}), 1);
    }
}
