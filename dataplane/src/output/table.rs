//! Aligned table for people reading a terminal.

use std::fmt::Write;

use super::opt;
use crate::flow::record::FlowRecord;

pub(super) fn header(buf: &mut String) {
    let _ = writeln!(
        buf,
        "{:<6} {:<41} {:<41} {:>8} {:>10} {:>8} {:>10} {:>9} {:>10} {:>9} {:>9} {:>5} {:>5} {:<7} {:<12} name",
        "proto",
        "client",
        "server",
        "c2s_pkt",
        "c2s_bytes",
        "s2c_pkt",
        "s2c_bytes",
        "rtt_us",
        "ts_rtt_us",
        "srt_us",
        "dur_ms",
        "rtx",
        "ooo",
        "end",
        "app"
    );
}

/// What names the flow: the TLS or QUIC server name, the HTTP Host, the
/// DNS question (then, for HTTP, the status of the last response).
fn name(r: &FlowRecord) -> String {
    use xdprobe_l7::L7Fields;
    use xdprobe_l7::text::Shown;
    let shown = |s: &Option<Box<[u8]>>| {
        s.as_deref()
            .map_or_else(String::new, |b| Shown(b).to_string())
    };
    match &r.l7 {
        Some(L7Fields::Tls(t)) => shown(&t.sni),
        Some(L7Fields::Quic(q)) => shown(&q.sni),
        Some(L7Fields::Http(h)) => match h.status {
            Some(s) => format!("{} {s}", shown(&h.host)),
            None => shown(&h.host),
        },
        Some(L7Fields::Dns(d)) => shown(&d.qname),
        None => String::new(),
    }
}

/// The interval's timestamp RTT at the probe: the two legs' medians
/// summed, when both have one.
fn ts_rtt_us(r: &FlowRecord) -> Option<u32> {
    let t = r.npm.ts_rtt?;
    Some(t.server.p50_us?.saturating_add(t.client.p50_us?))
}

pub(super) fn row(buf: &mut String, r: &FlowRecord) {
    let ep = |a: std::net::IpAddr, p: u16| match a {
        std::net::IpAddr::V6(_) => format!("[{a}]:{p}"),
        std::net::IpAddr::V4(_) => format!("{a}:{p}"),
    };
    let dur_ms = r.end.nanos_since(r.start) as f64 / 1e6;
    let guess = if r.direction_guessed { "?" } else { "" };
    let _ = writeln!(
        buf,
        "{:<6} {:<41} {:<41} {:>8} {:>10} {:>8} {:>10} {:>9} {:>10} {:>9} {:>9.1} {:>5} {:>5} {:<7} {:<12} {}",
        super::proto_name(r.proto),
        format!("{}{guess}", ep(r.client_addr, r.client_port)),
        ep(r.server_addr, r.server_port),
        r.c2s.packets,
        r.c2s.bytes,
        r.s2c.packets,
        r.s2c.bytes,
        opt(r.npm.rtt_us),
        opt(ts_rtt_us(r)),
        opt(r.npm.srt_us),
        dur_ms,
        r.c2s.retrans + r.s2c.retrans,
        r.c2s.ooo + r.s2c.ooo,
        format!("{:?}", r.end_reason).to_lowercase(),
        r.app.map_or("-", |a| a.as_str()),
        name(r)
    );
}
