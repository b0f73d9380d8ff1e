//! `[host]`: the host probes (stack-layer latency, connect latency).
//! Hook strings are checked for shape here and against the running kernel
//! when the daemon starts (a missing tracepoint is a start-up error
//! naming it).

use std::time::Duration;

use super::{DurationRule, IntRule, Validator};
use crate::error::Problem;
use crate::raw::{RawHost, RawHostFilter, RawHostHooks, S};
use crate::settings::{HOST_LAYERS, HostSettings};

const HOOK_KINDS: &[&str] = &["tracepoint", "tp", "tp_btf", "raw_tp", "kprobe", "fentry"];
const MAX_PORTS: usize = 16;
const MAX_NETNS: usize = 8;
const MAX_PIDS: usize = 8;
const MAX_CGROUPS: usize = 8;
const MAX_HOOKS: usize = 3;

fn hook_shape_ok(h: &str) -> bool {
    let Some((kind, target)) = h.split_once(':') else {
        return false;
    };
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    };
    match kind {
        "tracepoint" | "tp" => target
            .split_once(':')
            .is_some_and(|(a, b)| name_ok(a) && name_ok(b)),
        k if HOOK_KINDS.contains(&k) => name_ok(target),
        _ => false,
    }
}

impl Validator<'_> {
    pub(super) fn host(&mut self, raw: RawHost) -> HostSettings {
        let d = HostSettings::default();
        let sample_bytes = self.int(
            "host.sample_bytes",
            raw.sample_bytes.as_ref(),
            IntRule {
                name: "sample_bytes",
                default: i64::from(d.sample_bytes),
                min: 0,
                max: 1 << 30,
                power_of_two: false,
            },
        );
        let sample_interval = self.duration(
            "host.sample_interval",
            raw.sample_interval.as_ref(),
            DurationRule {
                name: "sample_interval",
                default: d.sample_interval,
                min: Duration::ZERO,
                max: Duration::from_secs(3600),
            },
        );
        let sample_window = self.duration(
            "host.sample_window",
            raw.sample_window.as_ref(),
            DurationRule {
                name: "sample_window",
                default: d.sample_window,
                min: Duration::ZERO,
                max: Duration::from_secs(60),
            },
        );
        let sample_window_every = self.duration(
            "host.sample_window_every",
            raw.sample_window_every.as_ref(),
            DurationRule {
                name: "sample_window_every",
                default: d.sample_window_every,
                min: Duration::from_millis(10),
                max: Duration::from_secs(60),
            },
        );
        let hold = self.duration(
            "host.hold",
            raw.hold.as_ref(),
            DurationRule {
                name: "hold",
                default: d.hold,
                min: Duration::from_millis(1),
                max: Duration::from_secs(60),
            },
        );
        if !sample_window.is_zero() && sample_window >= sample_window_every {
            let span = raw.sample_window.as_ref().map_or(0..0, |v| v.span());
            self.invalid(
                "host.sample_window",
                span,
                Problem::Inconsistent(format!(
                    "a window of {sample_window:?} does not fit in sample_window_every \
                     ({sample_window_every:?}); make it shorter, or 0 to stay attached"
                )),
            );
        }
        let mut layers = Vec::new();
        if let Some(list) = &raw.layers {
            for (i, l) in list.get_ref().iter().enumerate() {
                if HOST_LAYERS.contains(&l.get_ref().as_str()) {
                    if !layers.contains(l.get_ref()) {
                        layers.push(l.get_ref().clone());
                    }
                } else {
                    self.invalid(
                        format!("host.layers[{i}]"),
                        l.span(),
                        Problem::NotOneOf {
                            value: l.get_ref().clone(),
                            allowed: &HOST_LAYERS,
                        },
                    );
                }
            }
        }
        let report_interval = self.duration(
            "host.report_interval",
            raw.report_interval.as_ref(),
            DurationRule {
                name: "report_interval",
                default: d.report_interval,
                min: Duration::from_secs(1),
                max: Duration::from_secs(86_400),
            },
        );
        let idle_timeout = self.duration(
            "host.idle_timeout",
            raw.idle_timeout.as_ref(),
            DurationRule {
                name: "idle_timeout",
                default: d.idle_timeout,
                min: Duration::from_secs(1),
                max: Duration::from_secs(86_400),
            },
        );
        let max_flows = self.int(
            "host.max_flows",
            raw.max_flows.as_ref(),
            IntRule {
                name: "max_flows",
                default: d.max_flows as i64,
                min: 1,
                max: 1 << 22,
                power_of_two: false,
            },
        );
        let ring_bytes = self.int(
            "host.ring_bytes",
            raw.ring_bytes.as_ref(),
            IntRule {
                name: "ring_bytes",
                default: i64::from(d.ring_bytes),
                min: 4096,
                max: 1 << 30,
                power_of_two: true,
            },
        );
        let connlat_min = self.duration(
            "host.connlat_min",
            raw.connlat_min.as_ref(),
            DurationRule {
                name: "connlat_min",
                default: d.connlat_min,
                min: Duration::ZERO,
                max: Duration::from_secs(3600),
            },
        );
        let mut collectors = Vec::new();
        for (i, c) in raw.collectors.iter().flatten().enumerate() {
            let url = c.get_ref().trim();
            match super::collector::check_collector(url) {
                Ok(()) if url.starts_with("tcp://") => self.invalid(
                    format!("host.collectors[{i}]"),
                    c.span(),
                    Problem::Collector {
                        url: url.to_owned(),
                        reason: "host-stack records go to udp:// and file:// collectors".into(),
                    },
                ),
                Ok(()) => collectors.push(url.to_owned()),
                Err(reason) => self.invalid(
                    format!("host.collectors[{i}]"),
                    c.span(),
                    Problem::Collector {
                        url: url.to_owned(),
                        reason,
                    },
                ),
            }
        }
        let hooks = self.host_hooks(raw.hooks.unwrap_or_default());
        let f = raw.filter.unwrap_or_default();
        let (ports, netns, pids, cgroups) = self.host_filter(f);
        HostSettings {
            stack: raw.stack.is_some_and(S::into_inner),
            sample_bytes: u32::try_from(sample_bytes).unwrap_or(d.sample_bytes),
            sample_interval,
            sample_window,
            sample_window_every,
            hold,
            layers,
            report_interval,
            idle_timeout,
            max_flows: usize::try_from(max_flows).unwrap_or(d.max_flows),
            ring_bytes: u32::try_from(ring_bytes).unwrap_or(d.ring_bytes),
            hooks,
            ports,
            netns,
            pids,
            cgroups,
            connlat: raw.connlat.is_some_and(S::into_inner),
            connlat_min,
            collectors,
        }
    }

    fn host_hooks(&mut self, raw: RawHostHooks) -> Vec<(String, Vec<String>)> {
        let by_layer = [
            ("sock_tx", raw.sock_tx),
            ("tcp_tx", raw.tcp_tx),
            ("ip_tx", raw.ip_tx),
            ("dev_tx", raw.dev_tx),
            ("dev_rx", raw.dev_rx),
            ("ip_rx", raw.ip_rx),
            ("tcp_rx", raw.tcp_rx),
            ("sock_rx", raw.sock_rx),
        ];
        let mut out = Vec::new();
        for (layer, list) in by_layer {
            let Some(list) = list else { continue };
            let key = format!("host.hooks.{layer}");
            if list.is_empty() {
                self.invalid_at_top(key, Problem::Missing("at least one hook"));
                continue;
            }
            if list.len() > MAX_HOOKS {
                let span = list.first().map_or(0..0, S::span);
                self.invalid(
                    key.clone(),
                    span,
                    Problem::TooMany {
                        count: list.len(),
                        max: MAX_HOOKS,
                    },
                );
            }
            let mut hooks = Vec::new();
            for (i, h) in list.iter().enumerate() {
                if hook_shape_ok(h.get_ref()) {
                    hooks.push(h.get_ref().clone());
                } else {
                    self.invalid(
                        format!("{key}[{i}]"),
                        h.span(),
                        Problem::Inconsistent(format!(
                            "hook {:?}: expected KIND:TARGET, KIND one of {}, a tracepoint as tracepoint:SYSTEM:NAME",
                            h.get_ref(),
                            HOOK_KINDS.join(", ")
                        )),
                    );
                }
            }
            out.push((layer.to_owned(), hooks));
        }
        out
    }

    fn host_filter(&mut self, f: RawHostFilter) -> (Vec<u16>, Vec<String>, Vec<u32>, Vec<String>) {
        let ports = self.int_list(
            "host.filter.ports",
            &f.ports,
            IntRule {
                name: "port",
                default: -1,
                min: 1,
                max: 65535,
                power_of_two: false,
            },
            MAX_PORTS,
            "port",
        );
        let too_many = |v: &mut Self, key: &str, n: usize, max: usize, span| {
            if n > max {
                v.invalid(key, span, Problem::TooMany { count: n, max });
            }
        };
        let first = |l: &[S<String>]| l.first().map_or(0..0, S::span);
        too_many(
            self,
            "host.filter.netns",
            f.netns.len(),
            MAX_NETNS,
            first(&f.netns),
        );
        too_many(
            self,
            "host.filter.cgroups",
            f.cgroups.len(),
            MAX_CGROUPS,
            first(&f.cgroups),
        );
        too_many(
            self,
            "host.filter.pids",
            f.pids.len(),
            MAX_PIDS,
            f.pids.first().map_or(0..0, S::span),
        );
        let mut pids = Vec::new();
        for (i, p) in f.pids.iter().enumerate() {
            let n = self.int(
                &format!("host.filter.pids[{i}]"),
                Some(p),
                IntRule {
                    name: "pid",
                    default: 0,
                    min: 1,
                    max: i64::from(i32::MAX),
                    power_of_two: false,
                },
            );
            if n > 0 {
                pids.push(n as u32);
            }
        }
        let strings = |l: Vec<S<String>>| l.into_iter().map(S::into_inner).collect::<Vec<_>>();
        (ports, strings(f.netns), pids, strings(f.cgroups))
    }
}

#[cfg(test)]
mod tests {
    use crate::env::Environment;
    use crate::error::ConfigError;
    use crate::validate::from_text;
    use std::time::Duration;

    fn env() -> Environment {
        Environment::with_cores(2)
    }

    #[track_caller]
    fn one(text: &str, key: &str, line: usize, msg: &str) {
        let e: Vec<ConfigError> = from_text(text, &env()).expect_err("should be refused");
        assert_eq!(e.len(), 1, "{e:#?}");
        assert_eq!(e[0].key(), Some(key), "{}", e[0]);
        assert_eq!(e[0].line(), Some(line), "{}", e[0]);
        assert!(e[0].message().contains(msg), "{}\n  lacks {msg:?}", e[0]);
    }

    #[test]
    fn a_host_agent_needs_no_interface() {
        let c = from_text("[host]\nstack = true\n", &env()).unwrap();
        assert!(c.interfaces.is_empty());
        assert!(c.host.stack && !c.host.connlat);
        assert_eq!(c.host.sample_bytes, 72_400);
        let e = from_text("[host]\nsample_bytes = 0\n", &env()).unwrap_err();
        assert!(e[0].message().contains("[[interface]]"), "{}", e[0]);
    }

    #[test]
    fn every_key_parses() {
        let c = from_text(
            "[host]\nstack = true\nconnlat = true\nsample_bytes = 0\nsample_interval = \"10ms\"\n\
             layers = [\"sock_tx\", \"dev_tx\", \"sock_rx\"]\nreport_interval = \"5s\"\n\
             idle_timeout = \"20s\"\nmax_flows = 1000\nring_bytes = 1048576\nconnlat_min = \"1ms\"\n\
             collectors = [\"udp://192.0.2.9:4739\", \"file:///var/lib/xdprobe/host.ipfix\"]\n\
             [host.hooks]\ndev_tx = [\"tracepoint:net:net_dev_xmit\"]\n\
             dev_rx = [\"tracepoint:net:netif_rx\", \"tp:net:napi_gro_receive_entry\"]\n\
             [host.filter]\nports = [5201, 443]\nnetns = [\"srv\"]\npids = [42]\n\
             cgroups = [\"/sys/fs/cgroup/system.slice\"]\n",
            &env(),
        )
        .unwrap();
        let h = c.host;
        assert_eq!(h.sample_interval, Duration::from_millis(10));
        assert_eq!(
            (h.sample_window, h.sample_window_every),
            (Duration::ZERO, Duration::from_secs(1))
        );
        assert_eq!(h.layers, ["sock_tx", "dev_tx", "sock_rx"]);
        assert_eq!(h.hooks.len(), 2);
        assert_eq!(h.hooks[1].0, "dev_rx");
        assert_eq!(h.ports, [5201, 443]);
        assert_eq!((h.pids.as_slice(), h.max_flows), (&[42u32][..], 1000));
        assert_eq!(h.connlat_min, Duration::from_millis(1));
        assert_eq!(
            h.collectors,
            ["udp://192.0.2.9:4739", "file:///var/lib/xdprobe/host.ipfix"]
        );
    }

    #[test]
    fn a_sampling_window_must_fit_its_period() {
        let c = from_text(
            "[host]\nstack = true\nsample_window = \"50ms\"\nsample_window_every = \"2s\"\n",
            &env(),
        )
        .unwrap();
        assert_eq!(c.host.sample_window, Duration::from_millis(50));
        assert_eq!(c.host.sample_window_every, Duration::from_secs(2));
        one(
            "[host]\nstack = true\nsample_window = \"1s\"\n",
            "host.sample_window",
            3,
            "does not fit in sample_window_every",
        );
        one(
            "[host]\nstack = true\nsample_window = \"50ms\"\nsample_window_every = \"5ms\"\n",
            "host.sample_window_every",
            4,
            "",
        );
    }

    #[test]
    fn wrong_values_name_their_key_and_line() {
        one(
            "[host]\nstack = true\nlayers = [\"tcp_txx\"]\n",
            "host.layers[0]",
            3,
            "not one of",
        );
        one(
            "[host]\nstack = true\n[host.hooks]\ndev_txx = [\"tp:net:x\"]\n",
            "host.hooks.dev_txx",
            4,
            "unknown field",
        );
        one(
            "[host]\nstack = true\n[host.hooks]\ndev_tx = [\"net_dev_xmit\"]\n",
            "host.hooks.dev_tx[0]",
            4,
            "KIND:TARGET",
        );
        one(
            "[host]\nstack = true\ncollectors = [\"tcp://192.0.2.9:4739\"]\n",
            "host.collectors[0]",
            3,
            "udp:// and file://",
        );
        one(
            "[host]\nstack = true\nring_bytes = 5000\n",
            "host.ring_bytes",
            3,
            "power of two",
        );
        one(
            "[host]\nstack = true\n[host.filter]\nports = [0]\n",
            "host.filter.ports[0]",
            4,
            "greater than zero",
        );
        one(
            "[host]\nstack = true\nsample_interval = 5\n",
            "host.sample_interval",
            3,
            "duration",
        );
    }
}
