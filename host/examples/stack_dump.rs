//! Development aid: attach the stack-latency probe and print raw events.
use std::time::{Duration, Instant};
fn main() {
    let kernel = xdprobe_host::kernel::Kernel::open().unwrap();
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let ports: Vec<u16> = std::env::args()
        .skip(2)
        .filter_map(|s| s.parse().ok())
        .collect();
    let opts = xdprobe_host::stack::probe::StackOptions {
        ports,
        ..Default::default()
    };
    let mut p = match xdprobe_host::stack::probe::StackProbe::start(&kernel, &opts) {
        Ok(p) => p,
        Err(e) => {
            let mut s = format!("{e}");
            let mut src = std::error::Error::source(&e);
            while let Some(x) = src {
                s += &format!(": {x}");
                src = x.source();
            }
            eprintln!("{s}");
            std::process::exit(2)
        }
    };
    eprintln!("attached: {:?}", p.attached);
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        p.drain(|e| {
            println!(
                "{} L{} {}:{} -> {}:{} seq={} end={} len={} ns={} tgid={} if={}",
                e.ts_ns,
                e.layer,
                e.saddr[3],
                e.sport,
                e.daddr[3],
                e.dport,
                e.seq,
                e.end,
                e.end.wrapping_sub(e.seq),
                e.netns,
                e.tgid,
                e.ifindex
            )
        });
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("{:?}", p.counters());
}
