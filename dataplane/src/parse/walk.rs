//! Link layer → L4 walk. (Stub: the parser task fills this in.)
use super::{DropReason, LinkType, PacketMeta};

pub fn parse(_link: LinkType, _frame: &[u8], _wire_len: u32) -> Result<PacketMeta<'_>, DropReason> {
    Err(DropReason::Truncated)
}
