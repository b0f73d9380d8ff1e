//! Network performance metrics (`docs/spec/npm-metrics.md`), per flow,
//! sans-IO: each tracker takes one packet's fields and its capture timestamp.
//!
//! The flow table keeps a TCP flow's [`tcp::TcpTracker`] and a DNS flow's
//! [`dns::DnsTracker`] in columns beside the flow entries (`flow::table`)
//! and calls it for every packet; at export it asks the tracker to fill the
//! record's NPM fields and then starts a new interval (active timeout)
//! keeping the handshake values.

pub mod dns;
pub mod handshake;
pub mod histogram;
pub mod retrans;
pub mod seq;
pub mod sketch;
pub mod srt;
pub mod tcp;
pub mod tls;
pub mod tsrtt;
