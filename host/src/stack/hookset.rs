//! Which hooks observe each layer on this kernel, and the programs'
//! read-only settings (offsets, scope) for them: everything checked
//! before anything is attached.

use xdprobe_common::host::{
    DEV_RX_HOOKS, STACK_FILTER_CGROUP, STACK_FILTER_NETNS, STACK_FILTER_PORT, STACK_FILTER_TGID,
    STACK_MAX_CGROUPS, STACK_MAX_NETNS, STACK_MAX_PORTS, STACK_MAX_TGIDS, StackSettings,
};

use crate::hooks::{CLOSE_EVENT, Hook, Kind, Layer, Policy};
use crate::kernel::{Kernel, offsets};
use crate::stack::probe::{ProbeError, StackOptions};

/// A layer's chosen hooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerHooks {
    pub layer: Layer,
    pub hooks: Vec<Hook>,
    /// Per hook, the classic tracepoint to attach instead if the kernel
    /// refuses the BTF-typed default chosen for it.
    pub fallback: Vec<Option<Hook>>,
}

/// Layers' hooks after checking them against the kernel.
pub(crate) fn resolve(kernel: &Kernel, opts: &StackOptions) -> Result<Vec<LayerHooks>, ProbeError> {
    let wanted: Vec<Layer> = if opts.layers.is_empty() {
        Layer::ALL.to_vec()
    } else {
        opts.layers.clone()
    };
    let mut out = Vec::new();
    for layer in wanted {
        let (hooks, explicit) = match opts.hooks.get(&layer) {
            Some(h) => (h.clone(), true),
            None => (layer.default_hooks(), false),
        };
        if explicit && hooks.len() > layer.max_hooks() && layer.policy() == Policy::Any {
            return Err(ProbeError::TooManyHooks {
                layer: layer.key(),
                max: layer.max_hooks(),
            });
        }
        let mut ok = Vec::new();
        let mut fallback = Vec::new();
        for h in hooks {
            // Defaults on the skb layers: the BTF-typed twin where this
            // kernel has it. It is cheaper per event (direct skb loads),
            // and the kernel skips a classic tracepoint program whenever
            // another BPF program or a map system call is running on that
            // CPU (`bpf_prog_active`): 1.2 % of the runs in a 2 Gbit/s
            // iperf3 test here, whole packets at once (the same count at
            // IP_TX, DEV_TX and DEV_RX); a BTF-typed one only when it
            // interrupts itself. `tcp:tcp_probe` (the TCP receive layer)
            // has a BTF-typed twin too.
            let twin = (!explicit && (layer.skb_slot(0).is_some() || layer == Layer::TcpRx))
                .then(|| h.btf_twin())
                .flatten()
                .filter(|t| check_hook(kernel, layer, t).is_ok());
            if let Some(t) = twin {
                if check_hook(kernel, layer, &h).is_ok() {
                    fallback.push(Some(h));
                } else {
                    fallback.push(None);
                }
                ok.push(t);
                continue;
            }
            match check_hook(kernel, layer, &h) {
                Ok(()) => {
                    ok.push(h);
                    fallback.push(None);
                }
                Err(reason) if explicit => {
                    return Err(ProbeError::Hook {
                        layer: layer.key(),
                        hook: h.to_string(),
                        reason,
                    });
                }
                Err(reason) => {
                    tracing::debug!(layer = layer.key(), hook = %h, %reason, "default hook not available");
                }
            }
        }
        if layer.policy() == Policy::Any {
            ok.truncate(layer.max_hooks());
            fallback.truncate(layer.max_hooks());
        }
        if !ok.is_empty() {
            out.push(LayerHooks {
                layer,
                hooks: ok,
                fallback,
            });
        }
    }
    Ok(out)
}

/// Why `hook` cannot observe `layer` on this kernel, if it cannot.
fn check_hook(kernel: &Kernel, layer: Layer, hook: &Hook) -> Result<(), String> {
    if !layer.kinds().contains(&hook.kind) {
        let kinds: Vec<_> = layer.kinds().iter().map(|k| k.as_str()).collect();
        return Err(format!(
            "this layer's program is written for {} hooks",
            kinds.join(", ")
        ));
    }
    if let Some(fixed) = layer.fixed_event() {
        let name = fixed.split_once(':').map_or(fixed, |(_, n)| n);
        let target = match hook.kind {
            Kind::Tracepoint => hook.target.as_str(),
            _ => hook.tp_name(),
        };
        if target != fixed && target != name {
            return Err(format!("this layer reads fields only {fixed} has"));
        }
    }
    match hook.kind {
        Kind::Tracepoint => {
            let f = kernel
                .tracefs
                .format(&hook.target)
                .map_err(|e| e.to_string())?;
            if layer.fixed_event().is_none() && f.skb_field().is_none() {
                return Err("the tracepoint carries no skbaddr".to_owned());
            }
            Ok(())
        }
        Kind::TpBtf | Kind::RawTp => {
            let args = kernel
                .btf
                .tracepoint_args(hook.tp_name())
                .ok_or_else(|| format!("this kernel has no tracepoint {}", hook.tp_name()))?;
            let want = if layer == Layer::TcpTx || layer == Layer::TcpRx {
                "struct sock *"
            } else {
                "struct sk_buff *"
            };
            if args.first().map(String::as_str) != Some(want) {
                return Err(format!(
                    "its first argument is {:?}, not {want}",
                    args.first()
                ));
            }
            Ok(())
        }
        Kind::Kprobe | Kind::Fentry => {
            if hook.kind == Kind::Kprobe && !kernel.has_kprobes() {
                return Err("this kernel has no kprobes (no kprobe event source)".to_owned());
            }
            skb_arg(kernel, &hook.target).map(|_| ())
        }
    }
}

/// Which argument of kernel function `name` is the `struct sk_buff *`.
pub(crate) fn skb_arg(kernel: &Kernel, name: &str) -> Result<u8, String> {
    let args = kernel
        .btf
        .func_args(name)
        .ok_or_else(|| format!("the kernel's BTF has no function {name}"))?;
    args.iter()
        .position(|a| a == "struct sk_buff *")
        .filter(|&i| i < 5)
        .map(|i| i as u8)
        .ok_or_else(|| format!("{name} takes no struct sk_buff * among its first five arguments"))
}

/// The program that observes `layer` through its `slot`-th hook.
pub(crate) fn program_name(layer: Layer, kind: Kind, slot: usize) -> &'static str {
    let s = slot.min(2);
    match (layer, kind) {
        (Layer::IpTx, Kind::TpBtf) => "stack_bt_ip_tx",
        (Layer::DevTx, Kind::TpBtf) => "stack_bt_dev_tx",
        (Layer::DevRx, Kind::TpBtf) => {
            ["stack_bt_dev_rx0", "stack_bt_dev_rx1", "stack_bt_dev_rx2"][s]
        }
        (Layer::IpRx, Kind::TpBtf) => "stack_bt_ip_rx",
        (Layer::IpTx, Kind::Kprobe) => "stack_kp_ip_tx",
        (Layer::IpTx, Kind::Fentry) => "stack_fe_ip_tx",
        (Layer::DevTx, Kind::Kprobe) => "stack_kp_dev_tx",
        (Layer::DevTx, Kind::Fentry) => "stack_fe_dev_tx",
        (Layer::DevRx, Kind::Kprobe) => {
            ["stack_kp_dev_rx0", "stack_kp_dev_rx1", "stack_kp_dev_rx2"][s]
        }
        (Layer::DevRx, Kind::Fentry) => {
            ["stack_fe_dev_rx0", "stack_fe_dev_rx1", "stack_fe_dev_rx2"][s]
        }
        (Layer::IpRx, Kind::Kprobe) => "stack_kp_ip_rx",
        (Layer::IpRx, Kind::Fentry) => "stack_fe_ip_rx",
        (Layer::SockTx, _) => "stack_send_length",
        (Layer::TcpTx, Kind::TpBtf) => "stack_tcp_sendmsg_btf",
        (Layer::TcpTx, _) => "stack_tcp_sendmsg_raw",
        (Layer::IpTx, _) => "stack_ip_tx",
        (Layer::DevTx, _) => "stack_dev_tx",
        (Layer::DevRx, _) => ["stack_dev_rx0", "stack_dev_rx1", "stack_dev_rx2"][slot.min(2)],
        (Layer::IpRx, _) => "stack_ip_rx",
        (Layer::TcpRx, Kind::TpBtf) => "stack_tcp_probe_btf",
        (Layer::TcpRx, _) => "stack_tcp_probe",
        (Layer::SockRx, _) => "stack_recv_length",
    }
}

pub(crate) fn settings(
    kernel: &Kernel,
    layers: &[LayerHooks],
    opts: &StackOptions,
) -> Result<StackSettings, ProbeError> {
    let mut needed: Vec<&str> = vec![CLOSE_EVENT];
    for l in layers {
        match l.layer {
            Layer::SockTx => needed.push("sock:sock_send_length"),
            Layer::TcpRx => needed.push("tcp:tcp_probe"),
            Layer::SockRx => needed.push("sock:sock_recv_length"),
            _ => {}
        }
    }
    let mut tp = offsets::stack_tp_offsets(&kernel.tracefs, &needed)?;
    let skb_off = |h: &Hook| -> Result<u32, ProbeError> {
        let f = kernel
            .tracefs
            .format(&h.target)
            .map_err(offsets::OffsetError::from)?;
        Ok(
            f.offset(f.skb_field().map_or("skbaddr", |f| f.name.as_str()), 8)
                .map_err(offsets::OffsetError::from)?,
        )
    };
    let mut skb_args = [0u8; 8];
    for l in layers {
        for (i, h) in l.hooks.iter().take(l.layer.max_hooks()).enumerate() {
            let Some(slot) = l.layer.skb_slot(i) else {
                continue;
            };
            // A BTF-typed hook takes the skb as its first argument; the
            // record offset is for its classic fallback, if any.
            let h = match (h.kind, l.fallback.get(i).and_then(Option::as_ref)) {
                (Kind::TpBtf, Some(classic)) => classic,
                (Kind::TpBtf, None) => continue,
                _ => h,
            };
            if h.kind != Kind::Tracepoint {
                skb_args[slot] = skb_arg(kernel, &h.target).map_err(|reason| ProbeError::Hook {
                    layer: l.layer.key(),
                    hook: h.to_string(),
                    reason,
                })?;
                continue;
            }
            let off = skb_off(h)?;
            match l.layer {
                Layer::IpTx => tp.ip_tx_skb = off,
                Layer::DevTx => tp.dev_tx_skb = off,
                Layer::IpRx => tp.ip_rx_skb = off,
                Layer::DevRx => tp.dev_rx_skb[i.min(DEV_RX_HOOKS - 1)] = off,
                _ => {}
            }
        }
    }
    let mut s = StackSettings {
        off: offsets::kernel_offsets(&kernel.btf)?,
        tp,
        sample_bytes: opts.sample_bytes,
        skb_arg: skb_args,
        ..StackSettings::ZERO
    };
    fill(&mut s.ports, &opts.ports, "ports", STACK_MAX_PORTS)?;
    fill(
        &mut s.netns,
        &opts.netns,
        "network namespaces",
        STACK_MAX_NETNS,
    )?;
    fill(&mut s.tgids, &opts.tgids, "processes", STACK_MAX_TGIDS)?;
    fill(&mut s.cgroups, &opts.cgroups, "cgroups", STACK_MAX_CGROUPS)?;
    s.n_cgroups = opts.cgroups.len() as u32;
    if !opts.cgroups.is_empty() {
        s.flags |= STACK_FILTER_CGROUP;
    }
    s.n_ports = opts.ports.len() as u32;
    s.n_netns = opts.netns.len() as u32;
    s.n_tgids = opts.tgids.len() as u32;
    if !opts.ports.is_empty() {
        s.flags |= STACK_FILTER_PORT;
    }
    if !opts.netns.is_empty() {
        s.flags |= STACK_FILTER_NETNS;
    }
    if !opts.tgids.is_empty() {
        s.flags |= STACK_FILTER_TGID;
    }
    Ok(s)
}

fn fill<T: Copy>(
    dst: &mut [T],
    src: &[T],
    what: &'static str,
    max: usize,
) -> Result<(), ProbeError> {
    if src.len() > max {
        return Err(ProbeError::FilterTooLong { what, max });
    }
    dst[..src.len()].copy_from_slice(src);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object;

    fn has_symbol(obj: &[u8], name: &str) -> bool {
        let pat = format!("\0{name}\0");
        obj.windows(pat.len()).any(|w| w == pat.as_bytes())
    }

    /// The overhead benchmark's floor is only the floor if the empty
    /// object offers every program the loader can pick, under the same
    /// name, so the same hooks get attached.
    #[test]
    fn the_empty_object_has_every_program_the_loader_attaches() {
        if object::STACKLAT.is_empty() || object::STACKFLOOR.is_empty() {
            assert!(
                std::env::var("CI").is_err(),
                "the tracing objects were not built under CI"
            );
            eprintln!("SKIPPED: the tracing objects were not built (AYA_BUILD_SKIP=1)");
            return;
        }
        let mut names = vec!["stack_set_state", "stack_send_enter"];
        for layer in Layer::ALL {
            for &kind in layer.kinds() {
                for slot in 0..layer.max_hooks() {
                    names.push(program_name(layer, kind, slot));
                }
            }
        }
        for n in names {
            assert!(has_symbol(object::STACKLAT, n), "stacklat has no {n}");
            assert!(has_symbol(object::STACKFLOOR, n), "stackfloor has no {n}");
        }
    }
}
