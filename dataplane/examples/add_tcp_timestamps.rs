//! Writes a copy of a capture with the TCP timestamp option on every TCP
//! segment (`benches/support/tcp_ts.rs`): the input of the timestamp-RTT
//! rows of `benches/compare.sh`.
//!
//! `cargo run --release -p xdprobe-dataplane --example add_tcp_timestamps -- IN OUT`

#[path = "../../benches/support/tcp_ts.rs"]
mod tcp_ts;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(input), Some(output)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: add_tcp_timestamps IN OUT");
        std::process::exit(2);
    };
    let data = std::fs::read(input).unwrap_or_else(|e| panic!("read {input}: {e}"));
    let (out, n) = tcp_ts::add_tcp_timestamps(&data);
    std::fs::write(output, out).unwrap_or_else(|e| panic!("write {output}: {e}"));
    eprintln!("{output}: timestamp option added to {n} TCP segments");
}
