//! Stage one: the file's shape, as written. Every leaf keeps its byte span
//! so validation can name the line; every value is optional so defaults are
//! applied (and documented) in one place, `crate::validate`. Integers are
//! read as `i64` so "-1" gets our range message instead of serde's.
//!
//! `deny_unknown_fields` everywhere: a misspelt key (`idle_timout`) must be an
//! error, not a silently ignored line.

use serde::Deserialize;
use toml::Spanned;

pub type S<T> = Spanned<T>;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub probe: Option<RawProbe>,
    #[serde(default)]
    pub interface: Vec<S<RawInterface>>,
    pub flow: Option<RawFlow>,
    pub l7: Option<RawL7>,
    pub filter: Option<RawFilter>,
    pub export: Option<RawExport>,
    pub metrics: Option<RawMetrics>,
    pub host: Option<RawHost>,
    pub manager: Option<S<RawManager>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProbe {
    pub mode: Option<S<String>>,
    pub user: Option<S<String>>,
    pub log_interval: Option<S<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInterface {
    pub name: Option<S<String>>,
    pub xdp_mode: Option<S<String>>,
    pub xsk_bind: Option<S<String>>,
    pub handoff: Option<S<String>>,
    pub queues: Option<S<Vec<S<RawQueue>>>>,
    pub umem_frames: Option<S<i64>>,
    pub frame_size: Option<S<i64>>,
    pub rx_ring: Option<S<i64>>,
    pub fill_ring: Option<S<i64>>,
    pub completion_ring: Option<S<i64>>,
    pub busy_poll: Option<S<bool>>,
    pub poll_timeout: Option<S<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    pub queue: S<i64>,
    pub core: S<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFlow {
    pub capacity: Option<S<i64>>,
    pub idle_timeout: Option<S<toml::Value>>,
    pub active_timeout: Option<S<toml::Value>>,
    pub tcp_end_linger: Option<S<toml::Value>>,
    pub npm: Option<S<bool>>,
    pub tcp_ts_rtt: Option<S<bool>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawL7 {
    pub enabled: Option<S<bool>>,
    pub tls: Option<S<bool>>,
    pub quic: Option<S<bool>>,
    pub http: Option<S<bool>>,
    pub dns: Option<S<bool>>,
    pub packets: Option<S<i64>>,
    pub max_flows: Option<S<i64>>,
    pub buffers: Option<S<i64>>,
    pub reassembly_bytes: Option<S<i64>>,
    pub http_max_head: Option<S<i64>>,
    pub http_target_len: Option<S<i64>>,
    pub http_user_agent: Option<S<bool>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilter {
    #[serde(default)]
    pub vlans: Vec<S<i64>>,
    #[serde(default)]
    pub prefixes: Vec<S<String>>,
    #[serde(default)]
    pub ports: Vec<S<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExport {
    #[serde(default)]
    pub collectors: Vec<S<String>>,
    pub pen: Option<S<i64>>,
    pub observation_domain: Option<S<i64>>,
    pub mtu: Option<S<i64>>,
    pub template_refresh: Option<S<toml::Value>>,
    pub options_interval: Option<S<toml::Value>>,
    pub tcp_buffer_records: Option<S<i64>>,
    pub channel_capacity: Option<S<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub enabled: Option<S<bool>>,
    pub listen: Option<S<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHost {
    pub stack: Option<S<bool>>,
    pub sample_bytes: Option<S<i64>>,
    pub sample_interval: Option<S<toml::Value>>,
    pub sample_window: Option<S<toml::Value>>,
    pub sample_window_every: Option<S<toml::Value>>,
    pub hold: Option<S<toml::Value>>,
    pub layers: Option<S<Vec<S<String>>>>,
    pub report_interval: Option<S<toml::Value>>,
    pub idle_timeout: Option<S<toml::Value>>,
    pub max_flows: Option<S<i64>>,
    pub ring_bytes: Option<S<i64>>,
    pub connlat: Option<S<bool>>,
    pub connlat_min: Option<S<toml::Value>>,
    pub collectors: Option<Vec<S<String>>>,
    pub hooks: Option<RawHostHooks>,
    pub filter: Option<RawHostFilter>,
}

/// One key per layer: a misspelt layer is a schema error with its line.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHostHooks {
    pub sock_tx: Option<Vec<S<String>>>,
    pub tcp_tx: Option<Vec<S<String>>>,
    pub ip_tx: Option<Vec<S<String>>>,
    pub dev_tx: Option<Vec<S<String>>>,
    pub dev_rx: Option<Vec<S<String>>>,
    pub ip_rx: Option<Vec<S<String>>>,
    pub tcp_rx: Option<Vec<S<String>>>,
    pub sock_rx: Option<Vec<S<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHostFilter {
    #[serde(default)]
    pub ports: Vec<S<i64>>,
    #[serde(default)]
    pub netns: Vec<S<String>>,
    #[serde(default)]
    pub pids: Vec<S<i64>>,
    #[serde(default)]
    pub cgroups: Vec<S<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawManager {
    pub listen: Option<S<String>>,
    pub sample_bytes: Option<S<i64>>,
    pub sync_interval: Option<S<toml::Value>>,
    pub sync_probes: Option<S<i64>>,
    pub sync_timeout: Option<S<toml::Value>>,
    pub hold: Option<S<toml::Value>>,
    pub idle_timeout: Option<S<toml::Value>>,
    pub report_interval: Option<S<toml::Value>>,
    pub json: Option<S<String>>,
    pub plot: Option<S<String>>,
    pub wire_records: Option<S<String>>,
    #[serde(default)]
    pub veth_xdp: Vec<S<String>>,
    pub max_agents: Option<S<i64>>,
    pub unsynced_events: Option<S<i64>>,
    pub insecure: Option<S<bool>>,
    pub tls_cert: Option<S<String>>,
    pub tls_key: Option<S<String>>,
    pub tls_ca: Option<S<String>>,
    #[serde(default)]
    pub tls_pinned: Vec<S<String>>,
    pub hello_timeout: Option<S<toml::Value>>,
    pub agent_timeout: Option<S<toml::Value>>,
    pub max_frame: Option<S<i64>>,
    pub memory_limit: Option<S<i64>>,
    pub user: Option<S<String>>,
}
