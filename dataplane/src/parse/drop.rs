//! Why a packet was not used. (Stub: the parser task fills this in.)

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    Truncated,
}

#[derive(Clone, Debug, Default)]
pub struct DropCounters {}
