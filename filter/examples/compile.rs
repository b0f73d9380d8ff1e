//! Prints the classic BPF libpcap makes of an expression for raw IP
//! packets, as `tcpdump -dd` would: `cargo run -p xdprobe-filter
//! --example compile -- 'udp dst port 7'`.

fn main() {
    let expr = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    match xdprobe_filter::compile(&expr, xdprobe_filter::LinkType::Raw, 65535) {
        Ok(p) => {
            for i in &p.insns {
                println!("{i},");
            }
            eprintln!("{} instructions", p.insns.len());
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
}
