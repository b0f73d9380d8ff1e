//! QUIC Initial packet protection (RFC 9001 §5; RFC 9369 §3.3 for v2):
//! keys from the client's Destination Connection ID with HKDF-SHA256,
//! header protection with AES-128 (one block), the payload with
//! AES-128-GCM, decrypted in place. RustCrypto does the cryptography.

use aes::Aes128;
use aes::cipher::{BlockEncrypt, generic_array::GenericArray};
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, KeyInit, Nonce, Tag};
use hkdf::Hkdf;
use sha2::Sha256;

pub const VERSION_1: u32 = 0x0000_0001;
pub const VERSION_2: u32 = 0x6B33_43CF;

/// initial_salt (RFC 9001 §5.2).
const SALT_V1: [u8; 20] = [
    0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad,
    0xcc, 0xbb, 0x7f, 0x0a,
];
/// initial_salt (RFC 9369 §3.3.1).
const SALT_V2: [u8; 20] = [
    0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb,
    0xf9, 0xbd, 0x2e, 0xd9,
];
/// initial_salt of drafts 29–32 (draft-ietf-quic-tls-29 §5.2).
const SALT_DRAFT29: [u8; 20] = [
    0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61, 0x11, 0xe0,
    0x43, 0x90, 0xa8, 0x99,
];

/// The Initial salt and key labels of a version, `None` for a version
/// whose Initials we cannot read.
fn version_params(version: u32) -> Option<(&'static [u8; 20], [&'static [u8]; 3])> {
    const V1: [&[u8]; 3] = [b"quic key", b"quic iv", b"quic hp"];
    match version {
        VERSION_1 | 0xFF00_0021 | 0xFF00_0022 => Some((&SALT_V1, V1)),
        0xFF00_001D..=0xFF00_0020 => Some((&SALT_DRAFT29, V1)),
        VERSION_2 => Some((&SALT_V2, [b"quicv2 key", b"quicv2 iv", b"quicv2 hp"])),
        _ => None,
    }
}

/// Whether the Initials of `version` can be decrypted here.
pub fn readable(version: u32) -> bool {
    version_params(version).is_some()
}

/// The key, IV and header-protection key of one direction's Initials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitialKeys {
    pub key: [u8; 16],
    pub iv: [u8; 12],
    pub hp: [u8; 16],
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
fn expand_label(prk: &Hkdf<Sha256>, label: &[u8], out: &mut [u8]) -> Option<()> {
    let mut info = [0u8; 2 + 1 + 6 + 16 + 1];
    let n = 2 + 1 + 6 + label.len() + 1;
    if label.len() > 16 {
        return None;
    }
    info[..2].copy_from_slice(&(out.len() as u16).to_be_bytes());
    info[2] = (6 + label.len()) as u8;
    info[3..9].copy_from_slice(b"tls13 ");
    info[9..9 + label.len()].copy_from_slice(label);
    prk.expand(&info[..n], out).ok()
}

/// The client's Initial keys for a connection whose first Destination
/// Connection ID is `dcid`.
pub fn client_initial_keys(version: u32, dcid: &[u8]) -> Option<InitialKeys> {
    let (salt, labels) = version_params(version)?;
    let (initial, _) = Hkdf::<Sha256>::extract(Some(salt), dcid);
    let initial = Hkdf::<Sha256>::from_prk(&initial).ok()?;
    let mut client = [0u8; 32];
    expand_label(&initial, b"client in", &mut client)?;
    let secret = Hkdf::<Sha256>::from_prk(&client).ok()?;
    let mut k = InitialKeys::default();
    expand_label(&secret, labels[0], &mut k.key)?;
    expand_label(&secret, labels[1], &mut k.iv)?;
    expand_label(&secret, labels[2], &mut k.hp)?;
    Some(k)
}

/// Why a packet was not decrypted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// Too short for the header-protection sample or the tag.
    Short,
    /// The AEAD tag did not verify.
    BadTag,
}

/// Removes header protection and decrypts one long-header packet in
/// place: `pkt` runs from the first byte to the end of the packet
/// (`pn_at` + the Length field). Returns the packet number and the range
/// of the plaintext payload in `pkt`.
pub fn open(
    keys: &InitialKeys,
    pkt: &mut [u8],
    pn_at: usize,
) -> Result<(u64, std::ops::Range<usize>), OpenError> {
    let sample = pkt.get(pn_at + 4..pn_at + 20).ok_or(OpenError::Short)?;
    let mut mask = GenericArray::clone_from_slice(sample);
    Aes128::new(GenericArray::from_slice(&keys.hp)).encrypt_block(&mut mask);
    pkt[0] ^= mask[0] & 0x0F;
    let pn_len = usize::from(pkt[0] & 0x03) + 1;
    let mut pn = 0u64;
    for i in 0..pn_len {
        pkt[pn_at + i] ^= mask[1 + i];
        pn = pn << 8 | u64::from(pkt[pn_at + i]);
    }
    let body = pn_at + pn_len;
    if pkt.len() < body + 16 {
        return Err(OpenError::Short);
    }
    let tag_at = pkt.len() - 16;
    let mut nonce = keys.iv;
    for (n, p) in nonce[4..].iter_mut().zip(pn.to_be_bytes()) {
        *n ^= p;
    }
    let (head, rest) = pkt.split_at_mut(body);
    let (ct, tag) = rest.split_at_mut(tag_at - body);
    let tag = Tag::clone_from_slice(tag);
    Aes128Gcm::new(GenericArray::from_slice(&keys.key))
        .decrypt_in_place_detached(Nonce::from_slice(&nonce), head, ct, &tag)
        .map_err(|_| OpenError::BadTag)?;
    Ok((pn, body..tag_at))
}

#[cfg(test)]
#[path = "crypto_tests.rs"]
mod tests;
