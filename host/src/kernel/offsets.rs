//! The member and field offsets the tracing programs need, gathered from
//! the running kernel (BTF for structs, tracefs for tracepoint records),
//! with each size checked, so a kernel that moved or retyped something is a
//! start-up error naming it, never a program reading the wrong bytes.

use xdprobe_common::host::{ConnSockOffsets, KernelOffsets, TpOffsets};

use super::btf::{Btf, BtfError};
use super::tracefs::{Format, Tracefs, TracefsError};

#[derive(Debug, thiserror::Error)]
pub enum OffsetError {
    #[error("kernel struct layout: {0}")]
    Btf(#[from] BtfError),
    #[error("kernel struct layout: {strukt}.{member} is {size} bytes, expected {want}")]
    Size {
        strukt: &'static str,
        member: &'static str,
        size: u32,
        want: u32,
    },
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    #[error("kernel struct layout: {0}, which the programs read in one go")]
    NotAdjacent(&'static str),
}

fn member(
    btf: &Btf,
    strukt: &'static str,
    path: &'static str,
    want: u32,
) -> Result<u32, OffsetError> {
    let m = btf.member(strukt, path)?;
    if m.size != want {
        return Err(OffsetError::Size {
            strukt,
            member: path,
            size: m.size,
            want,
        });
    }
    Ok(m.offset)
}

/// Every struct member offset the host programs read.
pub fn kernel_offsets(btf: &Btf) -> Result<KernelOffsets, OffsetError> {
    // `sock` begins with `sock_common`, `tcp_sock` with `sock` (through
    // inet_connection_sock and inet_sock), so offsets taken through the
    // outer structs are offsets from the `struct sock *` the hooks see.
    let cb = member(btf, "sk_buff", "cb", 48)?;
    let o = KernelOffsets {
        skb_head: member(btf, "sk_buff", "head", 8)?,
        skb_data: member(btf, "sk_buff", "data", 8)?,
        skb_len: member(btf, "sk_buff", "len", 4)?,
        skb_network_header: member(btf, "sk_buff", "network_header", 2)?,
        skb_mac_header: member(btf, "sk_buff", "mac_header", 2)?,
        skb_protocol: member(btf, "sk_buff", "protocol", 2)?,
        skb_cb: cb,
        skb_dev: member(btf, "sk_buff", "dev", 8)?,
        dev_nd_net: member(btf, "net_device", "nd_net.net", 8)?,
        dev_ifindex: member(btf, "net_device", "ifindex", 4)?,
        net_ns_inum: member(btf, "net", "ns.inum", 4)?,
        sk_family: member(btf, "sock", "__sk_common.skc_family", 2)?,
        sk_daddr: member(btf, "sock", "__sk_common.skc_daddr", 4)?,
        sk_rcv_saddr: member(btf, "sock", "__sk_common.skc_rcv_saddr", 4)?,
        sk_dport: member(btf, "sock", "__sk_common.skc_dport", 2)?,
        sk_num: member(btf, "sock", "__sk_common.skc_num", 2)?,
        sk_v6_daddr: member(btf, "sock", "__sk_common.skc_v6_daddr", 16)?,
        sk_v6_rcv_saddr: member(btf, "sock", "__sk_common.skc_v6_rcv_saddr", 16)?,
        sk_net: member(btf, "sock", "__sk_common.skc_net.net", 8)?,
        sk_err: member(btf, "sock", "sk_err", 4)?,
        tp_write_seq: member(btf, "tcp_sock", "write_seq", 4)?,
        tp_copied_seq: member(btf, "tcp_sock", "copied_seq", 4)?,
        tcb_seq: member(btf, "tcp_skb_cb", "seq", 4)?,
        tcb_end_seq: member(btf, "tcp_skb_cb", "end_seq", 4)?,
        sk_state: member(btf, "sock", "__sk_common.skc_state", 1)?,
        tp_rcv_nxt: member(btf, "tcp_sock", "rcv_nxt", 4)?,
    };
    if o.skb_data != o.skb_head + 8 {
        return Err(OffsetError::NotAdjacent(
            "sk_buff.data does not follow sk_buff.head",
        ));
    }
    let th = member(btf, "sk_buff", "transport_header", 2)?;
    if th != o.skb_protocol + 2
        || o.skb_network_header != o.skb_protocol + 4
        || o.skb_mac_header != o.skb_protocol + 6
    {
        return Err(OffsetError::NotAdjacent(
            "sk_buff.protocol, transport_header, network_header and mac_header are not adjacent",
        ));
    }
    Ok(o)
}

/// The socket members the BTF-typed connect program reads in place of the
/// classic tracepoint's record.
pub fn conn_sock_offsets(btf: &Btf) -> Result<ConnSockOffsets, OffsetError> {
    Ok(ConnSockOffsets {
        protocol: member(btf, "sock", "sk_protocol", 2)?,
        family: member(btf, "sock", "__sk_common.skc_family", 2)?,
        sport: member(btf, "inet_sock", "inet_sport", 2)?,
        dport: member(btf, "sock", "__sk_common.skc_dport", 2)?,
        saddr: member(btf, "sock", "__sk_common.skc_rcv_saddr", 4)?,
        daddr: member(btf, "sock", "__sk_common.skc_daddr", 4)?,
        saddr6: member(btf, "sock", "__sk_common.skc_v6_rcv_saddr", 16)?,
        daddr6: member(btf, "sock", "__sk_common.skc_v6_daddr", 16)?,
    })
}

/// Tracepoint record offsets of the stack-latency programs' fixed
/// tracepoints among `needed`; the skb layers' slots are filled by the
/// loader from whichever tracepoint each layer's hook names.
pub fn stack_tp_offsets(tracefs: &Tracefs, needed: &[&str]) -> Result<TpOffsets, OffsetError> {
    let need = |e: &str| needed.contains(&e);
    let get = |e: &str| -> Result<Format, TracefsError> { tracefs.format(e) };
    let mut t = TpOffsets::default();
    if need("sock:sock_send_length") {
        let s = get("sock:sock_send_length")?;
        t.send_sk = s.offset("sk", 8)?;
        t.send_protocol = s.offset("protocol", 2)?;
        t.send_ret = s.offset("ret", 4)?;
    }
    if need("sock:sock_recv_length") {
        let r = get("sock:sock_recv_length")?;
        t.recv_sk = r.offset("sk", 8)?;
        t.recv_protocol = r.offset("protocol", 2)?;
        t.recv_ret = r.offset("ret", 4)?;
        t.recv_flags = r.offset("flags", 4)?;
    }
    if need("tcp:tcp_probe") {
        let p = get("tcp:tcp_probe")?;
        t.probe_skb = p.offset("skbaddr", 8)?;
        t.probe_sk = p.offset("skaddr", 8)?;
        t.probe_data_len = p.offset("data_len", 2)?;
    }
    if need("sock:inet_sock_set_state") {
        let s = get("sock:inet_sock_set_state")?;
        t.state_sk = s.offset("skaddr", 8)?;
        t.state_old = s.offset("oldstate", 4)?;
        t.state_new = s.offset("newstate", 4)?;
        t.state_protocol = s.offset("protocol", 2)?;
        t.state_family = s.offset("family", 2)?;
        t.state_sport = s.offset("sport", 2)?;
        t.state_dport = s.offset("dport", 2)?;
        t.state_saddr = s.offset("saddr", 4)?;
        t.state_daddr = s.offset("daddr", 4)?;
        t.state_saddr_v6 = s.offset("saddr_v6", 16)?;
        t.state_daddr_v6 = s.offset("daddr_v6", 16)?;
    }
    Ok(t)
}
