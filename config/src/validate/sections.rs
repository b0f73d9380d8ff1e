//! One validator per section ([[interface]] is in `interface.rs`). Defaults are the `default:` values below; a
//! test checks `deploy/probe.toml` states the same ones.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::{DurationRule, IntRule, Validator, check_collector};
use crate::error::Problem;
use crate::prefix::Prefix;
use crate::raw::{RawExport, RawFilter, RawFlow, RawMetrics, RawProbe, S};
use crate::settings::{ExportSettings, Filter, FlowSettings, MetricsSettings, Mode, ProbeSettings};
use crate::{MAX_FILTER_PORTS, MAX_FILTER_PREFIXES, MAX_FILTER_VLANS};

pub(super) const SECOND: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(86_400);

/// Bounds shared by every ring: the kernel wants powers of two.
pub(super) fn ring(name: &'static str, default: i64) -> IntRule {
    IntRule {
        name,
        default,
        min: 1,
        max: 1 << 20,
        power_of_two: true,
    }
}

fn u32_rule(name: &'static str, default: i64) -> IntRule {
    IntRule {
        name,
        default,
        min: 0,
        max: i64::from(u32::MAX),
        power_of_two: false,
    }
}

pub(super) fn to_u32(n: i64) -> u32 {
    u32::try_from(n).unwrap_or_default()
}

fn to_usize(n: i64) -> usize {
    usize::try_from(n).unwrap_or_default()
}

fn every(name: &'static str, default: Duration) -> DurationRule {
    DurationRule {
        name,
        default,
        min: SECOND,
        max: DAY,
    }
}

/// Portable user names (POSIX-ish, as `useradd` accepts by default).
pub(super) fn valid_username(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && name.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

impl Validator<'_> {
    pub(super) fn probe(&mut self, raw: RawProbe) -> ProbeSettings {
        let mode = self.choice(
            "probe.mode",
            raw.mode.as_ref(),
            Mode::Appliance,
            &[("appliance", Mode::Appliance), ("host", Mode::Host)],
            &["appliance", "host"],
        );
        let user = raw.user.and_then(|u| {
            if valid_username(u.get_ref()) {
                Some(u.into_inner())
            } else {
                let name = u.get_ref().clone();
                self.invalid("probe.user", u.span(), Problem::UserName(name));
                None
            }
        });
        let log_interval = self.duration(
            "probe.log_interval",
            raw.log_interval.as_ref(),
            every("log_interval", Duration::from_secs(10)),
        );
        ProbeSettings {
            mode,
            user,
            log_interval,
        }
    }

    pub(super) fn flow(&mut self, raw: RawFlow) -> FlowSettings {
        let capacity = self.int(
            "flow.capacity",
            raw.capacity.as_ref(),
            IntRule {
                name: "capacity",
                default: 262_144,
                min: 1,
                max: 1 << 26,
                power_of_two: false,
            },
        );
        let idle_timeout = self.duration(
            "flow.idle_timeout",
            raw.idle_timeout.as_ref(),
            every("idle_timeout", Duration::from_secs(30)),
        );
        let active_timeout = self.duration(
            "flow.active_timeout",
            raw.active_timeout.as_ref(),
            every("active_timeout", Duration::from_secs(300)),
        );
        let mut tcp_end_linger = self.duration(
            "flow.tcp_end_linger",
            raw.tcp_end_linger.as_ref(),
            DurationRule {
                name: "tcp_end_linger",
                default: Duration::from_secs(2),
                min: Duration::ZERO,
                max: DAY,
            },
        );
        if let Some(s) = raw
            .tcp_end_linger
            .as_ref()
            .filter(|_| tcp_end_linger > idle_timeout)
        {
            let msg = format!(
                "tcp_end_linger ({}) must not exceed idle_timeout ({}): the idle timeout would end the flow first",
                crate::format_duration(tcp_end_linger),
                crate::format_duration(idle_timeout)
            );
            self.invalid("flow.tcp_end_linger", s.span(), Problem::Inconsistent(msg));
            tcp_end_linger = idle_timeout;
        }
        FlowSettings {
            capacity: to_usize(capacity),
            idle_timeout,
            active_timeout,
            tcp_end_linger,
            npm: raw.npm.as_ref().is_none_or(|b| *b.get_ref()),
            tcp_ts_rtt: raw.tcp_ts_rtt.as_ref().is_none_or(|b| *b.get_ref()),
        }
    }

    /// A list of small integers: range-checked, duplicates refused.
    pub(super) fn int_list(
        &mut self,
        key: &str,
        list: &[S<i64>],
        rule: IntRule,
        max_len: usize,
        what: &str,
    ) -> Vec<u16> {
        if list.len() > max_len {
            let span = list.first().map_or(0..0, S::span);
            self.invalid(
                key,
                span,
                Problem::TooMany {
                    count: list.len(),
                    max: max_len,
                },
            );
            // The list is refused whole: its entries are not worth a look each.
            return Vec::new();
        }
        let mut seen: HashMap<i64, usize> = HashMap::new();
        let mut out = Vec::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            let k = format!("{key}[{i}]");
            let n = self.int(&k, Some(v), rule);
            let Ok(n16) = u16::try_from(n) else { continue };
            let line = self.line_of(v.span());
            if let Some(first_line) = seen.insert(n, line) {
                self.invalid(
                    k,
                    v.span(),
                    Problem::Duplicate {
                        what: format!("{what} {n}"),
                        first_line,
                    },
                );
            } else {
                out.push(n16);
            }
        }
        out
    }

    pub(super) fn filter(&mut self, raw: RawFilter) -> Filter {
        let vlans = self.int_list(
            "filter.vlans",
            &raw.vlans,
            IntRule {
                name: "VLAN ID",
                default: -1,
                // 0: untagged (and priority-tagged) frames, which the XDP
                // program reads as outer VLAN ID 0.
                min: 0,
                max: 4094,
                power_of_two: false,
            },
            MAX_FILTER_VLANS,
            "VLAN",
        );
        let ports = self.int_list(
            "filter.ports",
            &raw.ports,
            IntRule {
                name: "port",
                default: -1,
                min: 1,
                max: 65535,
                power_of_two: false,
            },
            MAX_FILTER_PORTS,
            "port",
        );
        if raw.prefixes.len() > MAX_FILTER_PREFIXES {
            let span = raw.prefixes.first().map_or(0..0, S::span);
            self.invalid(
                "filter.prefixes",
                span,
                Problem::TooMany {
                    count: raw.prefixes.len(),
                    max: MAX_FILTER_PREFIXES,
                },
            );
        }
        let mut seen: HashMap<Prefix, usize> = HashMap::new();
        let mut prefixes = Vec::with_capacity(raw.prefixes.len().min(MAX_FILTER_PREFIXES));
        // A list over the limit is refused whole: its entries are not looked at.
        let checked = if raw.prefixes.len() > MAX_FILTER_PREFIXES {
            &[][..]
        } else {
            &raw.prefixes[..]
        };
        for (i, p) in checked.iter().enumerate() {
            let key = format!("filter.prefixes[{i}]");
            match p.get_ref().parse::<Prefix>() {
                Err(e) => self.invalid(key, p.span(), e.into()),
                Ok(prefix) => {
                    let line = self.line_of(p.span());
                    if let Some(first_line) = seen.insert(prefix, line) {
                        self.invalid(
                            key,
                            p.span(),
                            Problem::Duplicate {
                                what: format!("prefix {prefix}"),
                                first_line,
                            },
                        );
                    } else {
                        prefixes.push(prefix);
                    }
                }
            }
        }
        Filter {
            vlans,
            prefixes,
            ports,
        }
    }

    pub(super) fn export(&mut self, raw: RawExport) -> ExportSettings {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut collectors = Vec::with_capacity(raw.collectors.len());
        for (i, c) in raw.collectors.iter().enumerate() {
            let key = format!("export.collectors[{i}]");
            let url = c.get_ref().trim();
            if let Err(reason) = check_collector(url) {
                self.invalid(
                    key,
                    c.span(),
                    Problem::Collector {
                        url: url.to_owned(),
                        reason,
                    },
                );
                continue;
            }
            let line = self.line_of(c.span());
            if let Some(first_line) = seen.insert(url.to_owned(), line) {
                self.invalid(
                    key,
                    c.span(),
                    Problem::Duplicate {
                        what: format!("collector {url:?}"),
                        first_line,
                    },
                );
            } else {
                collectors.push(url.to_owned());
            }
        }
        let pen = self.int("export.pen", raw.pen.as_ref(), u32_rule("pen", 32473));
        let observation_domain = self.int(
            "export.observation_domain",
            raw.observation_domain.as_ref(),
            u32_rule("observation_domain", 0),
        );
        let mtu = self.int(
            "export.mtu",
            raw.mtu.as_ref(),
            IntRule {
                name: "mtu",
                default: 1500,
                min: 576,
                max: 65535,
                power_of_two: false,
            },
        );
        let template_refresh = self.duration(
            "export.template_refresh",
            raw.template_refresh.as_ref(),
            every("template_refresh", Duration::from_secs(60)),
        );
        let options_interval = self.duration(
            "export.options_interval",
            raw.options_interval.as_ref(),
            every("options_interval", Duration::from_secs(60)),
        );
        let tcp_buffer_records = self.int(
            "export.tcp_buffer_records",
            raw.tcp_buffer_records.as_ref(),
            IntRule {
                name: "tcp_buffer_records",
                default: 100_000,
                min: 0,
                max: 100_000_000,
                power_of_two: false,
            },
        );
        let channel_capacity = self.int(
            "export.channel_capacity",
            raw.channel_capacity.as_ref(),
            IntRule {
                name: "channel_capacity",
                default: 65_536,
                min: 1,
                max: 1 << 24,
                power_of_two: false,
            },
        );
        ExportSettings {
            collectors,
            pen: to_u32(pen),
            observation_domain: to_u32(observation_domain),
            mtu: u16::try_from(mtu).unwrap_or(1500),
            template_refresh,
            options_interval,
            tcp_buffer_records: to_usize(tcp_buffer_records),
            channel_capacity: to_usize(channel_capacity),
        }
    }

    pub(super) fn metrics(&mut self, raw: RawMetrics) -> MetricsSettings {
        let default: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9464));
        let listen = match &raw.listen {
            None => default,
            Some(l) => match l.get_ref().parse::<SocketAddr>() {
                Ok(a) => a,
                Err(_) => {
                    self.invalid(
                        "metrics.listen",
                        l.span(),
                        Problem::SocketAddr(l.get_ref().clone()),
                    );
                    default
                }
            },
        };
        MetricsSettings {
            enabled: raw.enabled.as_ref().is_none_or(|b| *b.get_ref()),
            listen,
        }
    }
}
