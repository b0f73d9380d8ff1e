//! Names operators use for a scope → what the kernel programs compare:
//! network namespaces by name, path or inode; cgroups by path; and the
//! `[host]` config section → probe and matcher options, shared by
//! `xdprobe host` and the daemon.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use xdprobe_config::HostSettings;

use crate::hooks::{Hook, Layer};
use crate::stack::matcher::MatcherConfig;
use crate::stack::probe::StackOptions;

#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    #[error("network namespace {name}: {path}")]
    Netns {
        name: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cgroup {0}: not a cgroup v2 directory")]
    NotCgroup(String),
    #[error("cgroup {path}")]
    Cgroup {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: inode number out of range")]
    Inode(String),
    #[error("host.hooks.{layer}: {source}")]
    Hook {
        layer: String,
        #[source]
        source: crate::hooks::HookParseError,
    },
    #[error("no layer {0:?}")]
    Layer(String),
    #[error("pid {0}: no such process")]
    NoProcess(u32),
    #[error("pid {pid} is a thread of process {tgid}: give the process ({tgid})")]
    Thread { pid: u32, tgid: u32 },
    #[error("port 0 matches no connection: give a port from 1 to 65535")]
    PortZero,
}

/// A process to scope to must exist now (in this PID namespace) and be a
/// process, not one of its threads: the programs compare the thread
/// group ID, so any other number silently matches nothing.
pub fn check_pid(pid: u32) -> Result<(), ScopeError> {
    if pid == 0 {
        return Err(ScopeError::NoProcess(0));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| ScopeError::NoProcess(pid))?;
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(pid);
    if tgid != pid {
        return Err(ScopeError::Thread { pid, tgid });
    }
    Ok(())
}

/// Every scope the operator named must be able to match something.
pub fn check_scope(ports: &[u16], pids: &[u32]) -> Result<(), ScopeError> {
    if ports.contains(&0) {
        return Err(ScopeError::PortZero);
    }
    pids.iter().try_for_each(|&p| check_pid(p))
}

/// `/run/netns/NAME`, a path, or an inode number → the namespace's inode
/// number (what the programs report as `netns`).
pub fn netns_inode(s: &str) -> Result<u32, ScopeError> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let path = if s.contains('/') {
        PathBuf::from(s)
    } else {
        PathBuf::from("/run/netns").join(s)
    };
    let m = std::fs::metadata(&path).map_err(|source| ScopeError::Netns {
        name: s.to_owned(),
        path: path.display().to_string(),
        source,
    })?;
    u32::try_from(m.ino()).map_err(|_| ScopeError::Inode(s.to_owned()))
}

/// A cgroup v2 directory → its ID (the directory's inode number, which is
/// what `bpf_get_current_cgroup_id` returns).
pub fn cgroup_id(p: &Path) -> Result<u64, ScopeError> {
    let m = std::fs::metadata(p).map_err(|source| ScopeError::Cgroup {
        path: p.display().to_string(),
        source,
    })?;
    if !m.is_dir() {
        return Err(ScopeError::NotCgroup(p.display().to_string()));
    }
    Ok(m.ino())
}

/// The stack probe's options from `[host]`.
pub fn stack_options(h: &HostSettings) -> Result<StackOptions, ScopeError> {
    let mut hooks: BTreeMap<Layer, Vec<Hook>> = BTreeMap::new();
    for (layer, list) in &h.hooks {
        let l = Layer::from_key(layer).ok_or_else(|| ScopeError::Layer(layer.clone()))?;
        for s in list {
            let hook = s.parse().map_err(|source| ScopeError::Hook {
                layer: layer.clone(),
                source,
            })?;
            hooks.entry(l).or_default().push(hook);
        }
    }
    let layers = h
        .layers
        .iter()
        .map(|k| Layer::from_key(k).ok_or_else(|| ScopeError::Layer(k.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StackOptions {
        hooks,
        layers,
        sample_bytes: h.sample_bytes,
        ports: h.ports.clone(),
        netns: h
            .netns
            .iter()
            .map(|n| netns_inode(n))
            .collect::<Result<_, _>>()?,
        tgids: h.pids.clone(),
        cgroups: h
            .cgroups
            .iter()
            .map(|p| cgroup_id(Path::new(p)))
            .collect::<Result<_, _>>()?,
        ring_bytes: h.ring_bytes,
        windows: (!h.sample_window.is_zero()).then_some(crate::stack::agent::Windows {
            window: h.sample_window,
            every: h.sample_window_every,
        }),
        empty_programs: false,
    })
}

/// The matcher's settings for a probe started with `opts`, from `[host]`.
pub fn matcher_config(
    h: &HostSettings,
    opts: &StackOptions,
    attached: Vec<Layer>,
) -> MatcherConfig {
    let ns = |d: Duration| d.as_nanos() as u64;
    MatcherConfig {
        sample_bytes: opts.sample_bytes,
        idle_ns: ns(h.idle_timeout),
        hold_ns: ns(h.hold),
        report_ns: ns(h.report_interval),
        max_flows: h.max_flows,
        attached,
        min_interval_ns: ns(h.sample_interval),
        require_socket: !opts.tgids.is_empty() || !opts.cgroups.is_empty(),
        ..MatcherConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_layer_keys_are_the_hook_layers() {
        let keys: Vec<&str> = Layer::ALL.iter().map(|l| l.key()).collect();
        assert_eq!(keys, xdprobe_config::HOST_LAYERS);
    }

    #[test]
    fn the_config_becomes_probe_and_matcher_options() {
        let c = xdprobe_config::parse(
            "[host]\nstack = true\nsample_bytes = 1000\nsample_interval = \"5ms\"\n\
             layers = [\"sock_tx\", \"sock_rx\"]\n[host.hooks]\ndev_tx = [\"tp_btf:net_dev_start_xmit\"]\n\
             [host.filter]\nports = [80]\nnetns = [\"4026531840\"]\npids = [7]\n",
            "t.toml",
        )
        .unwrap();
        let o = stack_options(&c.host).unwrap();
        assert_eq!(o.sample_bytes, 1000);
        assert_eq!(o.layers, [Layer::SockTx, Layer::SockRx]);
        assert_eq!(
            o.hooks[&Layer::DevTx][0].to_string(),
            "tp_btf:net_dev_start_xmit"
        );
        assert_eq!(
            (o.ports.as_slice(), o.netns.as_slice()),
            (&[80u16][..], &[4026531840u32][..])
        );
        let m = matcher_config(&c.host, &o, vec![Layer::SockTx]);
        assert!(m.require_socket);
        assert_eq!(m.min_interval_ns, 5_000_000);
        let e = netns_inode("no-such-netns-xyz").unwrap_err().to_string();
        assert!(e.contains("no-such-netns-xyz"), "{e}");
        assert!(cgroup_id(Path::new("/proc/self/status")).is_err());
    }
}
