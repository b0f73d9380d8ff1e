//! Time-ordered merge of the frames a worker owns, when frames are handed
//! between workers.
//!
//! Each worker reads frames in timestamp order from its own queue, but the
//! two directions of a connection can arrive on different queues: without
//! care, the owner could account a SYN+ACK handed over from another queue
//! after the ACK that answers it from its own. So, with hand-off on, the
//! frames a worker owns wait in per-source FIFOs (its own lane, and one
//! ring from each other worker: `super::queue`), and the owner takes the oldest
//! head among them, but only once no source can still produce an older
//! frame: each source publishes a watermark, "every frame I read stamped up
//! to here is already in the rings". A source that stays quiet longer than
//! `HOLD` is not waited for any more, so a stuck or idle queue delays
//! accounting by at most that.
//!
//! The frames released are handed on in batches of up to `BATCH`, in that
//! order, read in place from their slots (`Worker::on_batch`: parse all,
//! prefetch their flows, then account in order; the same records as one
//! at a time), and each ring's slots are given back once per batch.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use xdprobe_dataplane::{Timestamp, parse::LinkType, source::Frame, worker::BATCH};

use super::queue::{Consumer, LANE_SLOTS, Lane, Producer, RING_SLOTS, Source, ring};
use crate::clock::unix_now;

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

    /// Worker `me` has pushed (and published) every frame it read with a
    /// timestamp ≤ `ts`.
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

/// One worker's inputs: its own lane and (source worker, ring from it) for
/// every other worker of the interface.
pub struct Merge {
    /// The worker these inputs belong to.
    pub me: usize,
    /// This worker's own frames (source `me`).
    pub own: Lane,
    pub inputs: Vec<(usize, Consumer)>,
    pub marks: Marks,
}

/// Source 0 is the own lane, source k > 0 is `inputs[k - 1]`.
const OWN: usize = 0;

impl Merge {
    /// True when some frame waits.
    pub fn pending(&mut self) -> bool {
        self.own.next_ts().is_some() || self.inputs.iter_mut().any(|(_, c)| c.next_ts().is_some())
    }

    /// Hands frames to `f` in timestamp order, in batches of up to `BATCH`,
    /// for as long as that order is certain (or, with `force`, until every
    /// input is empty). Returns how many came from other workers.
    pub fn run(&mut self, force: bool, mut f: impl FnMut(&[Frame<'_>])) -> usize {
        let mut handed = 0;
        let mut now: Option<u64> = None;
        loop {
            // Choose up to BATCH frames; each stays in its slot until the
            // batch is accounted.
            let mut picks = [(OWN, 0usize); BATCH];
            let mut n = 0;
            while let Some(pick) = picks.get_mut(n) {
                let Some((t, k)) = self.oldest() else { break };
                if !force && !self.safe(t, k) {
                    let now = *now.get_or_insert_with(|| unix_now().as_nanos());
                    if now.saturating_sub(t.as_nanos()) < HOLD_NS {
                        break;
                    }
                }
                let i = match k {
                    OWN => self.own.take(),
                    k => {
                        handed += 1;
                        self.inputs.get_mut(k - 1).map_or(0, |(_, c)| c.take())
                    }
                };
                *pick = (k, i);
                n += 1;
            }
            if n == 0 {
                break;
            }
            let mut batch = [Frame::default(); BATCH];
            let mut m = 0;
            for &(k, i) in picks.iter().take(n) {
                let w = match k {
                    OWN => self.own.taken(i),
                    k => self.inputs.get(k - 1).and_then(|(_, c)| c.taken(i)),
                };
                if let (Some(w), Some(p)) = (w, batch.get_mut(m)) {
                    *p = Frame {
                        ts: w.ts,
                        link: Some(LinkType::Ethernet),
                        linktype: 1,
                        data: w.data,
                        wire_len: w.wire_len,
                        interface: 0,
                    };
                    m += 1;
                }
            }
            f(batch.get(..m).unwrap_or(&[]));
            self.own.release();
            for (_, c) in &mut self.inputs {
                c.release();
            }
            if n < BATCH {
                break;
            }
        }
        handed
    }

    /// The oldest frame not yet taken: (timestamp, source).
    fn oldest(&mut self) -> Option<(Timestamp, usize)> {
        let mut best = self.own.next_ts().map(|t| (t, OWN));
        for (k, (_, c)) in self.inputs.iter_mut().enumerate() {
            if let Some(t) = c.next_ts()
                && best.is_none_or(|(bt, _)| t < bt)
            {
                best = Some((t, k + 1));
            }
        }
        best
    }

    /// No other source can still deliver a frame older than `t`. The
    /// watermark is read before the ring, so a frame pushed before the
    /// watermark was raised is seen in the ring.
    fn safe(&mut self, t: Timestamp, chosen: usize) -> bool {
        let marks = &self.marks;
        let vouches = |mark: u64, head: Option<Timestamp>| match head {
            Some(head) => head >= t,
            None => mark >= t.as_nanos(),
        };
        if chosen != OWN {
            let mark = marks.get(self.me);
            if !vouches(mark, self.own.next_ts()) {
                return false;
            }
        }
        self.inputs.iter_mut().enumerate().all(|(k, (src, c))| {
            if k + 1 == chosen {
                return true;
            }
            let mark = marks.get(*src);
            vouches(mark, c.next_ts())
        })
    }
}

/// The hand-off between the `n` workers of one interface:
/// `producers[i][j]` is the ring from worker i to worker j (none for
/// i = j: a worker's own frames wait in its merge's lane), `merges[j]`
/// worker j's inputs. With `n` = 1 (hand-off off, or a single queue) there
/// is nothing at all. Memory: `handoff::bytes_for(n)`.
pub type Mesh = (Vec<Vec<Option<Producer>>>, Vec<Option<Merge>>);

pub fn mesh(n: usize) -> Mesh {
    if n <= 1 {
        return (Vec::new(), Vec::new());
    }
    let marks = Marks::new(n);
    let mut producers: Vec<Vec<Option<Producer>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    let mut merges: Vec<Merge> = (0..n)
        .map(|me| Merge {
            me,
            own: Lane::new(LANE_SLOTS),
            inputs: Vec::with_capacity(n - 1),
            marks: marks.clone(),
        })
        .collect();
    for (i, row) in producers.iter_mut().enumerate() {
        for (j, slot) in row.iter_mut().enumerate() {
            if i == j {
                continue;
            }
            let (p, c) = ring(RING_SLOTS);
            *slot = Some(p);
            if let Some(m) = merges.get_mut(j) {
                m.inputs.push((i, c));
            }
        }
    }
    (producers, merges.into_iter().map(Some).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mesh_has_no_ring_from_a_worker_to_itself() {
        let (producers, mut merges) = mesh(3);
        for (i, row) in producers.iter().enumerate() {
            for (j, p) in row.iter().enumerate() {
                assert_eq!(p.is_some(), i != j, "ring {i} -> {j}");
            }
        }
        for (j, m) in merges.iter_mut().enumerate() {
            let m = m.as_mut().expect("merge");
            assert_eq!(m.me, j);
            let from: Vec<usize> = m.inputs.iter().map(|(i, _)| *i).collect();
            assert_eq!(from, (0..3).filter(|&i| i != j).collect::<Vec<_>>());
        }
        assert!(mesh(1).0.is_empty() && mesh(1).1.is_empty());
    }

    fn ts(ns: u64) -> Timestamp {
        Timestamp::from_nanos(unix_now().as_nanos() + ns)
    }

    /// Worker `me` of `n`: its merge and the producers of the rings into it
    /// (`producers[j]`: from worker j; `None` at `me`).
    fn merge(me: usize, n: usize, slots: usize, marks: &Marks) -> (Merge, Vec<Option<Producer>>) {
        let mut producers = Vec::new();
        let mut inputs = Vec::new();
        for j in 0..n {
            if j == me {
                producers.push(None);
            } else {
                let (p, c) = ring(slots);
                producers.push(Some(p));
                inputs.push((j, c));
            }
        }
        let m = Merge {
            me,
            own: Lane::new(slots),
            inputs,
            marks: marks.clone(),
        };
        (m, producers)
    }

    fn names(seen: &mut Vec<Vec<u8>>) -> impl FnMut(&[Frame<'_>]) + '_ {
        |b| seen.extend(b.iter().map(|p| p.data.to_vec()))
    }

    #[test]
    fn waits_for_a_source_that_may_still_send_older_frames() {
        let marks = Marks::new(2);
        let (mut m, mut ps) = merge(0, 2, 8, &marks);
        let p1 = ps[1].as_mut().expect("ring from 1");
        let base = ts(1_000_000_000); // in the future: HOLD never expires here
        let at = |d: u64| Timestamp::from_nanos(base.as_nanos() + d);
        assert!(m.own.push(b"b", 60, at(20)));
        marks.publish(0, at(20));
        let mut seen = Vec::new();
        // Source 1 has vouched for nothing yet: hold.
        assert_eq!(m.run(false, names(&mut seen)), 0);
        assert!(p1.push(b"a", 60, at(10)));
        p1.publish();
        marks.publish(1, at(10));
        // a (10) is safe; b (20) needs source 1 to vouch up to 20.
        assert_eq!(m.run(false, names(&mut seen)), 1);
        marks.publish(1, at(25));
        assert_eq!(
            m.run(false, names(&mut seen)),
            0,
            "b is our own: not counted"
        );
        assert_eq!(seen, vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(p1.push(b"c", 60, at(30)));
        p1.publish();
        assert_eq!(m.run(true, names(&mut seen)), 1, "force drains");
        assert!(!m.pending());
    }

    #[test]
    fn a_silent_source_is_not_waited_for_beyond_hold() {
        let marks = Marks::new(2);
        let (mut m, mut ps) = merge(1, 2, 8, &marks);
        let p0 = ps[0].as_mut().expect("ring from 0");
        let old = Timestamp::from_nanos(unix_now().as_nanos() - 10 * HOLD_NS);
        assert!(p0.push(b"x", 60, old));
        p0.publish();
        assert_eq!(m.run(false, |_| {}), 1);
    }

    /// Own and handed frames with interleaved times come out as one
    /// timestamp-ordered sequence, in batches of at most BATCH, each batch
    /// holding its slots until it is accounted.
    #[test]
    fn batches_keep_timestamp_order_across_own_and_handed_frames() {
        let marks = Marks::new(3);
        let (mut m, mut ps) = merge(1, 3, 64, &marks);
        let base = ts(1_000_000_000);
        let at = |d: u64| Timestamp::from_nanos(base.as_nanos() + d);
        // 40 frames per source, source s stamped 3i + s: fully interleaved.
        for i in 0..40u64 {
            for (s, p) in ps.iter_mut().enumerate() {
                let t = at(3 * i + s as u64);
                let tag = (3 * i + s as u64).to_le_bytes();
                match p.as_mut() {
                    Some(p) => assert!(p.push(&tag, 60, t)),
                    None => assert!(m.own.push(&tag, 60, t)),
                }
            }
        }
        for p in ps.iter_mut().flatten() {
            p.publish();
        }
        // Everyone has vouched for everything but the last 10 ns.
        for s in 0..3 {
            marks.publish(s, at(109));
        }
        let mut order = Vec::new();
        let mut sizes = Vec::new();
        let mut from0 = ps[0].take().expect("ring from 0");
        let handed = m.run(false, |b| {
            sizes.push(b.len());
            for p in b {
                assert_eq!(p.link, Some(LinkType::Ethernet));
                order.push(u64::from_le_bytes(p.data.try_into().expect("8 bytes")));
            }
        });
        // Up to 117 the other sources' heads vouch; 118 and 119 wait for
        // source 0's watermark (109).
        assert_eq!(order, (0..118).collect::<Vec<_>>());
        assert_eq!(handed, order.iter().filter(|&&v| v % 3 != 1).count());
        assert!(sizes.iter().all(|&s| s <= BATCH), "{sizes:?}");
        assert_eq!(sizes.first(), Some(&BATCH), "{sizes:?}");
        assert!(m.pending(), "frames 118 and 119 wait for a watermark");
        // Every frame from 0 was accounted: its ring is empty again.
        for i in 0..64u64 {
            assert!(from0.push(&i.to_le_bytes(), 60, at(200 + i)), "slot {i}");
        }
        assert!(!from0.push(b"full", 60, at(300)));
    }

    #[test]
    fn slots_are_given_back_once_the_batch_is_accounted() {
        let marks = Marks::new(2);
        let (mut m, mut ps) = merge(0, 2, 4, &marks);
        let mut p1 = ps[1].take().expect("ring from 1");
        let base = ts(1_000_000_000);
        for i in 0..4u64 {
            assert!(p1.push(&[i as u8], 60, Timestamp::from_nanos(base.as_nanos() + i)));
        }
        p1.publish();
        marks.publish(0, Timestamp::MAX);
        marks.publish(1, Timestamp::MAX);
        let mut during = None;
        let handed = m.run(false, |b| {
            assert_eq!(b.len(), 4);
            during = Some(p1.push(b"x", 60, base));
        });
        assert_eq!(handed, 4);
        assert_eq!(during, Some(false), "the batch's slots are still taken");
        assert!(p1.push(b"x", 60, base), "given back after the batch");
    }
}
