//! `xdprobe host --manager HOST:PORT`: the host probe as one agent of a
//! manager (`xdprobe manager`). Beside its own reports, it streams every
//! sampled observation to the manager and, with `--clock-sync IFACE`,
//! answers the manager's clock probes from XDP on that interface.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use xdprobe_common::host::{StackCounters, StackEvent};
use xdprobe_host::fleet::forward::{ForwardConfig, Forwarder};
use xdprobe_host::fleet::proto::{self, Hello};
use xdprobe_host::fleet::tls::{
    self,
    rustls::{ClientConfig, pki_types::ServerName},
};
use xdprobe_host::hooks::Layer;
use xdprobe_host::stack::agent::Tap;
use xdprobe_host::sync::responder::{Responder, ResponderOptions};

/// Default UDP port of the clock probes.
pub const CLOCK_SYNC_PORT: u16 = 7461;

#[derive(clap::Args, Debug, Default)]
pub struct AgentArgs {
    /// Also stream the sampled observations to a manager (`xdprobe
    /// manager`) at HOST:PORT, reconnecting as needed.
    #[arg(long, value_name = "HOST:PORT")]
    pub manager: Option<String>,
    /// This agent's name at the manager (default: the host name).
    #[arg(long, value_name = "NAME", requires = "manager")]
    pub agent_name: Option<String>,
    /// Answer the manager's clock probes from XDP on this interface (the
    /// one the manager's probes arrive on). Needed for T4 and T8 across
    /// hosts.
    #[arg(long, value_name = "IFACE", requires = "manager")]
    pub clock_sync: Option<String>,
    /// UDP port of the clock probes.
    #[arg(long, default_value_t = CLOCK_SYNC_PORT, requires = "clock_sync")]
    pub clock_sync_port: u16,
    /// This agent's TLS certificate and key for the manager (PEM; from
    /// `xdprobe manager gen-certs`): it must name --agent-name.
    #[arg(long, value_name = "FILE", requires_all = ["manager", "manager_key"])]
    pub manager_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", requires = "manager_cert")]
    pub manager_key: Option<PathBuf>,
    /// The CA the manager's certificate must chain to.
    #[arg(long, value_name = "FILE", requires = "manager_cert")]
    pub manager_ca: Option<PathBuf>,
    /// The manager's own certificate, accepted as it is (instead of a CA).
    #[arg(
        long,
        value_name = "FILE",
        requires = "manager_cert",
        conflicts_with = "manager_ca"
    )]
    pub manager_pinned: Option<PathBuf>,
    /// The name the manager's certificate must carry (default: the host
    /// or address of --manager).
    #[arg(long, value_name = "NAME", requires = "manager_cert")]
    pub manager_name: Option<String>,
    /// Plaintext to a manager configured with `insecure = true`: no
    /// authentication either way.
    #[arg(long, requires = "manager", conflicts_with = "manager_cert")]
    pub manager_insecure: bool,
    /// Events kept while the manager is away or slow; beyond, the oldest
    /// are dropped and counted.
    #[arg(long, default_value_t = 262_144, value_name = "EVENTS")]
    pub manager_buffer: usize,
    /// Test suites only (namespaces share one kernel clock): shift this
    /// agent's clock, its clock-probe stamps and its events alike, by NS
    /// nanoseconds. Not a config key, on purpose.
    #[arg(long, hide = true, allow_hyphen_values = true, value_name = "NS")]
    pub test_clock_offset_ns: Option<i64>,
}

/// The agent's side of a manager: the stream and the responder.
pub struct AgentSide {
    fwd: Forwarder,
    responder: Option<Responder>,
    offset_ns: i64,
}

fn resolve(s: &str) -> anyhow::Result<SocketAddr> {
    s.to_socket_addrs()
        .with_context(|| format!("--manager {s}"))?
        .next()
        .with_context(|| format!("--manager {s}: no address"))
}

/// This host's source address towards `to` (no packet is sent: a
/// connected UDP socket only asks the routing table).
fn local_addr_towards(to: SocketAddr) -> anyhow::Result<IpAddr> {
    let bind = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let s = UdpSocket::bind(bind)?;
    s.connect(to)
        .with_context(|| format!("no route to the manager {to}"))?;
    Ok(s.local_addr()?.ip())
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    u64::from_ne_bytes(b) ^ u64::from(std::process::id())
}

/// The TLS side of `--manager`: the agent's certificate and the trust in
/// the manager's, or nothing with `--manager-insecure`.
fn tls_setup(
    a: &AgentArgs,
    manager: &str,
) -> anyhow::Result<Option<(Arc<ClientConfig>, ServerName<'static>)>> {
    if a.manager_insecure {
        tracing::warn!(
            "INSECURE: --manager-insecure — the stream to the manager is plaintext and the manager is not authenticated"
        );
        return Ok(None);
    }
    let (Some(cert), Some(key)) = (&a.manager_cert, &a.manager_key) else {
        anyhow::bail!(
            "--manager needs --manager-cert, --manager-key and --manager-ca (or --manager-pinned): \
             `xdprobe manager gen-certs` makes them; --manager-insecure for plaintext"
        );
    };
    if a.manager_ca.is_none() && a.manager_pinned.is_none() {
        anyhow::bail!(
            "--manager-cert needs --manager-ca or --manager-pinned to check the manager with"
        );
    }
    let files = tls::TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        ca: a.manager_ca.clone(),
        pinned: a.manager_pinned.iter().cloned().collect(),
    };
    let config = tls::client_config(&files).context("--manager-cert")?;
    let host = match &a.manager_name {
        Some(n) => n.clone(),
        None => host_of(manager),
    };
    let name = tls::server_name(&host).context("--manager-name")?;
    Ok(Some((config, name)))
}

/// The host part of `HOST:PORT` / `[V6]:PORT`.
fn host_of(hostport: &str) -> String {
    let h = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h);
    h.trim_start_matches('[').trim_end_matches(']').to_owned()
}

impl AgentSide {
    /// Starts the stream (and the responder) when `--manager` is given.
    pub fn start(
        a: &AgentArgs,
        sample_bytes: u32,
        layers: &[Layer],
    ) -> anyhow::Result<Option<AgentSide>> {
        let Some(m) = &a.manager else {
            return Ok(None);
        };
        let manager = resolve(m)?;
        let responder = match &a.clock_sync {
            None => None,
            Some(iface) => Some(
                Responder::start(&ResponderOptions {
                    iface: iface.clone(),
                    port: a.clock_sync_port,
                    // Only the manager's probes are answered.
                    allow: vec![manager.ip()],
                    test_offset_ns: a.test_clock_offset_ns.unwrap_or(0),
                })
                .with_context(|| format!("--clock-sync {iface}"))?,
            ),
        };
        // The manager probes the address this agent's connection comes
        // from, whatever the HELLO says: this is that address.
        let sync = match &responder {
            None => None,
            Some(_) => {
                Some(SocketAddr::new(local_addr_towards(manager)?, a.clock_sync_port).to_string())
            }
        };
        let tls = tls_setup(a, m)?;
        let hello = Hello {
            version: proto::VERSION,
            agent: a
                .agent_name
                .clone()
                .unwrap_or_else(xdprobe_exporter::hostname),
            instance: random_u64(),
            sample_bytes,
            layers: layers.iter().map(|l| l.key().to_owned()).collect(),
            sync,
        };
        tracing::info!(manager = %manager, agent = %hello.agent, clock_sync = ?hello.sync, "streaming to the manager");
        let mut cfg = ForwardConfig::new(manager, hello);
        cfg.buffer_events = a.manager_buffer.max(1);
        cfg.tls = tls;
        let fwd = Forwarder::start(cfg).context("starting the manager stream")?;
        Ok(Some(AgentSide {
            fwd,
            responder,
            offset_ns: a.test_clock_offset_ns.unwrap_or(0),
        }))
    }

    /// Stops the stream (giving it a moment to send what is buffered) and
    /// detaches the responder; logs what became of the events.
    pub fn finish(self, print: bool) {
        let s = self.fwd.stop(Duration::from_secs(2));
        let answered = self.responder.as_ref().map(|r| r.counters().answered);
        drop(self.responder);
        tracing::info!(
            events = s.events,
            sent = s.sent,
            dropped = s.dropped(),
            dropped_buffer = s.dropped_buffer,
            dropped_channel = s.dropped_channel,
            dropped_connection = s.dropped_connection,
            connects = s.connects,
            clock_probes_answered = ?answered,
            "manager stream stopped"
        );
        if print {
            eprintln!("manager stream: {s:?}; clock probes answered: {answered:?}");
        }
    }
}

impl Tap for AgentSide {
    fn event(&mut self, ev: &StackEvent) {
        if self.offset_ns == 0 {
            self.fwd.push(ev);
        } else {
            let mut e = *ev;
            e.ts_ns = e.ts_ns.wrapping_add_signed(self.offset_ns);
            self.fwd.push(&e);
        }
    }

    fn tick(&mut self, kernel: &StackCounters) {
        self.fwd.set_kernel_ringbuf_full(kernel.ringbuf_full);
    }
}
