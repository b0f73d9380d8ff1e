//! Arbitrary bytes through `parse` for every link type: no input may panic,
//! hang or read outside the frame, and what comes back must be consistent.
//!
//! Input layout: the first byte picks the link type (`% 7`) and the
//! wire length (`/ 7 % 4`: the frame's own length, more than it as after a
//! snaplen cut, 0, or `u32::MAX`); the rest is the frame. `seeds.py` writes
//! real frames from the shared pcaps in this layout.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xdprobe_dataplane::parse::{L4, LinkType, parse};

const LINKS: [LinkType; 7] = [
    LinkType::Ethernet,
    LinkType::RawIp,
    LinkType::Ipv4,
    LinkType::Ipv6,
    LinkType::LinuxSll,
    LinkType::LinuxSll2,
    LinkType::Null,
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let link = LINKS[usize::from(sel) % LINKS.len()];
    let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
    let wire_len = match (sel / 7) % 4 {
        0 => len,
        1 => len.saturating_add(1500),
        2 => 0,
        _ => u32::MAX,
    };
    let Ok(m) = parse(link, frame, wire_len) else {
        return;
    };
    // The payload is borrowed from the frame and never longer than the
    // on-wire payload it is a capture of.
    let range = frame.as_ptr_range();
    let p = m.payload.as_ptr_range();
    assert!(m.payload.is_empty() || (range.start <= p.start && p.end <= range.end));
    assert!(m.payload.len() as u64 <= u64::from(m.payload_len));
    match m.l4 {
        L4::Tcp(_) | L4::Udp => {}
        _ => assert_eq!((m.src_port, m.dst_port), (0, 0)),
    }
    if m.l4 == L4::Fragment {
        assert!(m.payload.is_empty());
    }
});
