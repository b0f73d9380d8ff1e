//! The validated configuration: what the daemon consumes.
//!
//! Every value here has passed validation (`crate::validate`), so the daemon
//! can use it without re-checking: ring sizes are powers of two, cores exist,
//! queues are unique, durations are non-zero where zero would be meaningless.
//! Defaults and units are documented on each field and in `deploy/probe.toml`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::prefix::Prefix;

/// A fully validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub probe: ProbeSettings,
    /// At least one; names are unique.
    pub interfaces: Vec<Interface>,
    pub flow: FlowSettings,
    pub l7: L7Settings,
    pub filter: Filter,
    pub export: ExportSettings,
    pub metrics: MetricsSettings,
    pub host: HostSettings,
    /// `[manager]`, read by `xdprobe manager` (the daemon ignores it).
    pub manager: Option<ManagerSettings>,
}

impl Config {
    /// One entry per AF_XDP worker: (interface index, queue binding).
    /// Cores are unique across the whole config, so each worker owns a core.
    pub fn workers(&self) -> impl Iterator<Item = (&Interface, QueueBinding)> {
        self.interfaces
            .iter()
            .flat_map(|i| i.queues.iter().map(move |q| (i, *q)))
    }

    /// Bytes of locked memory the UMEMs need (all interfaces, all queues).
    /// Rings and maps come on top; `docs/operations.md` explains the margin.
    pub fn umem_bytes(&self) -> u64 {
        self.interfaces.iter().map(Interface::umem_bytes).sum()
    }
}

/// How the probe sits in the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Dedicated capture port (mirror/TAP): XDP drops every frame it does not
    /// redirect to AF_XDP, so the host stack never sees mirrored traffic.
    Appliance,
    /// Probe on a host's own interface: frames not redirected are `XDP_PASS`ed
    /// and the host keeps working. Redirected frames never reach the stack,
    /// so in host mode the XDP program must copy, not steal: the daemon
    /// decides how (see docs/operations.md).
    Host,
}

/// `[probe]`: process-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSettings {
    /// Default `Appliance`.
    pub mode: Mode,
    /// Drop to this user after setup (sockets, maps, UMEM). `None` (default):
    /// stay root but keep only the needed capabilities.
    pub user: Option<String>,
    /// How often the daemon logs its counters. Default 10 s.
    pub log_interval: Duration,
}

/// How the XDP program attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Driver mode; fails if the driver lacks XDP support.
    Native,
    /// SKB (generic) mode: works everywhere, slower.
    Generic,
    /// Native, falling back to generic with a warning. Default.
    Auto,
}

/// How the AF_XDP sockets bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XskBind {
    /// Zero-copy if the driver supports it, else copy. Default.
    Auto,
    /// Always copy mode (`XDP_COPY`).
    Copy,
    /// Zero-copy only (`XDP_ZEROCOPY`); fails on drivers without it (veth).
    ZeroCopy,
}

/// Whether the workers of an interface hand frames to the worker that owns
/// their flow, so both directions of a connection meet on one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// Off when the NIC reports symmetric RSS (its Toeplitz key repeats
    /// every 16 bits, or the symmetric-xor input transform is on), else on;
    /// always off with one queue. Default.
    Auto,
    /// Always, whatever the NIC reports (a NIC whose hash the probe cannot
    /// read, or to be sure).
    On,
    /// Never: only correct with symmetric RSS or a single queue.
    Off,
}

/// One NIC RX queue and the CPU core whose worker drains it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueBinding {
    pub queue: u32,
    pub core: usize,
}

/// `[[interface]]`: one capture interface. UMEM and ring sizes are per queue
/// (one AF_XDP socket and one UMEM per queue, shared-nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Kernel interface name (at most 15 bytes).
    pub name: String,
    /// Default `Auto`.
    pub xdp_mode: XdpMode,
    /// Default `Auto`.
    pub xsk_bind: XskBind,
    /// Default `Auto`. `xdprobe run --no-handoff` overrides it with `Off`.
    pub handoff: Handoff,
    /// At least one; queue numbers unique within the interface, cores unique
    /// across the config.
    pub queues: Vec<QueueBinding>,
    /// Frames per UMEM (per queue). Power of two, >= `fill_ring`. Default 16384
    /// (with 8192-entry rings: ~10 ms of frames at 1 Mpps while the worker is
    /// off its core; measured in `tests/live_bench.rs`).
    pub umem_frames: u32,
    /// Bytes per frame: 2048 or 4096. Default 4096.
    pub frame_size: u32,
    /// RX ring entries. Power of two, <= `umem_frames`. Default 8192.
    pub rx_ring: u32,
    /// Fill ring entries. Power of two, <= `umem_frames`. Default 8192.
    pub fill_ring: u32,
    /// Completion ring entries (the kernel requires one per UMEM even though
    /// a passive probe never transmits). Power of two. Default 64.
    pub completion_ring: u32,
    /// Busy-poll the RX ring instead of sleeping in poll(2). Default false.
    pub busy_poll: bool,
    /// poll(2) timeout when the ring is empty; also bounds how late flow
    /// expiry runs on an idle queue. 1 ms ..= 1 s. Default 100 ms.
    pub poll_timeout: Duration,
}

impl Interface {
    /// UMEM bytes for all of this interface's queues.
    pub fn umem_bytes(&self) -> u64 {
        u64::from(self.umem_frames) * u64::from(self.frame_size) * self.queues.len() as u64
    }
}

/// `[flow]`: the per-worker flow table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSettings {
    /// Flows per worker, allocated up front; when full the least recently
    /// seen flow is evicted (exported early). Default 262144.
    pub capacity: usize,
    /// A flow with no packet for this long is exported and removed. Default 30 s.
    pub idle_timeout: Duration,
    /// A long-lived flow is exported (and its counters restarted) every
    /// `active_timeout`. May be shorter or longer than `idle_timeout`.
    /// Default 300 s.
    pub active_timeout: Duration,
    /// After FIN/FIN or RST, wait this long for stragglers before export.
    /// At most `idle_timeout`. Default 2 s.
    pub tcp_end_linger: Duration,
    /// Compute NPM metrics (RTT, SRT, retransmissions). Default true.
    pub npm: bool,
    /// With `npm`: continuous RTT from the TCP timestamp option, per leg
    /// and record. Costs up to 256 bytes per flow that carries the option. Default true.
    pub tcp_ts_rtt: bool,
}

/// `[l7]`: what each flow is — the application label and the TLS, QUIC,
/// HTTP and DNS fields (docs/l7.md). Per worker, bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L7Settings {
    /// Parse payloads at all. Default true.
    pub enabled: bool,
    /// Per protocol (a protocol turned off still labels its flows).
    /// Default true each.
    pub tls: bool,
    pub quic: bool,
    pub http: bool,
    pub dns: bool,
    /// Payload packets per direction inspected while a flow matched
    /// nothing or its TLS/QUIC hellos are awaited (1 to 255). Default 8.
    pub packets: u8,
    /// Flows with parser state at once, per worker (1 to 16777216); past
    /// it a flow keeps its label only, counted. Default 16384.
    pub max_flows: usize,
    /// 16 KiB reassembly buffers per worker (0 to 65536). Default 1024.
    pub buffers: usize,
    /// Bytes a TLS hello flight, a QUIC CRYPTO stream or a DNS-over-TCP
    /// message may take (256 to 16384). Default 16384.
    pub reassembly_bytes: usize,
    /// Bytes an HTTP head may take (256 to 16384). Default 8192.
    pub http_max_head: usize,
    /// Bytes of the HTTP request target kept (0 to 1024). Default 256.
    pub http_target_len: usize,
    /// Keep the first request's User-Agent. Default false.
    pub http_user_agent: bool,
}

impl Default for L7Settings {
    fn default() -> Self {
        L7Settings {
            enabled: true,
            tls: true,
            quic: true,
            http: true,
            dns: true,
            packets: 8,
            max_flows: 16_384,
            buffers: 1024,
            reassembly_bytes: 16_384,
            http_max_head: 8192,
            http_target_len: 256,
            http_user_agent: false,
        }
    }
}

/// `[filter]`: what the XDP program redirects. Empty list = no condition on
/// that field; non-empty lists are ANDed; a packet matches a list if any
/// entry matches. Prefixes and ports match either source or destination.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Outer VLAN IDs (0..=4094; 0 stands for untagged and priority-tagged
    /// frames). When non-empty, untagged frames match only if 0 is listed.
    pub vlans: Vec<u16>,
    /// At most [`crate::MAX_FILTER_PREFIXES`].
    pub prefixes: Vec<Prefix>,
    /// TCP/UDP ports (1..=65535).
    pub ports: Vec<u16>,
}

impl Filter {
    /// True when nothing is filtered (every packet goes to AF_XDP).
    pub fn is_empty(&self) -> bool {
        self.vlans.is_empty() && self.prefixes.is_empty() && self.ports.is_empty()
    }
}

/// `[export]`: IPFIX / NetFlow v9 export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSettings {
    /// Collector URLs (`udp|tcp://HOST:PORT`, `file:///PATH`, optional
    /// `?format=..&mode=..&profile=..`), syntax-checked only: the daemon
    /// parses them with `xdprobe_exporter::CollectorSpec::parse`.
    /// Empty (default): records are counted but not exported.
    pub collectors: Vec<String>,
    /// IANA Private Enterprise Number for xdprobe's own elements.
    /// Default 32473 (the documentation PEN, RFC 5612).
    pub pen: u32,
    /// IPFIX observation domain / NetFlow v9 source ID. Default 0.
    pub observation_domain: u32,
    /// Largest IP packet the exporter may send over UDP, bytes.
    /// 576 ..= 65535. Default 1500.
    pub mtu: u16,
    /// Resend templates over UDP this often. Default 60 s.
    pub template_refresh: Duration,
    /// Send options records (exporter statistics) this often. Default 60 s.
    pub options_interval: Duration,
    /// Records buffered per TCP collector while it is unreachable. Default 100000.
    pub tcp_buffer_records: usize,
    /// Capacity of the workers → exporter queue, records. Default 65536.
    pub channel_capacity: usize,
}

/// `[metrics]`: the Prometheus endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSettings {
    /// Default true.
    pub enabled: bool,
    /// Default 127.0.0.1:9464.
    pub listen: SocketAddr,
}

/// The stack-latency layers, in stream order, by their config keys
/// (`[host] layers`, `[host.hooks]`). The host crate's `Layer` keys are
/// checked against this list by a test there.
pub const HOST_LAYERS: [&str; 8] = [
    "sock_tx", "tcp_tx", "ip_tx", "dev_tx", "dev_rx", "ip_rx", "tcp_rx", "sock_rx",
];

/// `[host]`: what the daemon watches inside this host's own kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSettings {
    /// Stack-layer latency (T1…T8) of this host's TCP flows. Default false.
    pub stack: bool,
    /// One timed byte per this many stream bytes; 0: every send and read.
    /// Default 72400.
    pub sample_bytes: u32,
    /// At most one timed byte per flow per this interval (0: no limit).
    /// Default 0.
    pub sample_interval: Duration,
    /// Time sampling: the layer programs are attached for this long out
    /// of every `sample_window_every` and detached in between (0: always
    /// attached). Default 0.
    pub sample_window: Duration,
    /// Period of the sampling windows. Default 1 s.
    pub sample_window_every: Duration,
    /// How long a timed byte waits for the layers it has not reached yet
    /// (and a closing window's drain for the bytes it let in) before it
    /// is given up as slow and counted as `cut`. Default 250 ms.
    pub hold: Duration,
    /// Layers observed (keys of [`HOST_LAYERS`]); empty: all. Default all.
    pub layers: Vec<String>,
    /// Long-lived flows are reported this often. Default 60 s.
    pub report_interval: Duration,
    /// A flow with no event for this long is reported and forgotten.
    /// Default 30 s.
    pub idle_timeout: Duration,
    /// Flows tracked at once; more are counted and not tracked. Default 65536.
    pub max_flows: usize,
    /// Kernel → user space ring buffer, bytes (power of two). Default 4 MiB.
    pub ring_bytes: u32,
    /// Per layer, hooks replacing the built-in defaults (`KIND:TARGET`
    /// strings, checked against the kernel at start).
    pub hooks: Vec<(String, Vec<String>)>,
    /// Scope: ports (either end), network namespaces (names under
    /// /run/netns, paths or inode numbers), processes, cgroup v2 paths.
    pub ports: Vec<u16>,
    pub netns: Vec<String>,
    pub pids: Vec<u32>,
    pub cgroups: Vec<String>,
    /// Per-process connect latency, and PID/comm of this host's outgoing
    /// connections on its flow records. Default false.
    pub connlat: bool,
    /// Connections faster than this are not reported on their own (they
    /// still enrich flow records). Default 0.
    pub connlat_min: Duration,
    /// Where host-stack IPFIX records go (UDP and file collectors; the
    /// wire exporter's are not used: flow collectors would count the
    /// host records as flows). Default none.
    pub collectors: Vec<String>,
}

impl Default for HostSettings {
    fn default() -> Self {
        HostSettings {
            stack: false,
            sample_bytes: 72_400,
            sample_interval: Duration::ZERO,
            sample_window: Duration::ZERO,
            sample_window_every: Duration::from_secs(1),
            hold: Duration::from_millis(250),
            layers: Vec::new(),
            report_interval: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(30),
            max_flows: 16_384,
            ring_bytes: 4 << 20,
            hooks: Vec::new(),
            ports: Vec::new(),
            netns: Vec::new(),
            pids: Vec::new(),
            cgroups: Vec::new(),
            connlat: false,
            connlat_min: Duration::ZERO,
            collectors: Vec::new(),
        }
    }
}

impl HostSettings {
    /// Whether any host probe runs.
    pub fn any(&self) -> bool {
        self.stack || self.connlat
    }
}
/// What `xdprobe manager -c FILE` reads: its own section, and the export
/// and metrics sections it shares with the probe. `[[interface]]` is not
/// required in a manager's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerConfig {
    pub manager: ManagerSettings,
    pub export: ExportSettings,
    pub metrics: MetricsSettings,
}

/// `[manager]`: the cross-host manager (`docs/host-crosshost.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerSettings {
    /// Where agents connect (TCP). Default 0.0.0.0:7460.
    pub listen: SocketAddr,
    /// The sampling grid the agents use (their `--sample-bytes`), stream
    /// bytes; 0: unsampled. Default 72400.
    pub sample_bytes: u32,
    /// Clock-sync rounds per agent this often. 100 ms ..= 24 h. Default 64 s.
    pub sync_interval: Duration,
    /// Probes per round. 1 ..= 1024. Default 16.
    pub sync_probes: u32,
    /// A probe without reply for this long is lost. 1 ms ..= 10 s. Default 50 ms.
    pub sync_timeout: Duration,
    /// How long a timed byte waits for the layers of the other host.
    /// 10 ms ..= 60 s. Default 2 s.
    pub hold: Duration,
    /// A flow without events for this long is reported and forgotten.
    /// 1 s ..= 24 h. Default 30 s.
    pub idle_timeout: Duration,
    /// Report long-lived flows this often; `None` (0s, default): when they end.
    pub report_interval: Option<Duration>,
    /// JSON lines of flow reports and clock rounds. Default: none.
    pub json: Option<std::path::PathBuf>,
    /// Stacked-bar SVG of the flows, redrawn as reports come. Default: none.
    pub plot: Option<std::path::PathBuf>,
    /// The wire probe's JSON records (`xdprobe run`/`pcap` JSON lines),
    /// followed as it grows, joined to the host reports by flow key.
    pub wire_records: Option<std::path::PathBuf>,
    /// veth interfaces towards agents that get a pass-through XDP program
    /// (a veth only delivers what its peer's XDP sends back when it has
    /// one itself). Default: none.
    pub veth_xdp: Vec<String>,
    /// Agents remembered at most. Default 4096.
    pub max_agents: usize,
    /// Events held per agent until its clock is measured. Default 262144.
    pub unsynced_events: usize,
    /// How agents prove who they are: mutual TLS (required unless
    /// `insecure = true`, plaintext with no authentication at all).
    pub security: ManagerSecurity,
    /// A connection must send its HELLO (after the TLS handshake) within
    /// this. 100 ms ..= 60 s. Default 5 s.
    pub hello_timeout: Duration,
    /// A connection that sends nothing for this long is closed (agents
    /// send STATS every second). 1 s ..= 1 h. Default 30 s.
    pub agent_timeout: Duration,
    /// Largest frame an agent may send, bytes. 4096 ..= 1 MiB. Default
    /// 524288 (an EVENTS frame is at most 294917).
    pub max_frame: usize,
    /// Bytes all connections together may hold in partial frames and
    /// events waiting for a clock round; beyond, the connection that
    /// would grow it is closed (counted). 1 MiB ..= 1 TiB. Default 256 MiB.
    pub memory_limit: usize,
    /// Switch to this user once listening and attached (the daemon's
    /// `[probe] user`). Default: stay root, with capabilities dropped.
    pub user: Option<String>,
}

/// `[manager] insecure`, `tls_*`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ManagerSecurity {
    /// Nothing configured (an error for `xdprobe manager`).
    #[default]
    Unset,
    /// `insecure = true`: plaintext, anyone may speak as any agent.
    Insecure,
    Tls {
        cert: std::path::PathBuf,
        key: std::path::PathBuf,
        ca: Option<std::path::PathBuf>,
        pinned: Vec<std::path::PathBuf>,
    },
}

impl Default for ManagerSettings {
    fn default() -> Self {
        ManagerSettings {
            listen: SocketAddr::from(([0, 0, 0, 0], 7460)),
            sample_bytes: 72_400,
            sync_interval: Duration::from_secs(64),
            sync_probes: 16,
            sync_timeout: Duration::from_millis(50),
            hold: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(30),
            report_interval: None,
            json: None,
            plot: None,
            wire_records: None,
            veth_xdp: Vec::new(),
            max_agents: 4096,
            unsynced_events: 262_144,
            security: ManagerSecurity::Unset,
            hello_timeout: Duration::from_secs(5),
            agent_timeout: Duration::from_secs(30),
            max_frame: 524_288,
            memory_limit: 256 << 20,
            user: None,
        }
    }
}
