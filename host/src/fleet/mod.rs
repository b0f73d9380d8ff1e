//! Across hosts: host agents stream their sampled observations to a
//! manager (`proto` is the stream, `forward` the agent's side), which puts
//! them on one clock and matches the two ends of each flow (`manager`),
//! counts them into histograms (`metrics`) and joins them with the wire
//! probe's records (`join`).

pub mod admit;
pub mod certs;
pub mod conn_counters;
pub mod forward;
pub mod join;
pub mod manager;
pub mod metrics;
pub mod proto;
pub mod record;
pub mod tls;
