//! TCP metrics for one flow: handshake RTT, SRT, retransmissions, OoO.
//! (Stub: the NPM issue fills this in.)

use crate::flow::record::{Dir, FlowRecord};
use crate::parse::TcpMeta;
use crate::time::Timestamp;

#[derive(Clone, Debug, Default)]
pub struct TcpTracker {}

impl TcpTracker {
    pub fn on_segment(
        &mut self,
        _dir: Dir,
        _tcp: &TcpMeta,
        _payload_len: u32,
        _payload: &[u8],
        _ts: Timestamp,
    ) {
    }

    pub fn fill(&self, _rec: &mut FlowRecord) {}

    pub fn reset_interval(&mut self) {}
}
