//! `[manager]`, and the whole file as `xdprobe manager -c` reads it.
//! Defaults are the `default:` values below (and `ManagerSettings::default`,
//! which a test keeps equal); `deploy/probe.toml` states them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::interface::valid_ifname;
use super::{DurationRule, IntRule, Validator, parse_raw};
use crate::env::Environment;
use crate::error::{ConfigError, Problem};
use crate::raw::{RawManager, S};
use crate::settings::{ManagerConfig, ManagerSecurity, ManagerSettings};

const DAY: Duration = Duration::from_secs(86_400);

/// A manager's file: `[manager]` (defaults if absent), `[export]`,
/// `[metrics]`; other sections are checked when present, `[[interface]]`
/// is not required.
pub fn manager_from_text(text: &str, env: &Environment) -> Result<ManagerConfig, Vec<ConfigError>> {
    let (raw, mut v) = parse_raw(text, env)?;
    if let Some(p) = raw.probe {
        v.probe(p);
    }
    if !raw.interface.is_empty() {
        v.interfaces(&raw.interface);
    }
    if let Some(f) = raw.flow {
        v.flow(f);
    }
    if let Some(f) = raw.filter {
        v.filter(f);
    }
    let export = v.export(raw.export.unwrap_or_default());
    let metrics = v.metrics(raw.metrics.unwrap_or_default());
    let said = raw.manager.as_ref().is_some_and(|m| {
        let m = m.get_ref();
        m.insecure.is_some()
            || m.tls_cert.is_some()
            || m.tls_key.is_some()
            || m.tls_ca.is_some()
            || !m.tls_pinned.is_empty()
    });
    let manager = v.manager(raw.manager.map(S::into_inner).unwrap_or_default());
    if !said {
        // Only the manager itself needs it: the probe's file may carry a
        // [manager] section it ignores.
        v.invalid_at_top(
            "manager.tls_cert",
            Problem::Inconsistent(
                "the agents' channel needs mutual TLS: tls_cert, tls_key and tls_ca (or tls_pinned); \
                 `xdprobe manager gen-certs` makes them. For plaintext with no authentication at all, \
                 say insecure = true"
                    .into(),
            ),
        );
    }
    v.finish(ManagerConfig {
        manager,
        export,
        metrics,
    })
}

fn count(name: &'static str, default: i64, min: i64, max: i64) -> IntRule {
    IntRule {
        name,
        default,
        min,
        max,
        power_of_two: false,
    }
}

fn span(name: &'static str, default: Duration, min: Duration, max: Duration) -> DurationRule {
    DurationRule {
        name,
        default,
        min,
        max,
    }
}

impl Validator<'_> {
    fn path(&mut self, key: &str, v: Option<&S<String>>) -> Option<PathBuf> {
        let v = v?;
        if v.get_ref().trim().is_empty() {
            self.invalid(key, v.span(), Problem::Missing("a file path"));
            return None;
        }
        Some(PathBuf::from(v.get_ref()))
    }

    pub(super) fn manager(&mut self, raw: RawManager) -> ManagerSettings {
        let d = ManagerSettings::default();
        let listen = self.manager_listen(raw.listen.as_ref(), d.listen);
        let sample_bytes = self.int(
            "manager.sample_bytes",
            raw.sample_bytes.as_ref(),
            count("sample_bytes", 72_400, 0, 1 << 30),
        );
        let sync_interval = self.duration(
            "manager.sync_interval",
            raw.sync_interval.as_ref(),
            span(
                "sync_interval",
                Duration::from_secs(64),
                Duration::from_millis(100),
                DAY,
            ),
        );
        let sync_probes = self.int(
            "manager.sync_probes",
            raw.sync_probes.as_ref(),
            count("sync_probes", 16, 1, 1024),
        );
        let sync_timeout = self.duration(
            "manager.sync_timeout",
            raw.sync_timeout.as_ref(),
            span(
                "sync_timeout",
                Duration::from_millis(50),
                Duration::from_millis(1),
                Duration::from_secs(10),
            ),
        );
        let hold = self.duration(
            "manager.hold",
            raw.hold.as_ref(),
            span(
                "hold",
                Duration::from_secs(2),
                Duration::from_millis(10),
                Duration::from_secs(60),
            ),
        );
        let idle_timeout = self.duration(
            "manager.idle_timeout",
            raw.idle_timeout.as_ref(),
            span(
                "idle_timeout",
                Duration::from_secs(30),
                Duration::from_secs(1),
                DAY,
            ),
        );
        let report_interval = self.duration(
            "manager.report_interval",
            raw.report_interval.as_ref(),
            span("report_interval", Duration::ZERO, Duration::ZERO, DAY),
        );
        let json = self.path("manager.json", raw.json.as_ref());
        let plot = self.path("manager.plot", raw.plot.as_ref());
        let wire_records = self.path("manager.wire_records", raw.wire_records.as_ref());
        let veth_xdp = self.veth_xdp(&raw.veth_xdp);
        let max_agents = self.int(
            "manager.max_agents",
            raw.max_agents.as_ref(),
            count("max_agents", 4096, 1, 1 << 20),
        );
        let unsynced_events = self.int(
            "manager.unsynced_events",
            raw.unsynced_events.as_ref(),
            count("unsynced_events", 262_144, 0, 1 << 26),
        );
        let security = self.manager_security(&raw);
        let limits = self.manager_limits(&raw);
        ManagerSettings {
            security,
            listen,
            sample_bytes: u32::try_from(sample_bytes).unwrap_or(d.sample_bytes),
            sync_interval,
            sync_probes: u32::try_from(sync_probes).unwrap_or(d.sync_probes),
            sync_timeout,
            hold,
            idle_timeout,
            report_interval: (!report_interval.is_zero()).then_some(report_interval),
            json,
            plot,
            wire_records,
            veth_xdp,
            max_agents: usize::try_from(max_agents).unwrap_or(d.max_agents),
            unsynced_events: usize::try_from(unsynced_events).unwrap_or(d.unsynced_events),
            ..limits
        }
    }
}

impl Validator<'_> {
    fn manager_listen(&mut self, raw: Option<&S<String>>, default: SocketAddr) -> SocketAddr {
        let Some(l) = raw else {
            return default;
        };
        l.get_ref().parse::<SocketAddr>().unwrap_or_else(|_| {
            self.invalid(
                "manager.listen",
                l.span(),
                Problem::SocketAddr(l.get_ref().clone()),
            );
            default
        })
    }

    /// `veth_xdp`: interface names, each once.
    fn veth_xdp(&mut self, raw: &[S<String>]) -> Vec<String> {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut veth_xdp = Vec::new();
        for (i, n) in raw.iter().enumerate() {
            let key = format!("manager.veth_xdp[{i}]");
            if !valid_ifname(n.get_ref()) {
                self.invalid(key, n.span(), Problem::InterfaceName(n.get_ref().clone()));
                continue;
            }
            let line = self.line_of(n.span());
            if let Some(first_line) = seen.insert(n.get_ref().clone(), line) {
                let what = format!("interface {:?}", n.get_ref());
                self.invalid(key, n.span(), Problem::Duplicate { what, first_line });
                continue;
            }
            veth_xdp.push(n.get_ref().clone());
        }
        veth_xdp
    }

    /// `hello_timeout`, `agent_timeout`, `max_frame`, `memory_limit`,
    /// `user`: what a connection may cost, and who the manager becomes.
    fn manager_limits(&mut self, raw: &RawManager) -> ManagerSettings {
        let d = ManagerSettings::default();
        let hello_timeout = self.duration(
            "manager.hello_timeout",
            raw.hello_timeout.as_ref(),
            span(
                "hello_timeout",
                d.hello_timeout,
                Duration::from_millis(100),
                Duration::from_secs(60),
            ),
        );
        let agent_timeout = self.duration(
            "manager.agent_timeout",
            raw.agent_timeout.as_ref(),
            span(
                "agent_timeout",
                d.agent_timeout,
                Duration::from_secs(1),
                Duration::from_secs(3600),
            ),
        );
        let max_frame = self.int(
            "manager.max_frame",
            raw.max_frame.as_ref(),
            count("max_frame", d.max_frame as i64, 4096, 1 << 20),
        );
        let memory_limit = self.int(
            "manager.memory_limit",
            raw.memory_limit.as_ref(),
            count("memory_limit", d.memory_limit as i64, 1 << 20, 1 << 40),
        );
        let user = raw.user.as_ref().and_then(|u| {
            if super::sections::valid_username(u.get_ref()) {
                Some(u.get_ref().clone())
            } else {
                let name = u.get_ref().clone();
                self.invalid("manager.user", u.span(), Problem::UserName(name));
                None
            }
        });
        ManagerSettings {
            hello_timeout,
            agent_timeout,
            max_frame: usize::try_from(max_frame).unwrap_or(d.max_frame),
            memory_limit: usize::try_from(memory_limit).unwrap_or(d.memory_limit),
            user,
            ..d
        }
    }

    /// `insecure`, `tls_cert`, `tls_key`, `tls_ca`, `tls_pinned`: either
    /// plaintext said out loud, or a full TLS identity and trust.
    fn manager_security(&mut self, raw: &RawManager) -> ManagerSecurity {
        let cert = self.path("manager.tls_cert", raw.tls_cert.as_ref());
        let key = self.path("manager.tls_key", raw.tls_key.as_ref());
        let ca = self.path("manager.tls_ca", raw.tls_ca.as_ref());
        let mut pinned = Vec::new();
        for (i, p) in raw.tls_pinned.iter().enumerate() {
            if let Some(p) = self.path(&format!("manager.tls_pinned[{i}]"), Some(p)) {
                pinned.push(p);
            }
        }
        let any_tls = raw.tls_cert.is_some()
            || raw.tls_key.is_some()
            || raw.tls_ca.is_some()
            || !raw.tls_pinned.is_empty();
        if let Some(i) = &raw.insecure
            && *i.get_ref()
        {
            if any_tls {
                self.invalid(
                    "manager.insecure",
                    i.span(),
                    Problem::Inconsistent(
                        "insecure = true turns TLS off, yet tls_* keys are set: keep one".into(),
                    ),
                );
            }
            return ManagerSecurity::Insecure;
        }
        if !any_tls {
            return ManagerSecurity::Unset;
        }
        let top = |v: &Option<S<String>>| v.as_ref().map_or(0..0, S::span);
        let at = top(&raw.tls_cert).start.max(top(&raw.tls_key).start);
        let (Some(cert), Some(key)) = (cert, key) else {
            let k = if raw.tls_cert.is_none() {
                "manager.tls_cert"
            } else {
                "manager.tls_key"
            };
            self.invalid(
                k,
                at..at,
                Problem::Missing("with TLS, the manager's certificate and key"),
            );
            return ManagerSecurity::Unset;
        };
        if ca.is_none() && pinned.is_empty() {
            self.invalid(
                "manager.tls_ca",
                at..at,
                Problem::Missing(
                    "tls_ca or tls_pinned (what the agents' certificates are checked against)",
                ),
            );
            return ManagerSecurity::Unset;
        }
        ManagerSecurity::Tls {
            cert,
            key,
            ca,
            pinned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment {
        Environment::with_cores(2)
    }

    #[test]
    fn an_insecure_file_is_a_manager_with_every_other_default() {
        let c = manager_from_text("[manager]\ninsecure = true\n", &env()).unwrap();
        assert_eq!(
            c.manager,
            ManagerSettings {
                security: ManagerSecurity::Insecure,
                ..ManagerSettings::default()
            }
        );
        assert!(c.export.collectors.is_empty());
    }

    #[test]
    fn the_channel_is_tls_unless_plaintext_is_asked_for() {
        // Nothing said: refused, with how to fix it.
        let e = manager_from_text("", &env()).unwrap_err();
        assert_eq!(e[0].key(), Some("manager.tls_cert"));
        assert!(e[0].message().contains("gen-certs"), "{}", e[0]);
        assert!(e[0].message().contains("insecure = true"), "{}", e[0]);
        let c = manager_from_text(
            "[manager]\ntls_cert = \"/e/m.pem\"\ntls_key = \"/e/m.key\"\ntls_ca = \"/e/ca.pem\"\nhello_timeout = \"2s\"\nagent_timeout = \"10s\"\nmax_frame = 65536\nmemory_limit = 8388608\nuser = \"nobody\"\n",
            &env(),
        )
        .unwrap();
        let m = &c.manager;
        assert_eq!(
            m.security,
            ManagerSecurity::Tls {
                cert: "/e/m.pem".into(),
                key: "/e/m.key".into(),
                ca: Some("/e/ca.pem".into()),
                pinned: vec![],
            }
        );
        assert_eq!(m.hello_timeout, Duration::from_secs(2));
        assert_eq!(m.agent_timeout, Duration::from_secs(10));
        assert_eq!((m.max_frame, m.memory_limit), (65536, 8 << 20));
        assert_eq!(m.user.as_deref(), Some("nobody"));
        for (text, key) in [
            (
                "[manager]\ntls_cert = \"/a\"\ntls_ca = \"/c\"\n",
                "manager.tls_key",
            ),
            (
                "[manager]\ntls_cert = \"/a\"\ntls_key = \"/b\"\n",
                "manager.tls_ca",
            ),
            (
                "[manager]\ninsecure = true\ntls_ca = \"/c\"\n",
                "manager.insecure",
            ),
            (
                "[manager]\ninsecure = true\nmax_frame = 100\n",
                "manager.max_frame",
            ),
        ] {
            let e = manager_from_text(text, &env()).unwrap_err();
            assert_eq!(e[0].key(), Some(key), "{text}: {}", e[0]);
        }
        // The probe's own file may carry a [manager] section without TLS.
        assert!(crate::validate::from_text("[[interface]]\nname = \"eth0\"\nqueues = [{ queue = 0, core = 0 }]\n[manager]\nlisten = \"0.0.0.0:1\"\n", &env()).is_ok());
    }

    #[test]
    fn keys_are_read_and_checked_with_their_line() {
        let c = manager_from_text(
            "[manager]\ninsecure = true\nlisten = \"[2001:db8::fe]:7000\"\nsync_interval = \"1s\"\nsample_bytes = 0\nreport_interval = \"10s\"\njson = \"/tmp/m.jsonl\"\nveth_xdp = [\"ma\", \"mb\"]\n[export]\ncollectors = [\"udp://127.0.0.1:4739\"]\n",
            &env(),
        )
        .unwrap();
        let m = &c.manager;
        assert_eq!(m.listen, "[2001:db8::fe]:7000".parse().unwrap());
        assert_eq!(m.sync_interval, Duration::from_secs(1));
        assert_eq!(m.sample_bytes, 0);
        assert_eq!(m.report_interval, Some(Duration::from_secs(10)));
        assert_eq!(m.json, Some(PathBuf::from("/tmp/m.jsonl")));
        assert_eq!(m.veth_xdp, ["ma", "mb"]);
        assert_eq!(c.export.collectors, ["udp://127.0.0.1:4739"]);

        let e = manager_from_text(
            "[manager]\nsync_interval = \"10ms\"\nveth_xdp = [\"a\", \"a\"]\nsync_probes = 0\nlisten = \"nowhere\"\ninsecure = true\n",
            &env(),
        )
        .unwrap_err();
        let keys: Vec<_> = e.iter().map(|e| (e.key(), e.line())).collect();
        assert_eq!(
            keys,
            [
                (Some("manager.sync_interval"), Some(2)),
                (Some("manager.veth_xdp[1]"), Some(3)),
                (Some("manager.sync_probes"), Some(4)),
                (Some("manager.listen"), Some(5)),
            ]
        );
        let e = manager_from_text("[manager]\nsync_intervall = \"1s\"\n", &env()).unwrap_err();
        assert!(e[0].message().contains("unknown field"), "{}", e[0]);
    }
}
