//! Across hosts, when things go wrong: the manager killed and away for
//! 30 s under traffic, then an agent killed and restarted. The agents must
//! buffer within their bound, count what they drop, reconnect, and the new
//! manager must carry on matching; nothing may crash or stay loaded.

mod common;
mod crosshost_support;
mod host_support;
mod live_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crosshost_support::{DB4, M4, Middle, Rig, flow};
use host_support::timed_messages;
use live_support::require_root;

/// `name: value` of the agent's final stream counters.
fn stream_counter(log: &str, name: &str) -> u64 {
    log.split("manager stream: AgentStats {")
        .nth(1)
        .and_then(|s| s.split(&format!("{name}: ")).nth(1))
        .and_then(|s| s.split([',', ' ', '}']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {log}"))
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn manager_down_30s_then_restarts_agents_buffer_count_and_reconnect() {
    if !require_root!() {
        return;
    }
    let _serial = host_support::serial();
    let before = crosshost_support::clocksync_programs();
    let rig = Rig::new(Middle::Linux);
    let port = 5411;
    let p = port.to_string();
    let cap = 3000u64;
    let caps = cap.to_string();
    let args = [
        "--port",
        p.as_str(),
        "--sample-bytes",
        "0",
        "--manager-buffer",
        caps.as_str(),
    ];
    let m = rig.manager("sync_interval = \"1s\"");
    let mut a = rig.agent('a', M4, Some(2_000_000), &args);
    let b = rig.agent('b', M4, None, &args);
    rig.wait_rounds(&["a", "b"], 1, Duration::from_secs(30));
    let server: SocketAddr = format!("{DB4}:{port}").parse().unwrap();
    std::thread::scope(|sc| {
        // 42 s of traffic: 200 messages a second, through the outage.
        let traffic = sc.spawn(|| {
            timed_messages(
                &rig.a,
                &rig.b,
                server,
                &host_support::Messages {
                    count: 8400,
                    size: 1000,
                    gap: Duration::from_millis(5),
                    reader: host_support::Reader::Eager,
                },
                &|_| {},
            )
        });
        std::thread::sleep(Duration::from_secs(3));
        // The manager crashes and stays away for 30 s.
        m.kill();
        let rss_before = rss_kib(a.pid());
        std::thread::sleep(Duration::from_secs(30));
        assert!(a.alive(), "agent a survived the outage:\n{}", a.log());
        let rss_after = rss_kib(a.pid());
        eprintln!("agent a RSS {rss_before} kB before the outage, {rss_after} kB after 30 s of it");
        assert!(rss_after < rss_before + 64 * 1024, "memory stays bounded");
        assert!(a.log().contains("manager connection down"), "{}", a.log());
        let m2 = rig.manager("sync_interval = \"1s\"");
        a.wait_log(
            &["buffer full, dropping the oldest events"],
            Duration::from_secs(1),
        );
        for ag in [&a, &b] {
            let end = Instant::now() + Duration::from_secs(15);
            while ag.count("connected to the manager") < 2 {
                assert!(Instant::now() < end, "no reconnect:\n{}", ag.log());
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // The new manager admitted both (an agent's "connected" is its
        // TCP connection; the TLS handshake and HELLO come after it).
        m2.wait_log(
            &["agent connected agent=a", "agent connected agent=b"],
            Duration::from_secs(15),
        );
        // Then agent b crashes and comes back (a new instance: measured
        // again).
        b.kill();
        std::thread::sleep(Duration::from_millis(500));
        let b2 = rig.agent('b', M4, None, &args);
        let timed = traffic.join().expect("traffic");
        assert!(timed.len() > 8000, "the connection lived through it all");
        std::thread::sleep(Duration::from_secs(3));
        let la = a.stop();
        let lb = b2.stop();
        let lm = m2.stop();
        let dropped = stream_counter(&la, "dropped_buffer");
        let buffered = stream_counter(&la, "buffered");
        let connects = stream_counter(&la, "connects");
        let sent = stream_counter(&la, "sent");
        eprintln!(
            "agent a: sent {sent}, dropped {dropped} (buffer of {cap}), {connects} connections"
        );
        assert!(dropped > 0, "the outage overflowed the buffer: {la}");
        assert!(buffered <= cap);
        assert_eq!(connects, 2);
        assert_eq!(stream_counter(&lb, "connects"), 1);
        // The new manager heard of a's drops (its STATS frames), saw b
        // come back as a new instance, and matched what came after.
        let block = |agent: &str| -> String {
            lm.split(&format!("agent: \"{agent}\""))
                .nth(1)
                .and_then(|s| s.split("AgentView {").next())
                .unwrap_or_else(|| panic!("no agent {agent} in {lm}"))
                .to_owned()
        };
        let count = |b: &str, name: &str| -> u64 {
            b.split(&format!("{name}: "))
                .nth(1)
                .and_then(|s| s.split([',', '\n']).next())
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {b}"))
        };
        let (ba, bb) = (block("a"), block("b"));
        assert!(count(&ba, "dropped_buffer") > 0, "{ba}");
        // On failure: what the manager said of each connection, and b2.
        let conn_log: Vec<&str> = lm
            .lines()
            .filter(|l| {
                ["agent connected", "disconnected", "closed", "refused"]
                    .iter()
                    .any(|w| l.contains(w))
            })
            .collect();
        assert_eq!(
            count(&bb, "restarts"),
            1,
            "{bb}\nmanager's connections:\n{}\nagent b2:\n{lb}",
            conn_log.join("\n")
        );
        let j = rig.manager_json();
        let r = flow(&j, None, Some(port));
        assert!(r["complete"].as_u64().unwrap() > 100, "{r}");
    });
    // The killed processes' programs went with them.
    let left = crosshost_support::clocksync_left(&before);
    assert!(left.is_empty(), "still loaded: {left:?}");
}
