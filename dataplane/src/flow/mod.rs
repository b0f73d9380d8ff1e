//! The per-worker flow table: bidirectional keys, expiry, records.

pub mod record;
