//! DNS-over-UDP server response time (spec §2). (Stub: the NPM issue fills this in.)

use crate::flow::record::{Dir, FlowRecord};
use crate::time::Timestamp;

#[derive(Clone, Debug, Default)]
pub struct DnsTracker {}

impl DnsTracker {
    pub fn on_datagram(&mut self, _dir: Dir, _payload: &[u8], _ts: Timestamp) {}

    pub fn fill(&self, _rec: &mut FlowRecord) {}

    pub fn reset_interval(&mut self) {}
}
