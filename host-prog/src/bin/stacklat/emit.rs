//! Observations into events: a socket's identity (cached per socket) or
//! a segment's headers, and the ring-buffer write behind the scope check.

use aya_ebpf::bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP};
use host_prog::{AF_INET, AF_INET6, ETH_P_IP, ETH_P_IPV6, Segment, parse_tcp, rd};
use xdprobe_common::host::{GATE_REST, SockId, StackEvent};

use crate::maps::{Count, SOCK_IDS, STACK_EVENTS, count, now, open};
use crate::scope::{netns_ok, port_ok, sampled};

#[inline(always)]
pub(crate) fn output(ev: &StackEvent) {
    if !port_ok(ev.sport, ev.dport) || !netns_ok(ev.netns) {
        count(Count::Filtered);
        return;
    }
    let flags = if STACK_EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= u64::from(setting!(wakeup_bytes))
    {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    match STACK_EVENTS.output::<StackEvent>(ev, u64::from(flags)) {
        Ok(()) => count(Count::Events),
        Err(_) => count(Count::RingbufFull),
    }
}

/// The network namespace of `net` (a `struct net *`).
#[inline(always)]
pub(crate) fn net_inum(net: u64) -> u32 {
    rd::<u32>(net, setting!(off.net_ns_inum)).unwrap_or(0)
}

/// Reads a socket's identity and namespace from the socket itself.
#[inline(always)]
pub(crate) fn read_sock_id(sk: u64) -> Option<SockId> {
    let family = rd::<u16>(sk, setting!(off.sk_family))?;
    let mut id = SockId {
        family: family as u8,
        ..SockId::default()
    };
    if family == AF_INET {
        id.local[..4].copy_from_slice(&rd::<[u8; 4]>(sk, setting!(off.sk_rcv_saddr))?);
        id.remote[..4].copy_from_slice(&rd::<[u8; 4]>(sk, setting!(off.sk_daddr))?);
    } else if family == AF_INET6 {
        id.local = rd::<[u8; 16]>(sk, setting!(off.sk_v6_rcv_saddr))?;
        id.remote = rd::<[u8; 16]>(sk, setting!(off.sk_v6_daddr))?;
    } else {
        return None;
    }
    id.lport = rd::<u16>(sk, setting!(off.sk_num))?;
    id.rport = u16::from_be(rd::<u16>(sk, setting!(off.sk_dport))?);
    let net = rd::<u64>(sk, setting!(off.sk_net))?;
    id.netns = net_inum(net);
    Some(id)
}

/// Fills the event's identity from the socket (cached per socket: the
/// local and remote ends of a connected socket do not change). `rx`: the
/// data flows from the remote end to this socket (a receiver's layer), so
/// the remote end is the source.
#[inline(always)]
pub(crate) fn sock_identity(ev: &mut StackEvent, sk: u64, rx: bool) -> Option<()> {
    // SAFETY: copied out of the map value at once.
    let id = match unsafe { SOCK_IDS.get(sk) }.copied() {
        Some(id) => id,
        None => {
            let id = read_sock_id(sk)?;
            // A socket that is not connected yet has no remote port:
            // cache only complete identities.
            if id.rport != 0 {
                let _ = SOCK_IDS.insert(sk, id, 0);
            }
            id
        }
    };
    ev.family = id.family;
    ev.netns = id.netns;
    if rx {
        (ev.saddr, ev.daddr, ev.sport, ev.dport) = (id.remote, id.local, id.rport, id.lport);
    } else {
        (ev.saddr, ev.daddr, ev.sport, ev.dport) = (id.local, id.remote, id.lport, id.rport);
    }
    Some(())
}

/// Reports a socket-identified observation (socket and TCP layers) whose
/// range the caller found `sampled`.
#[inline(always)]
pub(crate) fn emit_sock(layer: u8, sk: u64, seq: u32, end: u32, ts_ns: u64, tgid: u32, rx: bool) {
    let mut ev = StackEvent {
        ts_ns,
        seq,
        end,
        tgid,
        layer,
        ..StackEvent::default()
    };
    if sock_identity(&mut ev, sk, rx).is_none() {
        count(Count::ReadFailed);
        return;
    }
    output(&ev);
}

/// Reports a header-identified observation (IP and device layers). The
/// time is read once the segment is known to be sampled: an unsampled one
/// costs no clock read (the sampled one's time is later by the header
/// reads, tens of ns).
#[inline(always)]
pub(crate) fn emit_skb(layer: u8, skb: u64, s: &Segment) {
    if s.len == 0 {
        return; // pure ACK, SYN, FIN, RST: no stream bytes
    }
    let end = s.seq.wrapping_add(s.len);
    if !sampled(s.seq, end) {
        return;
    }
    let mut ev = StackEvent {
        ts_ns: now(),
        seq: s.seq,
        end,
        layer,
        family: s.family,
        sport: s.sport,
        dport: s.dport,
        saddr: s.saddr,
        daddr: s.daddr,
        ..StackEvent::default()
    };
    if let Some(dev) = rd::<u64>(skb, setting!(off.skb_dev)) {
        ev.ifindex = rd::<u32>(dev, setting!(off.dev_ifindex)).unwrap_or(0);
        if let Some(net) = rd::<u64>(dev, setting!(off.dev_nd_net)) {
            ev.netns = net_inum(net);
        }
    }
    output(&ev);
}

/// `sk_buff.head` and `.data` (adjacent: the loader checks).
#[inline(always)]
pub(crate) fn skb_head_data(skb: u64) -> Option<(u64, u64)> {
    let [head, data] = rd::<[u64; 2]>(skb, setting!(off.skb_head))?;
    Some((head, data))
}

/// The `sk_buff` fields the header walk needs.
pub(crate) struct SkbFields {
    len: u32,
    /// `protocol` (network order), `transport_header`, `network_header`,
    /// `mac_header` (adjacent: the loader checks).
    hdrs: [u16; 4],
    head: u64,
    data: u64,
}

/// Three reads: one read spanning `len` to `data` (96 bytes) measured no
/// cheaper here (bpf_stats, iperf3 over veth), so the smaller reads stay.
#[inline(always)]
pub(crate) fn skb_fields(skb: u64) -> Option<SkbFields> {
    let (head, data) = skb_head_data(skb)?;
    Some(SkbFields {
        len: rd::<u32>(skb, setting!(off.skb_len))?,
        hdrs: rd::<[u16; 4]>(skb, setting!(off.skb_protocol))?,
        head,
        data,
    })
}

/// Transmit side: the network header is set, `data` points at the link
/// header.
#[inline(always)]
pub(crate) fn tx_skb(layer: u8, skb: u64) {
    if !open(GATE_REST) {
        return;
    }
    let Some(f) = skb_fields(skb) else {
        count(Count::ReadFailed);
        return;
    };
    let l3 = f.head + u64::from(f.hdrs[2]);
    let before = l3.saturating_sub(f.data);
    if before > u64::from(f.len) {
        return;
    }
    if let Some(s) = parse_tcp(l3, f.len - before as u32) {
        emit_skb(layer, skb, &s);
    }
}

/// Receive side: `data` points at the network header (the driver's
/// `eth_type_trans` pulled the link header); the network header offset is
/// not set yet at the device layer.
#[inline(always)]
pub(crate) fn rx_skb(layer: u8, skb: u64) {
    if !open(GATE_REST) {
        return;
    }
    let Some(f) = skb_fields(skb) else {
        count(Count::ReadFailed);
        return;
    };
    let proto = u16::from_be(f.hdrs[0]);
    if proto != ETH_P_IP && proto != ETH_P_IPV6 {
        return;
    }
    if let Some(s) = parse_tcp(f.data, f.len) {
        emit_skb(layer, skb, &s);
    }
}
