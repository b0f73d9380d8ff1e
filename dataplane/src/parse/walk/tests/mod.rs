//! Walk tests: one hand-built frame per framing and per malformed case. Byte
//! layouts follow the RFCs cited in `wire`; expected values are the fields
//! written into the frames, never earlier output of the parser.
//!
//! `link`: framings below IP; `ip`: IPv4/IPv6/L4 lengths, fragments and
//! headers; `sweep`: cuts at every length and a no-panic mutation sweep.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;
use crate::parse::wire::ipv4::tests::ipv4;
use crate::parse::wire::ipv6::tests::ipv6;
use crate::parse::wire::tcp::tests::tcp;
use crate::parse::wire::udp::tests::udp;

mod ip;
mod link;
mod sweep;

pub(super) const V4_SRC: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
pub(super) const V4_DST: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2));
pub(super) const V6_SRC: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));

pub(super) fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    v.extend_from_slice(&ethertype.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// An Ethernet frame padded to the 60-byte minimum, as a NIC sends it.
pub(super) fn padded(mut f: Vec<u8>) -> Vec<u8> {
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// `tags` as (TPID, VID) pairs, then `ethertype` and `payload`.
pub(super) fn vlan_frame(tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut types: Vec<u16> = tags.iter().map(|t| t.0).collect();
    types.push(ethertype);
    for (i, &(_, vid)) in tags.iter().enumerate() {
        body.extend_from_slice(&vid.to_be_bytes());
        body.extend_from_slice(&types[i + 1].to_be_bytes());
    }
    body.extend_from_slice(payload);
    eth(types[0], &body)
}

pub(super) fn mpls_entry(label: u32, bos: bool) -> [u8; 4] {
    ((label << 12) | (u32::from(bos) << 8) | 64).to_be_bytes()
}

/// Parses a copy of `f` that lives for the rest of the test (leaked), so
/// frames can be built inline.
pub(super) fn p(link: LinkType, f: &[u8]) -> Result<PacketMeta<'static>, DropReason> {
    let f: &'static [u8] = f.to_vec().leak();
    parse(link, f, f.len() as u32)
}

pub(super) fn eth_ok(f: &[u8]) -> PacketMeta<'static> {
    p(LinkType::Ethernet, f).expect("packet parses")
}

pub(super) const SYN_OPTS: [u8; 20] = [
    2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 7, 0, 0, 0, 0, 1, 3, 3, 9,
];

pub(super) fn mpls_frame(labels: &[u32], payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, &l) in labels.iter().enumerate() {
        body.extend_from_slice(&mpls_entry(l, i + 1 == labels.len()));
    }
    body.extend_from_slice(payload);
    eth(0x8847, &body)
}

pub(super) fn pppoe(proto: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x11, 0x00, 0x00, 0x2a];
    v.extend_from_slice(&((payload.len() + 2) as u16).to_be_bytes());
    v.extend_from_slice(&proto.to_be_bytes());
    v.extend_from_slice(payload);
    eth(0x8864, &v)
}

/// Generic extension header (`kind` announces it) with `body_units` extra
/// 8-byte units.
pub(super) fn ext(next: u8, units: u8) -> Vec<u8> {
    let mut v = vec![next, units];
    v.resize(8 * (usize::from(units) + 1), 0);
    v
}

pub(super) fn frag6(next: u8, offset: u16, more: bool, id: u32) -> Vec<u8> {
    let mut v = vec![next, 0];
    v.extend_from_slice(&(offset | u16::from(more)).to_be_bytes());
    v.extend_from_slice(&id.to_be_bytes());
    v
}

/// Cuts `frame` at every length and checks the reason names the layer the
/// cut falls in: `layers` are (end offset, reason for cuts before it).
pub(super) fn assert_cuts(link: LinkType, frame: &[u8], layers: &[(usize, DropReason)]) {
    for n in 0..frame.len() {
        let want = layers.iter().find(|(end, _)| n < *end).map(|l| l.1);
        let got = parse(link, &frame[..n], frame.len() as u32).err();
        assert_eq!(got, want, "{link:?} cut at {n}");
    }
    assert!(parse(link, frame, frame.len() as u32).is_ok());
}
