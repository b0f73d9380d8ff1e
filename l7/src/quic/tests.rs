use super::*;
use crate::quic::vectors::{CLIENT_INITIAL_V1, CLIENT_INITIAL_V2, hex};
use aes::Aes128;
use aes::cipher::{BlockEncrypt, generic_array::GenericArray};
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, KeyInit, Nonce};

/// Protects a v1 Initial: header (4-byte packet number) and frames.
pub(crate) fn seal(dcid: &[u8], pn: u32, frames: &[u8]) -> Vec<u8> {
    let keys = crypto::client_initial_keys(crypto::VERSION_1, dcid).unwrap();
    let mut pkt = vec![0xC3, 0, 0, 0, 1, dcid.len() as u8];
    pkt.extend_from_slice(dcid);
    pkt.extend([0, 0]); // SCID length, token length
    let len = 4 + frames.len() + 16;
    pkt.extend((0x4000 | len as u16).to_be_bytes());
    let pn_at = pkt.len();
    pkt.extend(pn.to_be_bytes());
    let mut body = frames.to_vec();
    let mut nonce = keys.iv;
    for (n, p) in nonce[4..].iter_mut().zip(u64::from(pn).to_be_bytes()) {
        *n ^= p;
    }
    let tag = Aes128Gcm::new(GenericArray::from_slice(&keys.key))
        .encrypt_in_place_detached(Nonce::from_slice(&nonce), &pkt, &mut body)
        .unwrap();
    pkt.extend(body);
    pkt.extend(tag);
    let mut mask = GenericArray::clone_from_slice(&pkt[pn_at + 4..pn_at + 20]);
    Aes128::new(GenericArray::from_slice(&keys.hp)).encrypt_block(&mut mask);
    pkt[0] ^= mask[0] & 0x0F;
    for i in 0..4 {
        pkt[pn_at + i] ^= mask[1 + i];
    }
    pkt
}

pub(crate) fn crypto_frame(off: u64, data: &[u8]) -> Vec<u8> {
    let mut f = vec![0x06];
    f.extend((0x8000_0000u32 | off as u32).to_be_bytes());
    f.extend((0x4000u16 | data.len() as u16).to_be_bytes());
    f.extend_from_slice(data);
    f
}

struct Rig {
    pool: BufPool,
    sc: Scratch,
    q: Vec<u8>,
    stats: L7Stats,
}

impl Rig {
    fn new() -> Self {
        Rig {
            pool: BufPool::new(4),
            sc: Scratch::default(),
            q: Vec::new(),
            stats: L7Stats::default(),
        }
    }

    fn feed(&mut self, st: &mut QuicState, dir: Dir, p: &[u8]) {
        let mut cx = QuicCtx {
            pool: &mut self.pool,
            scratch: &mut self.sc,
            quic: &mut self.q,
            stats: &mut self.stats,
            bound: BUF_BYTES,
        };
        st.on_datagram(dir, p, &mut cx);
    }
}

#[test]
fn quic_rfc_vectors_give_sni_and_alpn() {
    for (v, pkt) in [
        (crypto::VERSION_1, CLIENT_INITIAL_V1),
        (crypto::VERSION_2, CLIENT_INITIAL_V2),
    ] {
        let p = hex(pkt);
        assert!(looks_like_long_header(&p));
        let mut r = Rig::new();
        let mut st = QuicState::default();
        r.feed(&mut st, Dir::C2S, &p);
        assert!(st.done);
        let info = st.info();
        assert_eq!(info.version, v);
        assert_eq!(info.sni.as_deref(), Some(&b"example.com"[..]));
        assert_eq!(info.alpn.as_deref(), Some(&b"\x04alpn"[..]));
        assert_eq!(&info.ja4.unwrap()[..4], b"q13d");
        assert_eq!((r.stats.quic_initials, r.stats.quic_client_hellos), (1, 1));
        assert_eq!(r.pool.in_use(), 0, "buffer returned");
    }
}

#[test]
fn quic_hello_over_two_initials_with_shuffled_frames() {
    let dcid = [7u8; 8];
    let hello = crate::synth::ja4_example_hello(b"quic.example");
    let (a, b) = hello.split_at(hello.len() / 2);
    let (a1, a2) = a.split_at(40);
    // Packet 0: the second piece of the first half, PING, padding, the
    // first piece; packet 1: ACK-free, the second half.
    let mut f0 = crypto_frame(40, a2);
    f0.push(0x01);
    f0.extend([0; 30]);
    f0.extend(crypto_frame(0, a1));
    let f1 = crypto_frame(a.len() as u64, b);
    let mut r = Rig::new();
    let mut st = QuicState::default();
    r.feed(&mut st, Dir::C2S, &seal(&dcid, 0, &f0));
    assert!(!st.done, "half a hello");
    // A server packet in between is not the client's.
    r.feed(
        &mut st,
        Dir::S2C,
        &seal(&[9; 8], 0, &crypto_frame(0, b"zz")),
    );
    r.feed(&mut st, Dir::C2S, &seal(&dcid, 1, &f1));
    assert!(st.done);
    assert_eq!(st.info().sni.as_deref(), Some(&b"quic.example"[..]));
    assert_eq!(r.stats.quic_bad_tag, 0);
}

#[test]
fn quic_bad_tag_is_counted_and_skipped() {
    let mut p = hex(CLIENT_INITIAL_V1);
    p[500] ^= 0x40;
    let mut r = Rig::new();
    let mut st = QuicState::default();
    r.feed(&mut st, Dir::C2S, &p);
    assert!(!st.done && st.info().sni.is_none());
    assert_eq!((r.stats.quic_bad_tag, r.stats.quic_initials), (1, 0));
}

#[test]
fn quic_header_parse_bounds() {
    let p = hex(CLIENT_INITIAL_V1);
    let h = LongHeader::parse(&p).unwrap();
    assert_eq!((h.version, h.kind, h.pn_at, h.end), (1, 0, 18, 1200));
    for n in 0..p.len() {
        // A cut packet never parses past its end.
        if let Some(h) = LongHeader::parse(&p[..n]) {
            assert!(h.end <= n);
        }
    }
    assert!(!looks_like_long_header(&[
        0xC0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0
    ]));
    assert_eq!(varint(&[0x25], 0), Some((37, 1)));
    assert_eq!(varint(&[0x7b, 0xbd], 0), Some((15293, 2)));
    assert_eq!(
        varint(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c], 0),
        Some((151_288_809_941_952_652, 8))
    );
    assert_eq!(varint(&[0xc2, 0x19], 0), None);
}
