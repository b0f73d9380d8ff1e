//! Hand-made captures of bad timestamp input: a classic pcap of
//! Ethernet/IPv4/TCP frames with whatever options a case needs.

use std::path::Path;

/// One TCP segment between 192.0.2.1:`cport` (client) and
/// 198.51.100.2:80.
pub struct Seg {
    pub from_client: bool,
    pub cport: u16,
    pub flags: u8,
    /// (TSval, TSecr), written as NOP NOP TS.
    pub ts: Option<(u32, u32)>,
    /// Raw option bytes instead (malformed cases); padded to 4 bytes.
    pub raw_opts: Option<Vec<u8>>,
    pub payload: usize,
    pub at_us: u64,
}

pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const PSH: u8 = 0x08;

fn frame(s: &Seg, seq: u32, ack: u32) -> Vec<u8> {
    let mut opts = match (&s.raw_opts, s.ts) {
        (Some(r), _) => r.clone(),
        (None, Some((v, e))) => {
            let mut o = vec![1, 1, 8, 10];
            o.extend_from_slice(&v.to_be_bytes());
            o.extend_from_slice(&e.to_be_bytes());
            o
        }
        (None, None) => Vec::new(),
    };
    while !opts.len().is_multiple_of(4) {
        opts.push(0);
    }
    let (c, sv) = ([192, 0, 2, 1], [198, 51, 100, 2]);
    let (src, dst, sp, dp) = if s.from_client {
        (c, sv, s.cport, 80)
    } else {
        (sv, c, 80, s.cport)
    };
    let tcp_len = 20 + opts.len();
    let ip_len = 20 + tcp_len + s.payload;
    let mut f = Vec::new();
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 6, 0, 0]);
    f[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    f.extend_from_slice(&[((tcp_len / 4) as u8) << 4, s.flags, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(&opts);
    f.resize(f.len() + s.payload, 0);
    f
}

/// Writes `segs` (in this order, times as given) to `path`; sequence and
/// acknowledgement numbers follow the payload per connection.
pub fn write(path: &Path, segs: &[Seg]) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    let mut next: std::collections::HashMap<(u16, bool), u32> = Default::default();
    for s in segs {
        let seq = *next.entry((s.cport, s.from_client)).or_insert(1000);
        let ack = *next.entry((s.cport, !s.from_client)).or_insert(1000);
        let f = frame(s, seq, ack);
        let adv = s.payload as u32 + u32::from(s.flags & SYN != 0);
        next.insert((s.cport, s.from_client), seq.wrapping_add(adv));
        out.extend_from_slice(&((s.at_us / 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&((s.at_us % 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&f);
    }
    std::fs::write(path, out).expect("write crafted capture");
}
