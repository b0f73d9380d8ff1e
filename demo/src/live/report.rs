//! The demo's report of a live run: the probe's records on stdout in the
//! chosen format, then what to look at, what the collector received, the
//! counters of every piece and, with the host agent, what it saw inside
//! the hosts; the exit code says whether the run did its job.

use std::{fmt::Write as _, io::Write as _, path::Path, process::ExitCode, time::Duration};

use xdprobe_dataplane::FlowRecord;

use super::{LiveOptions, Results};
use crate::bridge::LegStats;
use crate::probe;
use crate::{FormatArg, records};

/// Prints the results; the exit code says whether the run did its job.
pub(crate) fn report(o: &LiveOptions, r: &Results, took: Duration) -> anyhow::Result<ExitCode> {
    let json_mode = matches!(o.format, FormatArg::Json);
    let out = &r.outcome;
    // Connects of other processes on this machine (the agent watches the
    // whole kernel) are not the demo's: left out of its output.
    let foreign = |v: &serde_json::Value| {
        v["type"] == "connect" && v["pid"].as_u64() != Some(u64::from(r.client_pid))
    };
    let parsed: Vec<(&String, Option<serde_json::Value>)> = out
        .lines
        .iter()
        .map(|l| (l, serde_json::from_str(l).ok()))
        .filter(|(_, v)| !v.as_ref().is_some_and(foreign))
        .collect();
    let values: Vec<&serde_json::Value> = parsed.iter().filter_map(|(_, v)| v.as_ref()).collect();
    // Wire records have no `type`; the host agent's lines do.
    let (wire, host): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = values
        .iter()
        .copied()
        .partition(|v| v.get("type").is_none());
    let recs: Vec<_> = wire
        .iter()
        .copied()
        .filter_map(records::from_json)
        .collect();

    print_records(o, &parsed, &recs)?;
    let mut text = summary(o, r, &recs);

    let mut failures = Vec::new();
    if !out.status.is_some_and(|s| s.success()) {
        failures.push(format!(
            "the probe did not exit cleanly ({:?}); its log ends:\n{}",
            out.status,
            probe::tail(&out.log, 20)
        ));
    }
    if recs.is_empty() || recs.len() != wire.len() {
        failures.push(format!(
            "{} of the probe's {} wire JSON lines read as records",
            recs.len(),
            wire.len()
        ));
    }
    if o.host {
        host_section(&mut text, &host, o.plot.as_deref(), &mut failures);
    }
    match r.collected.flows {
        Some(n) if n == wire.len() => {
            let _ = writeln!(
                text,
                "collector: {n} flow records received, as many as the probe emitted"
            );
        }
        Some(n) => failures.push(format!(
            "the collector received {n} flow records, the probe emitted {}",
            wire.len()
        )),
        None => {}
    }
    if !r.client_ok {
        let _ = writeln!(
            text,
            "note:      some client exchanges failed (see traffic: lines); heavy loss can do that"
        );
    }
    let _ = writeln!(text, "wall time: {:.1} s", took.as_secs_f64());
    if json_mode {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    for f in &failures {
        eprintln!("xdprobe demo: FAILED: {f}");
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The records on stdout, in the chosen format; with `--format json`
/// nothing else goes there (the probe's own lines, as it wrote them).
fn print_records(
    o: &LiveOptions,
    parsed: &[(&String, Option<serde_json::Value>)],
    recs: &[FlowRecord],
) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    let mut text = String::new();
    match o.format {
        FormatArg::Json => {
            for (l, _) in parsed {
                writeln!(stdout, "{l}")?;
            }
        }
        FormatArg::Table => {
            let _ = writeln!(
                text,
                "\n== Flows the probe measured (XDP/AF_XDP on the mirror port, {} records) ==\n",
                recs.len()
            );
            stdout.write_all(text.as_bytes())?;
            text.clear();
            records::write_table(recs, &mut stdout)?;
        }
        FormatArg::Csv => {
            let mut w = xdprobe_dataplane::output::RecordWriter::new(
                &mut stdout,
                xdprobe_dataplane::output::Format::Csv,
            );
            for rec in recs {
                w.write(rec)?;
            }
        }
        FormatArg::None => {}
    }
    stdout.flush()?;
    Ok(())
}

/// What to look at, what the collector received, and the counters of the
/// probe, the exporter, the bridge and the traffic.
fn summary(o: &LiveOptions, r: &Results, recs: &[FlowRecord]) -> String {
    let out = &r.outcome;
    let mut text = String::new();
    let expect = records::Expect {
        delay_ms: o.delay_ms,
        think_ms: o.think_ms,
        dns_delay_ms: o.dns_delay_ms,
    };
    let _ = writeln!(text, "\nWhat to look at:");
    for h in records::highlights(recs, &expect) {
        let _ = writeln!(text, "  {h}");
    }
    let heading = match r.collected.flows {
        Some(_) => "What the collector received (IPFIX; nfdump shows no NPM elements)",
        None => "Export",
    };
    let _ = writeln!(text, "\n== {heading} ==\n\n{}", r.collected.text);
    let _ = writeln!(text, "\n== Counters ==");
    if let Some(s) = &out.capture_stats {
        let _ = writeln!(text, "probe:     {s}");
    }
    if let Some(s) = &out.exporter_stats {
        let s = s.strip_prefix("stats=").unwrap_or(s);
        let _ = writeln!(text, "exporter:  {s}");
    }
    let _ = writeln!(text, "bridge:    {}", bridge_line(&r.bridge));
    for l in r.traffic_log.lines() {
        let _ = writeln!(text, "traffic:   {l}");
    }
    text
}

/// What the probe's host agent saw inside the client's and server's
/// kernels: per TCP flow the stack segments' medians, the connections'
/// connect latency, and how many host reports joined their wire record.
fn host_section(
    text: &mut String,
    host: &[&serde_json::Value],
    plot: Option<&Path>,
    failures: &mut Vec<String>,
) {
    let of = |t: &'static str| host.iter().filter(move |v| v["type"] == t);
    let _ = writeln!(
        text,
        "\n== Inside the hosts (eBPF on this kernel's tracepoints; p50 µs per segment) ==\n"
    );
    let segs = ["T1", "T2", "T3", "T4", "T5", "T6", "T7"];
    let _ = write!(text, "{:<40} {:>7}", "FLOW (sender -> receiver)", "SAMPLES");
    for s in segs.iter().chain(&["T8"]) {
        let _ = write!(text, " {s:>8}");
    }
    let _ = writeln!(text);
    let mut bars = Vec::new();
    let mut reports: Vec<&&serde_json::Value> = of("host_stack")
        .filter(|v| v["complete"].as_u64().unwrap_or(0) > 0)
        .collect();
    reports.sort_by_key(|v| std::cmp::Reverse(v["complete"].as_u64().unwrap_or(0)));
    for v in reports.iter().take(12) {
        let flow = format!(
            "{}:{} -> {}:{}",
            v["src"].as_str().unwrap_or("?"),
            v["sport"],
            v["dst"].as_str().unwrap_or("?"),
            v["dport"]
        );
        let _ = write!(text, "{flow:<40} {:>7}", v["complete"]);
        let mut seg_means = Vec::new();
        if let Some(m) = v["segments"].as_object() {
            for s in segs {
                let cell = m
                    .iter()
                    .find(|(k, _)| *k == s || k.starts_with(&format!("{s}+")))
                    .and_then(|(_, x)| x["p50_us"].as_f64())
                    .map_or("-".to_owned(), |p| format!("{p:.1}"));
                let _ = write!(text, " {cell:>8}");
            }
            for (k, x) in m {
                if let Some(mean) = x["mean_us"].as_f64() {
                    seg_means.push((k.clone(), mean));
                }
            }
        }
        let t8 = v["t8"]["p50_us"]
            .as_f64()
            .map_or("-".to_owned(), |p| format!("{p:.1}"));
        let _ = writeln!(text, " {t8:>8}");
        seg_means.sort_by(|a, b| a.0.cmp(&b.0));
        bars.push(xdprobe_host::stack::plot::Bar {
            label: format!(
                "{}:{} → {}",
                v["src"].as_str().unwrap_or("?"),
                v["sport"],
                v["dport"]
            ),
            segments: seg_means,
        });
    }
    let _ = writeln!(
        text,
        "T1 socket→TCP  T2 TCP→IP  T3 IP→device (qdisc)  T4 the network (here: the bridge's delay)\n\
         T5 device→IP  T6 IP→TCP  T7 TCP→the reader  T8 end to end (both ends on this kernel)"
    );
    let mut connects: Vec<f64> = of("connect")
        .filter(|v| v["outcome"] == "established")
        .filter_map(|v| v["latency_us"].as_f64())
        .collect();
    connects.sort_by(f64::total_cmp);
    let failed = of("connect")
        .filter(|v| v["outcome"] != "established")
        .count();
    if let Some(mid) = connects.get(connects.len() / 2) {
        let _ = writeln!(
            text,
            "connect(): {} connections by the client process, median {:.2} ms (one RTT through the bridge), {failed} refused or failed",
            connects.len(),
            mid / 1000.0
        );
    }
    let joined = of("joined").count();
    let _ = writeln!(
        text,
        "joined:    {joined} host reports matched to the wire record of their connection (JSON type \"joined\")"
    );
    if reports.is_empty() {
        failures.push("the host agent reported no TCP flow (see the probe log)".into());
    }
    if let Some(p) = plot {
        match xdprobe_host::stack::plot::draw_bars(p, &bars) {
            Ok(()) => {
                let _ = writeln!(text, "picture:   {}", p.display());
            }
            Err(e) => failures.push(format!("{}: {e}", p.display())),
        }
    }
}

fn bridge_line(legs: &[LegStats]) -> String {
    let (Some(a), Some(b)) = (legs.first(), legs.get(1)) else {
        return "no counters".into();
    };
    let pct = |lost: u64, of: u64| {
        if of == 0 {
            0.0
        } else {
            lost as f64 * 100.0 / of as f64
        }
    };
    let (c2s_in, c2s_lost) = (a.a_to_b.received, b.a_to_b.lost);
    let (s2c_in, s2c_lost) = (b.b_to_a.received, a.b_to_a.lost);
    let other: u64 = legs
        .iter()
        .flat_map(|l| [l.a_to_b, l.b_to_a])
        .map(|d| d.overflow + d.oversize + d.tx_errors)
        .sum();
    format!(
        "client->server {c2s_in} frames, {c2s_lost} dropped ({:.2} %); \
         server->client {s2c_in} frames, {s2c_lost} dropped ({:.2} %); \
         {other} lost otherwise (queue full, oversize, send error)",
        pct(c2s_lost, c2s_in),
        pct(s2c_lost, s2c_in)
    )
}
