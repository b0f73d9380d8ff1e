//! What the demo's client and server say to each other: the ports, and the
//! paced bulk sender both ends use. Every loop here is bounded by a
//! deadline.

use std::{
    io::{self, Read, Write},
    net::TcpStream,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

/// HTTP-like request/response exchanges (the server thinks before each
/// response).
pub const HTTP_PORT: u16 = 80;
/// The client uploads to this port for a few seconds.
pub const UPLOAD_PORT: u16 = 5001;
/// The server sends to the client for as long as it asks, from this port.
pub const DOWNLOAD_PORT: u16 = 5002;
/// Nobody listens here: the connection is refused (SYN, RST).
pub const REFUSED_PORT: u16 = 81;
pub const DNS_PORT: u16 = 53;

/// Bytes per paced write.
const CHUNK: usize = 8192;

/// Writes to `s` at about `kbit_s` for `dur` (or until `deadline`, `stop`
/// or an error); returns the bytes written. A sender that falls behind
/// does not burst to catch up: the network under test is slow on purpose.
pub fn paced_send(
    s: &mut TcpStream,
    dur: Duration,
    kbit_s: u32,
    deadline: Instant,
    stop: &AtomicBool,
) -> io::Result<u64> {
    let chunk = [0x5Au8; CHUNK];
    let interval = Duration::from_secs_f64((CHUNK * 8) as f64 / (f64::from(kbit_s.max(1)) * 1e3));
    let end = (Instant::now() + dur).min(deadline);
    let mut next = Instant::now();
    let mut sent = 0u64;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        s.write_all(&chunk)?;
        sent += CHUNK as u64;
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    Ok(sent)
}

/// Reads and discards until EOF, `deadline` or `stop`; returns the bytes
/// read. `s` must have a read timeout so the deadline is checked.
pub fn drain(s: &mut TcpStream, deadline: Instant, stop: &AtomicBool) -> io::Result<u64> {
    let mut buf = [0u8; 16384];
    let mut got = 0u64;
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n as u64,
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// A read timeout, as the platform reports it.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Finds the end of an HTTP head (`\r\n\r\n`) in `buf`: the index just past
/// it.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The value of `Content-Length` in an HTTP head (case-insensitive name).
pub fn content_length(head: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(head).ok()?;
    text.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_head_helpers() {
        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 42\r\nX: y\r\n\r\nbody";
        let end = head_end(r).unwrap();
        assert_eq!(&r[end..], b"body");
        assert_eq!(content_length(&r[..end]), Some(42));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
        assert_eq!(content_length(b"HTTP/1.1 200 OK\r\n\r\n"), None);
    }
}
