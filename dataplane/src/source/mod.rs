//! Packet sources: where frames and their capture timestamps come from.
//! Both hand the same `(frame, timestamp)` pairs to the flow code; files
//! through `reorder`, which puts small timestamp inversions in order as
//! the live hand-off does.

#[cfg(feature = "afxdp")]
pub mod afxdp;
mod capture;
mod frame;
pub mod pcap;
pub mod reorder;

pub use capture::Capture;
pub use frame::Frame;
pub(crate) use frame::Placed;
