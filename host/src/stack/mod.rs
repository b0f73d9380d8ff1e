//! Stack-layer latency (T1–T8): kernel observations → per-flow matching by
//! sequence number → per-segment statistics → reports.

pub mod agent;
mod hookset;
mod links;
pub mod matcher;
pub mod output;
pub mod plot;
pub mod probe;
pub mod quantiles;
pub mod stats;
pub mod windows;
