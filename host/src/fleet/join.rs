//! The joined view: the wire probe's record of a TCP connection (RTT,
//! server response time, retransmissions — seen on the mirror port) and
//! the hosts' layer breakdown of each of its directions, put side by side.
//!
//! The key they share is the connection's TCP 5-tuple with its two ends
//! unordered ([`ConnKey`]): the wire record names them client and server,
//! a host report sender and receiver, and either end may send. A host
//! report joins the wire record of the same key whose time span overlaps
//! its own (within `slack`, the two clocks' disagreement: the wire probe
//! stamps in TAI-derived Unix time, the manager in its own wall clock);
//! which direction it is (`c2s` or `s2c`) follows from who sent.
//!
//! Either side may come first (the wire probe reports a connection when
//! it ends, the manager a direction when its bytes are matched): both wait
//! in bounded tables for `horizon`, and the second to arrive makes the
//! joined record. Sans-IO: records and times in, joined records out.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use serde::Serialize;
use serde_json::Value;

/// A TCP connection, ends unordered (the lower `(addr, port)` first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ConnKey {
    pub a: (IpAddr, u16),
    pub b: (IpAddr, u16),
}

impl ConnKey {
    pub fn new(x: (IpAddr, u16), y: (IpAddr, u16)) -> ConnKey {
        let (a, b) = if x <= y { (x, y) } else { (y, x) };
        ConnKey { a, b }
    }
}

/// The fields of a wire record the join needs; the record itself travels
/// along as it was: a JSON line read from a file (`Value`, the manager),
/// or the probe's own typed record (the daemon), written out as the
/// joined line's `wire`.
#[derive(Clone, Debug, PartialEq)]
pub struct Wire<R = Value> {
    pub client: (IpAddr, u16),
    pub server: (IpAddr, u16),
    pub start_us: u64,
    pub end_us: u64,
    pub record: R,
}

impl Wire {
    /// From one JSON line of the probe's record schema (`xdprobe run` /
    /// `xdprobe pcap --format json`); `None` for anything else, and for
    /// records that are not TCP.
    pub fn from_json(v: Value) -> Option<Wire> {
        if v.get("proto")?.as_u64()? != 6 {
            return None;
        }
        let ep = |a: &str, p: &str| -> Option<(IpAddr, u16)> {
            Some((
                v.get(a)?.as_str()?.parse().ok()?,
                u16::try_from(v.get(p)?.as_u64()?).ok()?,
            ))
        };
        Some(Wire {
            client: ep("client_addr", "client_port")?,
            server: ep("server_addr", "server_port")?,
            start_us: v.get("start_us")?.as_u64()?,
            end_us: v.get("end_us")?.as_u64()?,
            record: v,
        })
    }
}

impl<R> Wire<R> {
    fn key(&self) -> ConnKey {
        ConnKey::new(self.client, self.server)
    }
}

/// One direction's host report, as the manager wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    pub sender: (IpAddr, u16),
    pub receiver: (IpAddr, u16),
    pub start_us: u64,
    pub end_us: u64,
    pub report: Value,
}

/// One joined record.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Joined<R = Value> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub key: ConnKey,
    /// The host report's direction in the wire record's terms.
    pub direction: &'static str,
    pub wire: R,
    pub host: Value,
}

/// Limits of the join tables.
#[derive(Clone, Copy, Debug)]
pub struct JoinConfig {
    /// How long an unjoined record waits for its partner, µs.
    pub horizon_us: u64,
    /// Clock disagreement allowed when comparing time spans, µs.
    pub slack_us: u64,
    /// Records held per side at most (the oldest go first).
    pub max_held: usize,
}

impl Default for JoinConfig {
    fn default() -> Self {
        JoinConfig {
            horizon_us: 300_000_000,
            slack_us: 2_000_000,
            max_held: 65_536,
        }
    }
}

#[derive(Debug)]
pub struct Joiner<R = Value> {
    cfg: JoinConfig,
    wires: HashMap<ConnKey, Vec<(u64, Wire<R>)>>,
    hosts: HashMap<ConnKey, Vec<(u64, Host)>>,
    /// Arrival order, for expiry and the bound: (arrival µs, key, is_wire).
    order: VecDeque<(u64, ConnKey, bool)>,
    pub joined: u64,
    pub expired: u64,
}

fn overlaps(a: (u64, u64), b: (u64, u64), slack: u64) -> bool {
    a.0 <= b.1.saturating_add(slack) && b.0 <= a.1.saturating_add(slack)
}

impl<R> Default for Joiner<R> {
    fn default() -> Self {
        Joiner {
            cfg: JoinConfig::default(),
            wires: HashMap::new(),
            hosts: HashMap::new(),
            order: VecDeque::new(),
            joined: 0,
            expired: 0,
        }
    }
}

fn joined<R: Clone>(w: &Wire<R>, h: &Host) -> Joined<R> {
    Joined {
        kind: "joined",
        key: w.key(),
        direction: if h.sender == w.client { "c2s" } else { "s2c" },
        wire: w.record.clone(),
        host: h.report.clone(),
    }
}

impl<R: Clone> Joiner<R> {
    pub fn new(cfg: JoinConfig) -> Self {
        Joiner {
            cfg,
            ..Joiner::default()
        }
    }

    /// A wire record arrived at `now_us`: joined with every held host
    /// report of its connection that overlaps it. It stays held too (both
    /// directions, and later reports of long flows, may still come).
    pub fn wire(&mut self, w: Wire<R>, now_us: u64) -> Vec<Joined<R>> {
        let key = w.key();
        let span = (w.start_us, w.end_us);
        let out: Vec<Joined<R>> = self
            .hosts
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|(_, h)| overlaps(span, (h.start_us, h.end_us), self.cfg.slack_us))
            .map(|(_, h)| joined(&w, h))
            .collect();
        self.joined += out.len() as u64;
        self.hold(key, true, now_us);
        self.wires.entry(key).or_default().push((now_us, w));
        self.expire(now_us);
        out
    }

    /// A host report arrived: joined with the held wire records of its
    /// connection that overlap it.
    pub fn host(&mut self, h: Host, now_us: u64) -> Vec<Joined<R>> {
        let key = ConnKey::new(h.sender, h.receiver);
        let span = (h.start_us, h.end_us);
        let out: Vec<Joined<R>> = self
            .wires
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|(_, w)| overlaps(span, (w.start_us, w.end_us), self.cfg.slack_us))
            .map(|(_, w)| joined(w, &h))
            .collect();
        self.joined += out.len() as u64;
        self.hold(key, false, now_us);
        self.hosts.entry(key).or_default().push((now_us, h));
        self.expire(now_us);
        out
    }

    fn hold(&mut self, key: ConnKey, wire: bool, now_us: u64) {
        self.order.push_back((now_us, key, wire));
    }

    /// Forgets records older than the horizon, and the oldest beyond the
    /// bound.
    pub fn expire(&mut self, now_us: u64) {
        let cutoff = now_us.saturating_sub(self.cfg.horizon_us);
        while let Some(&(t, key, wire)) = self.order.front() {
            if t >= cutoff && self.order.len() <= 2 * self.cfg.max_held {
                break;
            }
            self.order.pop_front();
            let removed = if wire {
                drop_first(&mut self.wires, &key)
            } else {
                drop_first(&mut self.hosts, &key)
            };
            self.expired += u64::from(removed);
        }
    }

    pub fn held(&self) -> usize {
        self.order.len()
    }
}

fn drop_first<T>(m: &mut HashMap<ConnKey, Vec<(u64, T)>>, key: &ConnKey) -> bool {
    let Some(v) = m.get_mut(key) else {
        return false;
    };
    if !v.is_empty() {
        v.remove(0);
    }
    if v.is_empty() {
        m.remove(key);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wire(cport: u16, start_us: u64, end_us: u64) -> Wire {
        Wire::from_json(json!({
            "client_addr": "198.51.100.1", "client_port": cport,
            "server_addr": "198.51.100.2", "server_port": 5201,
            "proto": 6, "start_us": start_us, "end_us": end_us, "rtt_us": 10_040,
        }))
        .unwrap()
    }

    fn host(from_client: bool, cport: u16, start_us: u64, end_us: u64) -> Host {
        let c: (IpAddr, u16) = ("198.51.100.1".parse().unwrap(), cport);
        let s: (IpAddr, u16) = ("198.51.100.2".parse().unwrap(), 5201);
        let (sender, receiver) = if from_client { (c, s) } else { (s, c) };
        Host {
            sender,
            receiver,
            start_us,
            end_us,
            report: json!({"t4": 5000}),
        }
    }

    #[test]
    fn either_side_may_come_first_and_direction_follows_the_sender() {
        let mut j = Joiner::new(JoinConfig::default());
        assert!(j.host(host(true, 40000, 1_000, 9_000), 10).is_empty());
        let out = j.wire(wire(40000, 500, 9_500), 20);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].direction, "c2s");
        assert_eq!(out[0].wire["rtt_us"], 10_040);
        assert_eq!(out[0].host["t4"], 5000);
        // The other direction of the same connection, later.
        let out = j.host(host(false, 40000, 2_000, 9_000), 30);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].direction, "s2c");
        assert_eq!(j.joined, 2);
    }

    #[test]
    fn another_connection_or_time_does_not_join() {
        let mut j = Joiner::new(JoinConfig {
            slack_us: 1_000,
            ..JoinConfig::default()
        });
        j.wire(wire(40000, 0, 10_000), 1);
        assert!(
            j.host(host(true, 40001, 0, 10_000), 2).is_empty(),
            "other port"
        );
        // Same 5-tuple reused much later (a new connection).
        assert!(j.host(host(true, 40000, 50_000, 60_000), 3).is_empty());
        // Within the slack.
        assert_eq!(j.host(host(true, 40000, 10_500, 12_000), 4).len(), 1);
    }

    #[test]
    fn held_records_are_bounded_and_expire() {
        let mut j = Joiner::new(JoinConfig {
            horizon_us: 100,
            slack_us: 0,
            max_held: 10,
        });
        for i in 0..100u16 {
            j.wire(wire(i, 0, 1), 50);
        }
        assert!(j.held() <= 20);
        j.expire(1_000);
        assert_eq!(j.held(), 0);
        assert!(j.wires.is_empty());
        assert!(j.host(host(true, 99, 0, 1), 1_000).is_empty());
    }

    #[test]
    fn only_tcp_records_of_the_schema_are_read() {
        assert!(Wire::from_json(json!({"proto": 17})).is_none());
        assert!(Wire::from_json(json!({"type": "host_stack"})).is_none());
    }
}
