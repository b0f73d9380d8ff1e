use super::*;
use crate::quic::vectors::{CLIENT_INITIAL_V1, CLIENT_INITIAL_V2, CRYPTO_FRAME, DCID, hex};

#[test]
fn quic_initial_keys_rfc9001_a1() {
    let k = client_initial_keys(VERSION_1, &hex(DCID)).unwrap();
    assert_eq!(k.key.to_vec(), hex("1f369613dd76d5467730efcbe3b1a22d"));
    assert_eq!(k.iv.to_vec(), hex("fa044b2f42a3fd3b46fb255c"));
    assert_eq!(k.hp.to_vec(), hex("9f50449e04a0e810283a1e9933adedd2"));
}

#[test]
fn quic_initial_keys_rfc9369_a1() {
    let k = client_initial_keys(VERSION_2, &hex(DCID)).unwrap();
    assert_eq!(k.key.to_vec(), hex("8b1a0bc121284290a29e0971b5cd045d"));
    assert_eq!(k.iv.to_vec(), hex("91f73e2351d8fa91660e909f"));
    assert_eq!(k.hp.to_vec(), hex("45b95e15235d6f45a6b19cbcb0294ba9"));
}

fn open_vector(version: u32, packet: &str) -> (u64, Vec<u8>, Vec<u8>) {
    let mut pkt = hex(packet);
    assert_eq!(pkt.len(), 1200);
    let keys = client_initial_keys(version, &hex(DCID)).unwrap();
    // First byte, version, DCID length + 8, SCID length 0, token length 0,
    // a 2-byte Length (0x449e = 1182): the packet number is at 18.
    let (pn, range) = open(&keys, &mut pkt, 18).unwrap();
    (pn, pkt[..18 + 4].to_vec(), pkt[range].to_vec())
}

#[test]
fn quic_open_rfc9001_a2_client_initial() {
    let (pn, header, payload) = open_vector(VERSION_1, CLIENT_INITIAL_V1);
    assert_eq!(pn, 2);
    assert_eq!(header, hex("c300000001088394c8f03e5157080000449e00000002"));
    let frame = hex(CRYPTO_FRAME);
    assert_eq!(payload.len(), 1162);
    assert_eq!(&payload[..frame.len()], &frame[..]);
    assert!(payload[frame.len()..].iter().all(|b| *b == 0), "PADDING");
}

#[test]
fn quic_open_rfc9369_a2_client_initial() {
    let (pn, header, payload) = open_vector(VERSION_2, CLIENT_INITIAL_V2);
    assert_eq!(pn, 2);
    assert_eq!(header, hex("d36b3343cf088394c8f03e5157080000449e00000002"));
    let frame = hex(CRYPTO_FRAME);
    assert_eq!(&payload[..frame.len()], &frame[..]);
}

#[test]
fn quic_open_refuses_a_bad_tag_and_short_packets() {
    let keys = client_initial_keys(VERSION_1, &hex(DCID)).unwrap();
    let mut pkt = hex(CLIENT_INITIAL_V1);
    pkt[700] ^= 1;
    assert_eq!(open(&keys, &mut pkt, 18), Err(OpenError::BadTag));
    let mut pkt = hex(CLIENT_INITIAL_V1);
    let other = client_initial_keys(VERSION_2, &hex(DCID)).unwrap();
    assert_eq!(
        open(&other, &mut pkt, 18),
        Err(OpenError::BadTag),
        "v2 keys on v1"
    );
    let mut short = hex(CLIENT_INITIAL_V1)[..30].to_vec();
    assert_eq!(open(&keys, &mut short, 18), Err(OpenError::Short));
    assert!(client_initial_keys(0x1234_5678, &hex(DCID)).is_none());
}
