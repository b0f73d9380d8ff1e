//! Byte transports to one collector. UDP and files take whole messages and
//! never block the exporter thread; TCP is a non-blocking state machine
//! driven by mio readiness events (connect, reconnect with backoff, partial
//! writes).

pub mod file;
pub mod pace;
pub mod tcp;
pub mod udp;

/// What became of one message handed to a datagram or file transport.
#[derive(Debug)]
pub enum Sent {
    Ok,
    /// The message is lost (counted by the caller); the error is logged.
    Dropped(std::io::Error),
}
