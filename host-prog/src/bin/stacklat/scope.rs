//! What an observation must pass before it is reported: the sampling
//! grid and the in-kernel scope (ports, network namespaces, processes,
//! cgroups) from the loader's settings.

use aya_ebpf::helpers::bpf_get_current_cgroup_id;
use host_prog::holds_sample;
use xdprobe_common::host::{
    STACK_FILTER_CGROUP, STACK_FILTER_NETNS, STACK_FILTER_PORT, STACK_FILTER_TGID,
    STACK_MAX_CGROUPS, STACK_MAX_NETNS, STACK_MAX_PORTS, STACK_MAX_TGIDS,
};

use crate::maps::{Count, count};

#[inline(always)]
pub(crate) fn sampled(seq: u32, end: u32) -> bool {
    if holds_sample(seq, end, setting!(sample_bytes)) {
        true
    } else {
        count(Count::Unsampled);
        false
    }
}

#[inline(always)]
pub(crate) fn port_ok(sport: u16, dport: u16) -> bool {
    if setting!(flags) & STACK_FILTER_PORT == 0 {
        return true;
    }
    let n = setting!(n_ports) as usize;
    for i in 0..STACK_MAX_PORTS {
        if i >= n {
            break;
        }
        let p = setting!(ports[i]);
        if p == sport || p == dport {
            return true;
        }
    }
    false
}

#[inline(always)]
pub(crate) fn netns_ok(netns: u32) -> bool {
    if setting!(flags) & STACK_FILTER_NETNS == 0 {
        return true;
    }
    let n = setting!(n_netns) as usize;
    for i in 0..STACK_MAX_NETNS {
        if i >= n {
            break;
        }
        if setting!(netns[i]) == netns {
            return true;
        }
    }
    false
}

/// Process scope of a socket-layer event (process context): the thread
/// group and the cgroup of the current task.
#[inline(always)]
pub(crate) fn tgid_ok(tgid: u32) -> bool {
    let flags = setting!(flags);
    if flags & STACK_FILTER_TGID != 0 {
        let n = setting!(n_tgids) as usize;
        let mut hit = false;
        for i in 0..STACK_MAX_TGIDS {
            if i >= n {
                break;
            }
            if setting!(tgids[i]) == tgid {
                hit = true;
                break;
            }
        }
        if !hit {
            return false;
        }
    }
    if flags & STACK_FILTER_CGROUP != 0 {
        // SAFETY: helper without arguments (cgroup v2 ID of the current task).
        let cg = unsafe { bpf_get_current_cgroup_id() };
        let n = setting!(n_cgroups) as usize;
        for i in 0..STACK_MAX_CGROUPS {
            if i >= n {
                break;
            }
            if setting!(cgroups[i]) == cg {
                return true;
            }
        }
        return false;
    }
    true
}
