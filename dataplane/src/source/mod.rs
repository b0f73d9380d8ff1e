//! Packet sources: where frames and their capture timestamps come from.
//! Both hand the same `(frame, timestamp)` pairs to the flow code.

pub mod pcap;
