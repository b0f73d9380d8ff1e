//! Development aid: trace points for a few seconds and print raw trails.
//! `cargo run -p xdprobe-host --example trace_dump -- SECS 'net:*,skb:*' 'udp port 7'`
use std::time::{Duration, Instant};
fn main() {
    let kernel = xdprobe_host::kernel::Kernel::open().unwrap();
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let points = args.next().unwrap_or_else(|| "net:*,skb:*,qdisc:*".into());
    let flow = args.next().unwrap_or_default();
    let points = xdprobe_host::trace::points::choose(&kernel, &[points], None).unwrap();
    let opts = xdprobe_host::trace::probe::TraceOptions {
        points,
        flow,
        ..Default::default()
    };
    let mut p = match xdprobe_host::trace::probe::TraceProbe::start(&kernel, &opts) {
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
    let names: Vec<String> = p.points.iter().map(|p| p.name.clone()).collect();
    let show = |t: &xdprobe_common::trace::Trail| {
        let steps: Vec<String> = t.steps[..usize::from(t.n_steps).min(32)]
            .iter()
            .map(|s| format!("{}+{}", names[usize::from(s.point)], s.ts_ns - t.first_ns))
            .collect();
        println!(
            "end={} len={} head={:x} skb={:x} {}",
            t.end,
            t.pkt_len,
            t.head,
            t.skb,
            steps.join(" ")
        );
    };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        p.drain(show);
        std::thread::sleep(Duration::from_millis(100));
    }
    p.stop(&mut |t| show(t));
    eprintln!("{:?}", p.counters());
}
