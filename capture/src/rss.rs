//! Does the NIC's RSS send both directions of a flow to the same queue?
//! Asked of the kernel the way `ethtool -x` does (`SIOCETHTOOL`,
//! `ETHTOOL_GRSSH`), for `handoff = "auto"`: with symmetric RSS the
//! hand-off between workers is not needed.
//!
//! Symmetric means either the symmetric-xor (or or-xor) input transform is
//! on, or the hash is Toeplitz with a key that repeats every 16 bits (the
//! repeated `6d:5a` key `deploy/setup-nic.sh` programs): swapping the
//! 32- or 128-bit addresses and the 16-bit ports then shifts every input
//! bit by a multiple of the key's period, which leaves the hash unchanged.
//! Not checked: which fields the NIC hashes (`ethtool -n IFACE rx-flow-hash`;
//! a source-only field set would not be symmetric) and flow-director rules.

use std::{ffi::c_void, fmt, io};

/// `ETHTOOL_GRSSH` (linux/ethtool.h): read the RSS hash configuration.
const ETHTOOL_GRSSH: u32 = 0x46;
/// `ETH_RSS_HASH_TOP`: Toeplitz.
const HASH_TOEPLITZ: u8 = 1 << 0;
/// `RXH_XFRM_SYM_XOR` and `RXH_XFRM_SYM_OR_XOR` (Linux 6.8 and 6.11).
const XFRM_SYMMETRIC: u8 = (1 << 0) | (1 << 1);

/// `struct ethtool_rxfh` without its flexible `rss_config` tail.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RxfhHead {
    cmd: u32,
    rss_context: u32,
    indir_size: u32,
    key_size: u32,
    hfunc: u8,
    input_xfrm: u8,
    rsvd8: [u8; 2],
    rsvd32: u32,
}

/// `struct ifreq` with the `ifr_data` member of its union (40 bytes).
#[repr(C)]
struct IfreqData {
    name: [u8; 16],
    data: *mut c_void,
    _pad: [u8; 16],
}

/// What the NIC told about its RSS hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rss {
    /// Both directions of a flow hash alike; the reason, for the log.
    Symmetric(&'static str),
    /// They may not; the reason.
    Asymmetric(&'static str),
}

impl fmt::Display for Rss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rss::Symmetric(why) => write!(f, "symmetric RSS ({why})"),
            Rss::Asymmetric(why) => write!(f, "RSS not known to be symmetric ({why})"),
        }
    }
}

/// Judges a hash configuration as `ETHTOOL_GRSSH` reports it.
pub fn judge(hfunc: u8, input_xfrm: u8, key: &[u8]) -> Rss {
    if input_xfrm & XFRM_SYMMETRIC != 0 {
        return Rss::Symmetric("symmetric-xor input transform");
    }
    if hfunc != HASH_TOEPLITZ {
        return Rss::Asymmetric("hash function is not Toeplitz");
    }
    if key.len() < 4 {
        return Rss::Asymmetric("no RSS key");
    }
    if key.iter().skip(2).zip(key).all(|(a, b)| a == b) {
        Rss::Symmetric("Toeplitz key repeats every 16 bits")
    } else {
        Rss::Asymmetric("Toeplitz key does not repeat every 16 bits")
    }
}

/// Reads `iface`'s RSS configuration. An error (no RSS at all, as on veth:
/// `EOPNOTSUPP`) means nothing is known.
pub fn query(iface: &str) -> io::Result<Rss> {
    let mut head = RxfhHead {
        cmd: ETHTOOL_GRSSH,
        ..RxfhHead::default()
    };
    // First call with zero sizes: the kernel only fills them in.
    ethtool(iface, (&raw mut head).cast(), size_of::<RxfhHead>())?;
    let indir = head.indir_size as usize * size_of::<u32>();
    let key_len = head.key_size as usize;
    let total = size_of::<RxfhHead>() + indir + key_len;
    // u32 words: the kernel's struct is 4-byte aligned.
    let mut buf = vec![0u32; total.div_ceil(4)];
    let sized = RxfhHead {
        cmd: ETHTOOL_GRSSH,
        indir_size: head.indir_size,
        key_size: head.key_size,
        ..RxfhHead::default()
    };
    // SAFETY: `buf` holds at least size_of::<RxfhHead>() bytes and is
    // 4-byte aligned, as RxfhHead (plain u32/u8 fields) needs.
    unsafe { buf.as_mut_ptr().cast::<RxfhHead>().write(sized) };
    ethtool(iface, buf.as_mut_ptr().cast(), total)?;
    // SAFETY: as above; the kernel wrote the header back in place.
    let got = unsafe { buf.as_ptr().cast::<RxfhHead>().read() };
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let start = size_of::<RxfhHead>() + indir;
    let key = bytes.get(start..start + key_len).unwrap_or(&[]);
    Ok(judge(got.hfunc, got.input_xfrm, key))
}

/// One `SIOCETHTOOL` ioctl on `iface` with the command block at `data`.
fn ethtool(iface: &str, data: *mut c_void, len: usize) -> io::Result<()> {
    let name = iface.as_bytes();
    if name.is_empty() || name.len() > 15 || len < size_of::<u32>() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut req = IfreqData {
        name: [0; 16],
        data,
        _pad: [0; 16],
    };
    if let Some(dst) = req.name.get_mut(..name.len()) {
        dst.copy_from_slice(name);
    }
    // SAFETY: plain socket(2) call; the descriptor is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `req` is a valid ifreq whose data pointer the caller made
    // point at `len` writable bytes holding an ethtool command block the
    // kernel writes no further than its sizes allow.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &raw mut req) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    if rc < 0 { Err(err) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_keys_and_transforms() {
        let sym: Vec<u8> = [0x6d, 0x5a].repeat(20);
        assert!(matches!(judge(HASH_TOEPLITZ, 0, &sym), Rss::Symmetric(_)));
        let mut random = sym.clone();
        random[7] ^= 1;
        assert!(matches!(
            judge(HASH_TOEPLITZ, 0, &random),
            Rss::Asymmetric(_)
        ));
        assert!(matches!(
            judge(HASH_TOEPLITZ, 1, &random),
            Rss::Symmetric(_)
        ));
        assert!(matches!(judge(1 << 1, 2, &random), Rss::Symmetric(_)));
        assert!(
            matches!(judge(1 << 1, 0, &sym), Rss::Asymmetric(_)),
            "XOR hash"
        );
        assert!(matches!(judge(HASH_TOEPLITZ, 0, &[]), Rss::Asymmetric(_)));
    }

    /// Toeplitz over `input` with `key` (the definition in Microsoft's RSS
    /// specification): for every set input bit, XOR in the 32 key bits
    /// starting at that bit.
    fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
        let bit = |i: usize| key.get(i / 8).map_or(0, |b| (b >> (7 - i % 8)) & 1);
        let mut h = 0u32;
        for i in 0..input.len() * 8 {
            if (input[i / 8] >> (7 - i % 8)) & 1 == 1 {
                h ^= (0..32).fold(0u32, |w, j| (w << 1) | u32::from(bit(i + j)));
            }
        }
        h
    }

    /// What `judge` calls symmetric is: the hash of (src, dst, sport,
    /// dport) equals that of (dst, src, dport, sport) for IPv4 and IPv6.
    #[test]
    fn a_key_judged_symmetric_hashes_both_directions_alike() {
        let sym: Vec<u8> = [0x6d, 0x5a].repeat(20);
        let random: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(97) ^ 0x3c).collect();
        assert!(matches!(
            judge(HASH_TOEPLITZ, 0, &random),
            Rss::Asymmetric(_)
        ));
        let tuple = |a: &[u8], b: &[u8], pa: u16, pb: u16| {
            [a, b, &pa.to_be_bytes(), &pb.to_be_bytes()].concat()
        };
        let v4 = ([192, 0, 2, 1], [198, 51, 100, 7]);
        let mut v6a = [0u8; 16];
        let mut v6b = [0u8; 16];
        v6a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        v6b[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        v6a[15] = 1;
        v6b[15] = 0x42;
        for (a, b) in [(&v4.0[..], &v4.1[..]), (&v6a[..], &v6b[..])] {
            let fwd = tuple(a, b, 40000, 443);
            let rev = tuple(b, a, 443, 40000);
            assert_eq!(toeplitz(&sym, &fwd), toeplitz(&sym, &rev));
            assert_ne!(toeplitz(&random, &fwd), toeplitz(&random, &rev));
        }
    }

    #[test]
    fn no_such_interface_is_an_error_not_a_guess() {
        assert!(query("xdprobe-none0").is_err());
        assert!(query("").is_err());
    }
}
