//! Helpers of the `xdprobe trace` tests (`trace_live`): the echo pair of
//! namespaces, runs of `trace echo` and `trace run`, the programs and links
//! they leave attached, and readers of the report's groups and steps.

use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::live_support::topo::{signal, wait_exit, wait_for};
use crate::live_support::{NetNs, VethOpts, addr, neigh, veth};
use serde_json::Value;

pub const XDPROBE: &str = env!("CARGO_BIN_EXE_xdprobe");
pub const A_IP: &str = "198.51.100.1";
pub const B_IP: &str = "198.51.100.2";
pub const A_DEV: &str = "ta0";
pub const B_DEV: &str = "tb0";

/// The tests count attached programs: one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn xdprobe(args: &[&str]) -> Output {
    Command::new(XDPROBE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running xdprobe")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn tracefs() -> &'static Path {
    for p in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(p).join("events").is_dir() {
            return Path::new(p);
        }
    }
    // xdprobe mounts it when missing; the list test runs it first.
    Path::new("/sys/kernel/tracing")
}

/// Does this format file (read here, not by xdprobe's parser) declare an
/// 8-byte pointer field named skbaddr, skb_addr or skb?
pub fn format_has_skb(format: &str) -> bool {
    format.lines().any(|l| {
        let Some(decl) = l.trim().strip_prefix("field:") else {
            return false;
        };
        let mut parts = decl.split(';').map(str::trim);
        let d = parts.next().unwrap_or("");
        let sized8 = parts.any(|p| p == "size:8");
        let name = d.rsplit([' ', '*']).next().unwrap_or("");
        sized8 && d.contains('*') && matches!(name, "skbaddr" | "skb_addr" | "skb")
    })
}

/// Tracepoints and those with an skb field, counted from tracefs directly.
pub fn tracefs_counts() -> (usize, usize) {
    let (mut want_tps, mut want_skb) = (0usize, 0usize);
    for sys in std::fs::read_dir(tracefs().join("events"))
        .unwrap()
        .flatten()
    {
        let Ok(evs) = std::fs::read_dir(sys.path()) else {
            continue;
        };
        for ev in evs.flatten() {
            let f = ev.path().join("format");
            if f.is_file() {
                want_tps += 1;
                if format_has_skb(&std::fs::read_to_string(&f).unwrap_or_default()) {
                    want_skb += 1;
                }
            }
        }
    }
    (want_tps, want_skb)
}

/// Function symbols: unique text-symbol names in kallsyms, less the JIT
/// images of loaded BPF programs (module [bpf]), which come and go.
pub fn kallsyms_functions(kallsyms: &str) -> BTreeSet<&str> {
    kallsyms
        .lines()
        .filter(|l| !l.ends_with("[bpf]"))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (_, ty, name) = (it.next()?, it.next()?, it.next()?);
            (ty == "t" || ty == "T").then_some(name)
        })
        .collect()
}

/// Ids of loaded programs named `trace_point` and of perf links to them.
pub fn attached() -> (BTreeSet<u64>, BTreeSet<u64>) {
    let progs: Value = serde_json::from_slice(
        &Command::new("bpftool")
            .args(["-j", "prog", "show"])
            .output()
            .expect("bpftool prog show")
            .stdout,
    )
    .unwrap_or(Value::Array(vec![]));
    let ids: BTreeSet<u64> = progs
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == "trace_point")
        .filter_map(|p| p["id"].as_u64())
        .collect();
    let links: Value = serde_json::from_slice(
        &Command::new("bpftool")
            .args(["-j", "link", "show"])
            .output()
            .expect("bpftool link show")
            .stdout,
    )
    .unwrap_or(Value::Array(vec![]));
    let lids = links
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["prog_id"].as_u64().is_some_and(|p| ids.contains(&p)))
        .filter_map(|l| l["id"].as_u64())
        .collect();
    (ids, lids)
}

/// Two namespaces joined by a veth, static neighbours, offloads off.
pub struct Pair {
    pub a: NetNs,
    pub b: NetNs,
}

pub fn pair() -> Pair {
    let a = NetNs::new("tra");
    let b = NetNs::new("trb");
    veth(&a, A_DEV, &b, B_DEV, VethOpts::default());
    addr(&a, A_DEV, &format!("{A_IP}/24"));
    addr(&b, B_DEV, &format!("{B_IP}/24"));
    let (ma, mb) = (a.mac(A_DEV), b.mac(B_DEV));
    neigh(&a, A_DEV, B_IP, &mb);
    neigh(&b, B_DEV, A_IP, &ma);
    Pair { a, b }
}

pub fn ns_inode(ns: &NetNs) -> u64 {
    std::fs::metadata(format!("/run/netns/{}", ns.name))
        .unwrap()
        .ino()
}

pub struct Run {
    pub report: Value,
    pub rtt_p50_us: f64,
    pub sent: u64,
    pub replies: u64,
    pub trails: Vec<Value>,
}

/// Sends probes from A to B's listener and reports them.
pub fn echo(p: &Pair, dir: &Path, tag: &str, rate: u32, count: u32) -> Run {
    let out = dir.join(format!("{tag}.jsonl"));
    let o =
        p.a.command(XDPROBE)
            .args(["trace", "echo", "--send", &format!("{B_IP}:7")])
            .args(["--rate", &rate.to_string(), "--count", &count.to_string()])
            .args(["--idle", "300ms", "--wait", "300ms", "--stats", "--out"])
            .arg(&out)
            .stdin(Stdio::null())
            .output()
            .unwrap();
    let err = text(&o.stderr);
    assert!(o.status.success(), "{tag}: {err}");
    eprintln!(
        "{tag}: {}",
        err.lines()
            .filter(|l| !l.contains("INFO"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let line = err.lines().find(|l| l.starts_with("probes:")).unwrap();
    let num_before = |word: &str| -> f64 {
        let i = line.find(word).unwrap();
        line[..i]
            .split_whitespace()
            .last()
            .unwrap()
            .trim_end_matches(',')
            .parse()
            .unwrap()
    };
    let p50 = line
        .split("p50 ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let rep = xdprobe(&["trace", "report", "--json", out.to_str().unwrap()]);
    assert!(rep.status.success(), "{}", text(&rep.stderr));
    let trails = read_trails(&out);
    Run {
        report: serde_json::from_slice(&rep.stdout).unwrap(),
        rtt_p50_us: p50.parse().unwrap(),
        sent: num_before("sent") as u64,
        replies: num_before("replies") as u64,
        trails,
    }
}

pub fn group<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no {name} group in {r}"))
}

pub fn path(g: &Value) -> Vec<String> {
    g["common_path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

/// `want` appears in `path` in this order (other points may lie between).
pub fn in_order(path: &[String], want: &[&str]) -> bool {
    let mut it = path.iter();
    want.iter().all(|w| it.any(|p| p == w))
}

/// p50 (µs) of each step of the group's common path, by (from, to).
pub fn step_p50s(g: &Value) -> Vec<((String, String), f64)> {
    g["path_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                (
                    s["from"].as_str().unwrap().to_owned(),
                    s["to"].as_str().unwrap().to_owned(),
                ),
                s["p50_us"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The tbf's backlog in bytes, from `tc -s -j qdisc show` (the text
/// form rounds a backlog within 16 B of a multiple of 1024 to `NKb`).
pub fn backlog_bytes(ns: &NetNs) -> Option<u64> {
    let out = ns.exec(&["tc", "-s", "-j", "qdisc", "show", "dev", A_DEV]);
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v[0]["backlog"].as_u64()
}

/// Sends `n` datagrams from `ns` to B's port 9, with `SO_MARK` = `mark`
/// when given.
pub fn send_to_port9(ns: &NetNs, n: u8, mark: Option<u32>) {
    use std::os::fd::AsRawFd;
    ns.run(|| {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        if let Some(m) = mark {
            // SAFETY: setsockopt(SO_MARK) with a u32 that outlives the call.
            let rc = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_MARK,
                    (&m as *const u32).cast(),
                    4,
                )
            };
            assert_eq!(rc, 0, "SO_MARK: {}", std::io::Error::last_os_error());
        }
        for i in 0..n {
            s.send_to(&[i; 32], (B_IP, 9)).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
    });
}

/// Starts `xdprobe trace run ARGS --out OUT`, its stderr to `log`.
pub fn spawn_trace(args: &[&str], out: &Path, log: &Path) -> Child {
    Command::new(XDPROBE)
        .args(["trace", "run"])
        .args(args)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// Stops a `trace run` with SIGTERM; it exits cleanly.
pub fn stop_trace(child: &mut Child, log: &Path) {
    signal(child.id(), libc::SIGTERM);
    let st = wait_exit(child, Duration::from_secs(10), "trace run");
    assert!(st.success(), "{}", std::fs::read_to_string(log).unwrap());
}

/// The trails of a JSON-lines file, one per line.
pub fn read_trails(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs the tracer around `traffic`, returns its trails.
pub fn trace_around(dir: &Path, tag: &str, args: &[&str], traffic: impl FnOnce()) -> Vec<Value> {
    let before = attached();
    let out = dir.join(format!("{tag}.jsonl"));
    let log = dir.join(format!("{tag}.log"));
    let mut child = spawn_trace(
        &[&["--duration", "20s", "--idle", "300ms"], args].concat(),
        &out,
        &log,
    );
    wait_for(Duration::from_secs(20), "the tracer to attach", || {
        attached().1.len() > before.1.len()
    });
    // Every point attached: the link count stops growing.
    std::thread::sleep(Duration::from_millis(300));
    traffic();
    std::thread::sleep(Duration::from_millis(500));
    stop_trace(&mut child, &log);
    read_trails(&out)
}
