//! One test per validation rule, each asserting the key, the line and the
//! message an operator would see.

use std::time::Duration;

use super::*;
use crate::settings::{Handoff, Mode, XdpMode, XskBind};

/// A valid interface block, lines 1-3.
const IFACE: &str = "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 0 }]\n";

fn env() -> Environment {
    Environment::with_cores(2)
}

fn errs(text: &str) -> Vec<ConfigError> {
    match from_text(text, &env()) {
        Ok(c) => panic!("config should be refused:\n{text}\nparsed as {c:?}"),
        Err(e) => e,
    }
}

/// Asserts exactly one error, at `key` on `line`, whose message contains `msg`.
#[track_caller]
fn one(text: &str, key: &str, line: usize, msg: &str) {
    let e = errs(text);
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    let e = &e[0];
    assert_eq!(e.key(), Some(key), "{e}");
    assert_eq!(e.line(), Some(line), "{e}");
    assert!(e.message().contains(msg), "{e}\n  lacks {msg:?}");
}

fn ok(text: &str) -> Config {
    from_text(text, &env()).unwrap_or_else(|e| panic!("{text}\n{e:#?}"))
}

#[test]
fn syntax_error_has_line_and_no_key() {
    let e = errs("[flow]\ncapacity = 5\n[export\n");
    assert_eq!(e.len(), 1);
    assert!(matches!(e[0], ConfigError::Syntax { .. }), "{:?}", e[0]);
    assert_eq!(e[0].line(), Some(3));
    assert_eq!(e[0].key(), None);
}

#[test]
fn unknown_keys_are_refused_with_their_line() {
    one(
        &format!("{IFACE}\n[flow]\nidle_timout = \"30s\"\n"),
        "flow.idle_timout",
        6,
        "unknown field `idle_timout`",
    );
    one(
        &format!("{IFACE}umem = 1\n"),
        "interface[0].umem",
        4,
        "unknown field `umem`",
    );
    one(
        "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 0, cpu = 1 }]\n",
        "interface[0].queues[0].cpu",
        3,
        "unknown field `cpu`",
    );
    one(
        &format!("{IFACE}[probes]\nmode = \"host\"\n"),
        "probes",
        4,
        "unknown field `probes`",
    );
}

#[test]
fn wrong_types_are_refused_in_toml_terms() {
    one(
        &format!("{IFACE}[flow]\ncapacity = \"big\"\n"),
        "flow.capacity",
        5,
        "expected an integer",
    );
    one(
        &format!("probe = 3\n{IFACE}"),
        "probe",
        1,
        "expected a table",
    );
    one(
        &format!("{IFACE}[filter]\nports = 53\n"),
        "filter.ports",
        5,
        "expected an array",
    );
    one(
        "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0 }]\n",
        "interface[0].queues[0]",
        3,
        "missing field `core`",
    );
}

#[test]
fn probe_section() {
    one(
        &format!("[probe]\nmode = \"tap\"\n{IFACE}"),
        "probe.mode",
        2,
        "\"tap\" is not one of: appliance, host",
    );
    one(
        &format!("[probe]\nuser = \"Root User\"\n{IFACE}"),
        "probe.user",
        2,
        "user name \"Root User\" is invalid",
    );
    one(
        &format!("[probe]\nlog_interval = \"0s\"\n{IFACE}"),
        "probe.log_interval",
        2,
        "log_interval must be greater than zero",
    );
    let c = ok(&format!(
        "[probe]\nmode = \"host\"\nuser = \"xdprobe\"\nlog_interval = \"1m\"\n{IFACE}"
    ));
    assert_eq!(c.probe.mode, Mode::Host);
    assert_eq!(c.probe.user.as_deref(), Some("xdprobe"));
    assert_eq!(c.probe.log_interval, Duration::from_secs(60));
}

#[test]
fn durations_need_units() {
    one(
        &format!("{IFACE}[flow]\nidle_timeout = \"30\"\n"),
        "flow.idle_timeout",
        5,
        "duration \"30\" has no unit",
    );
    one(
        &format!("{IFACE}[flow]\nidle_timeout = 30\n"),
        "flow.idle_timeout",
        5,
        "found integer 30 (write \"30s\"",
    );
    one(
        &format!("{IFACE}[flow]\nactive_timeout = \"1.5s\"\n"),
        "flow.active_timeout",
        5,
        "unknown unit \".5s\"",
    );
    one(
        &format!("{IFACE}[flow]\nactive_timeout = true\n"),
        "flow.active_timeout",
        5,
        "found boolean",
    );
    one(
        &format!("{IFACE}[flow]\nactive_timeout = \"2d\"\n"),
        "flow.active_timeout",
        5,
        "unknown unit \"d\"",
    );
    one(
        &format!("{IFACE}[flow]\nidle_timeout = \"48h\"\n"),
        "flow.idle_timeout",
        5,
        "idle_timeout must be between 1s and 24h (got 48h)",
    );
}

#[test]
fn interfaces_required_and_named() {
    one(
        "[flow]\ncapacity = 10\n",
        "interface",
        1,
        "at least one [[interface]] is required",
    );
    one(
        "[flow]\n\n[[interface]]\nqueues = [{ queue = 0, core = 0 }]\n",
        "interface[0].name",
        3,
        "name is required",
    );
    one(
        "[[interface]]\nname = \"a-very-long-interface-name\"\nqueues = [{ queue = 0, core = 0 }]\n",
        "interface[0].name",
        2,
        "1 to 15 bytes",
    );
    one(
        &format!("{IFACE}\n[[interface]]\nname = \"eth1\"\nqueues = [{{ queue = 0, core = 1 }}]\n"),
        "interface[1].name",
        6,
        "interface \"eth1\" listed twice (first at line 2)",
    );
    one(
        &format!("{IFACE}xdp_mode = \"driver\"\n"),
        "interface[0].xdp_mode",
        4,
        "not one of: native, generic, auto",
    );
    one(
        &format!("{IFACE}xsk_bind = \"zerocopy\"\n"),
        "interface[0].xsk_bind",
        4,
        "not one of: auto, copy, zero-copy",
    );
    one(
        &format!("{IFACE}handoff = \"yes\"\n"),
        "interface[0].handoff",
        4,
        "not one of: auto, on, off",
    );
}

#[test]
fn queues_and_cores() {
    one(
        "[[interface]]\nname = \"eth1\"\n",
        "interface[0].queues",
        1,
        "at least one queue is required",
    );
    one(
        "[[interface]]\nname = \"eth1\"\nqueues = []\n",
        "interface[0].queues",
        3,
        "at least one queue is required",
    );
    one(
        "[[interface]]\nname = \"eth1\"\nqueues = [\n  { queue = 0, core = 0 },\n  { queue = 0, core = 1 },\n]\n",
        "interface[0].queues[1].queue",
        5,
        "queue 0 listed twice (first at line 4)",
    );
    one(
        "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = -1, core = 0 }]\n",
        "interface[0].queues[0].queue",
        3,
        "queue must be between 0 and 4095 (got -1)",
    );
    one(
        "[[interface]]\nname = \"eth1\"\nqueues = [\n  { queue = 0, core = 0 },\n  { queue = 1, core = 7 },\n]\n",
        "interface[0].queues[1].core",
        5,
        "core 7 does not exist on this machine (2 cores)",
    );
    one(
        "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = -2 }]\n",
        "interface[0].queues[0].core",
        3,
        "core must be between 0 and",
    );
    one(
        &format!("{IFACE}[[interface]]\nname = \"eth2\"\nqueues = [{{ queue = 0, core = 0 }}]\n"),
        "interface[1].queues[0].core",
        6,
        "core 0 is already used by interface[0].queues[0] (line 3)",
    );
}

#[test]
fn core_check_is_injectable() {
    let text = "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 63 }]\n";
    let c = from_text(text, &Environment::unchecked()).expect("no machine check");
    assert_eq!(c.interfaces[0].queues[0].core, 63);
    let e = from_text(text, &Environment::with_cores(64));
    assert!(e.is_ok());
    let e = from_text(text, &Environment::with_cores(4)).expect_err("core 63 of 4");
    assert_eq!(
        e[0].message(),
        "core 63 does not exist on this machine (4 cores)"
    );
}

#[test]
fn umem_and_rings() {
    one(
        &format!("{IFACE}umem_frames = 3000\n"),
        "interface[0].umem_frames",
        4,
        "umem_frames must be a power of two (got 3000)",
    );
    one(
        &format!("{IFACE}umem_frames = 32\n"),
        "interface[0].umem_frames",
        4,
        "umem_frames must be between 64 and 1048576 (got 32)",
    );
    one(
        &format!("{IFACE}frame_size = 3000\n"),
        "interface[0].frame_size",
        4,
        "frame_size must be 2048 or 4096 (got 3000)",
    );
    one(
        &format!("{IFACE}fill_ring = 1000\n"),
        "interface[0].fill_ring",
        4,
        "fill_ring must be a power of two (got 1000)",
    );
    one(
        &format!("{IFACE}completion_ring = 0\n"),
        "interface[0].completion_ring",
        4,
        "completion_ring must be a power of two (got 0)",
    );
    one(
        &format!("{IFACE}umem_frames = 1024\nrx_ring = 2048\n"),
        "interface[0].rx_ring",
        5,
        "rx_ring (2048) must not exceed umem_frames (1024)",
    );
    one(
        &format!("{IFACE}poll_timeout = \"0ms\"\n"),
        "interface[0].poll_timeout",
        4,
        "poll_timeout must be greater than zero",
    );
    one(
        &format!("{IFACE}poll_timeout = \"5s\"\n"),
        "interface[0].poll_timeout",
        4,
        "between 1ms and 1s (got 5s)",
    );
    let c = ok(&format!(
        "{IFACE}umem_frames = 8192\nframe_size = 2048\nrx_ring = 4096\nfill_ring = 8192\nbusy_poll = true\nxdp_mode = \"native\"\nxsk_bind = \"copy\"\nhandoff = \"off\"\n"
    ));
    let i = &c.interfaces[0];
    assert_eq!(
        (i.umem_frames, i.frame_size, i.rx_ring, i.fill_ring),
        (8192, 2048, 4096, 8192)
    );
    assert!(i.busy_poll);
    assert_eq!((i.xdp_mode, i.xsk_bind), (XdpMode::Native, XskBind::Copy));
    assert_eq!(i.handoff, Handoff::Off);
    assert_eq!(c.umem_bytes(), 8192 * 2048);
}

#[test]
fn flow_section() {
    one(
        &format!("{IFACE}[flow]\ncapacity = 0\n"),
        "flow.capacity",
        5,
        "capacity must be greater than zero",
    );
    one(
        &format!("{IFACE}[flow]\ncapacity = 1000000000\n"),
        "flow.capacity",
        5,
        "capacity must be between 1 and 67108864",
    );
    one(
        &format!("{IFACE}[flow]\nidle_timeout = \"10s\"\ntcp_end_linger = \"1m\"\n"),
        "flow.tcp_end_linger",
        6,
        "tcp_end_linger (1m) must not exceed idle_timeout (10s)",
    );
    // Decision: an active timeout shorter than the idle timeout is allowed
    // (frequent interim exports of long flows, slow expiry of quiet ones).
    let c = ok(&format!(
        "{IFACE}[flow]\nidle_timeout = \"5m\"\nactive_timeout = \"1m\"\ntcp_end_linger = \"0s\"\nnpm = false\ntcp_ts_rtt = false\n"
    ));
    assert_eq!(c.flow.active_timeout, Duration::from_secs(60));
    assert_eq!(c.flow.idle_timeout, Duration::from_secs(300));
    assert_eq!(c.flow.tcp_end_linger, Duration::ZERO);
    assert!(!c.flow.npm);
    assert!(!c.flow.tcp_ts_rtt);
    let c = ok(&format!("{IFACE}[flow]\ntcp_ts_rtt = true\n"));
    assert!(c.flow.tcp_ts_rtt);
}

#[test]
fn filter_section() {
    one(
        &format!("{IFACE}[filter]\nvlans = [100, 5000]\n"),
        "filter.vlans[1]",
        5,
        "VLAN ID must be between 0 and 4094 (got 5000)",
    );
    // 0: untagged frames (what the XDP program reads for them).
    let c = ok(&format!("{IFACE}[filter]\nvlans = [0, 100]\n"));
    assert_eq!(c.filter.vlans, vec![0, 100]);
    one(
        &format!("{IFACE}[filter]\nvlans = [-1]\n"),
        "filter.vlans[0]",
        5,
        "VLAN ID must be between 0 and 4094 (got -1)",
    );
    one(
        &format!("{IFACE}[filter]\nvlans = [100, 100]\n"),
        "filter.vlans[1]",
        5,
        "VLAN 100 listed twice (first at line 5)",
    );
    one(
        &format!("{IFACE}[filter]\nports = [0]\n"),
        "filter.ports[0]",
        5,
        "port must be greater than zero",
    );
    one(
        &format!("{IFACE}[filter]\nports = [53,\n  53]\n"),
        "filter.ports[1]",
        6,
        "port 53 listed twice (first at line 5)",
    );
    one(
        &format!("{IFACE}[filter]\nprefixes = [\"192.0.2.0/24\",\n \"192.0.2.1/24\"]\n"),
        "filter.prefixes[1]",
        6,
        "has host bits set (did you mean \"192.0.2.0/24\"?)",
    );
    one(
        &format!("{IFACE}[filter]\nprefixes = [\"2001:db8::/129\"]\n"),
        "filter.prefixes[0]",
        5,
        "length \"129\" is not a number from 0 to 128",
    );
    one(
        &format!("{IFACE}[filter]\nprefixes = [\"10.0.0.0\"]\n"),
        "filter.prefixes[0]",
        5,
        "has no length",
    );
    one(
        &format!("{IFACE}[filter]\nprefixes = [\"2001:db8::/32\", \"2001:0db8::/32\"]\n"),
        "filter.prefixes[1]",
        5,
        "prefix 2001:db8::/32 listed twice",
    );
    let c = ok(&format!(
        "{IFACE}[filter]\nvlans = [100, 200]\nprefixes = [\"192.0.2.0/24\", \"2001:db8::/32\"]\nports = [53, 443]\n"
    ));
    assert_eq!(c.filter.vlans, [100, 200]);
    assert_eq!(c.filter.ports, [53, 443]);
    assert_eq!(c.filter.prefixes.len(), 2);
    assert!(c.filter.prefixes[0].contains("192.0.2.9".parse().unwrap()));
    assert!(!c.filter.is_empty());
}

#[test]
fn export_section() {
    one(
        &format!("{IFACE}[export]\ncollectors = [\"udp://127.0.0.1\"]\n"),
        "export.collectors[0]",
        5,
        "collector \"udp://127.0.0.1\": missing :PORT",
    );
    one(
        &format!(
            "{IFACE}[export]\ncollectors = [\"udp://127.0.0.1:4739\", \"udp://127.0.0.1:4739\"]\n"
        ),
        "export.collectors[1]",
        5,
        "listed twice",
    );
    one(
        &format!("{IFACE}[export]\npen = -1\n"),
        "export.pen",
        5,
        "pen must be between 0 and 4294967295 (got -1)",
    );
    one(
        &format!("{IFACE}[export]\nmtu = 100\n"),
        "export.mtu",
        5,
        "mtu must be between 576 and 65535 (got 100)",
    );
    one(
        &format!("{IFACE}[export]\nchannel_capacity = 0\n"),
        "export.channel_capacity",
        5,
        "channel_capacity must be greater than zero",
    );
    one(
        &format!("{IFACE}[export]\ntemplate_refresh = \"0s\"\n"),
        "export.template_refresh",
        5,
        "template_refresh must be greater than zero",
    );
    let c = ok(&format!(
        "{IFACE}[export]\ncollectors = [\"tcp://198.51.100.7:4739?format=nfv9\"]\ntcp_buffer_records = 0\n"
    ));
    assert_eq!(c.export.collectors, ["tcp://198.51.100.7:4739?format=nfv9"]);
    assert_eq!(c.export.tcp_buffer_records, 0);
}

#[test]
fn metrics_section() {
    one(
        &format!("{IFACE}[metrics]\nlisten = \"localhost:9464\"\n"),
        "metrics.listen",
        5,
        "not an IP address and port",
    );
    let c = ok(&format!(
        "{IFACE}[metrics]\nenabled = false\nlisten = \"[::1]:9100\"\n"
    ));
    assert!(!c.metrics.enabled);
    assert_eq!(c.metrics.listen, "[::1]:9100".parse().unwrap());
}

#[test]
fn every_validation_error_is_reported_in_file_order() {
    let text = "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 9 }]\numem_frames = 100\n\n[flow]\ncapacity = 0\nidle_timeout = \"30\"\n\n[metrics]\nlisten = \"nope\"\n";
    let e = errs(text);
    let got: Vec<_> = e
        .iter()
        .map(|e| (e.key().unwrap_or(""), e.line().unwrap_or(0)))
        .collect();
    assert_eq!(
        got,
        [
            ("interface[0].queues[0].core", 3),
            ("interface[0].umem_frames", 4),
            ("flow.capacity", 7),
            ("flow.idle_timeout", 8),
            ("metrics.listen", 11),
        ]
    );
}

#[test]
fn minimal_config_gets_documented_defaults() {
    let c = ok(IFACE);
    assert_eq!(c.probe.mode, Mode::Appliance);
    assert_eq!(c.probe.user, None);
    assert_eq!(c.probe.log_interval, Duration::from_secs(10));
    let i = &c.interfaces[0];
    assert_eq!(i.name, "eth1");
    assert_eq!((i.xdp_mode, i.xsk_bind), (XdpMode::Auto, XskBind::Auto));
    assert_eq!(i.handoff, Handoff::Auto);
    assert_eq!(
        (
            i.umem_frames,
            i.frame_size,
            i.rx_ring,
            i.fill_ring,
            i.completion_ring
        ),
        (16384, 4096, 8192, 8192, 64)
    );
    assert!(!i.busy_poll);
    assert_eq!(i.poll_timeout, Duration::from_millis(100));
    assert_eq!(c.flow.capacity, 262_144);
    assert_eq!(c.flow.idle_timeout, Duration::from_secs(30));
    assert_eq!(c.flow.active_timeout, Duration::from_secs(300));
    assert_eq!(c.flow.tcp_end_linger, Duration::from_secs(2));
    assert!(c.flow.npm);
    assert!(c.flow.tcp_ts_rtt);
    assert!(c.filter.is_empty());
    assert!(c.export.collectors.is_empty());
    assert_eq!(
        (c.export.pen, c.export.observation_domain, c.export.mtu),
        (32473, 0, 1500)
    );
    assert_eq!(c.export.template_refresh, Duration::from_secs(60));
    assert_eq!(c.export.options_interval, Duration::from_secs(60));
    assert_eq!(
        (c.export.tcp_buffer_records, c.export.channel_capacity),
        (100_000, 65_536)
    );
    assert!(c.metrics.enabled);
    assert_eq!(c.metrics.listen, "127.0.0.1:9464".parse().unwrap());
}

mod deploy;
