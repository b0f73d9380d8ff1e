//! Who may speak as which agent, sans-IO: the manager's rules for a
//! HELLO, given how the connection proved itself, and for what the agent
//! claims about itself.
//!
//! - With TLS, the HELLO's agent name must be one the agent's certificate
//!   is valid for (`fleet::tls::cert_names_agent`), and a new
//!   authenticated connection under a name takes the old one over (the
//!   agent restarted, or its old connection is half-open).
//! - Without (`insecure = true`), nothing is proven: a second connection
//!   under a name that is connected is refused, never a takeover, so a
//!   stranger cannot cut a running agent off. The old connection goes by
//!   itself when it breaks or falls silent (`agent_timeout`).
//! - The clock-sync target is never what the HELLO says alone: its
//!   address is the one the connection came from (only the port is the
//!   agent's to choose), so a HELLO cannot make the manager send probes
//!   to a third party.
//! - STATS values are checked before they reach the counters.

use std::net::{IpAddr, SocketAddr};

use rustls::pki_types::CertificateDer;

use crate::fleet::proto::{self, AgentStats, Hello};

/// How the connection proved itself.
#[derive(Clone, Copy, Debug)]
pub enum Auth<'a> {
    /// `insecure = true`: it did not.
    Insecure,
    /// The TLS handshake verified this (first) certificate.
    Cert(&'a CertificateDer<'a>),
}

impl Auth<'_> {
    pub fn is_authenticated(&self) -> bool {
        matches!(self, Auth::Cert(_))
    }
}

/// Why a HELLO is refused (the connection is closed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("protocol version {0} (this manager speaks {v})", v = proto::VERSION)]
    Version(u32),
    #[error("agent name empty or longer than 255 bytes")]
    Name,
    #[error("the certificate is not valid for agent name {0:?}")]
    CertName(String),
    #[error("agent {0:?} is connected already; without TLS a second connection cannot take over")]
    Connected(String),
}

/// What becomes of an admitted HELLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// The name has no live connection.
    New,
    /// An authenticated connection replaces the name's live one.
    TakeOver,
}

/// The rule for one HELLO; `connected`: the name has a live connection.
pub fn admit(h: &Hello, auth: Auth<'_>, connected: bool) -> Result<Admitted, Refusal> {
    if h.version != proto::VERSION {
        return Err(Refusal::Version(h.version));
    }
    if h.agent.is_empty() || h.agent.len() > 255 {
        return Err(Refusal::Name);
    }
    if let Auth::Cert(c) = auth
        && !crate::fleet::tls::cert_names_agent(c, &h.agent)
    {
        return Err(Refusal::CertName(h.agent.clone()));
    }
    match (connected, auth.is_authenticated()) {
        (false, _) => Ok(Admitted::New),
        (true, true) => Ok(Admitted::TakeOver),
        (true, false) => Err(Refusal::Connected(h.agent.clone())),
    }
}

/// Where the manager probes the agent's clock: the connection's address
/// (IPv4-mapped addresses as IPv4) at the port the HELLO names. Returns
/// it, and the address the HELLO named instead when it differed (for a
/// warning).
pub fn sync_target(h: &Hello, peer: IpAddr) -> (Option<SocketAddr>, Option<String>) {
    let Some(s) = &h.sync else {
        return (None, None);
    };
    let peer = peer.to_canonical();
    match s.parse::<SocketAddr>() {
        Ok(a) => {
            let other = (a.ip().to_canonical() != peer).then(|| s.clone());
            (Some(SocketAddr::new(peer, a.port())), other)
        }
        // Only a port: fine; anything else names nothing usable.
        Err(_) => match s.parse::<u16>() {
            Ok(port) => (Some(SocketAddr::new(peer, port)), None),
            Err(_) => (None, Some(s.clone())),
        },
    }
}

/// Largest counter value accepted in a STATS frame: 2^53 − 1, exact as a
/// JSON number and a Prometheus float, and 285 years at a million events
/// a second.
pub const MAX_STAT: u64 = (1 << 53) - 1;

/// Whether a STATS frame's values can be true: every counter within
/// [`MAX_STAT`], the events sent or dropped not more than those handed
/// over, and no more buffered than that.
pub fn valid_stats(s: &AgentStats) -> bool {
    let all = [
        s.events,
        s.sent,
        s.dropped_buffer,
        s.dropped_channel,
        s.dropped_connection,
        s.buffered,
        s.connects,
        s.kernel_ringbuf_full,
    ];
    all.iter().all(|&v| v <= MAX_STAT)
        && s.sent.saturating_add(s.dropped()) <= s.events
        && s.buffered <= s.events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(agent: &str, sync: Option<&str>) -> Hello {
        Hello {
            version: proto::VERSION,
            agent: agent.into(),
            instance: 1,
            sample_bytes: 0,
            layers: vec![],
            sync: sync.map(str::to_owned),
        }
    }

    #[test]
    fn without_tls_a_connected_name_is_never_taken_over() {
        let h = hello("web-1", None);
        assert_eq!(admit(&h, Auth::Insecure, false), Ok(Admitted::New));
        assert_eq!(
            admit(&h, Auth::Insecure, true),
            Err(Refusal::Connected("web-1".into()))
        );
        let mut old = h.clone();
        old.version = 0;
        assert_eq!(admit(&old, Auth::Insecure, false), Err(Refusal::Version(0)));
        assert_eq!(
            admit(&hello("", None), Auth::Insecure, false),
            Err(Refusal::Name)
        );
    }

    #[test]
    fn probes_go_where_the_connection_came_from() {
        let peer: IpAddr = "203.0.113.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:203.0.113.1".parse().unwrap();
        let want: SocketAddr = "203.0.113.1:7461".parse().unwrap();
        assert_eq!(
            sync_target(&hello("a", Some("203.0.113.1:7461")), mapped),
            (Some(want), None)
        );
        // Another address: the connection's is used, the claim reported.
        assert_eq!(
            sync_target(&hello("a", Some("192.0.2.77:7461")), peer),
            (Some(want), Some("192.0.2.77:7461".into()))
        );
        assert_eq!(
            sync_target(&hello("a", Some("7461")), peer),
            (Some(want), None)
        );
        assert_eq!(
            sync_target(&hello("a", Some("nowhere")), peer),
            (None, Some("nowhere".into()))
        );
        assert_eq!(sync_target(&hello("a", None), peer), (None, None));
    }

    #[test]
    fn stats_that_cannot_be_true_are_refused() {
        let ok = AgentStats {
            events: 100,
            sent: 90,
            dropped_buffer: 5,
            buffered: 5,
            connects: 1,
            ..AgentStats::default()
        };
        assert!(valid_stats(&ok));
        assert!(valid_stats(&AgentStats::default()));
        let max = AgentStats {
            events: u64::MAX,
            sent: u64::MAX,
            buffered: u64::MAX,
            ..AgentStats::default()
        };
        assert!(!valid_stats(&max));
        assert!(!valid_stats(&AgentStats { sent: 101, ..ok }));
        assert!(!valid_stats(&AgentStats {
            buffered: 101,
            ..ok
        }));
        assert!(!valid_stats(&AgentStats {
            connects: MAX_STAT + 1,
            ..ok
        }));
    }
}
