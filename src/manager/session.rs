//! One agent connection's bytes: plaintext, or TLS through a
//! `rustls::ServerConnection` driven by the mio loop (`read_tls` from the
//! socket, decrypted bytes out of `reader()`, handshake and alerts back
//! with `write_tls`). The manager sends no application data; what it
//! writes is TLS's own.

use std::io::{self, Read};
use std::sync::Arc;

use mio::net::TcpStream;
use xdprobe_host::fleet::tls::rustls::pki_types::CertificateDer;
use xdprobe_host::fleet::tls::rustls::{ServerConfig, ServerConnection};

/// What a TLS connection costs beyond its frame reader (rustls's record
/// buffers), charged to the memory limit.
pub const TLS_COST: usize = 36 << 10;

pub enum Session {
    Plain,
    Tls(Box<ServerConnection>),
}

/// What one read turn brought.
pub enum Got {
    /// Application bytes were appended (possibly none).
    Data,
    /// No more for now.
    Blocked,
    /// The peer closed.
    Closed,
}

impl Session {
    pub fn new(tls: Option<&Arc<ServerConfig>>) -> io::Result<Session> {
        match tls {
            None => Ok(Session::Plain),
            Some(c) => ServerConnection::new(c.clone())
                .map(|s| Session::Tls(Box::new(s)))
                .map_err(io::Error::other),
        }
    }

    /// The verified peer certificate, once the handshake is done.
    pub fn peer_cert(&self) -> Option<&CertificateDer<'static>> {
        match self {
            Session::Plain => None,
            Session::Tls(s) if !s.is_handshaking() => s.peer_certificates()?.first(),
            Session::Tls(_) => None,
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Session::Tls(_))
    }

    /// Reads what the socket has (at most `buf.len()` application bytes
    /// per call), appending application bytes to `out`. `Err`: the
    /// connection must go (a TLS alert has been queued for the peer).
    pub fn read(
        &mut self,
        stream: &mut TcpStream,
        buf: &mut [u8],
        out: &mut Vec<u8>,
    ) -> io::Result<Got> {
        match self {
            Session::Plain => match stream.read(buf) {
                Ok(0) => Ok(Got::Closed),
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    Ok(Got::Data)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Got::Blocked),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Got::Data),
                Err(e) => Err(e),
            },
            Session::Tls(s) => {
                let r = match s.read_tls(stream) {
                    Ok(0) => return Ok(Got::Closed),
                    Ok(_) => Got::Data,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Got::Blocked,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => Got::Data,
                    Err(e) => return Err(e),
                };
                let st = s.process_new_packets().map_err(|e| {
                    // Tell the peer why (the alert is queued), best effort.
                    let _ = s.write_tls(stream);
                    io::Error::new(io::ErrorKind::PermissionDenied, format!("TLS: {e}"))
                })?;
                let mut left = st.plaintext_bytes_to_read();
                while left > 0 {
                    let take = left.min(buf.len());
                    let n = s.reader().read(&mut buf[..take])?;
                    if n == 0 {
                        break;
                    }
                    out.extend_from_slice(&buf[..n]);
                    left -= n;
                }
                if st.peer_has_closed() {
                    return Ok(Got::Closed);
                }
                Ok(r)
            }
        }
    }

    /// Writes what TLS has to say (handshake, alerts) as far as the socket
    /// takes it.
    pub fn write(&mut self, stream: &mut TcpStream) -> io::Result<()> {
        let Session::Tls(s) = self else {
            return Ok(());
        };
        while s.wants_write() {
            match s.write_tls(stream) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
