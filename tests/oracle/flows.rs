//! tshark's frames summed per flow: the per-flow reference values the tests
//! compare `xdprobe pcap` with. The shape (keys, units, rounding) is that of
//! the workplace's `oracle.py`, so both can be cross-checked
//! (`tests/oracle_crosscheck.rs`); what is measured, and the three places
//! where this oracle deliberately differs from it, are documented on
//! [`summarize`].

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::tshark::{F_ACK, F_SYN, L4, Pkt};

/// Per-direction counters (keys as in `oracle.py`, plus `window_full`).
#[derive(Default)]
struct DirAcc {
    packets: u64,
    ip_bytes: u64,
    l4_payload: u64,
    frame_bytes: u64,
    retrans_any: u64,
    retrans_fast: u64,
    retrans_spur: u64,
    out_of_order: u64,
    keep_alive: u64,
    dup_ack: u64,
    lost_segment: u64,
    zero_window: u64,
    window_full: u64,
}

impl DirAcc {
    fn json(&self) -> Value {
        json!({
            "packets": self.packets, "ip_bytes": self.ip_bytes,
            "l4_payload": self.l4_payload, "frame_bytes": self.frame_bytes,
            "retrans_any": self.retrans_any, "retrans_fast": self.retrans_fast,
            "retrans_spur": self.retrans_spur, "out_of_order": self.out_of_order,
            "keep_alive": self.keep_alive, "dup_ack": self.dup_ack,
            "lost_segment": self.lost_segment, "zero_window": self.zero_window,
            "window_full": self.window_full,
        })
    }
}

/// One flow being summed. Direction 0 ("ab") is the sender of its first
/// frame.
struct Acc {
    flow: String,
    l4: L4,
    ip_proto: Option<u8>,
    a: (String, u16),
    b: (String, u16),
    /// Client direction (0/1), once known.
    client: Option<usize>,
    first_ns: u64,
    last_ns: u64,
    vlan: Option<u16>,
    dirs: [DirAcc; 2],
    syn: Vec<u64>,
    synack: Vec<u64>,
    hs_ack: Option<u64>,
    initial_rtt: Option<u64>,
    srt: Vec<u64>,
    req_last: u64,
    req_pending: bool,
    /// Content type of the client's first TLS-decoded payload segment.
    first_client_payload_tls: Option<Option<u8>>,
    dns_q: u64,
    dns_r: u64,
    dns_qframes: BTreeSet<u64>,
    dns_matched: BTreeSet<u64>,
    dns_times: Vec<u64>,
    dns_rcodes: BTreeMap<String, u64>,
    frag: u64,
}

/// ns → µs with three decimals (`round(ns / 1000, 3)` in `oracle.py`).
fn us(ns: impl Into<f64>) -> f64 {
    ns.into().round() / 1000.0
}

fn us_opt(ns: Option<i64>) -> Value {
    ns.map_or(Value::Null, |n| json!(us(n as f64)))
}

/// `(ns + 500) / 1000`: the probe's own rounding to the microsecond.
pub fn round_us(ns: u64) -> u64 {
    (ns + 500) / 1000
}

/// Per-flow summary of tshark's frames, one JSON object per flow in order
/// of first appearance, keyed like `oracle.py --format jsonl`:
///
/// - flow: TCP/UDP by tshark's stream index, other IP by protocol and
///   address pair; client = the sender of the first SYN (TCP), else of the
///   first DNS query, else unknown (`dir_guess`, the first frame's sender
///   stands in);
/// - per direction: packets, IP bytes (IPv4 total length, IPv6 payload
///   length + 40), L4 payload and frame bytes, and the count of each of
///   Wireshark's TCP analysis flags;
/// - TCP handshake: SYN / SYN+ACK times, `server_nt_us` = first SYN+ACK −
///   the last SYN stamped before it, `client_nt_us` = first client ACK after
///   a SYN+ACK − the last SYN+ACK, Wireshark's `initial_rtt`;
/// - TCP turns: every time from the last client payload segment to the
///   first server payload segment after it (keep-alives are not payload);
/// - DNS: queries, responses, unanswered queries, `dns.time` per response.
///
/// Where this differs from `oracle.py`, on purpose:
/// 1. `first_ts`/`last_ts` (and the exact `first_us`/`last_us`) are the
///    earliest and latest capture times of the flow, not those of its first
///    and last frame in file order: the probe sorts small timestamp
///    inversions (`dataplane/src/source/reorder.rs`), so "first packet"
///    means first in time. Equal for files in time order.
/// 2. A frame that makes a DNS query the client's (a DNS/TCP connection
///    seen mid-stream) does so before its own payload is considered, so that
///    query is the first request of the flow's first turn. `oracle.py`
///    learned the roles only after the frame and measured no turn.
/// 3. Extra keys: `window_full` per direction and in total,
///    `tls_client_hello` (the client's first payload segment starts a TLS
///    handshake record as tshark decodes it, heuristics included; `null`
///    without client payload), `first_us`/`last_us`.
pub fn summarize(pkts: &[Pkt]) -> Vec<Value> {
    let mut order: Vec<String> = Vec::new();
    let mut flows: BTreeMap<String, Acc> = BTreeMap::new();
    for p in pkts {
        let f = flows.entry(p.flow.clone()).or_insert_with(|| {
            order.push(p.flow.clone());
            Acc::new(p)
        });
        f.add(p);
    }
    order
        .iter()
        .filter_map(|k| flows.get(k))
        .map(record)
        .collect()
}

impl Acc {
    /// A flow whose first packet (in file order) is `p`.
    fn new(p: &Pkt) -> Acc {
        Acc {
            flow: p.flow.clone(),
            l4: p.l4,
            ip_proto: p.ip_proto,
            a: (p.src_addr.clone(), p.src_port),
            b: (p.dst_addr.clone(), p.dst_port),
            client: None,
            first_ns: p.ts_ns,
            last_ns: p.ts_ns,
            vlan: p.vlan,
            dirs: Default::default(),
            syn: Vec::new(),
            synack: Vec::new(),
            hs_ack: None,
            initial_rtt: None,
            srt: Vec::new(),
            req_last: 0,
            req_pending: false,
            first_client_payload_tls: None,
            dns_q: 0,
            dns_r: 0,
            dns_qframes: BTreeSet::new(),
            dns_matched: BTreeSet::new(),
            dns_times: Vec::new(),
            dns_rcodes: BTreeMap::new(),
            frag: 0,
        }
    }

    fn add(&mut self, p: &Pkt) {
        self.first_ns = self.first_ns.min(p.ts_ns);
        self.last_ns = self.last_ns.max(p.ts_ns);
        let d = usize::from((p.src_addr.as_str(), p.src_port) != (self.a.0.as_str(), self.a.1));
        let st = &mut self.dirs[d];
        st.packets += 1;
        st.ip_bytes += p.ip_len;
        st.frame_bytes += p.frame_len;
        self.frag += u64::from(p.ip_fragment);
        // Roles from a DNS query come first (difference 2 above).
        if let Some(dns) = p.dns
            && !dns.response
            && self.client.is_none()
        {
            self.client = Some(d);
        }
        match p.l4 {
            L4::Tcp => self.add_tcp(p, d),
            L4::Udp => self.dirs[d].l4_payload += p.udp_len.saturating_sub(8),
            L4::Other => {}
        }
        if let Some(dns) = p.dns {
            if dns.response {
                self.dns_r += 1;
                self.dns_times.extend(dns.time_ns);
                self.dns_matched.extend(dns.response_to);
                let rc = dns.rcode.map_or("?".to_string(), |r| r.to_string());
                *self.dns_rcodes.entry(rc).or_default() += 1;
            } else {
                self.dns_q += 1;
                self.dns_qframes.insert(p.frame);
            }
        }
    }

    /// A TCP packet of direction `d`: its payload and analysis flags, the
    /// handshake, the turns.
    fn add_tcp(&mut self, p: &Pkt, d: usize) {
        let st = &mut self.dirs[d];
        st.l4_payload += u64::from(p.len);
        let a = &p.a;
        for (hit, n) in [
            (a.retrans, &mut st.retrans_any),
            (a.fast, &mut st.retrans_fast),
            (a.spurious, &mut st.retrans_spur),
            (a.ooo, &mut st.out_of_order),
            (a.keep_alive, &mut st.keep_alive),
            (a.dup_ack, &mut st.dup_ack),
            (a.lost_segment, &mut st.lost_segment),
            (a.zero_window, &mut st.zero_window),
            (a.window_full, &mut st.window_full),
        ] {
            *n += u64::from(hit);
        }
        let (syn, ack) = (p.flags & F_SYN != 0, p.flags & F_ACK != 0);
        if syn && !ack {
            if self.client.is_none() && self.synack.is_empty() {
                self.client = Some(d);
            }
            if self.synack.is_empty() {
                self.syn.push(p.ts_ns);
            }
        } else if syn && ack {
            self.synack.push(p.ts_ns);
            if self.client.is_none() {
                self.client = Some(1 - d);
            }
        } else if ack && !self.synack.is_empty() && self.hs_ack.is_none() && Some(d) == self.client
        {
            self.hs_ack = Some(p.ts_ns);
        }
        if self.initial_rtt.is_none() {
            self.initial_rtt = p.initial_rtt_ns;
        }
        if p.len > 0 && Some(d) == self.client && self.first_client_payload_tls.is_none() {
            self.first_client_payload_tls = Some(p.tls_content_type);
        }
        if p.len > 0
            && !a.keep_alive
            && let Some(c) = self.client
        {
            if d == c {
                self.req_last = p.ts_ns;
                self.req_pending = true;
            } else if self.req_pending {
                self.srt.push(p.ts_ns - self.req_last);
                self.req_pending = false;
            }
        }
    }
}

fn record(f: &Acc) -> Value {
    let c = f.client.unwrap_or(0);
    let s = 1 - c;
    let (cli, srv) = if c == 0 { (&f.a, &f.b) } else { (&f.b, &f.a) };
    let port = |p: u16| {
        if f.l4 == L4::Other {
            Value::Null
        } else {
            json!(p)
        }
    };
    let mut r = Map::new();
    r.insert("flow".into(), json!(f.flow));
    r.insert(
        "proto".into(),
        json!(match f.l4 {
            L4::Tcp => "tcp",
            L4::Udp => "udp",
            L4::Other => "ip",
        }),
    );
    r.insert("ip_proto".into(), json!(f.ip_proto));
    r.insert("src_ip".into(), json!(cli.0));
    r.insert("src_port".into(), port(cli.1));
    r.insert("dst_ip".into(), json!(srv.0));
    r.insert("dst_port".into(), port(srv.1));
    r.insert("dir_guess".into(), json!(f.client.is_none()));
    r.insert("vlan".into(), json!(f.vlan.map(|v| v.to_string())));
    r.insert(
        "first_ts".into(),
        json!((f.first_ns as f64 / 1e9 * 1e6).round() / 1e6),
    );
    r.insert(
        "last_ts".into(),
        json!((f.last_ns as f64 / 1e9 * 1e6).round() / 1e6),
    );
    r.insert("first_us".into(), json!(round_us(f.first_ns)));
    r.insert("last_us".into(), json!(round_us(f.last_ns)));
    r.insert(
        "duration_us".into(),
        json!(us((f.last_ns - f.first_ns) as f64)),
    );
    let (dc, ds) = (&f.dirs[c], &f.dirs[s]);
    r.insert("packets".into(), json!(dc.packets + ds.packets));
    r.insert("ip_bytes".into(), json!(dc.ip_bytes + ds.ip_bytes));
    r.insert("c2s".into(), dc.json());
    r.insert("s2c".into(), ds.json());
    if f.frag > 0 {
        r.insert("ip_fragments".into(), json!(f.frag));
    }
    if f.l4 == L4::Tcp {
        tcp_keys(f, &mut r);
    }
    if f.dns_q > 0 || f.dns_r > 0 {
        let v = &f.dns_times;
        let unanswered = f.dns_qframes.difference(&f.dns_matched).count();
        r.insert(
            "dns".into(),
            json!({
                "queries": f.dns_q, "responses": f.dns_r, "unanswered": unanswered,
                "rcodes": f.dns_rcodes,
                "time_us": v.iter().take(50).map(|&x| us(x as f64)).collect::<Vec<_>>(),
                "mean_us": if v.is_empty() { Value::Null } else {
                    json!(us(v.iter().sum::<u64>() as f64 / v.len() as f64))
                },
            }),
        );
    }
    Value::Object(r)
}

/// A TCP flow's handshake, retransmission and analysis counts, and its
/// turns' response times.
fn tcp_keys(f: &Acc, r: &mut Map<String, Value>) {
    let syn_last = match (f.synack.first(), f.syn.is_empty()) {
        (Some(&sa), false) => f.syn.iter().rfind(|&&x| x <= sa).copied(),
        _ => None,
    };
    let snt = syn_last.and_then(|sl| Some(*f.synack.first()? as i64 - sl as i64));
    let cnt = match (f.hs_ack, f.synack.last()) {
        (Some(a), Some(&sa)) => Some(a as i64 - sa as i64),
        _ => None,
    };
    let sum = |k: fn(&DirAcc) -> u64| k(&f.dirs[0]) + k(&f.dirs[1]);
    let any = sum(|d| d.retrans_any);
    let fast = sum(|d| d.retrans_fast);
    let spur = sum(|d| d.retrans_spur);
    r.insert(
        "handshake".into(),
        json!({
            "syn_count": f.syn.len(), "synack_count": f.synack.len(),
            "server_nt_us": us_opt(snt), "client_nt_us": us_opt(cnt),
            "initial_rtt_us": us_opt(f.initial_rtt.map(|n| n as i64)),
        }),
    );
    r.insert(
        "initial_rtt_us".into(),
        us_opt(f.initial_rtt.map(|n| n as i64)),
    );
    r.insert(
        "retrans".into(),
        json!({"any": any, "plain": any - fast - spur, "fast": fast, "spurious": spur}),
    );
    r.insert("out_of_order".into(), json!(sum(|d| d.out_of_order)));
    r.insert("keep_alive".into(), json!(sum(|d| d.keep_alive)));
    r.insert("dup_ack".into(), json!(sum(|d| d.dup_ack)));
    r.insert("lost_segment".into(), json!(sum(|d| d.lost_segment)));
    r.insert("zero_window".into(), json!(sum(|d| d.zero_window)));
    r.insert("window_full".into(), json!(sum(|d| d.window_full)));
    r.insert(
        "tls_client_hello".into(),
        json!(f.first_client_payload_tls.map(|t| t == Some(22))),
    );
    if !f.srt.is_empty() {
        r.insert("srt".into(), srt_json(&f.srt, snt));
    }
}

/// The turns' response times `v` (ns), against the server's network time
/// `snt` when known.
fn srt_json(v: &[u64], snt: Option<i64>) -> Value {
    let mut srt = Map::new();
    srt.insert("count".into(), json!(v.len()));
    let min = v.iter().min().copied().unwrap_or(0);
    let max = v.iter().max().copied().unwrap_or(0);
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    srt.insert("first_us".into(), json!(us(v[0] as f64)));
    srt.insert("min_us".into(), json!(us(min as f64)));
    srt.insert("mean_us".into(), json!(us(mean)));
    srt.insert("max_us".into(), json!(us(max as f64)));
    if let Some(snt) = snt {
        srt.insert(
            "first_minus_snt_us".into(),
            json!(us(v[0] as f64 - snt as f64)),
        );
    }
    Value::Object(srt)
}
