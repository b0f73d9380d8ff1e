//! `xdprobe demo bridge` (hidden): one leg of the impairing bridge as a
//! process of its own, for test rigs that build their own namespaces
//! (`tests/rig/`, `tests/live_support/topo.rs`). It bridges `--a` and `--b`
//! of the namespace it is started in (`ip netns exec`), impairs the chosen
//! directions, creates `--ready` once both sockets are open, stops on
//! SIGTERM/SIGINT or after `--seconds`, and prints its counters as one
//! JSON line on stderr.

use std::{
    path::PathBuf,
    process::ExitCode,
    sync::{Arc, atomic::AtomicBool},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::bridge::{Bridge, DirCounters, Impair, Leg};

#[derive(clap::Args, Debug)]
pub struct BridgeArgs {
    /// Interface A (client side).
    #[arg(long)]
    pub a: String,
    /// Interface B (server side).
    #[arg(long)]
    pub b: String,
    /// One-way delay of each impaired direction, ms.
    #[arg(long, default_value_t = 0.0)]
    pub delay_ms: f64,
    /// Loss, percent of each impaired direction's frames.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Frames sent at once, overtaking the delayed ones, percent.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Frames sent twice, percent.
    #[arg(long, default_value_t = 0.0)]
    pub dup: f64,
    /// Which directions are impaired: ab, ba or ab,ba. The others are
    /// forwarded at once.
    #[arg(long, default_value = "ab,ba")]
    pub dirs: String,
    /// Seed of the random coins (A→B uses 2·seed, B→A 2·seed + 1).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stop after this many seconds at the latest (1 to 600).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub seconds: u64,
    /// Created once both interfaces are open.
    #[arg(long)]
    pub ready: Option<PathBuf>,
}

fn pct(name: &str, v: f64) -> anyhow::Result<f64> {
    if (0.0..=100.0).contains(&v) {
        Ok(v)
    } else {
        bail!("--{name} must be between 0 and 100, not {v}")
    }
}

pub fn run(a: &BridgeArgs) -> anyhow::Result<ExitCode> {
    if !(0.0..=10_000.0).contains(&a.delay_ms) {
        bail!("--delay-ms must be between 0 and 10000");
    }
    let mut ab = false;
    let mut ba = false;
    for d in a.dirs.split(',').map(str::trim) {
        match d {
            "ab" => ab = true,
            "ba" => ba = true,
            _ => bail!("--dirs takes ab, ba or ab,ba (not {d:?})"),
        }
    }
    let imp = |on: bool, salt: u64| -> anyhow::Result<Impair> {
        Ok(if on {
            Impair {
                delay: Duration::from_secs_f64(a.delay_ms / 1e3),
                loss_pct: pct("loss", a.loss)?,
                reorder_pct: pct("reorder", a.reorder)?,
                dup_pct: pct("dup", a.dup)?,
                seed: a.seed.wrapping_mul(2).wrapping_add(salt),
            }
        } else {
            Impair::default()
        })
    };
    let leg = Leg {
        a: a.a.clone(),
        b: a.b.clone(),
        a_to_b: imp(ab, 0)?,
        b_to_a: imp(ba, 1)?,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let limit = Duration::from_secs(a.seconds);
    let mut bridge = Bridge::start(None, std::slice::from_ref(&leg), limit)?;
    if let Some(r) = &a.ready {
        std::fs::write(r, b"ready\n").with_context(|| format!("writing {}", r.display()))?;
    }
    let end = Instant::now() + limit;
    while Instant::now() < end && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = bridge.stop()?;
    let s = stats.first().copied().unwrap_or_default();
    eprintln!(
        "{}",
        serde_json::json!({
            "a": a.a, "b": a.b,
            "ab": counters(&s.a_to_b), "ba": counters(&s.b_to_a),
        })
    );
    Ok(ExitCode::SUCCESS)
}

fn counters(d: &DirCounters) -> serde_json::Value {
    serde_json::json!({
        "received": d.received, "forwarded": d.forwarded, "lost": d.lost,
        "reordered": d.reordered, "duplicated": d.duplicated,
        "overflow": d.overflow, "oversize": d.oversize, "tx_errors": d.tx_errors,
    })
}
