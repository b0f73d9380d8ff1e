//! Hook sets: which kernel hook observes each layer. Data, not code: each
//! layer has a default list that suits current kernels, the config may
//! replace it, and the loader attaches what the running kernel offers.
//!
//! A hook is written `KIND:TARGET`:
//! - `tracepoint:SYS:NAME` — a classic tracepoint (record layout from tracefs);
//! - `tp_btf:NAME` / `raw_tp:NAME` — the same tracepoint, BTF-typed or raw,
//!   whose arguments are the kernel's `TP_PROTO` (pointers the classic
//!   record may not carry);
//! - `kprobe:FUNC` / `fentry:FUNC` — a kernel function; only where the
//!   kernel has kprobes / accepts fentry (not on every kernel: this one
//!   ships without kprobes and refuses fentry), so never a default.

use std::fmt;
use std::str::FromStr;

use xdprobe_common::host::{DEV_RX_HOOKS, layer};

/// How a program attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Tracepoint,
    TpBtf,
    RawTp,
    Kprobe,
    Fentry,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tracepoint => "tracepoint",
            Kind::TpBtf => "tp_btf",
            Kind::RawTp => "raw_tp",
            Kind::Kprobe => "kprobe",
            Kind::Fentry => "fentry",
        }
    }
}

/// One hook: a kind and what it attaches to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hook {
    pub kind: Kind,
    /// `SYS:NAME` for tracepoints, `NAME` for tp_btf/raw_tp, the function
    /// name for kprobe/fentry.
    pub target: String,
}

impl Hook {
    pub fn tracepoint(event: &str) -> Hook {
        Hook {
            kind: Kind::Tracepoint,
            target: event.to_owned(),
        }
    }

    /// The tracepoint's bare name (`net_dev_queue`), for tp_btf/raw_tp.
    pub fn tp_name(&self) -> &str {
        self.target
            .split_once(':')
            .map_or(self.target.as_str(), |(_, n)| n)
    }

    /// The BTF-typed program on the same tracepoint, for a classic one.
    pub fn btf_twin(&self) -> Option<Hook> {
        (self.kind == Kind::Tracepoint).then(|| Hook {
            kind: Kind::TpBtf,
            target: self.tp_name().to_owned(),
        })
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.target)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookParseError {
    #[error(
        "hook {0:?}: expected KIND:TARGET, KIND one of tracepoint, tp_btf, raw_tp, kprobe, fentry"
    )]
    Syntax(String),
    #[error("hook {0:?}: a tracepoint is written tracepoint:SYSTEM:NAME")]
    TracepointName(String),
}

impl FromStr for Hook {
    type Err = HookParseError;

    fn from_str(s: &str) -> Result<Hook, HookParseError> {
        let (kind, target) = s
            .split_once(':')
            .ok_or_else(|| HookParseError::Syntax(s.to_owned()))?;
        let kind = match kind {
            "tracepoint" | "tp" => Kind::Tracepoint,
            "tp_btf" => Kind::TpBtf,
            "raw_tp" | "raw_tracepoint" => Kind::RawTp,
            "kprobe" => Kind::Kprobe,
            "fentry" => Kind::Fentry,
            _ => return Err(HookParseError::Syntax(s.to_owned())),
        };
        let ok_name = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        };
        match kind {
            Kind::Tracepoint => {
                let (sys, name) = target
                    .split_once(':')
                    .filter(|(a, b)| ok_name(a) && ok_name(b))
                    .ok_or_else(|| HookParseError::TracepointName(s.to_owned()))?;
                let _ = (sys, name);
            }
            _ if !ok_name(target) => return Err(HookParseError::Syntax(s.to_owned())),
            _ => {}
        }
        Ok(Hook {
            kind,
            target: target.to_owned(),
        })
    }
}

/// The layers a stack-latency probe can observe, with the config key of
/// each (`[host.hooks] KEY = [...]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    SockTx,
    TcpTx,
    IpTx,
    DevTx,
    DevRx,
    IpRx,
    TcpRx,
    SockRx,
}

impl Layer {
    pub const ALL: [Layer; 8] = [
        Layer::SockTx,
        Layer::TcpTx,
        Layer::IpTx,
        Layer::DevTx,
        Layer::DevRx,
        Layer::IpRx,
        Layer::TcpRx,
        Layer::SockRx,
    ];

    /// The `layer::*` code in events.
    pub fn code(self) -> u8 {
        match self {
            Layer::SockTx => layer::SOCK_TX,
            Layer::TcpTx => layer::TCP_TX,
            Layer::IpTx => layer::IP_TX,
            Layer::DevTx => layer::DEV_TX,
            Layer::DevRx => layer::DEV_RX,
            Layer::IpRx => layer::IP_RX,
            Layer::TcpRx => layer::TCP_RX,
            Layer::SockRx => layer::SOCK_RX,
        }
    }

    pub fn from_code(c: u8) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.code() == c)
    }

    /// Position 0..8 in stream order.
    pub fn index(self) -> usize {
        usize::from(self.code() - 1)
    }

    pub fn key(self) -> &'static str {
        match self {
            Layer::SockTx => "sock_tx",
            Layer::TcpTx => "tcp_tx",
            Layer::IpTx => "ip_tx",
            Layer::DevTx => "dev_tx",
            Layer::DevRx => "dev_rx",
            Layer::IpRx => "ip_rx",
            Layer::TcpRx => "tcp_rx",
            Layer::SockRx => "sock_rx",
        }
    }

    pub fn from_key(k: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.key() == k)
    }

    /// Sender-side layer (the data leaves this host).
    pub fn is_tx(self) -> bool {
        self.code() <= layer::DEV_TX
    }

    /// The hooks used when the config names none, in order of preference.
    /// On the skb layers each classic tracepoint here is attached as its
    /// BTF-typed twin where the kernel takes that (`btf_twin`, see
    /// `stack::probe::resolve`), the classic one otherwise.
    pub fn default_hooks(self) -> Vec<Hook> {
        let tp = Hook::tracepoint;
        let btf = |n: &str| Hook {
            kind: Kind::TpBtf,
            target: n.to_owned(),
        };
        let raw = |n: &str| Hook {
            kind: Kind::RawTp,
            target: n.to_owned(),
        };
        match self {
            Layer::SockTx => vec![tp("sock:sock_send_length")],
            Layer::TcpTx => vec![btf("tcp_sendmsg_locked"), raw("tcp_sendmsg_locked")],
            Layer::IpTx => vec![tp("net:net_dev_queue")],
            Layer::DevTx => vec![tp("net:net_dev_start_xmit")],
            Layer::DevRx => vec![
                tp("net:napi_gro_receive_entry"),
                tp("net:netif_rx"),
                tp("net:netif_receive_skb_entry"),
            ],
            Layer::IpRx => vec![tp("net:netif_receive_skb")],
            Layer::TcpRx => vec![tp("tcp:tcp_probe")],
            Layer::SockRx => vec![tp("sock:sock_recv_length")],
        }
    }

    /// How the layer's list is read: `Any` attaches every listed hook the
    /// kernel has (device receive: drivers take different paths), `First`
    /// attaches the first one that loads.
    pub fn policy(self) -> Policy {
        match self {
            Layer::DevRx => Policy::Any,
            _ => Policy::First,
        }
    }

    /// Hook kinds the layer's program exists for. The skb layers also run
    /// on kernel functions (kprobe, fentry) where the kernel allows them:
    /// never by default, because function names and arguments change
    /// between kernel versions and many kernels refuse both.
    pub fn kinds(self) -> &'static [Kind] {
        match self {
            Layer::TcpTx => &[Kind::TpBtf, Kind::RawTp],
            Layer::IpTx | Layer::DevTx | Layer::DevRx | Layer::IpRx => {
                &[Kind::Tracepoint, Kind::TpBtf, Kind::Kprobe, Kind::Fentry]
            }
            Layer::TcpRx => &[Kind::Tracepoint, Kind::TpBtf],
            _ => &[Kind::Tracepoint],
        }
    }

    /// Slot of an skb layer's `n`-th hook in `StackSettings::skb_arg`.
    pub fn skb_slot(self, n: usize) -> Option<usize> {
        use xdprobe_common::host::skb_slot;
        match self {
            Layer::IpTx => Some(skb_slot::IP_TX),
            Layer::DevTx => Some(skb_slot::DEV_TX),
            Layer::DevRx => Some(skb_slot::DEV_RX + n.min(DEV_RX_HOOKS - 1)),
            Layer::IpRx => Some(skb_slot::IP_RX),
            _ => None,
        }
    }

    /// The tracepoint the layer's program is written for, when the program
    /// reads fields only that tracepoint has (the socket and TCP layers);
    /// `None` when any tracepoint with an `skbaddr` field fits.
    pub fn fixed_event(self) -> Option<&'static str> {
        match self {
            Layer::SockTx => Some("sock:sock_send_length"),
            Layer::TcpTx => Some("tcp_sendmsg_locked"),
            Layer::TcpRx => Some("tcp:tcp_probe"),
            Layer::SockRx => Some("sock:sock_recv_length"),
            _ => None,
        }
    }

    /// Most hooks a layer can take.
    pub fn max_hooks(self) -> usize {
        match self {
            Layer::DevRx => DEV_RX_HOOKS,
            _ => 1,
        }
    }

    /// Human name of the point, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Layer::SockTx => "sender socket (send call entered)",
            Layer::TcpTx => "sender TCP (bytes queued)",
            Layer::IpTx => "sender IP done (to device layer)",
            Layer::DevTx => "sender device (to driver)",
            Layer::DevRx => "receiver device (frame delivered)",
            Layer::IpRx => "receiver IP (stack entry)",
            Layer::TcpRx => "receiver TCP (segment processed)",
            Layer::SockRx => "receiver socket (read returned)",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    First,
    Any,
}

/// The send-call entry tracepoints that give the socket layer its time.
pub const SEND_ENTRY_EVENTS: &[&str] = &[
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_writev",
    "syscalls:sys_enter_sendto",
    "syscalls:sys_enter_sendmsg",
    "syscalls:sys_enter_sendmmsg",
    "syscalls:sys_enter_sendfile64",
];

/// The flow-end tracepoint.
pub const CLOSE_EVENT: &str = "sock:inet_sock_set_state";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_parse_and_print_back() {
        for s in [
            "tracepoint:net:net_dev_queue",
            "tp_btf:tcp_sendmsg_locked",
            "raw_tp:tcp_sendmsg_locked",
            "kprobe:ip_rcv",
            "fentry:tcp_v4_rcv",
        ] {
            let h: Hook = s.parse().unwrap();
            assert_eq!(h.to_string(), s);
        }
        assert_eq!(
            "tp:net:x".parse::<Hook>().unwrap().to_string(),
            "tracepoint:net:x"
        );
        assert_eq!(
            "tracepoint:net:net_dev_queue"
                .parse::<Hook>()
                .unwrap()
                .tp_name(),
            "net_dev_queue"
        );
    }

    #[test]
    fn bad_hooks_say_what_is_expected() {
        for s in [
            "",
            "net_dev_queue",
            "uprobe:x",
            "tracepoint:net_dev_queue",
            "kprobe:",
            "tracepoint:a/b:c",
        ] {
            assert!(s.parse::<Hook>().is_err(), "{s}");
        }
    }

    #[test]
    fn layers_round_trip_and_defaults_fit_their_kinds() {
        for (i, l) in Layer::ALL.into_iter().enumerate() {
            assert_eq!(l.index(), i);
            assert_eq!(Layer::from_code(l.code()), Some(l));
            assert_eq!(Layer::from_key(l.key()), Some(l));
            let d = l.default_hooks();
            assert!(!d.is_empty() && d.len() <= l.max_hooks().max(2));
            assert!(d.iter().all(|h| l.kinds().contains(&h.kind)), "{l:?}");
            assert!(
                d.iter()
                    .all(|h| h.kind != Kind::Kprobe && h.kind != Kind::Fentry)
            );
        }
    }
}
