//! The manager's clock-sync thread: a round of timing probes for every
//! connected agent every `interval` (a new agent gets one at once), each
//! turned into an estimate and handed to the main loop. A thread of its
//! own because a round spins on its socket for a few milliseconds (the
//! reply's timing is the measurement); the main loop never waits on it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, unbounded};
use xdprobe_host::sync::estimate::{self, Estimate};
use xdprobe_host::sync::prober::{BurstConfig, Prober};

/// Exchanges that vote when the intervals disagree.
const KEEP: usize = 4;

/// An agent to probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub agent: String,
    pub addr: SocketAddr,
    /// The agent process: a new one (a restart) is probed at once.
    pub instance: u64,
}

/// One round's outcome for one agent.
pub struct Round {
    pub agent: String,
    pub target: SocketAddr,
    /// `None`: no usable reply (responder missing, path down).
    pub estimate: Option<Estimate>,
    pub sent: usize,
    pub lost: usize,
    pub error: Option<String>,
}

pub struct ClockThread {
    targets: Sender<Vec<Target>>,
    pub rounds: Receiver<Round>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ClockThread {
    pub fn spawn(
        interval: Duration,
        burst: BurstConfig,
        session: u32,
    ) -> std::io::Result<ClockThread> {
        let prober = Prober::new(session)?;
        let (targets, targets_rx) = unbounded();
        let (rounds_tx, rounds) = unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xdprobe-clock".into())
            .spawn(move || run(prober, interval, burst, &targets_rx, &rounds_tx, &s))?;
        Ok(ClockThread {
            targets,
            rounds,
            stop,
            thread: Some(thread),
        })
    }

    /// The agents to probe from now on.
    pub fn set_targets(&self, t: Vec<Target>) {
        let _ = self.targets.send(t);
    }
}

impl Drop for ClockThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    mut prober: Prober,
    interval: Duration,
    burst: BurstConfig,
    targets: &Receiver<Vec<Target>>,
    out: &Sender<Round>,
    stop: &AtomicBool,
) {
    // Agent → (target, next round due).
    let mut due: HashMap<String, (Target, Instant)> = HashMap::new();
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let next = due.values().map(|d| d.1).min();
        let wait = next
            .map_or(Duration::from_millis(100), |n| {
                n.saturating_duration_since(now)
            })
            .min(Duration::from_millis(100));
        match targets.recv_timeout(wait) {
            Ok(list) => {
                let mut fresh: HashMap<String, (Target, Instant)> = HashMap::new();
                for t in list {
                    // The same process at the same address: keep its
                    // schedule; else (new, moved, restarted) probe now.
                    let at = match due.get(&t.agent) {
                        Some((old, at)) if *old == t => *at,
                        _ => Instant::now(),
                    };
                    fresh.insert(t.agent.clone(), (t, at));
                }
                due = fresh;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        let mut ready: Vec<(String, SocketAddr)> = due
            .iter()
            .filter(|(_, d)| d.1 <= now)
            .map(|(a, d)| (a.clone(), d.0.addr))
            .collect();
        ready.sort();
        for (agent, target) in ready {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let round = match prober.burst(target, &burst) {
                Ok(b) => Round {
                    agent: agent.clone(),
                    target,
                    estimate: estimate::estimate(&b.exchanges, KEEP),
                    sent: b.sent,
                    lost: b.lost,
                    error: None,
                },
                Err(e) => Round {
                    agent: agent.clone(),
                    target,
                    estimate: None,
                    sent: 0,
                    lost: 0,
                    error: Some(e.to_string()),
                },
            };
            // A failed round is retried sooner than a good one is repeated.
            let next = if round.estimate.is_some() {
                interval
            } else {
                interval.min(Duration::from_secs(5))
            };
            if let Some(d) = due.get_mut(&agent) {
                d.1 = Instant::now() + next;
            }
            if out.send(round).is_err() {
                return;
            }
        }
    }
}
