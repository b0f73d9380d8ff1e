//! QUIC Initial packet protection (RFC 9001 §5; RFC 9369 §3.3 for v2):
//! keys from the client's Destination Connection ID with HKDF-SHA256
//! (RustCrypto's HMAC), header protection with AES-128 (one block) and the
//! payload with AES-128-GCM, decrypted in place (`ring`, the crypto library
//! the fleet channels already link: its AES-GCM is about twice as fast as
//! RustCrypto's here, and the Initial's tag must be checked over the whole
//! padded datagram of every QUIC flow).

use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use ring::aead::{self, Aad, LessSafeKey, Nonce, Tag, UnboundKey};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

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

/// Index of a version's Initial salt (see [`salts`]), and its key labels;
/// `None` for a version whose Initials we cannot read.
fn version_params(version: u32) -> Option<(usize, [&'static [u8]; 3])> {
    const V1: [&[u8]; 3] = [b"quic key", b"quic iv", b"quic hp"];
    match version {
        VERSION_1 | 0xFF00_0021 | 0xFF00_0022 => Some((0, V1)),
        0xFF00_001D..=0xFF00_0020 => Some((2, V1)),
        VERSION_2 => Some((1, [b"quicv2 key", b"quicv2 iv", b"quicv2 hp"])),
        _ => None,
    }
}

/// HMAC-SHA256 keyed with each version's Initial salt (v1, v2, drafts),
/// keyed once: HKDF-Extract for every QUIC flow then starts from a copy
/// (two SHA-256 blocks fewer per flow).
fn salts() -> &'static [HmacSha256; 3] {
    static SALTS: OnceLock<[HmacSha256; 3]> = OnceLock::new();
    SALTS.get_or_init(|| [SALT_V1, SALT_V2, SALT_DRAFT29].map(|s| keyed(&s)))
}

fn keyed(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length: this cannot fail.
    <HmacSha256 as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
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

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context, for outputs
/// of one hash length at most (a single HKDF-Expand block:
/// `HMAC(PRK, info || 0x01)`); `prk` is HMAC keyed with the secret.
fn expand_label(prk: &HmacSha256, label: &[u8], out: &mut [u8]) -> Option<()> {
    let mut info = [0u8; 2 + 1 + 6 + 16 + 1];
    if label.len() > 16 || out.len() > 32 {
        return None;
    }
    let n = 2 + 1 + 6 + label.len() + 1;
    info[..2].copy_from_slice(&(out.len() as u16).to_be_bytes());
    info[2] = (6 + label.len()) as u8;
    info[3..9].copy_from_slice(b"tls13 ");
    info[9..9 + label.len()].copy_from_slice(label);
    // info[n - 1] is the empty context's length (0); then the block counter.
    let mut m = prk.clone();
    m.update(&info[..n]);
    m.update(&[1]);
    let t = m.finalize().into_bytes();
    out.copy_from_slice(&t[..out.len()]);
    Some(())
}

/// The client's Initial keys for a connection whose first Destination
/// Connection ID is `dcid`.
pub fn client_initial_keys(version: u32, dcid: &[u8]) -> Option<InitialKeys> {
    let (salt, labels) = version_params(version)?;
    let mut extract = salts()[salt].clone();
    extract.update(dcid);
    let initial = keyed(&extract.finalize().into_bytes());
    let mut client = [0u8; 32];
    expand_label(&initial, b"client in", &mut client)?;
    let secret = keyed(&client);
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
    // Keys of the right length and a 16-byte sample: neither can fail.
    let hp = aead::quic::HeaderProtectionKey::new(&aead::quic::AES_128, &keys.hp)
        .map_err(|_| OpenError::Short)?;
    let mask = hp.new_mask(sample).map_err(|_| OpenError::Short)?;
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
    let tag = Tag::try_from(&tag[..]).map_err(|_| OpenError::Short)?;
    let key = UnboundKey::new(&aead::AES_128_GCM, &keys.key).map_err(|_| OpenError::Short)?;
    LessSafeKey::new(key)
        .open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&*head),
            tag,
            ct,
            0..,
        )
        .map_err(|_| OpenError::BadTag)?;
    Ok((pn, body..tag_at))
}

#[cfg(test)]
#[path = "crypto_tests.rs"]
mod tests;
