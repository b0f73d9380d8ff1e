//! What each flow is (issue 23): the application label and the fields that
//! name the flow's service — TLS and QUIC server names, ALPN, versions and
//! fingerprints, HTTP/1.x requests and status codes, DNS questions and
//! answer codes — read from the packets that carry them.
//!
//! Sans-IO like the rest of the data plane: the flow table keeps one 8-byte
//! [`Slot`] per flow, calls [`L7::on_segment`] with a payload and its
//! capture time until told [`Progress::Done`], and [`L7::fields`] /
//! [`L7::finish`] when it builds a record. Work and memory are bounded: a
//! flow's parser state is one entry of a per-worker pool with a fixed
//! bound, held bytes are at most one reassembly buffer per direction from a
//! bounded pool, and a flow is no longer inspected once its fields are
//! found (HTTP and DNS flows are followed for their life: every
//! transaction counts, and bodies are skipped by their length unread).
//!
//! Layout, in the order a payload travels: `app` (what a first payload
//! looks like) → `flow` (the engine, slots and pools) → `stream` (TCP
//! reassembly, bounded) → the parsers `tls`, `quic`, `http`, `dns` →
//! `fields` (what a record carries).

pub mod app;
pub mod dns;
pub mod fields;
mod flow;
pub mod http;
mod pool;
pub mod quic;
pub mod stats;
mod stream;
pub mod synth;
pub mod text;
pub mod tls;

pub use app::App;
pub use fields::L7Fields;
pub use flow::{Dir, L7, L7Config, Progress, Segment, Slot, Transport};
pub use pool::BUF_BYTES;
pub use stats::L7Stats;
