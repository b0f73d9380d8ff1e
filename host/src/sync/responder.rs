//! The agent's side of clock sync: loads the XDP responder
//! (`host-prog/src/bin/clocksync.rs`) on one interface. It answers the
//! manager's timing probes until dropped; dropping detaches it (the
//! attachment is a bpf_link owned by this process: it also goes when the
//! process dies), and nothing is pinned.

use std::net::IpAddr;

use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, PerCpuArray},
    programs::{ProgramError, Xdp, XdpMode, xdp::XdpLinkId},
};
use xdprobe_common::sync::{
    SYNC_ALLOW_V4, SYNC_ALLOW_V6, SYNC_V4, SYNC_V6, SyncCounters, SyncSettings, names,
};

use crate::object;

#[derive(Debug, thiserror::Error)]
pub enum ResponderError {
    #[error("the clock-sync responder is not in this binary (built with AYA_BUILD_SKIP=1)")]
    NotBuilt,
    #[error("loading the clock-sync responder")]
    Load(#[source] aya::EbpfError),
    #[error("the clock-sync object has no {0}")]
    Missing(&'static str),
    #[error("clock-sync program")]
    Program(#[source] ProgramError),
    #[error(
        "attaching the clock-sync responder to {iface} (one XDP program per interface: is another one attached?)"
    )]
    Attach {
        iface: String,
        #[source]
        source: ProgramError,
    },
    #[error("map {0}")]
    Map(&'static str, #[source] aya::maps::MapError),
}

/// What the responder answers.
#[derive(Clone, Debug, Default)]
pub struct ResponderOptions {
    /// Interface the manager's probes arrive on.
    pub iface: String,
    /// UDP port of the probes.
    pub port: u16,
    /// Answer only probes from these sources (at most one per family; an
    /// empty list answers any source of both families).
    pub allow: Vec<IpAddr>,
    /// Test suites only: added to both stamps to simulate a skewed clock.
    pub test_offset_ns: i64,
}

/// The attached responder.
pub struct Responder {
    counters: PerCpuArray<MapData, SyncCounters>,
    link: Option<XdpLinkId>,
    /// The mode it attached in: native (driver) where the driver has XDP,
    /// else generic (skb), which stamps later on the receive path.
    pub mode: XdpMode,
    pub iface: String,
    ebpf: Ebpf,
}

fn settings(opts: &ResponderOptions) -> SyncSettings {
    let mut s = SyncSettings {
        offset_ns: opts.test_offset_ns,
        port: opts.port,
        flags: SYNC_V4 | SYNC_V6,
        ..SyncSettings::ZERO
    };
    let v4 = opts.allow.iter().find_map(|a| match a {
        IpAddr::V4(a) => Some(*a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    });
    let v6 = opts.allow.iter().find_map(|a| match a {
        IpAddr::V6(a) if a.to_ipv4_mapped().is_none() => Some(*a),
        _ => None,
    });
    if !opts.allow.is_empty() {
        // A family with no allowed source is not answered at all.
        s.flags = 0;
        if let Some(a) = v4 {
            s.flags |= SYNC_V4 | SYNC_ALLOW_V4;
            s.allow_v4 = a.octets();
        }
        if let Some(a) = v6 {
            s.flags |= SYNC_V6 | SYNC_ALLOW_V6;
            s.allow_v6 = a.octets();
        }
    }
    s
}

fn program(ebpf: &mut Ebpf) -> Result<&mut Xdp, ResponderError> {
    ebpf.program_mut(names::PROGRAM)
        .ok_or(ResponderError::Missing(names::PROGRAM))?
        .try_into()
        .map_err(ResponderError::Program)
}

impl Responder {
    /// Loads and attaches: native mode, else generic with a warning.
    pub fn start(opts: &ResponderOptions) -> Result<Responder, ResponderError> {
        Self::start_with(opts, settings(opts))
    }

    /// The same program answering nothing: every frame passes. A veth
    /// only delivers the frames its peer's XDP program sends back
    /// (`XDP_TX`) when it runs an XDP program itself (the kernel's veth
    /// driver kicks the receiving side's NAPI only then), so the manager
    /// puts this on its end of a veth towards an agent.
    pub fn pass_through(iface: &str) -> Result<Responder, ResponderError> {
        let opts = ResponderOptions {
            iface: iface.to_owned(),
            ..ResponderOptions::default()
        };
        Self::start_with(&opts, SyncSettings::ZERO)
    }

    fn start_with(opts: &ResponderOptions, s: SyncSettings) -> Result<Responder, ResponderError> {
        if object::CLOCKSYNC.is_empty() {
            return Err(ResponderError::NotBuilt);
        }
        let mut ebpf = EbpfLoader::new()
            .override_global(names::SETTINGS, &s, true)
            .load(object::CLOCKSYNC)
            .map_err(ResponderError::Load)?;
        let counters = ebpf
            .take_map(names::COUNTERS)
            .ok_or(ResponderError::Missing(names::COUNTERS))?;
        let counters =
            PerCpuArray::try_from(counters).map_err(|e| ResponderError::Map(names::COUNTERS, e))?;
        let prog = program(&mut ebpf)?;
        prog.load().map_err(ResponderError::Program)?;
        let (link, mode) = match prog.attach(&opts.iface, XdpMode::Driver) {
            Ok(l) => (l, XdpMode::Driver),
            Err(e) => {
                tracing::warn!(iface = %opts.iface, error = %e,
                    "native XDP refused; the clock-sync responder runs in generic (skb) mode, later on the receive path");
                let l = prog.attach(&opts.iface, XdpMode::Skb).map_err(|source| {
                    ResponderError::Attach {
                        iface: opts.iface.clone(),
                        source,
                    }
                })?;
                (l, XdpMode::Skb)
            }
        };
        if s.flags != 0 {
            tracing::info!(iface = %opts.iface, port = opts.port, ?mode, "clock-sync responder attached");
        }
        Ok(Responder {
            counters,
            link: Some(link),
            mode,
            iface: opts.iface.clone(),
            ebpf,
        })
    }

    /// The responder's counters, summed over CPUs.
    pub fn counters(&self) -> SyncCounters {
        self.counters
            .get(&0, 0)
            .map(|v| v.iter().fold(SyncCounters::default(), |a, c| a.add(*c)))
            .unwrap_or_default()
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Some(link) = self.link.take()
            && let Ok(p) = program(&mut self.ebpf)
            && let Err(e) = p.detach(link)
        {
            tracing::warn!(iface = %self.iface, error = %e, "detaching the clock-sync responder");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_sources_pick_the_families_answered() {
        let any = settings(&ResponderOptions {
            port: 9,
            ..Default::default()
        });
        assert_eq!(any.flags, SYNC_V4 | SYNC_V6);
        let v4 = settings(&ResponderOptions {
            allow: vec!["203.0.113.254".parse().unwrap()],
            ..Default::default()
        });
        assert_eq!(v4.flags, SYNC_V4 | SYNC_ALLOW_V4);
        assert_eq!(v4.allow_v4, [203, 0, 113, 254]);
        let both = settings(&ResponderOptions {
            allow: vec![
                "2001:db8::fe".parse().unwrap(),
                "::ffff:203.0.113.9".parse().unwrap(),
            ],
            test_offset_ns: -5,
            ..Default::default()
        });
        assert_eq!(
            both.flags,
            SYNC_V4 | SYNC_ALLOW_V4 | SYNC_V6 | SYNC_ALLOW_V6
        );
        assert_eq!(both.allow_v4, [203, 0, 113, 9]);
        assert_eq!(both.offset_ns, -5);
    }
}
