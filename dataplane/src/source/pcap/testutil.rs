//! Hand-built pcap and pcapng bytes for tests, written from the specs
//! (draft-ietf-opsawg-pcap, draft-ietf-opsawg-pcapng) independently of the
//! reader. Also compiled into `tests/pcap_vs_tshark.rs` (by `#[path]`), where
//! tshark reads the same bytes; each user needs only some of the helpers.
#![allow(
    dead_code,
    reason = "shared by unit and integration tests, each uses a subset"
)]

/// Byte order to write in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Le,
    Be,
}

/// A little writer of integers in one byte order.
pub struct W {
    order: Order,
    pub out: Vec<u8>,
}

impl W {
    pub fn new(order: Order) -> Self {
        W {
            order,
            out: Vec::new(),
        }
    }
    pub fn u16(mut self, v: u16) -> Self {
        let b = match self.order {
            Order::Le => v.to_le_bytes(),
            Order::Be => v.to_be_bytes(),
        };
        self.out.extend_from_slice(&b);
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        let b = match self.order {
            Order::Le => v.to_le_bytes(),
            Order::Be => v.to_be_bytes(),
        };
        self.out.extend_from_slice(&b);
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        let b = match self.order {
            Order::Le => v.to_le_bytes(),
            Order::Be => v.to_be_bytes(),
        };
        self.out.extend_from_slice(&b);
        self
    }
    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.out.extend_from_slice(b);
        self
    }
    /// Zero bytes up to the next multiple of 4.
    pub fn pad4(mut self) -> Self {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
        self
    }
}

/// Deterministic frame content, distinct per `seed`.
pub fn frame(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

// ---- classic pcap ----

pub fn pcap_header(order: Order, nanos: bool, snaplen: u32, linktype: u32) -> Vec<u8> {
    W::new(order)
        .u32(if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 })
        .u16(2)
        .u16(4)
        .u32(0)
        .u32(0)
        .u32(snaplen)
        .u32(linktype)
        .out
}

/// A record whose captured length is `data.len()`.
pub fn pcap_record(order: Order, sec: u32, frac: u32, data: &[u8], wire_len: u32) -> Vec<u8> {
    pcap_record_raw(order, sec, frac, data.len() as u32, wire_len, data)
}

/// A record with an arbitrary captured-length field (for corrupt files).
pub fn pcap_record_raw(
    order: Order,
    sec: u32,
    frac: u32,
    caplen: u32,
    wire_len: u32,
    data: &[u8],
) -> Vec<u8> {
    W::new(order)
        .u32(sec)
        .u32(frac)
        .u32(caplen)
        .u32(wire_len)
        .bytes(data)
        .out
}

// ---- pcapng ----

/// Wraps `body` (padded to 4) in type and both lengths.
pub fn block(order: Order, ty: u32, body: &[u8]) -> Vec<u8> {
    let padded = body.len().next_multiple_of(4);
    let len = (padded + 12) as u32;
    W::new(order)
        .u32(ty)
        .u32(len)
        .bytes(body)
        .pad4()
        .u32(len)
        .out
}

/// Section Header Block, version 1.0, unknown section length, one
/// `shb_userappl` option so that options are present.
pub fn shb(order: Order) -> Vec<u8> {
    let body = W::new(order)
        .u32(0x1a2b_3c4d)
        .u16(1)
        .u16(0)
        .u64(u64::MAX)
        .u16(4) // shb_userappl
        .u16(6)
        .bytes(b"xdtest")
        .pad4()
        .u16(0)
        .u16(0)
        .out;
    block(order, 0x0a0d_0d0a, &body)
}

/// Interface Description Block with optional `if_tsresol` / `if_tsoffset`
/// (written after an `if_name`, so the options must really be walked).
pub fn idb(
    order: Order,
    linktype: u16,
    snaplen: u32,
    tsresol: Option<u8>,
    tsoffset: Option<i64>,
) -> Vec<u8> {
    let mut w = W::new(order)
        .u16(linktype)
        .u16(0)
        .u32(snaplen)
        .u16(2) // if_name
        .u16(5)
        .bytes(b"veth0")
        .pad4();
    if let Some(r) = tsresol {
        w = w.u16(9).u16(1).bytes(&[r]).pad4();
    }
    if let Some(off) = tsoffset {
        w = w.u16(14).u16(8).u64(off as u64);
    }
    let body = w.u16(0).u16(0).out;
    block(order, 1, &body)
}

/// Enhanced Packet Block with captured length `data.len()`, plus an
/// `opt_comment` so that trailing options are present.
pub fn epb(order: Order, iface: u32, ts: u64, data: &[u8], wire_len: u32) -> Vec<u8> {
    epb_raw(order, iface, ts, data.len() as u32, wire_len, data)
}

pub fn epb_raw(
    order: Order,
    iface: u32,
    ts: u64,
    caplen: u32,
    wire_len: u32,
    data: &[u8],
) -> Vec<u8> {
    let body = W::new(order)
        .u32(iface)
        .u32((ts >> 32) as u32)
        .u32(ts as u32)
        .u32(caplen)
        .u32(wire_len)
        .bytes(data)
        .pad4()
        .u16(1) // opt_comment
        .u16(3)
        .bytes(b"hi!")
        .pad4()
        .u16(0)
        .u16(0)
        .out;
    block(order, 6, &body)
}

/// Simple Packet Block (interface 0, no timestamp, no captured length).
pub fn spb(order: Order, data: &[u8], wire_len: u32) -> Vec<u8> {
    let body = W::new(order).u32(wire_len).bytes(data).out;
    block(order, 3, &body)
}

/// Obsolete Packet Block (type 2).
pub fn obsolete_pb(order: Order, iface: u16, ts: u64, data: &[u8], wire_len: u32) -> Vec<u8> {
    let body = W::new(order)
        .u16(iface)
        .u16(0) // drops count
        .u32((ts >> 32) as u32)
        .u32(ts as u32)
        .u32(data.len() as u32)
        .u32(wire_len)
        .bytes(data)
        .out;
    block(order, 2, &body)
}

/// Interface Statistics Block for interface 0 (only to be skipped).
pub fn isb(order: Order, ts: u64) -> Vec<u8> {
    let body = W::new(order)
        .u32(0)
        .u32((ts >> 32) as u32)
        .u32(ts as u32)
        .u16(0)
        .u16(0)
        .out;
    block(order, 5, &body)
}

/// Name Resolution Block with one IPv4 record (only to be skipped).
pub fn nrb(order: Order) -> Vec<u8> {
    let body = W::new(order)
        .u16(1) // nrb_record_ipv4
        .u16(13)
        .bytes(&[192, 0, 2, 1])
        .bytes(b"host.tst\0")
        .pad4()
        .u16(0)
        .u16(0)
        .out;
    block(order, 4, &body)
}

/// Custom Block (copiable, type 0x00000BAD) with a private enterprise number.
pub fn custom(order: Order, payload: &[u8]) -> Vec<u8> {
    let body = W::new(order).u32(32473).bytes(payload).out;
    block(order, 0x0000_0bad, &body)
}
