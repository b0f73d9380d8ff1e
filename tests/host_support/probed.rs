//! Timed messages under a running probe: the shape most host tests share.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use super::{HostProbe, Messages, Pair, Timed, flow, timed_messages};
use crate::live_support::topo::TempDir;

/// Runs `m` through a probe started in `dir` with `args`; returns the
/// reports and the messages' own timings.
pub fn probed_messages(
    pair: &Pair,
    dir: &TempDir,
    server: SocketAddr,
    args: &[&str],
    m: &Messages,
    before_each: &(dyn Fn(u32) + Sync),
) -> (Vec<Value>, Vec<Timed>) {
    let probe = HostProbe::start(&dir.0, args);
    let timed = timed_messages(&pair.c, &pair.s, server, m, before_each);
    assert_eq!(timed.len() as u32, m.count, "every message arrived");
    // Let the last socket events reach the agent before it stops.
    std::thread::sleep(Duration::from_millis(400));
    (probe.stop(), timed)
}

/// The report of the flow from `src` to `port`; exactly one.
pub fn one_flow(reports: &[Value], port: u16, src: &str) -> Value {
    let f = flow(reports, port, src);
    assert_eq!(f.len(), 1, "one report for the data flow: {reports:#?}");
    f[0].clone()
}
