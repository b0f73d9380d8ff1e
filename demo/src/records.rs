//! The probe's JSON records, read back by the dataplane's own reader of its
//! schema, printed with the very table writer `xdprobe pcap --format table`
//! uses, and a few lines saying what to look at.

use std::io::Write;

pub use xdprobe_dataplane::output::from_json;
use xdprobe_dataplane::{
    FlowRecord,
    output::{Format, RecordWriter},
};

use super::traffic::{DNS_PORT, DOWNLOAD_PORT, HTTP_PORT, REFUSED_PORT, UPLOAD_PORT};

/// The records as the aligned table, in start order.
pub fn write_table(recs: &[FlowRecord], out: impl Write) -> std::io::Result<()> {
    let mut sorted: Vec<&FlowRecord> = recs.iter().collect();
    sorted.sort_by_key(|r| (r.start, r.client_port));
    let mut w = RecordWriter::new(out, Format::Table);
    for r in sorted {
        w.write(r)?;
    }
    w.flush()
}

/// What a flow is in the demo's traffic, by its server port.
pub fn role(r: &FlowRecord) -> &'static str {
    match (r.proto, r.server_port) {
        (6, HTTP_PORT) => "HTTP-like",
        (6, UPLOAD_PORT) => "bulk upload",
        (6, DOWNLOAD_PORT) => "bulk download",
        (6, REFUSED_PORT) => "refused",
        (17, DNS_PORT) => "DNS",
        _ => "other",
    }
}

fn ms(us: u32) -> String {
    format!("{:.2} ms", f64::from(us) / 1e3)
}

fn median(mut v: Vec<u32>) -> Option<u32> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// Settings the highlights compare the measurements with.
pub struct Expect {
    pub delay_ms: u64,
    pub think_ms: u64,
    pub dns_delay_ms: u64,
}

/// A few lines that point at the measurements and what they should be.
pub fn highlights(recs: &[FlowRecord], e: &Expect) -> Vec<String> {
    let mut out = Vec::new();
    let rtts: Vec<u32> = recs
        .iter()
        .filter(|r| r.proto == 6)
        .filter_map(|r| r.npm.rtt_us)
        .collect();
    if let Some(m) = median(rtts.clone()) {
        out.push(format!(
            "handshake RTT: median {} over {} TCP flows (the bridge delays {} ms each way: expect ≈ {} ms)",
            ms(m),
            rtts.len(),
            e.delay_ms,
            2 * e.delay_ms
        ));
    }
    let srt = |role_name: &str| -> Vec<u32> {
        recs.iter()
            .filter(|r| role(r) == role_name && r.npm.srt_count > 0)
            .filter_map(|r| r.npm.srt_us)
            .collect()
    };
    if let Some(m) = median(srt("HTTP-like")) {
        out.push(format!(
            "server response time, HTTP-like: median {} (the server thinks {} ms)",
            ms(m),
            e.think_ms
        ));
    }
    if let Some(m) = median(srt("DNS")) {
        out.push(format!(
            "server response time, DNS: median {} (the responder takes {} ms)",
            ms(m),
            e.dns_delay_ms
        ));
    }
    let rtx: u32 = recs.iter().map(|r| r.c2s.retrans + r.s2c.retrans).sum();
    let ooo: u32 = recs.iter().map(|r| r.c2s.ooo + r.s2c.ooo).sum();
    let bulk: Vec<String> = recs
        .iter()
        .filter(|r| matches!(role(r), "bulk upload" | "bulk download"))
        .map(|r| format!("{} {}", role(r), r.c2s.retrans + r.s2c.retrans))
        .collect();
    out.push(format!(
        "retransmissions: {rtx} in all ({}), out-of-order: {ooo}",
        bulk.join(", ")
    ));
    out.extend(names(recs));
    if let Some(r) = recs.iter().find(|r| role(r) == "refused") {
        out.push(format!(
            "refused connection: {}:{} -> {}:{}, {} packets, RTT {}",
            r.client_addr,
            r.client_port,
            r.server_addr,
            r.server_port,
            r.c2s.packets + r.s2c.packets,
            r.npm.rtt_us.map_or_else(|| "-".into(), ms)
        ));
    }
    out
}

/// What the flows were, as the L7 parsers read them from their payload:
/// each HTTP host with its requests and the statuses answered, and the
/// DNS names asked with their response codes.
fn names(recs: &[FlowRecord]) -> Vec<String> {
    use std::collections::BTreeMap;
    use xdprobe_dataplane::l7::L7Fields;
    use xdprobe_dataplane::l7::text::Shown;
    let text = |s: &Option<Box<[u8]>>| s.as_deref().map_or("?".into(), |b| Shown(b).to_string());
    // host -> (flows, requests, responses by class)
    let mut http: BTreeMap<String, (u32, u32, [u32; 5])> = BTreeMap::new();
    let mut dns: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for r in recs {
        match &r.l7 {
            Some(L7Fields::Http(h)) => {
                let e = http.entry(text(&h.host)).or_default();
                e.0 += 1;
                e.1 += h.requests;
                for (t, c) in e.2.iter_mut().zip(h.status_class) {
                    *t += c;
                }
            }
            Some(L7Fields::Dns(d)) => dns.entry(text(&d.qname)).or_default().extend(d.rcode),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (host, (flows, requests, classes)) in http {
        let statuses: Vec<String> = (1..=5)
            .zip(classes)
            .filter(|(_, c)| *c > 0)
            .map(|(k, c)| format!("{c} × {k}xx"))
            .collect();
        out.push(format!(
            "HTTP host {host}: {requests} requests in {flows} flows, answered {}",
            statuses.join(", ")
        ));
    }
    if !dns.is_empty() {
        let asked: Vec<String> = dns
            .iter()
            .map(|(name, rcodes)| match rcodes.first() {
                Some(0) => format!("{name} (NOERROR)"),
                Some(3) => format!("{name} (NXDOMAIN)"),
                Some(c) => format!("{name} (rcode {c})"),
                None => format!("{name} (no answer)"),
            })
            .collect();
        out.push(format!("DNS names asked: {}", asked.join(", ")));
    }
    out
}
