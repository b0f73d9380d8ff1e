//! SIGHUP: the config read again, and what can change without a
//! re-attach applied to the running daemon.

use std::{path::Path, sync::atomic::Ordering, time::Duration};

use xdprobe_capture::worker::queue::Control;
use xdprobe_config::Config;
use xdprobe_dataplane::FlowConfig;
use xdprobe_exporter::Exporter;

use super::{collectors, flow_config};

/// SIGHUP: apply what can change without re-attaching.
pub(super) fn reload(
    path: &Path,
    old: &Config,
    exporter: &Exporter,
    control: &Control,
    log_interval: &mut Duration,
) {
    let new = match xdprobe_config::load(path) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("reload: config invalid, keeping the running one:\n{e}");
            return;
        }
    };
    match collectors(&new) {
        Ok(c) => match exporter.reconfigure(c) {
            Ok(()) => {
                tracing::info!(collectors = ?new.export.collectors, "reload: collectors applied")
            }
            Err(e) => {
                tracing::error!(error = %e, "reload: collectors refused, keeping the running ones")
            }
        },
        Err(e) => {
            tracing::error!(error = %e, "reload: collectors refused, keeping the running ones")
        }
    }
    *log_interval = new.probe.log_interval;
    let (mut fresh, running) = (flow_config(&new), flow_config(old));
    let timeouts = |c: &FlowConfig| (c.idle_timeout, c.active_timeout, c.tcp_linger);
    if timeouts(&fresh) != timeouts(&running) {
        if let Ok(mut slot) = control.flow_update.lock() {
            *slot = Some(fresh.clone());
        }
        control.flow_generation.fetch_add(1, Ordering::AcqRel);
        tracing::info!(
            idle = ?fresh.idle_timeout,
            active = ?fresh.active_timeout,
            linger = ?fresh.tcp_linger,
            "reload: flow timeouts applied"
        );
    }
    (fresh.idle_timeout, fresh.active_timeout, fresh.tcp_linger) = timeouts(&running);
    if fresh != running {
        tracing::warn!("reload: [flow] capacity / npm changes take effect after a restart");
    }
    if new.interfaces != old.interfaces
        || new.filter != old.filter
        || new.probe.mode != old.probe.mode
    {
        tracing::warn!(
            "reload: interface, queue, filter or mode changes need a restart (re-attach)"
        );
    }
}
