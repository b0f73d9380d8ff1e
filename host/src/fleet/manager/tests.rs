use xdprobe_common::host::layer as code;

use super::*;
use crate::stack::matcher::MatcherConfig;

const NS_A: u32 = 4026532001; // sender's namespace on host A
const NS_B: u32 = 4026532001; // the same inode number on host B: a different namespace

fn hello(agent: &str, instance: u64) -> Hello {
    Hello {
        version: crate::fleet::proto::VERSION,
        agent: agent.into(),
        instance,
        sample_bytes: 0,
        layers: vec![],
        sync: Some("203.0.113.1:3190".into()),
    }
}

fn ev(layer: u8, seq: u32, len: u32, t_ns: u64, netns: u32) -> StackEvent {
    let mut e = StackEvent {
        ts_ns: t_ns,
        seq,
        end: seq.wrapping_add(len),
        netns,
        layer,
        family: 2,
        sport: 40000,
        dport: 5201,
        tgid: if matches!(layer, code::SOCK_TX | code::SOCK_RX) {
            7
        } else {
            0
        },
        ..StackEvent::default()
    };
    e.saddr[..4].copy_from_slice(&[198, 51, 100, 1]);
    e.daddr[..4].copy_from_slice(&[198, 51, 100, 2]);
    e
}

fn round(at_ns: u64, offset_ns: i64) -> Estimate {
    Estimate {
        at_ns,
        offset_ns,
        uncertainty_ns: 3_000,
        min_delay_ns: 20_000,
        answered: 16,
        kept: 4,
        insane: 0,
    }
}

fn fleet() -> Fleet {
    Fleet::new(FleetConfig {
        matcher: MatcherConfig {
            sample_bytes: 0,
            hold_ns: 2_000_000_000,
            raw_samples: true,
            ..MatcherConfig::default()
        },
        max_unsynced: 1000,
        max_agents: 8,
    })
}

/// Host A's clock runs `off_a` ahead of the manager's, B's `off_b`. One
/// write per 10 ms; A's layers take 1, 2, 3 µs, the network 5 ms, B's
/// layers 4, 5, 6 µs (manager time).
fn run(off_a: i64, off_b: i64) -> Vec<CrossReport> {
    let mut f = fleet();
    assert!(f.hello(hello("a", 1)));
    assert!(f.hello(hello("b", 2)));
    let t0 = 1_000_000_000_000u64;
    f.estimate("a", round(t0 - 1_000_000_000, off_a));
    f.estimate("b", round(t0 - 1_000_000_000, off_b));
    let on = |t: u64, off: i64| t.wrapping_add_signed(off);
    for i in 0..20u32 {
        let seq = 1000 + i * 1000;
        let t = t0 + u64::from(i) * 10_000_000;
        let a = [
            ev(code::TCP_TX, seq, 1000, on(t + 1_000, off_a), NS_A),
            ev(code::IP_TX, seq, 1000, on(t + 3_000, off_a), NS_A),
            ev(code::DEV_TX, seq, 1000, on(t + 6_000, off_a), NS_A),
            ev(code::SOCK_TX, seq, 1000, on(t, off_a), NS_A),
        ];
        let dev_rx = t + 6_000 + 5_000_000;
        let b = [
            ev(code::DEV_RX, seq, 1000, on(dev_rx, off_b), NS_B),
            ev(code::IP_RX, seq, 1000, on(dev_rx + 4_000, off_b), NS_B),
            ev(code::TCP_RX, seq, 1000, on(dev_rx + 9_000, off_b), NS_B),
            ev(code::SOCK_RX, seq, 1000, on(dev_rx + 15_000, off_b), NS_B),
        ];
        // B's events reach the manager before A's, in two frames.
        f.events("b", &b);
        f.events("a", &a);
    }
    let mut out = Vec::new();
    let mut samples = 0;
    f.finish(t0 + 10_000_000_000, &mut |o| match o {
        FleetOut::Report(r) => out.push(*r),
        FleetOut::Sample(_) => samples += 1,
    });
    assert_eq!(samples, 20);
    out
}

fn seg(r: &CrossReport, name: &str) -> f64 {
    r.report
        .segments
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name}: {:?}", r.report.segments))
        .summary
        .mean_us
}

#[test]
fn skewed_clocks_are_corrected_before_matching() {
    for (a, b) in [
        (0, 0),
        (1_000_000, -1_000_000),
        (250_000_000, -250_000_000),
        (-3_000_000_000, 7),
    ] {
        let r = run(a, b);
        assert_eq!(r.len(), 1, "one flow");
        let r = &r[0];
        assert!(r.crosses_hosts());
        assert_eq!(r.report.complete, 20);
        assert_eq!(r.report.layers.len(), 8);
        assert_eq!(seg(r, "T1"), 1.0);
        assert_eq!(seg(r, "T3"), 3.0);
        assert_eq!(seg(r, "T4"), 5000.0, "offsets {a} {b}");
        assert_eq!(seg(r, "T7"), 6.0);
        assert_eq!(r.report.t8.unwrap().mean_us, 5021.0);
        let (s, d) = (r.sender.as_ref().unwrap(), r.receiver.as_ref().unwrap());
        assert_eq!((s.agent.as_str(), s.netns), ("a", NS_A));
        assert_eq!((d.agent.as_str(), d.netns), ("b", NS_B));
        assert_eq!(s.clock.unwrap().offset_ns, a);
        assert_eq!(r.clock_uncertainty_ns(), 6_000);
    }
}

#[test]
fn events_wait_for_the_first_clock_round_within_bounds() {
    let mut f = fleet();
    f.hello(hello("a", 1));
    f.hello(hello("b", 2));
    let off = 250_000_000i64;
    let t = 5_000_000_000_000u64;
    f.estimate("b", round(t, 0));
    // A's events come before A's clock is known.
    f.events(
        "a",
        &[
            ev(code::DEV_TX, 1, 100, t.wrapping_add_signed(off), NS_A),
            ev(
                code::SOCK_TX,
                1,
                100,
                t.wrapping_add_signed(off) - 50_000,
                NS_A,
            ),
        ],
    );
    f.events(
        "b",
        &[
            ev(code::DEV_RX, 1, 100, t + 1_000_000, NS_B),
            ev(code::SOCK_RX, 1, 100, t + 1_100_000, NS_B),
        ],
    );
    let mut out = Vec::new();
    f.advance(t + 5_000_000_000, &mut |o| {
        if let FleetOut::Report(r) = o {
            out.push(*r)
        }
    });
    assert!(out.is_empty(), "nothing to report yet");
    f.estimate("a", round(t, off));
    f.finish(t + 10_000_000_000, &mut |o| {
        if let FleetOut::Report(r) = o {
            out.push(*r)
        }
    });
    assert_eq!(out.len(), 1);
    assert_eq!(seg(&out[0], "T4"), 1000.0);
    assert_eq!(f.agents()[0].counters.events, 2);

    // The wait is bounded: the oldest are dropped and counted.
    let mut f = fleet();
    f.hello(hello("a", 1));
    let evs: Vec<StackEvent> = (0..1500)
        .map(|i| ev(code::DEV_TX, i * 10, 10, 1, NS_A))
        .collect();
    f.events("a", &evs);
    let v = &f.agents()[0];
    assert_eq!(v.counters.unsynced_dropped, 500);
}

#[test]
fn a_restarted_agent_is_measured_again_and_strangers_are_counted() {
    let mut f = fleet();
    f.hello(hello("a", 1));
    f.estimate("a", round(1_000, 5));
    assert!(f.clock("a").is_some());
    f.gone("a");
    assert!(f.sync_targets().is_empty(), "not probed while away");
    f.hello(hello("a", 1));
    assert!(f.clock("a").is_some(), "a reconnect keeps the clock");
    f.hello(hello("a", 9));
    assert!(f.clock("a").is_none(), "a new instance is measured afresh");
    let v = &f.agents()[0];
    assert_eq!((v.counters.connects, v.counters.restarts), (3, 1));
    assert_eq!(
        f.sync_targets(),
        vec![("a".to_owned(), "203.0.113.1:3190".to_owned(), 9)]
    );
    f.events("nobody", &[ev(code::DEV_TX, 1, 1, 1, 1)]);
    assert_eq!(f.counters().events_unknown_agent, 1);
    for i in 0..20 {
        f.hello(hello(&format!("x{i}"), i));
    }
    assert_eq!(f.counters().agents_refused, 13);
}
