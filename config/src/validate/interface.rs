//! `[[interface]]`: names, queues → cores, hand-off, UMEM and ring sizes.

use std::collections::HashMap;
use std::time::Duration;

use super::sections::{SECOND, ring, to_u32};
use super::{DurationRule, IntRule, Validator};
use crate::error::Problem;
use crate::raw::{RawInterface, S};
use crate::settings::{Handoff, Interface, QueueBinding, XdpMode, XskBind};

/// Interface names the kernel would accept (IFNAMSIZ is 16 with the NUL).
pub(super) fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

impl Validator<'_> {
    pub(super) fn interfaces(&mut self, raw: &[S<RawInterface>]) -> Vec<Interface> {
        if raw.is_empty() {
            self.invalid_at_top("interface", Problem::NoInterface);
        }
        // name → line; core → (key of its first queue, line).
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut cores: HashMap<i64, String> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, iface) in raw.iter().enumerate() {
            let key = format!("interface[{i}]");
            let span = iface.span();
            let iface = iface.get_ref();
            let name = self.interface_name(&key, span.clone(), iface, &mut names);
            let queues = self.queues(&key, span, iface, &mut cores);
            out.push(self.interface(&key, iface, name, queues));
        }
        out
    }

    /// The interface's name, valid and not one an earlier interface took;
    /// empty (with the problem recorded) otherwise.
    fn interface_name(
        &mut self,
        key: &str,
        span: std::ops::Range<usize>,
        iface: &RawInterface,
        names: &mut HashMap<String, usize>,
    ) -> String {
        match &iface.name {
            None => {
                self.invalid(format!("{key}.name"), span, Problem::Missing("name"));
                String::new()
            }
            Some(n) if !valid_ifname(n.get_ref()) => {
                self.invalid(
                    format!("{key}.name"),
                    n.span(),
                    Problem::InterfaceName(n.get_ref().clone()),
                );
                String::new()
            }
            Some(n) => {
                let line = self.line_of(n.span());
                if let Some(first_line) = names.insert(n.get_ref().clone(), line) {
                    let what = format!("interface {:?}", n.get_ref());
                    self.invalid(
                        format!("{key}.name"),
                        n.span(),
                        Problem::Duplicate { what, first_line },
                    );
                }
                n.get_ref().clone()
            }
        }
    }

    /// The rest of one interface after its name and queues: UMEM and ring
    /// sizes, poll timeout, XDP/XSK modes and hand-off.
    fn interface(
        &mut self,
        key: &str,
        iface: &RawInterface,
        name: String,
        queues: Vec<QueueBinding>,
    ) -> Interface {
        let umem_frames = self.int(
            &format!("{key}.umem_frames"),
            iface.umem_frames.as_ref(),
            IntRule {
                min: 64,
                ..ring("umem_frames", 16384)
            },
        );
        let frame_size = self.frame_size(key, iface);
        let ring_within_umem = |v: &mut Self,
                                field: &'static str,
                                value: Option<&S<i64>>,
                                default| {
            let n = v.int(&format!("{key}.{field}"), value, ring(field, default));
            if let Some(s) = value.filter(|_| n > umem_frames) {
                let msg = format!(
                    "{field} ({n}) must not exceed umem_frames ({umem_frames}): the kernel could never fill it"
                );
                v.invalid(
                    format!("{key}.{field}"),
                    s.span(),
                    Problem::Inconsistent(msg),
                );
            }
            n
        };
        let rx_ring = ring_within_umem(self, "rx_ring", iface.rx_ring.as_ref(), 8192);
        let fill_ring = ring_within_umem(self, "fill_ring", iface.fill_ring.as_ref(), 8192);
        let completion_ring = self.int(
            &format!("{key}.completion_ring"),
            iface.completion_ring.as_ref(),
            ring("completion_ring", 64),
        );
        let poll_timeout = self.duration(
            &format!("{key}.poll_timeout"),
            iface.poll_timeout.as_ref(),
            DurationRule {
                name: "poll_timeout",
                default: Duration::from_millis(100),
                min: Duration::from_millis(1),
                max: SECOND,
            },
        );
        let (xdp_mode, xsk_bind, handoff) = self.modes(key, iface);
        Interface {
            name,
            xdp_mode,
            xsk_bind,
            handoff,
            queues,
            umem_frames: to_u32(umem_frames),
            frame_size: to_u32(frame_size),
            rx_ring: to_u32(rx_ring),
            fill_ring: to_u32(fill_ring),
            completion_ring: to_u32(completion_ring),
            busy_poll: iface.busy_poll.as_ref().is_some_and(|b| *b.get_ref()),
            poll_timeout,
        }
    }

    /// 2048 or 4096, the two UMEM frame sizes AF_XDP takes; 4096 unset.
    fn frame_size(&mut self, key: &str, iface: &RawInterface) -> i64 {
        match &iface.frame_size {
            None => 4096,
            Some(f) if matches!(*f.get_ref(), 2048 | 4096) => *f.get_ref(),
            Some(f) => {
                let msg = format!("frame_size must be 2048 or 4096 (got {})", f.get_ref());
                self.invalid(
                    format!("{key}.frame_size"),
                    f.span(),
                    Problem::Inconsistent(msg),
                );
                4096
            }
        }
    }

    /// `xdp_mode`, `xsk_bind` and `handoff`, in that order.
    fn modes(&mut self, key: &str, iface: &RawInterface) -> (XdpMode, XskBind, Handoff) {
        let xdp_mode = self.choice(
            &format!("{key}.xdp_mode"),
            iface.xdp_mode.as_ref(),
            XdpMode::Auto,
            &[
                ("native", XdpMode::Native),
                ("generic", XdpMode::Generic),
                ("auto", XdpMode::Auto),
            ],
            &["native", "generic", "auto"],
        );
        let xsk_bind = self.choice(
            &format!("{key}.xsk_bind"),
            iface.xsk_bind.as_ref(),
            XskBind::Auto,
            &[
                ("auto", XskBind::Auto),
                ("copy", XskBind::Copy),
                ("zero-copy", XskBind::ZeroCopy),
            ],
            &["auto", "copy", "zero-copy"],
        );
        let handoff = self.choice(
            &format!("{key}.handoff"),
            iface.handoff.as_ref(),
            Handoff::Auto,
            &[
                ("auto", Handoff::Auto),
                ("on", Handoff::On),
                ("off", Handoff::Off),
            ],
            &["auto", "on", "off"],
        );
        (xdp_mode, xsk_bind, handoff)
    }

    fn queues(
        &mut self,
        key: &str,
        iface_span: std::ops::Range<usize>,
        iface: &RawInterface,
        cores: &mut HashMap<i64, String>,
    ) -> Vec<QueueBinding> {
        let Some(list) = &iface.queues else {
            self.invalid(format!("{key}.queues"), iface_span, Problem::NoQueue);
            return Vec::new();
        };
        if list.get_ref().is_empty() {
            self.invalid(format!("{key}.queues"), list.span(), Problem::NoQueue);
        }
        let mut seen: HashMap<i64, usize> = HashMap::new();
        let mut out = Vec::with_capacity(list.get_ref().len());
        for (j, q) in list.get_ref().iter().enumerate() {
            let qkey = format!("{key}.queues[{j}]");
            let q = q.get_ref();
            let queue = self.int(
                &format!("{qkey}.queue"),
                Some(&q.queue),
                IntRule {
                    name: "queue",
                    default: -1,
                    min: 0,
                    max: 4095,
                    power_of_two: false,
                },
            );
            if queue >= 0 {
                let line = self.line_of(q.queue.span());
                if let Some(first_line) = seen.insert(queue, line) {
                    let what = format!("queue {queue}");
                    self.invalid(
                        format!("{qkey}.queue"),
                        q.queue.span(),
                        Problem::Duplicate { what, first_line },
                    );
                }
            }
            let core = self.core(&qkey, &q.core, cores);
            if let (Ok(queue), Some(core)) = (u32::try_from(queue), core) {
                out.push(QueueBinding { queue, core });
            }
        }
        out
    }

    fn core(
        &mut self,
        qkey: &str,
        raw: &S<i64>,
        cores: &mut HashMap<i64, String>,
    ) -> Option<usize> {
        let key = format!("{qkey}.core");
        let n = *raw.get_ref();
        if n < 0 {
            let p = Problem::OutOfRange {
                name: "core",
                value: n,
                min: 0,
                max: i64::from(u32::MAX),
            };
            self.invalid(key, raw.span(), p);
            return None;
        }
        if let Some(online) = self.online_cores()
            && !online.iter().any(|&c| i64::try_from(c) == Ok(n))
        {
            let count = online.len();
            self.invalid(key, raw.span(), Problem::NoSuchCore { core: n, count });
            return None;
        }
        if let Some(other) = cores.get(&n) {
            let other = other.clone();
            self.invalid(key, raw.span(), Problem::CoreTaken { core: n, other });
            return None;
        }
        let line = self.line_of(raw.span());
        cores.insert(n, format!("{qkey} (line {line})"));
        usize::try_from(n).ok()
    }
}
