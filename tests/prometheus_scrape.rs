//! A real Prometheus (Debian's `prometheus`) scrapes a running `xdprobe run`
//! and `xdprobe manager`, with the shipped alerting rules loaded. The probe
//! captures crafted frames sent over a veth between namespaces; its flow
//! records go to a UDP socket of the test and to a TCP collector nobody
//! listens on; a host agent connects to the manager and goes away.
//!
//! Asserted through Prometheus' HTTP API, each polled until the scrape
//! happened (bounded): the frames, records, parse drops and export
//! counters the probe itself reports (and, independently, the frames the
//! test sent, the datagrams its socket received, one drop per malformed
//! frame); `up == 1` for both jobs; the agent's connection going 1 → 0;
//! the collector-down and agent-disconnected alerts pending or firing on
//! those real series; every rule evaluated without error; and every
//! expression of the Grafana dashboard accepted by Prometheus, naming
//! only series the two endpoints export. promtool checks and unit-tests
//! the rules (a test of its own).
//!
//! Needs root; skips loudly otherwise (never under CI=true).

mod live_support;
mod prom_support;

use std::collections::BTreeSet;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use live_support::frames::{all_frames, beyond_limits, send_raw};
use live_support::probe::{Probe, ProbeOpts, metric};
use live_support::topo::{TempDir, signal, wait_exit};
use live_support::{NetNs, VethOpts, require_root, require_tool, veth};
use prom_support::{exposed_names, get, promql_names, query, samples, scalar};
use serde_json::Value;

const TX_DEV: &str = "pst0";
const PROBE_DEV: &str = "psp0";
const PROM: u16 = 9090;
const PROBE_METRICS: u16 = 9464;
const MANAGER_METRICS: u16 = 9465;
const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/prometheus/xdprobe.rules.yml"
);
const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/xdprobe.json");

/// A background process killed on drop.
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(ns: &NetNs, args: &[&str], log: &Path) -> Bg {
    let child = ns
        .command(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log).expect("log"))
        .stderr(std::fs::File::create(log.with_extension("err")).expect("log"))
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {args:?}: {e}"));
    Bg(child)
}

/// Polls `f` until it returns `Ok`, at most `limit`; panics with `what`
/// and the last `Err` text on timeout.
fn poll<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let end = Instant::now() + limit;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() > end => panic!("{what}: not within {limit:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

fn log_of(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn prometheus_scrapes_the_probe_and_the_manager() {
    if !require_root!() || !require_tool("prometheus") {
        return;
    }
    let tmp = TempDir::new("prometheus");
    let dir = tmp.path();
    let tx = NetNs::new("pst");
    let ns = NetNs::new("psp");
    veth(&tx, TX_DEV, &ns, PROBE_DEV, VethOpts::default());
    ns.exec(&["ip", "link", "set", PROBE_DEV, "promisc", "on"]);
    let udp = ns.run(|| UdpSocket::bind("127.0.0.1:0").expect("udp collector"));
    udp.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let dead = ns.run(|| {
        let l = TcpListener::bind("127.0.0.1:0").expect("port");
        l.local_addr().expect("addr").port()
    });
    let udp_url = format!("udp://{}", udp.local_addr().expect("addr"));
    let tcp_url = format!("tcp://127.0.0.1:{dead}");
    let probe = Probe::start(
        &ns,
        dir,
        &ProbeOpts {
            iface: PROBE_DEV,
            queues: 1,
            collectors: vec![udp_url.clone(), tcp_url.clone()],
            metrics_port: PROBE_METRICS,
            extra_args: Vec::new(),
            idle_timeout: "1s",
            active_timeout: "300s",
            user: None,
            extra_config: "",
            interface_extra: "",
        },
    );
    let _manager = start_manager(&ns, dir);
    let _prom = start_prometheus(&ns, dir);

    // Traffic, then the probe's own numbers once they settle.
    let beyond = beyond_limits();
    let mut frames = all_frames();
    frames.extend(beyond.iter().map(|(_, f)| f.clone()));
    tx.run(|| send_raw(TX_DEV, &frames));
    let to_workers = (frames.len() - 1) as u64;
    let direct = settle(&probe, &ns, to_workers, &udp_url);
    let records = metric(&direct, "xdprobe_worker_records_total", "");
    assert!(records > 0, "{direct}");
    datagrams_match(&probe, &ns, &udp, &udp_url);

    let reasons: Vec<&str> = beyond.iter().map(|(r, _)| *r).collect();
    let expect = expected(&direct, to_workers, &udp_url, &tcp_url, &reasons);
    poll(
        Duration::from_secs(30),
        "Prometheus has the probe's values",
        || {
            for (e, want) in &expect {
                match scalar(&ns, PROM, e) {
                    Some(v) if v == *want => {}
                    got => return Err(format!("{e} = {got:?}, the probe says {want}")),
                }
            }
            Ok(())
        },
    );
    eprintln!(
        "Prometheus: {to_workers} frames, {records} records, one parse drop per malformed frame, up == 1 for both jobs"
    );

    agent_comes_and_goes(&ns, dir);
    alerts_and_rules(&ns);
    dashboard_refers_to_exported_series(&ns);

    let (st, _, log) = probe.stop();
    assert!(st.success(), "{st}\n{log}");
}

/// What Prometheus must show once the scrapes caught up: (query, value)
/// from the probe's own exposition `direct` and the test's references.
fn expected(
    direct: &str,
    to_workers: u64,
    udp_url: &str,
    tcp_url: &str,
    drop_reasons: &[&str],
) -> Vec<(String, f64)> {
    let records = metric(direct, "xdprobe_worker_records_total", "");
    vec![
        (
            "sum(xdprobe_worker_rx_frames_total)".into(),
            to_workers as f64,
        ),
        ("sum(xdprobe_worker_records_total)".into(), records as f64),
        (
            format!("xdprobe_export_records_total{{collector=\"{udp_url}\"}}"),
            records as f64,
        ),
        (
            format!("xdprobe_export_queued_records{{collector=\"{tcp_url}\"}}"),
            metric(direct, "xdprobe_export_queued_records", tcp_url) as f64,
        ),
        (
            format!("xdprobe_export_collector_up{{collector=\"{tcp_url}\"}}"),
            0.0,
        ),
        ("up{job=\"xdprobe\"}".into(), 1.0),
        ("up{job=\"xdprobe-manager\"}".into(), 1.0),
    ]
    .into_iter()
    .chain(drop_reasons.iter().map(|reason| {
        (
            format!("xdprobe_worker_parse_drops_total{{reason=\"{reason}\"}}"),
            1.0,
        )
    }))
    .collect()
}

/// `xdprobe manager` in `ns`, metrics on MANAGER_METRICS.
fn start_manager(ns: &NetNs, dir: &Path) -> Bg {
    // Its agents' channel as an operator sets it up: gen-certs' files.
    let pki = dir.join("pki");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xdprobe"))
        .args(["manager", "gen-certs", "--dir", pki.to_str().expect("path")])
        .args(["--manager", "127.0.0.1", "--agent", "pa"])
        .output()
        .expect("gen-certs");
    assert!(out.status.success(), "gen-certs: {out:?}");
    let p = |f: &str| pki.join(f).display().to_string();
    let cfg = dir.join("manager.toml");
    std::fs::write(
        &cfg,
        format!(
            "[manager]\nlisten = \"127.0.0.1:7460\"\nsample_bytes = 0\n\
             tls_cert = \"{}\"\ntls_key = \"{}\"\ntls_ca = \"{}\"\n\n\
             [metrics]\nenabled = true\nlisten = \"127.0.0.1:{MANAGER_METRICS}\"\n",
            p("manager.pem"),
            p("manager.key"),
            p("ca.pem")
        ),
    )
    .expect("manager config");
    let log = dir.join("manager.log");
    let m = spawn(
        ns,
        &[
            env!("CARGO_BIN_EXE_xdprobe"),
            "manager",
            "-c",
            cfg.to_str().expect("path"),
        ],
        &log,
    );
    poll(Duration::from_secs(20), "manager listening", || {
        let l = log_of(&log.with_extension("err"));
        l.contains("manager listening").then_some(()).ok_or(l)
    });
    m
}

/// Prometheus in `ns`: both jobs every second, the shipped rules.
fn start_prometheus(ns: &NetNs, dir: &Path) -> Bg {
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {RULES}\n\
             scrape_configs:\n\
             \x20 - job_name: xdprobe\n    static_configs:\n      - targets: [\"127.0.0.1:{PROBE_METRICS}\"]\n\
             \x20 - job_name: xdprobe-manager\n    static_configs:\n      - targets: [\"127.0.0.1:{MANAGER_METRICS}\"]\n"
        ),
    )
    .expect("prometheus config");
    let data = dir.join("tsdb");
    let p = spawn(
        ns,
        &[
            "prometheus",
            &format!("--config.file={}", cfg.display()),
            &format!("--storage.tsdb.path={}", data.display()),
            &format!("--web.listen-address=127.0.0.1:{PROM}"),
            "--log.level=warn",
        ],
        &dir.join("prometheus.log"),
    );
    poll(Duration::from_secs(60), "Prometheus ready", || {
        match get(ns, PROM, "/-/ready") {
            (200, _) => Ok(()),
            other => Err(format!("{other:?} {}", log_of(&dir.join("prometheus.err")))),
        }
    });
    p
}

/// Waits until the workers read every frame meant for them and the
/// records stopped changing and all reached the UDP collector; the probe's
/// exposition text then.
fn settle(probe: &Probe, ns: &NetNs, to_workers: u64, udp_url: &str) -> String {
    let mut last = None;
    poll(
        Duration::from_secs(30),
        "the probe's counters settle",
        || {
            let m = probe.metrics(ns);
            let frames = metric(&m, "xdprobe_worker_rx_frames_total", "");
            let records = metric(&m, "xdprobe_worker_records_total", "");
            let exported = metric(&m, "xdprobe_export_records_total", udp_url);
            let now = (frames, records, exported);
            let stable =
                last == Some(now) && frames == to_workers && records > 0 && exported == records;
            last = Some(now);
            if stable {
                Ok(m)
            } else {
                std::thread::sleep(Duration::from_millis(1200));
                Err(format!(
                    "frames {frames}/{to_workers}, records {records}, exported {exported}"
                ))
            }
        },
    )
}

/// The messages the probe says it sent to the UDP collector are the
/// datagrams the test's socket received (the count is published each
/// second, after the sends, and loopback delivers at once: before ≤
/// received ≤ after, the last polled until the next publication).
fn datagrams_match(probe: &Probe, ns: &NetNs, udp: &UdpSocket, url: &str) {
    let messages = || metric(&probe.metrics(ns), "xdprobe_export_messages_total", url);
    let before = messages();
    let mut buf = [0u8; 65_536];
    let mut received = 0u64;
    while udp.recv(&mut buf).is_ok() {
        received += 1;
    }
    let after = poll(
        Duration::from_secs(10),
        "the message count published",
        || {
            let after = messages();
            if after >= received {
                Ok(after)
            } else {
                Err(format!("{after} published, {received} received"))
            }
        },
    );
    assert!(
        before <= received && received <= after && before > 0,
        "messages {before}..{after}, datagrams received {received}"
    );
}

/// A host agent connects to the manager, then stops: Prometheus sees
/// `xdprobe_manager_agent_connected` go 1 → 0.
fn agent_comes_and_goes(ns: &NetNs, dir: &Path) {
    let log = dir.join("agent.log");
    let pki = |f: &str| dir.join("pki").join(f).display().to_string();
    let (cert, key, ca) = (pki("agent-pa.pem"), pki("agent-pa.key"), pki("ca.pem"));
    let mut agent = spawn(
        ns,
        &[
            env!("CARGO_BIN_EXE_xdprobe"),
            "host",
            "--manager",
            "127.0.0.1:7460",
            "--agent-name",
            "pa",
            "--manager-cert",
            &cert,
            "--manager-key",
            &key,
            "--manager-ca",
            &ca,
            "--netns",
            &ns.name,
            "--port",
            "9",
        ],
        &log,
    );
    let connected = "xdprobe_manager_agent_connected{agent=\"pa\"}";
    poll(
        Duration::from_secs(60),
        "the agent connected, in Prometheus",
        || match scalar(ns, PROM, connected) {
            Some(1.0) => Ok(()),
            got => Err(format!(
                "{got:?}; agent: {}",
                log_of(&log.with_extension("err"))
            )),
        },
    );
    signal(agent.0.id(), libc::SIGTERM);
    wait_exit(&mut agent.0, Duration::from_secs(20), "xdprobe host");
    poll(
        Duration::from_secs(30),
        "the agent gone, in Prometheus",
        || match scalar(ns, PROM, connected) {
            Some(0.0) => Ok(()),
            got => Err(format!("{got:?}")),
        },
    );
    eprintln!("Prometheus: agent pa connected, then disconnected");
}

/// Every shipped rule evaluates without error on the real series, and the
/// two conditions this setup creates are alerts.
fn alerts_and_rules(ns: &NetNs) {
    let file = std::fs::read_to_string(RULES).expect("rules");
    let names: BTreeSet<String> = file
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(str::to_owned)
        .collect();
    poll(
        Duration::from_secs(30),
        "every rule evaluated, healthy",
        || {
            let (_, body) = get(ns, PROM, "/api/v1/rules");
            let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            let rules: Vec<&Value> = v["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .collect();
            let loaded: BTreeSet<String> = rules
                .iter()
                .filter_map(|r| r["name"].as_str().map(str::to_owned))
                .collect();
            if loaded != names {
                return Err(format!("loaded {loaded:?}"));
            }
            match rules.iter().find(|r| r["health"] != "ok") {
                None => Ok(()),
                Some(r) => Err(format!("{r}")),
            }
        },
    );
    for alert in ["XdprobeCollectorDown", "XdprobeAgentDisconnected"] {
        poll(Duration::from_secs(30), alert, || {
            let v = query(ns, PROM, &format!("ALERTS{{alertname=\"{alert}\"}}"));
            let s = samples(&v);
            let (m, _) = s.first().ok_or_else(|| format!("{v}"))?;
            eprintln!("Prometheus: {alert} {}", m["alertstate"]);
            Ok(())
        });
    }
    eprintln!("Prometheus: {} rules loaded, all healthy", names.len());
}

/// The dashboard is valid JSON whose every expression Prometheus accepts
/// and whose every series name one of the two endpoints exports.
fn dashboard_refers_to_exported_series(ns: &NetNs) {
    let d: Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).expect("dashboard"))
        .expect("the dashboard is valid JSON");
    let mut exported = exposed_names(&get(ns, PROBE_METRICS, "/metrics").1);
    exported.extend(exposed_names(&get(ns, MANAGER_METRICS, "/metrics").1));
    exported.insert("up".into());
    let (_, known) = get(ns, PROM, "/api/v1/label/__name__/values");
    let known: Value = serde_json::from_str(&known).expect("names");
    let mut exprs: Vec<String> = Vec::new();
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(p["id"].as_u64().expect("id")),
            "duplicate panel id: {p}"
        );
        let g = &p["gridPos"];
        assert!(
            g["x"].as_u64().unwrap_or(99) + g["w"].as_u64().unwrap_or(99) <= 24,
            "{p}"
        );
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().expect("expr").to_owned());
        }
    }
    for v in d["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = v["query"]["query"].as_str() {
            let inner = q.trim_start_matches("label_values(").trim_end_matches(')');
            let (metric_name, label) = inner.split_once(',').expect("label_values(metric, label)");
            exprs.push(format!("group by ({}) ({metric_name})", label.trim()));
        }
    }
    assert!(exprs.len() >= 20, "{} expressions", exprs.len());
    for e in &exprs {
        for n in promql_names(e) {
            assert!(
                exported.contains(&n),
                "dashboard: {n} in {e:?} is not exported"
            );
            if n == "up" || has_samples(ns, &n) {
                assert!(
                    known["data"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x == &n)),
                    "Prometheus never stored {n}"
                );
            }
        }
        let q = e
            .replace("$instance", ".*")
            .replace("$__rate_interval", "1m");
        let v = query(ns, PROM, &q);
        assert_eq!(v["status"], "success", "Prometheus refuses {q:?}: {v}");
    }
    eprintln!(
        "dashboard: {} expressions, all valid, all on exported series",
        exprs.len()
    );
}

/// Whether the endpoints show a sample of `name` (not only its TYPE line).
fn has_samples(ns: &NetNs, name: &str) -> bool {
    [PROBE_METRICS, MANAGER_METRICS].iter().any(|&port| {
        get(ns, port, "/metrics").1.lines().any(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
    })
}

/// promtool accepts the rules and the example configuration, and the
/// rules' unit tests pass (each alert fires on its series, with its text).
#[test]
fn promtool_accepts_and_unit_tests_the_rules() {
    if !require_tool("promtool") {
        return;
    }
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus"));
    let run = |args: &[&str], cwd: &Path| {
        let o = Command::new("promtool")
            .args(args)
            .current_dir(cwd)
            .output()
            .expect("promtool");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "promtool {args:?}:\n{text}");
        text
    };
    let out = run(&["check", "rules", "xdprobe.rules.yml"], &dir);
    assert!(out.contains("SUCCESS: 11 rules found"), "{out}");
    run(&["test", "rules", "xdprobe.rules.test.yml"], &dir);
    // The example configuration names the installed rules file: point it
    // at the source tree's copy.
    let tmp = TempDir::new("promtool");
    let cfg = std::fs::read_to_string(dir.join("prometheus.yml"))
        .expect("example")
        .replace("/usr/share/xdprobe/prometheus/xdprobe.rules.yml", RULES);
    std::fs::write(tmp.path().join("prometheus.yml"), cfg).expect("write");
    run(&["check", "config", "prometheus.yml"], tmp.path());
}
