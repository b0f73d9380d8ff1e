//! The manager's core, sans-IO: agents' events and clock estimates in,
//! per-flow reports spanning hosts out. No socket, no clock read here;
//! `xdprobe manager` does the I/O around it.
//!
//! It reuses the stack matcher (`stack::matcher`) unchanged. Two things
//! make events from several kernels look like events from one:
//! - each (agent, network namespace) pair gets a synthetic namespace id
//!   unique across the fleet, so the matcher tells the sender's transmit
//!   layers and the receiver's receive layers apart exactly as it does on
//!   one kernel (by namespace);
//! - each event's time is moved onto the manager's clock with its agent's
//!   [`ClockModel`] before the matcher sees it. Events of an agent whose
//!   clock is not measured yet wait (bounded) for its first round.
//!
//! Both ends see the same TCP sequence numbers, so the matcher's
//! cumulative-byte rule (`B_j ≤ E_i ≤ E_j`) joins the sender's and the
//! receiver's observations of the same bytes with no coordination; the
//! sampling grid (a byte whose sequence number is a multiple of N) is
//! picked by both agents' kernels alike.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;
use xdprobe_common::host::StackEvent;

use crate::fleet::proto::{AgentStats, Hello};
use crate::stack::matcher::{FlowReport, MatchCounters, Matcher, MatcherConfig, RawSample};
use crate::sync::estimate::{ClockModel, ClockState, Estimate};

/// Limits of the manager's core.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    pub matcher: MatcherConfig,
    /// Events held per agent until its clock is measured; the oldest are
    /// dropped beyond (counted).
    pub max_unsynced: usize,
    /// Agents remembered at most (a new name beyond is refused, counted).
    pub max_agents: usize,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            matcher: MatcherConfig {
                sample_bytes: 72_400,
                // Events from two hosts arrive at different times (each
                // agent drains its ring buffer on its own schedule, then
                // the stream): anchors wait longer than on one kernel.
                hold_ns: 2_000_000_000,
                raw_samples: true,
                ..MatcherConfig::default()
            },
            max_unsynced: 262_144,
            max_agents: 4096,
        }
    }
}

/// One end of a flow, named across the fleet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Place {
    pub agent: String,
    /// The network namespace inode on that agent's host.
    pub netns: u32,
    pub pid: u32,
    /// The agent's clock as last measured (offset to the manager's).
    pub clock: Option<ClockState>,
}

/// A flow report with its ends named.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossReport {
    /// Times are on the manager's clock.
    pub report: FlowReport,
    pub sender: Option<Place>,
    pub receiver: Option<Place>,
}

impl CrossReport {
    /// Both ends seen, on different agents: T4 and T8 crossed hosts.
    pub fn crosses_hosts(&self) -> bool {
        matches!((&self.sender, &self.receiver), (Some(a), Some(b)) if a.agent != b.agent)
    }

    /// Half-width of the range the clock alignment may have moved T4/T8
    /// by: the sum of both ends' proven bounds (0 on one host).
    pub fn clock_uncertainty_ns(&self) -> u64 {
        if !self.crosses_hosts() {
            return 0;
        }
        [&self.sender, &self.receiver]
            .iter()
            .filter_map(|p| p.as_ref()?.clock.map(|c| c.uncertainty_ns))
            .sum()
    }
}

/// What happened to one agent's events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AgentCounters {
    pub events: u64,
    /// Events dropped while waiting for the first clock round.
    pub unsynced_dropped: u64,
    pub connects: u64,
    pub restarts: u64,
    pub sync_rounds: u64,
}

struct Agent {
    hello: Hello,
    clock: ClockModel,
    unsynced: VecDeque<StackEvent>,
    counters: AgentCounters,
    /// The agent's own counters (buffer drops …), from its STATS frames.
    reported: AgentStats,
    connected: bool,
}

/// Fleet-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FleetCounters {
    pub agents_refused: u64,
    pub events_unknown_agent: u64,
    pub reports: u64,
}

/// What the core hands out.
pub enum FleetOut<'a> {
    /// A flow direction's report (boxed: a sample is handed out far more
    /// often).
    Report(Box<CrossReport>),
    /// One timed byte (for histograms), before the reports of the same turn.
    Sample(&'a RawSample),
}

/// A view of one agent for logs, metrics and the JSON output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentView {
    pub agent: String,
    pub connected: bool,
    pub sync: Option<String>,
    pub clock: Option<ClockState>,
    pub counters: AgentCounters,
    pub reported: AgentStats,
}

pub struct Fleet {
    cfg: FleetConfig,
    agents: HashMap<String, Agent>,
    /// (agent, netns inode) → synthetic id, and back (index = id − 1).
    ids: HashMap<(String, u32), u32>,
    places: Vec<(String, u32)>,
    matcher: Matcher,
    counters: FleetCounters,
    /// Events waiting for a clock round, over all agents, and how many
    /// may (the manager's `memory_limit` share).
    unsynced_held: usize,
    unsynced_budget: usize,
}

impl Fleet {
    pub fn new(cfg: FleetConfig) -> Fleet {
        Fleet {
            matcher: Matcher::new(cfg.matcher.clone()),
            cfg,
            agents: HashMap::new(),
            ids: HashMap::new(),
            places: Vec::new(),
            counters: FleetCounters::default(),
            unsynced_held: 0,
            unsynced_budget: usize::MAX,
        }
    }

    /// Events all agents together may hold waiting for a clock round;
    /// beyond, new ones are dropped (counted as `unsynced_dropped`).
    pub fn set_unsynced_budget(&mut self, events: usize) {
        self.unsynced_budget = events;
    }

    /// Bytes held by events waiting for a clock round.
    pub fn unsynced_bytes(&self) -> usize {
        self.unsynced_held * std::mem::size_of::<StackEvent>()
    }

    pub fn sample_bytes(&self) -> u32 {
        self.cfg.matcher.sample_bytes
    }

    /// An agent (re)connected. Returns false when it is refused (too many
    /// agents). A new instance under a known name is a restarted agent:
    /// its clock is measured afresh (it may run on another host now), and
    /// its events wait for that.
    pub fn hello(&mut self, h: Hello) -> bool {
        if let Some(a) = self.agents.get_mut(&h.agent) {
            a.counters.connects += 1;
            a.connected = true;
            if a.hello.instance != h.instance {
                a.counters.restarts += 1;
                a.clock = ClockModel::default();
                // The old instance's clock never got measured: its
                // waiting events cannot be placed any more.
                a.counters.unsynced_dropped += a.unsynced.len() as u64;
                self.unsynced_held -= a.unsynced.len();
                a.unsynced = VecDeque::new();
            }
            a.hello = h;
            return true;
        }
        if self.agents.len() >= self.cfg.max_agents {
            self.counters.agents_refused += 1;
            return false;
        }
        self.agents.insert(
            h.agent.clone(),
            Agent {
                hello: h,
                clock: ClockModel::default(),
                unsynced: VecDeque::new(),
                counters: AgentCounters {
                    connects: 1,
                    ..AgentCounters::default()
                },
                reported: AgentStats::default(),
                connected: true,
            },
        );
        true
    }

    /// The agent's connection went away (its clock and flows stay).
    pub fn gone(&mut self, agent: &str) {
        if let Some(a) = self.agents.get_mut(agent) {
            a.connected = false;
        }
    }

    pub fn agent_stats(&mut self, agent: &str, s: AgentStats) {
        if let Some(a) = self.agents.get_mut(agent) {
            a.reported = s;
        }
    }

    fn place_id(
        ids: &mut HashMap<(String, u32), u32>,
        places: &mut Vec<(String, u32)>,
        agent: &str,
        netns: u32,
    ) -> u32 {
        if let Some(&id) = ids.get(&(agent.to_owned(), netns)) {
            return id;
        }
        places.push((agent.to_owned(), netns));
        let id = u32::try_from(places.len()).unwrap_or(u32::MAX);
        ids.insert((agent.to_owned(), netns), id);
        id
    }

    /// Events from `agent`, stamped by its clock.
    pub fn events(&mut self, agent: &str, evs: &[StackEvent]) {
        let Some(a) = self.agents.get_mut(agent) else {
            self.counters.events_unknown_agent += evs.len() as u64;
            return;
        };
        a.counters.events += evs.len() as u64;
        if !a.clock.is_synced() {
            for ev in evs {
                if a.unsynced.len() >= self.cfg.max_unsynced {
                    if a.unsynced.pop_front().is_some() {
                        self.unsynced_held -= 1;
                    }
                    a.counters.unsynced_dropped += 1;
                }
                if self.unsynced_held >= self.unsynced_budget {
                    // The fleet's share of memory is used up: this one
                    // goes (another agent's waiting events stay).
                    a.counters.unsynced_dropped += 1;
                    continue;
                }
                a.unsynced.push_back(*ev);
                self.unsynced_held += 1;
            }
            return;
        }
        for ev in evs {
            let mut e = *ev;
            e.netns = Self::place_id(&mut self.ids, &mut self.places, agent, ev.netns);
            // A close carries the socket's time too.
            e.ts_ns = a.clock.to_manager(ev.ts_ns);
            self.matcher.on_event(&e);
        }
    }

    /// A clock round for `agent` (manager-time order). The first one lets
    /// its waiting events through.
    pub fn estimate(&mut self, agent: &str, est: Estimate) {
        let Some(a) = self.agents.get_mut(agent) else {
            return;
        };
        let first = !a.clock.is_synced();
        a.clock.add(est);
        a.counters.sync_rounds += 1;
        if first && !a.unsynced.is_empty() {
            let waiting: Vec<StackEvent> = std::mem::take(&mut a.unsynced).into();
            self.unsynced_held -= waiting.len();
            a.counters.events -= waiting.len() as u64;
            self.events(agent, &waiting);
        }
    }

    pub fn clock(&self, agent: &str) -> Option<ClockState> {
        self.agents.get(agent)?.clock.state()
    }

    /// The clock-sync targets of the connected agents: (agent, `IP:PORT`,
    /// instance — a new instance needs a round at once).
    pub fn sync_targets(&self) -> Vec<(String, String, u64)> {
        let mut v: Vec<(String, String, u64)> = self
            .agents
            .iter()
            .filter(|(_, a)| a.connected)
            .filter_map(|(n, a)| Some((n.clone(), a.hello.sync.clone()?, a.hello.instance)))
            .collect();
        v.sort();
        v
    }

    pub fn agents(&self) -> Vec<AgentView> {
        let mut v: Vec<AgentView> = self
            .agents
            .iter()
            .map(|(n, a)| AgentView {
                agent: n.clone(),
                connected: a.connected,
                sync: a.hello.sync.clone(),
                clock: a.clock.state(),
                counters: a.counters,
                reported: a.reported,
            })
            .collect();
        v.sort_by(|a, b| a.agent.cmp(&b.agent));
        v
    }

    pub fn matcher_counters(&self) -> MatchCounters {
        self.matcher.counters()
    }

    pub fn counters(&self) -> FleetCounters {
        self.counters
    }

    fn name(&self, r: FlowReport) -> CrossReport {
        let place = |e: Option<crate::stack::matcher::End>| {
            let e = e?;
            let (agent, netns) = self.places.get(e.netns.checked_sub(1)? as usize)?;
            Some(Place {
                agent: agent.clone(),
                netns: *netns,
                pid: e.pid,
                clock: self.clock(agent),
            })
        };
        CrossReport {
            sender: place(r.sender),
            receiver: place(r.receiver),
            report: r,
        }
    }

    /// Resolves what can be at manager time `now_ns` and hands out the
    /// finished reports and the timed bytes (for histograms).
    pub fn advance(&mut self, now_ns: u64, out: &mut impl FnMut(FleetOut<'_>)) {
        let mut done = Vec::new();
        self.matcher.advance(now_ns, &mut |r| done.push(r));
        self.hand_out(done, out);
    }

    /// Reports every flow (the manager stops).
    pub fn finish(&mut self, now_ns: u64, out: &mut impl FnMut(FleetOut<'_>)) {
        // Agents that never got a clock: their events are matched as they
        // are (their T4/T8 are then meaningless, their own segments not).
        let names: Vec<String> = self
            .agents
            .iter()
            .filter(|(_, a)| !a.clock.is_synced() && !a.unsynced.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        for n in names {
            if let Some(a) = self.agents.get_mut(&n) {
                tracing::warn!(agent = %n, events = a.unsynced.len(), "agent never answered a clock probe: its waiting events are dropped");
                a.counters.unsynced_dropped += a.unsynced.len() as u64;
                self.unsynced_held -= a.unsynced.len();
                a.unsynced = VecDeque::new();
            }
        }
        let mut done = Vec::new();
        self.matcher.finish(now_ns, &mut |r| done.push(r));
        self.hand_out(done, out);
    }

    fn hand_out(&mut self, done: Vec<FlowReport>, out: &mut impl FnMut(FleetOut<'_>)) {
        for s in self.matcher.take_samples() {
            out(FleetOut::Sample(&s));
        }
        for r in done {
            self.counters.reports += 1;
            out(FleetOut::Report(Box::new(self.name(r))));
        }
    }
}

#[cfg(test)]
mod tests;
