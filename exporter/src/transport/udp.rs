//! UDP: one datagram per message, from a connected non-blocking socket.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use super::Sent;

pub struct UdpOut {
    sock: UdpSocket,
}

impl UdpOut {
    pub fn new(to: SocketAddr) -> io::Result<Self> {
        let any: SocketAddr = match to {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let sock = UdpSocket::bind(any)?;
        sock.connect(to)?;
        // A full socket buffer must cost one datagram, not stall every
        // collector behind this one.
        sock.set_nonblocking(true)?;
        Ok(UdpOut { sock })
    }

    /// Send one message. `ECONNREFUSED` (an ICMP port unreachable from an
    /// earlier datagram: the collector is not running) and `WouldBlock`
    /// both lose this message; UDP export has no retransmission. The
    /// caller also counts the datagram the ICMP answered as lost.
    pub fn send(&mut self, msg: &[u8]) -> Sent {
        match self.sock.send(msg) {
            Ok(n) if n == msg.len() => Sent::Ok,
            Ok(n) => Sent::Dropped(io::Error::other(format!(
                "short datagram {n}/{}",
                msg.len()
            ))),
            Err(e) => Sent::Dropped(e),
        }
    }

    /// Whether the kernel holds an ICMP port unreachable for the last
    /// datagram (clears it): asked at shutdown, when no later send would.
    pub fn refused_since_last_send(&self) -> bool {
        matches!(self.sock.take_error(), Ok(Some(e)) if e.kind() == io::ErrorKind::ConnectionRefused)
    }
}
