//! Stack-latency reports as operators read them: one JSON object per flow
//! report per line (times in Unix µs, segments keyed by name so
//! `jq .segments.T4.p50_us` works), and a table for the terminal.

use std::collections::HashMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::hooks::Layer;
use crate::stack::agent::WallClock;
use crate::stack::matcher::{EndReason, FlowReport};
use crate::stack::stats::Summary;

/// Process names by PID, read once from `/proc/PID/comm` — best while the
/// process lives, so the loop calls [`Comms::remember`] when a PID first
/// shows in the events; one that is gone by then stays unknown. Clones
/// share one cache (the loop's tap and the report writer). Bounded: past
/// `MAX_PIDS` the cache starts over.
#[derive(Clone, Default)]
pub struct Comms {
    cache: std::sync::Arc<std::sync::Mutex<HashMap<u32, Option<String>>>>,
}

const MAX_PIDS: usize = 65_536;

impl Comms {
    pub fn get(&mut self, pid: u32) -> Option<String> {
        if pid == 0 {
            return None;
        }
        let mut c = match self.cache.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if c.len() >= MAX_PIDS && !c.contains_key(&pid) {
            c.clear();
        }
        c.entry(pid)
            .or_insert_with(|| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .ok()
                    .map(|s| s.trim_end().to_owned())
            })
            .clone()
    }

    /// Looks a PID up now (while its process is alive) for later reports.
    pub fn remember(&mut self, pid: u32) {
        if pid == 0 {
            return;
        }
        let known = self
            .cache
            .lock()
            .map(|c| c.contains_key(&pid))
            .unwrap_or(true);
        if !known {
            let _ = self.get(pid);
        }
    }
}

/// A tap that remembers the process name of every PID in the events,
/// then hands them on.
pub struct CommTap<'a> {
    pub comms: Comms,
    pub inner: Option<&'a mut dyn crate::stack::agent::Tap>,
}

impl crate::stack::agent::Tap for CommTap<'_> {
    fn event(&mut self, ev: &xdprobe_common::host::StackEvent) {
        self.comms.remember(ev.tgid);
        if let Some(t) = self.inner.as_mut() {
            t.event(ev);
        }
    }

    fn tick(&mut self, k: &xdprobe_common::host::StackCounters) {
        if let Some(t) = self.inner.as_mut() {
            t.tick(k);
        }
    }
}

#[derive(Serialize)]
struct JsonEnd {
    netns: u32,
    pid: u32,
    comm: Option<String>,
}

#[derive(Serialize)]
struct JsonSegment<'a> {
    from: Layer,
    to: Layer,
    #[serde(flatten)]
    s: &'a Summary,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    src: std::net::IpAddr,
    sport: u16,
    dst: std::net::IpAddr,
    dport: u16,
    start_us: u64,
    end_us: u64,
    end_reason: EndReason,
    record_seq: u32,
    sender: Option<JsonEnd>,
    receiver: Option<JsonEnd>,
    layers: &'a [Layer],
    segments: serde_json::Map<String, serde_json::Value>,
    t8: Option<&'a Summary>,
    complete: u64,
    incomplete: u64,
    /// Cut by the observation's edges (`FlowReport::edge`).
    edge: u64,
    /// Held out as slower than the hold (`FlowReport::cut`).
    cut: u64,
    skipped: u64,
}

/// The JSON value of one report.
pub fn to_json(r: &FlowReport, clock: &WallClock, comms: &mut Comms) -> serde_json::Value {
    let end = |e: Option<crate::stack::matcher::End>, comms: &mut Comms| {
        e.map(|e| JsonEnd {
            netns: e.netns,
            pid: e.pid,
            comm: comms.get(e.pid),
        })
    };
    let mut segments = serde_json::Map::new();
    for s in &r.segments {
        let v = serde_json::to_value(JsonSegment {
            from: s.from,
            to: s.to,
            s: &s.summary,
        })
        .unwrap_or_default();
        segments.insert(s.name.clone(), v);
    }
    let j = JsonReport {
        kind: "host_stack",
        src: r.key.src,
        sport: r.key.sport,
        dst: r.key.dst,
        dport: r.key.dport,
        start_us: clock.unix_us(r.start_ns),
        end_us: clock.unix_us(r.end_ns),
        end_reason: r.end_reason,
        record_seq: r.record_seq,
        sender: end(r.sender, comms),
        receiver: end(r.receiver, comms),
        layers: &r.layers,
        segments,
        t8: r.t8.as_ref(),
        complete: r.complete,
        incomplete: r.incomplete,
        edge: r.edge,
        cut: r.cut,
        skipped: r.skipped,
    };
    serde_json::to_value(j).unwrap_or_default()
}

/// Writes one report as a JSON line.
pub fn write_json(
    w: &mut dyn Write,
    r: &FlowReport,
    clock: &WallClock,
    comms: &mut Comms,
) -> io::Result<()> {
    serde_json::to_writer(&mut *w, &to_json(r, clock, comms))?;
    w.write_all(b"\n")
}

/// A fixed-width table: one line per flow report, median µs per segment.
pub fn write_table(w: &mut dyn Write, reports: &[FlowReport]) -> io::Result<()> {
    const SEGS: [&str; 8] = ["T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8"];
    write!(w, "{:<44} {:>7}", "FLOW (sender -> receiver)", "SAMPLES")?;
    for s in SEGS {
        write!(w, " {s:>9}")?;
    }
    writeln!(w, "   (p50 µs; a+b: merged, no hook between)")?;
    for r in reports {
        let flow = format!(
            "{} -> {}",
            sock(r.key.src, r.key.sport),
            sock(r.key.dst, r.key.dport)
        );
        write!(w, "{flow:<44} {:>7}", r.complete)?;
        for name in &SEGS[..7] {
            // A merged segment prints under its first part.
            let cell = r
                .segments
                .iter()
                .find(|s| s.name == *name || s.name.starts_with(&format!("{name}+")))
                .map(|s| {
                    if s.name.contains('+') {
                        format!("{:.1}+", s.summary.p50_us)
                    } else {
                        format!("{:.1}", s.summary.p50_us)
                    }
                });
            let covered = r
                .segments
                .iter()
                .any(|s| s.name.contains('+') && s.name.split('+').skip(1).any(|p| p == *name));
            let cell = cell.unwrap_or_else(|| if covered { "·".into() } else { "-".into() });
            write!(w, " {cell:>9}")?;
        }
        let t8 = r.t8.map_or("-".to_owned(), |t| format!("{:.1}", t.p50_us));
        writeln!(w, " {t8:>9}")?;
    }
    write_held_out(w, reports)
}

/// Under the table, when the hold gave up on bytes: the figures above
/// leave out the slowest bytes, and a reader of the table alone would not
/// know (the JSON's `cut` says it per flow).
fn write_held_out(w: &mut dyn Write, reports: &[FlowReport]) -> io::Result<()> {
    let flows = reports.iter().filter(|r| r.cut > 0).count();
    if flows == 0 {
        return Ok(());
    }
    let cut: u64 = reports.iter().map(|r| r.cut).sum();
    let timed: u64 = reports.iter().map(|r| r.complete + r.cut).sum();
    writeln!(
        w,
        "held out: {cut} of {timed} timed bytes in {flows} flow(s) were slower than the hold and are not in these figures (raise --hold)"
    )
}

fn sock(a: std::net::IpAddr, p: u16) -> String {
    match a {
        std::net::IpAddr::V4(a) => format!("{a}:{p}"),
        std::net::IpAddr::V6(a) => format!("[{a}]:{p}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::matcher::FlowKey;

    fn report(complete: u64, cut: u64) -> FlowReport {
        FlowReport {
            key: FlowKey {
                src: [192, 0, 2, 1].into(),
                sport: 40000,
                dst: [192, 0, 2, 2].into(),
                dport: 5201,
            },
            start_ns: 0,
            end_ns: 1,
            end_reason: EndReason::End,
            record_seq: 0,
            sender: None,
            receiver: None,
            layers: Vec::new(),
            segments: Vec::new(),
            t8: None,
            complete,
            incomplete: 0,
            skipped: 0,
            thinned: 0,
            edge: 0,
            cut,
        }
    }

    fn table(reports: &[FlowReport]) -> String {
        let mut out = Vec::new();
        write_table(&mut out, reports).expect("write to a Vec");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn the_table_says_when_slow_bytes_are_left_out() {
        let t = table(&[report(900, 0), report(90, 10)]);
        assert!(
            t.contains("held out: 10 of 1000 timed bytes in 1 flow(s)"),
            "{t}"
        );
        assert!(!table(&[report(900, 0)]).contains("held out"));
    }
}
