//! The per-worker flow table: bidirectional keys, expiry, records.

pub mod frag;
pub mod key;
mod lru;
pub mod mem;
pub mod table;

pub use key::FlowKey;
pub use table::{FlowConfig, FlowTable, TableStats};
