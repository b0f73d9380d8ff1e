//! Types shared by the host-side tracing programs (`host-prog`) and user
//! space (`xdprobe-host`).
//!
//! The programs are built once and run on other kernels: nothing in them
//! knows a struct layout. User space reads member offsets from the running
//! kernel's BTF and tracepoint field offsets from tracefs `format` files,
//! and writes them into the read-only globals below before loading, so the
//! verifier sees them as constants.

/// Names of the maps and globals in the host objects.
pub mod names {
    /// Read-only global [`super::StackSettings`] of the stack-latency object.
    pub const STACK_SETTINGS: &str = "STACK_SETTINGS";
    /// `RingBuf` of [`super::StackEvent`].
    pub const STACK_EVENTS: &str = "STACK_EVENTS";
    /// `PerCpuArray<StackCounters>`, one entry.
    pub const STACK_COUNTERS: &str = "STACK_COUNTERS";
    /// `Array<SendSlot>` of [`super::SEND_SLOTS_LEN`], indexed by thread
    /// ID modulo its length: each send call's entry time and the
    /// TCP-layer observation it is building.
    pub const SEND_SLOTS: &str = "SEND_SLOTS";
    /// `HashMap<u64 sk, SockId>`: each socket's identity, read once.
    pub const SOCK_IDS: &str = "SOCK_IDS";
    /// `Array<u32>` of one: which of the programs may observe
    /// ([`super::GATE_ENTRY`], [`super::GATE_REST`]); written by user
    /// space as sampling windows open and close.
    pub const STACK_GATE: &str = "STACK_GATE";
    /// `Array<u64>` of one: when the send path's entry last opened
    /// (monotonic ns, written by user space just before it opens the
    /// gate). A send call entered before it is not paired with a return
    /// after it: its bytes went partly unwatched.
    pub const STACK_EPOCH: &str = "STACK_EPOCH";

    /// Read-only global [`super::ConnSettings`] of the connect-latency object.
    pub const CONN_SETTINGS: &str = "CONN_SETTINGS";
    /// `RingBuf` of [`super::ConnEvent`].
    pub const CONN_EVENTS: &str = "CONN_EVENTS";
    /// `LruHashMap<u64 sk, ConnStart>`: connections in SYN_SENT.
    pub const CONN_START: &str = "CONN_START";
    /// `PerCpuArray<ConnCounters>`, one entry.
    pub const CONN_COUNTERS: &str = "CONN_COUNTERS";

    /// Read-only global [`crate::trace::TraceSettings`] of the path-trace
    /// object (offsets, scope, the flow filter's classic BPF).
    pub const TRACE_SETTINGS: &str = "TRACE_SETTINGS";
    /// `Array<TracePoint>`, indexed by the BPF cookie each tracepoint is
    /// attached with: which point fired.
    pub const TRACE_POINTS: &str = "TRACE_POINTS";
    /// `HashMap<u64 skb head, Trail>`: packets being followed.
    pub const TRACE_TRAILS: &str = "TRACE_TRAILS";
    /// `HashMap<u64 sk_buff, u64 head>`: the trail each live skb is on.
    pub const TRACE_SKBS: &str = "TRACE_SKBS";
    /// `RingBuf` of finished [`crate::trace::Trail`]s.
    pub const TRACE_EVENTS: &str = "TRACE_EVENTS";
    /// `PerCpuArray<TraceCounters>`, one entry.
    pub const TRACE_COUNTERS: &str = "TRACE_COUNTERS";
    /// `PerCpuArray<TraceScratch>`, one entry: the trail being built and
    /// the packet copy the filter reads.
    pub const TRACE_SCRATCH: &str = "TRACE_SCRATCH";
}

/// Kernel struct member offsets (bytes), from the running kernel's BTF.
/// One build of the programs serves every kernel that has these members.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelOffsets {
    /// `sk_buff.head` (pointer).
    pub skb_head: u32,
    /// `sk_buff.data` (pointer).
    pub skb_data: u32,
    /// `sk_buff.len` (u32).
    pub skb_len: u32,
    /// `sk_buff.network_header` (u16, offset from `head`).
    pub skb_network_header: u32,
    /// `sk_buff.mac_header` (u16, offset from `head`, `0xffff` when unset).
    pub skb_mac_header: u32,
    /// `sk_buff.protocol` (__be16 ethertype).
    pub skb_protocol: u32,
    /// `sk_buff.cb` (the control buffer holding `tcp_skb_cb`).
    pub skb_cb: u32,
    /// `sk_buff.dev` (pointer).
    pub skb_dev: u32,
    /// `net_device.nd_net` (`possible_net_t`, a `struct net *`).
    pub dev_nd_net: u32,
    /// `net_device.ifindex` (int).
    pub dev_ifindex: u32,
    /// `net.ns` + `ns_common.inum`: the namespace's inode number, as
    /// `ls -L -i /proc/PID/ns/net` shows it.
    pub net_ns_inum: u32,
    /// `sock_common.skc_family` (u16).
    pub sk_family: u32,
    /// `sock_common.skc_daddr` (__be32).
    pub sk_daddr: u32,
    /// `sock_common.skc_rcv_saddr` (__be32).
    pub sk_rcv_saddr: u32,
    /// `sock_common.skc_dport` (__be16).
    pub sk_dport: u32,
    /// `sock_common.skc_num` (u16, host order).
    pub sk_num: u32,
    /// `sock_common.skc_v6_daddr` (16 bytes).
    pub sk_v6_daddr: u32,
    /// `sock_common.skc_v6_rcv_saddr` (16 bytes).
    pub sk_v6_rcv_saddr: u32,
    /// `sock_common.skc_net` (`possible_net_t`).
    pub sk_net: u32,
    /// `sock.sk_err` (int).
    pub sk_err: u32,
    /// `tcp_sock.write_seq` (u32): end of the data the application wrote.
    pub tp_write_seq: u32,
    /// `tcp_sock.copied_seq` (u32): end of the data the application read.
    pub tp_copied_seq: u32,
    /// `tcp_skb_cb.seq` (u32), relative to `sk_buff.cb`.
    pub tcb_seq: u32,
    /// `tcp_skb_cb.end_seq` (u32), relative to `sk_buff.cb`.
    pub tcb_end_seq: u32,
    /// `sock_common.skc_state` (u8): whether the peer's FIN was received.
    pub sk_state: u32,
    /// `tcp_sock.rcv_nxt` (u32): with the FIN received, `copied_seq`
    /// equal to it means the read consumed the FIN, which `copied_seq`
    /// counts as one byte.
    pub tp_rcv_nxt: u32,
}

/// Tracepoint record field offsets (bytes), from tracefs `format` files.
/// The skb layers take their `skbaddr` from whichever tracepoint the hook
/// set names for them, so each has its own slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TpOffsets {
    /// `sock:sock_send_length`: `sk`, `protocol`, `ret`.
    pub send_sk: u32,
    pub send_protocol: u32,
    pub send_ret: u32,
    /// `sock:sock_recv_length`: `sk`, `protocol`, `ret`, `flags`.
    pub recv_sk: u32,
    pub recv_protocol: u32,
    pub recv_ret: u32,
    pub recv_flags: u32,
    /// `skbaddr` of the `IP_TX` tracepoint (default `net:net_dev_queue`).
    pub ip_tx_skb: u32,
    /// `skbaddr` of the `DEV_TX` tracepoint (`net:net_dev_start_xmit`).
    pub dev_tx_skb: u32,
    /// `skbaddr` of up to three `DEV_RX` tracepoints (NAPI/GRO entry,
    /// `netif_rx`, `netif_receive_skb_entry`: drivers take one of them).
    pub dev_rx_skb: [u32; DEV_RX_HOOKS],
    /// `skbaddr` of the `IP_RX` tracepoint (`net:netif_receive_skb`).
    pub ip_rx_skb: u32,
    /// `tcp:tcp_probe`: `skbaddr`, `skaddr`, `data_len`.
    pub probe_skb: u32,
    pub probe_sk: u32,
    pub probe_data_len: u32,
    /// `sock:inet_sock_set_state`: `skaddr`, `oldstate`, `newstate`,
    /// `protocol`, and the connection's own identity (read from the record,
    /// not the socket: by CLOSE the socket's port may be released).
    pub state_sk: u32,
    pub state_old: u32,
    pub state_new: u32,
    pub state_protocol: u32,
    pub state_family: u32,
    pub state_sport: u32,
    pub state_dport: u32,
    pub state_saddr: u32,
    pub state_daddr: u32,
    pub state_saddr_v6: u32,
    pub state_daddr_v6: u32,
}

/// Device-receive tracepoints one program set can watch at once.
pub const DEV_RX_HOOKS: usize = 3;

/// Observation points of a TCP byte stream, in the order a byte passes
/// them (`docs/host-latency.md` names the hook behind each).
pub mod layer {
    /// Sender: the send call was entered (socket layer).
    pub const SOCK_TX: u8 = 1;
    /// Sender: TCP took the bytes into its send queue.
    pub const TCP_TX: u8 = 2;
    /// Sender: IP handed the segment to the device layer (`net_dev_queue`).
    pub const IP_TX: u8 = 3;
    /// Sender: the driver got the segment (`net_dev_start_xmit`).
    pub const DEV_TX: u8 = 4;
    /// Receiver: the device delivered the frame (NAPI/GRO entry or netif_rx).
    pub const DEV_RX: u8 = 5;
    /// Receiver: the stack took the (GRO-merged) skb (`netif_receive_skb`).
    pub const IP_RX: u8 = 6;
    /// Receiver: TCP processed the segment (`tcp_probe`).
    pub const TCP_RX: u8 = 7;
    /// Receiver: the application's read returned the bytes.
    pub const SOCK_RX: u8 = 8;
    /// Not a layer: the socket closed (flow end), from `inet_sock_set_state`.
    pub const CLOSE: u8 = 9;
    /// Number of layers (1..=8).
    pub const COUNT: usize = 8;
}

/// `StackSettings::flags`: only events whose source or destination port is
/// in `ports[..n_ports]` are reported.
pub const STACK_FILTER_PORT: u32 = 1 << 0;
/// Only events in one of the network namespaces `netns[..n_netns]`.
pub const STACK_FILTER_NETNS: u32 = 1 << 1;
/// Only socket-layer events of processes `tgids[..n_tgids]` (the other
/// layers are scoped in user space by the flows those sockets own).
pub const STACK_FILTER_TGID: u32 = 1 << 2;
/// Only socket-layer events of processes in the cgroups (v2 IDs)
/// `cgroups[..n_cgroups]`; scoped like `STACK_FILTER_TGID`.
pub const STACK_FILTER_CGROUP: u32 = 1 << 3;

/// Capacity of the in-kernel filter lists.
pub const STACK_MAX_PORTS: usize = 16;
pub const STACK_MAX_NETNS: usize = 8;
pub const STACK_MAX_TGIDS: usize = 8;
pub const STACK_MAX_CGROUPS: usize = 8;

/// Read-only settings of the stack-latency programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSettings {
    pub off: KernelOffsets,
    pub tp: TpOffsets,
    /// Sampling grid: a byte whose TCP sequence number is a multiple of
    /// this is a sample; an observation is reported when its byte range
    /// holds one. 0 or 1: every observation is reported.
    pub sample_bytes: u32,
    /// `STACK_FILTER_*` bits.
    pub flags: u32,
    pub n_ports: u32,
    pub n_netns: u32,
    pub n_tgids: u32,
    /// Wake the reader only once this many bytes wait in the ring buffer.
    /// Waking it for every event costs an inter-processor interrupt —
    /// tens of µs in a VM — inside the very path being timed; the reader
    /// polls on its own timer instead.
    pub wakeup_bytes: u32,
    pub ports: [u16; STACK_MAX_PORTS],
    pub netns: [u32; STACK_MAX_NETNS],
    pub tgids: [u32; STACK_MAX_TGIDS],
    pub n_cgroups: u32,
    pub cgroups: [u64; STACK_MAX_CGROUPS],
    /// For kprobe/fentry hooks of the skb layers: which argument of the
    /// function is the `struct sk_buff *`, per slot ([`skb_slot`]).
    pub skb_arg: [u8; 8],
}

/// Slots of the skb layers' hooks (index into `StackSettings::skb_arg`).
pub mod skb_slot {
    pub const IP_TX: usize = 0;
    pub const DEV_TX: usize = 1;
    /// `DEV_RX` takes three: 2, 3, 4.
    pub const DEV_RX: usize = 2;
    pub const IP_RX: usize = 5;
}

impl StackSettings {
    pub const ZERO: StackSettings = StackSettings {
        off: KernelOffsets::ZERO,
        tp: TpOffsets::ZERO,
        sample_bytes: 0,
        flags: 0,
        n_ports: 0,
        n_netns: 0,
        n_tgids: 0,
        wakeup_bytes: 0,
        ports: [0; STACK_MAX_PORTS],
        netns: [0; STACK_MAX_NETNS],
        tgids: [0; STACK_MAX_TGIDS],
        n_cgroups: 0,
        cgroups: [0; STACK_MAX_CGROUPS],
        skb_arg: [0; 8],
    };
}

impl Default for StackSettings {
    fn default() -> Self {
        Self::ZERO
    }
}

impl KernelOffsets {
    pub const ZERO: KernelOffsets = KernelOffsets {
        skb_head: 0,
        skb_data: 0,
        skb_len: 0,
        skb_network_header: 0,
        skb_mac_header: 0,
        skb_protocol: 0,
        skb_cb: 0,
        skb_dev: 0,
        dev_nd_net: 0,
        dev_ifindex: 0,
        net_ns_inum: 0,
        sk_family: 0,
        sk_daddr: 0,
        sk_rcv_saddr: 0,
        sk_dport: 0,
        sk_num: 0,
        sk_v6_daddr: 0,
        sk_v6_rcv_saddr: 0,
        sk_net: 0,
        sk_err: 0,
        tp_write_seq: 0,
        tp_copied_seq: 0,
        tcb_seq: 0,
        tcb_end_seq: 0,
        sk_state: 0,
        tp_rcv_nxt: 0,
    };
}

impl TpOffsets {
    pub const ZERO: TpOffsets = TpOffsets {
        send_sk: 0,
        send_protocol: 0,
        send_ret: 0,
        recv_sk: 0,
        recv_protocol: 0,
        recv_ret: 0,
        recv_flags: 0,
        ip_tx_skb: 0,
        dev_tx_skb: 0,
        dev_rx_skb: [0; DEV_RX_HOOKS],
        ip_rx_skb: 0,
        probe_skb: 0,
        probe_sk: 0,
        probe_data_len: 0,
        state_sk: 0,
        state_old: 0,
        state_new: 0,
        state_protocol: 0,
        state_family: 0,
        state_sport: 0,
        state_dport: 0,
        state_saddr: 0,
        state_daddr: 0,
        state_saddr_v6: 0,
        state_daddr_v6: 0,
    };
}

/// One observation of a byte range of a TCP stream at one layer.
/// Addresses and ports are those of the data's sender → receiver.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackEvent {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC). For `SOCK_TX` the entry of
    /// the send call, not the moment the event is written.
    pub ts_ns: u64,
    /// First byte's sequence number.
    pub seq: u32,
    /// One past the last byte's sequence number (wraps like TCP's).
    pub end: u32,
    /// Network namespace inode number of the socket or device.
    pub netns: u32,
    /// Thread group (process) ID for socket-layer events, else 0.
    pub tgid: u32,
    /// `layer::*`.
    pub layer: u8,
    /// `AF_INET` (2) or `AF_INET6` (10).
    pub family: u8,
    pub _pad: u16,
    /// Source and destination port, host byte order.
    pub sport: u16,
    pub dport: u16,
    /// Source and destination address (IPv4 in the first 4 bytes).
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    /// Interface index for device-layer events, else 0.
    pub ifindex: u32,
    pub _pad2: u32,
}

/// A socket's identity (local end first) and namespace, cached by the
/// programs so that each event costs one map lookup, not seven reads of
/// the socket.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockId {
    pub family: u8,
    pub _pad: u8,
    pub lport: u16,
    pub rport: u16,
    pub _pad2: u16,
    pub netns: u32,
    pub local: [u8; 16],
    pub remote: [u8; 16],
}

/// Per-CPU counters of the stack-latency programs; user space sums them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCounters {
    /// Events written to the ring buffer.
    pub events: u64,
    /// Events lost because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Socket-layer sends with no recorded call entry (io_uring, or the
    /// call began before the probe attached): not reported.
    pub no_entry: u64,
    /// Kernel memory reads that failed.
    pub read_failed: u64,
    /// Observations whose byte range held no sample byte.
    pub unsampled: u64,
    /// Observations outside the configured scope.
    pub filtered: u64,
    /// Send calls that returned inside a sampling window but were entered
    /// before it opened: not reported (their entry time belongs to bytes
    /// the probe did not watch all the way).
    pub stale_entry: u64,
}

impl StackCounters {
    pub const fn add(self, o: StackCounters) -> StackCounters {
        StackCounters {
            events: self.events.wrapping_add(o.events),
            ringbuf_full: self.ringbuf_full.wrapping_add(o.ringbuf_full),
            no_entry: self.no_entry.wrapping_add(o.no_entry),
            read_failed: self.read_failed.wrapping_add(o.read_failed),
            unsampled: self.unsampled.wrapping_add(o.unsampled),
            filtered: self.filtered.wrapping_add(o.filtered),
            stale_entry: self.stale_entry.wrapping_add(o.stale_entry),
        }
    }
}

/// Read-only settings of the connect-latency program.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnSettings {
    /// `sock:inet_sock_set_state` field offsets (`state_*` of [`TpOffsets`]).
    pub tp: TpOffsets,
    /// `sock.sk_err`, to tell a refused connection from a timed-out one.
    pub sk_err: u32,
    /// Successful connections faster than this are not reported (ns; 0: all).
    pub min_ns: u64,
    /// Wake the reader once this many bytes wait (see `StackSettings`).
    pub wakeup_bytes: u32,
    pub n_tgids: u32,
    pub tgids: [u32; STACK_MAX_TGIDS],
    /// Socket member offsets for the BTF-typed program, which gets only
    /// the socket and the two states and reads the rest from the socket.
    pub sk: ConnSockOffsets,
}

/// Where the BTF-typed connect program finds, in a `struct sock`, what the
/// classic tracepoint's record carries (the same members its
/// `TP_fast_assign` reads; `inet_sport`, not `skc_num`, since the port is
/// released before the CLOSE transition).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnSockOffsets {
    /// `sock.sk_protocol` (u16).
    pub protocol: u32,
    /// `sock_common.skc_family` (u16).
    pub family: u32,
    /// `inet_sock.inet_sport` (__be16).
    pub sport: u32,
    /// `sock_common.skc_dport` (__be16).
    pub dport: u32,
    /// `sock_common.skc_rcv_saddr` / `skc_daddr` (__be32).
    pub saddr: u32,
    pub daddr: u32,
    /// `sock_common.skc_v6_rcv_saddr` / `skc_v6_daddr` (16 bytes).
    pub saddr6: u32,
    pub daddr6: u32,
}

impl ConnSockOffsets {
    pub const ZERO: ConnSockOffsets = ConnSockOffsets {
        protocol: 0,
        family: 0,
        sport: 0,
        dport: 0,
        saddr: 0,
        daddr: 0,
        saddr6: 0,
        daddr6: 0,
    };
}

impl ConnSettings {
    pub const ZERO: ConnSettings = ConnSettings {
        sk: ConnSockOffsets::ZERO,
        tp: TpOffsets::ZERO,
        sk_err: 0,
        min_ns: 0,
        wakeup_bytes: 0,
        n_tgids: 0,
        tgids: [0; STACK_MAX_TGIDS],
    };
}

/// A connection in SYN_SENT: who started it, when.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnStart {
    pub ts_ns: u64,
    pub tgid: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
}

/// `ConnEvent::result`.
pub mod conn_result {
    /// SYN_SENT → ESTABLISHED.
    pub const ESTABLISHED: u8 = 0;
    /// SYN_SENT → CLOSE with ECONNREFUSED (a RST answered the SYN).
    pub const REFUSED: u8 = 1;
    /// SYN_SENT → CLOSE with ETIMEDOUT (no answer to the SYN retries).
    pub const TIMED_OUT: u8 = 2;
    /// SYN_SENT → CLOSE otherwise (closed by the application, host
    /// unreachable, …): `ConnEvent::err` says which.
    pub const FAILED: u8 = 3;
}

/// One outgoing TCP connection attempt, reported when it ends (connected
/// or failed).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnEvent {
    /// When `connect()` moved the socket to SYN_SENT (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// SYN_SENT → ESTABLISHED (or → CLOSE), ns.
    pub latency_ns: u64,
    pub tgid: u32,
    /// `sock.sk_err` at the failure (0 on success).
    pub err: i32,
    pub comm: [u8; 16],
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    /// `AF_INET` / `AF_INET6`.
    pub family: u8,
    /// `conn_result::*`.
    pub result: u8,
    pub _pad: u16,
}

/// Per-CPU counters of the connect-latency program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounters {
    /// Connections seen entering SYN_SENT (in scope).
    pub started: u64,
    /// Reported (connected or failed).
    pub events: u64,
    /// Lost because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Connected faster than the minimum: not reported.
    pub below_min: u64,
    /// An end without a recorded start (began before the probe, or its
    /// entry was evicted).
    pub no_start: u64,
    /// An end whose addresses could not be read (not IPv4/IPv6, or a
    /// failed read): not reported.
    pub no_identity: u64,
}

impl ConnCounters {
    pub const fn add(self, o: ConnCounters) -> ConnCounters {
        ConnCounters {
            started: self.started.wrapping_add(o.started),
            events: self.events.wrapping_add(o.events),
            ringbuf_full: self.ringbuf_full.wrapping_add(o.ringbuf_full),
            below_min: self.below_min.wrapping_add(o.below_min),
            no_start: self.no_start.wrapping_add(o.no_start),
            no_identity: self.no_identity.wrapping_add(o.no_identity),
        }
    }
}

/// Entries of the per-thread send slots (a power of two; thread IDs
/// modulo this share a slot, told apart by [`SendSlot::tid`]).
pub const SEND_SLOTS_LEN: u32 = 1 << 16;

/// `STACK_GATE` bits. Programs on classic tracepoints and kprobes are
/// gated rather than detached between sampling windows: closing their
/// perf link waits 75–95 ms for the tracepoint's grace period, one link
/// at a time. Entry: the send path's `sys_enter_*` (closed first). Rest:
/// every other layer program.
pub const GATE_ENTRY: u32 = 1;
pub const GATE_REST: u32 = 2;

/// One thread's send call in flight: when it was entered and the
/// TCP-layer observation it is building (TCP took bytes from `tcp_seq`
/// on at `tcp_ts_ns`; the end is known at the next observation).
///
/// A plain array slot instead of hash entries: the verifier inlines an
/// array lookup into a bounds check and an add, where a hash update or
/// delete took a bucket lock and cost 0.5–1 µs per send call here.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendSlot {
    /// Thread the slot's contents belong to; another thread of the same
    /// index finds a mismatch and treats the slot as empty.
    pub tid: u32,
    /// Sequence number where the pending TCP-layer observation starts.
    pub tcp_seq: u32,
    /// Entry time of the thread's send call; 0: none pending.
    pub entry_ns: u64,
    /// Socket of the pending TCP-layer observation; 0: none.
    pub tcp_sk: u64,
    pub tcp_ts_ns: u64,
}

const _: () = assert!(core::mem::size_of::<StackEvent>() == 72);
const _: () = assert!(core::mem::size_of::<KernelOffsets>() == 26 * 4);
const _: () = assert!(core::mem::size_of::<TpOffsets>() == 27 * 4);
const _: () = assert!(core::mem::size_of::<StackCounters>() == 7 * 8);
const _: () = assert!(core::mem::size_of::<SendSlot>() == 32);
const _: () = assert!(core::mem::size_of::<SockId>() == 44);
const _: () = assert!(core::mem::size_of::<ConnEvent>() == 8 + 8 + 4 + 4 + 16 + 32 + 8);
const _: () = assert!(core::mem::size_of::<ConnStart>() == 32);
const _: () = assert!(core::mem::size_of::<ConnSettings>() == 27 * 4 + 4 + 8 + 4 + 4 + 32 + 8 * 4);
const _: () =
    assert!(core::mem::size_of::<StackSettings>() == 104 + 27 * 4 + 24 + 32 + 32 + 32 + 4 + 64 + 8);
