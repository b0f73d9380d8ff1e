//! IP prefixes (`192.0.2.0/24`, `2001:db8::/32`) for the XDP filter.
//!
//! Our own small type rather than an `ipnet` dependency: the filter needs
//! parsing, a host-bits check and a `contains`, nothing more.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// A network prefix with its host bits zero (checked at parse time, so
/// `192.0.2.1/24` is refused rather than silently widened).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why a prefix string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("prefix {0:?} has no length (write ADDRESS/LENGTH, like \"192.0.2.0/24\")")]
    NoLength(String),
    #[error("prefix {0:?}: {1:?} is not an IP address")]
    BadAddress(String, String),
    #[error("prefix {0:?}: length {1:?} is not a number from 0 to {2}")]
    BadLength(String, String, u8),
    #[error("prefix {text:?} has host bits set (did you mean \"{suggestion}\"?)")]
    HostBits { text: String, suggestion: String },
}

impl Prefix {
    /// Builds a prefix, refusing lengths past the address width and host bits.
    pub fn new(addr: IpAddr, len: u8) -> Result<Prefix, PrefixError> {
        let max = max_len(addr);
        if len > max {
            return Err(PrefixError::BadLength(
                format!("{addr}/{len}"),
                len.to_string(),
                max,
            ));
        }
        let p = Prefix { addr, len };
        let net = p.network();
        if net != addr {
            return Err(PrefixError::HostBits {
                text: format!("{addr}/{len}"),
                suggestion: format!("{net}/{len}"),
            });
        }
        Ok(p)
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// True for `0.0.0.0/0` and `::/0`.
    pub fn is_default_route(&self) -> bool {
        self.len == 0
    }

    /// Whether `ip` falls inside this prefix (never across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => (u32::from(a) & mask32(self.len)) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => (u128::from(a) & mask128(self.len)) == u128::from(n),
            _ => false,
        }
    }

    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4((u32::from(a) & mask32(self.len)).into()),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a) & mask128(self.len)).into()),
        }
    }
}

fn max_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

fn mask32(len: u8) -> u32 {
    // checked_shl: a shift by 32 (len 0) would overflow.
    u32::MAX
        .checked_shl(32 - u32::from(len.min(32)))
        .unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(len.min(128)))
        .unwrap_or(0)
}

impl FromStr for Prefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Prefix, PrefixError> {
        let Some((addr_text, len_text)) = s.split_once('/') else {
            return Err(PrefixError::NoLength(s.to_owned()));
        };
        let addr: IpAddr = addr_text
            .parse()
            .map_err(|_| PrefixError::BadAddress(s.to_owned(), addr_text.to_owned()))?;
        let max = max_len(addr);
        let len = len_text
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= max && !len_text.starts_with('+'))
            .ok_or_else(|| PrefixError::BadLength(s.to_owned(), len_text.to_owned(), max))?;
        Prefix::new(addr, len).map_err(|e| match e {
            PrefixError::HostBits { suggestion, .. } => PrefixError::HostBits {
                text: s.to_owned(),
                suggestion,
            },
            other => other,
        })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Prefix, PrefixError> {
        s.parse()
    }

    #[test]
    fn parses_both_families() {
        let v4 = p("192.0.2.0/24").unwrap();
        assert_eq!(v4.prefix_len(), 24);
        assert!(v4.contains("192.0.2.77".parse().unwrap()));
        assert!(!v4.contains("192.0.3.1".parse().unwrap()));
        assert!(!v4.contains("2001:db8::1".parse().unwrap()));
        let v6 = p("2001:db8::/32").unwrap();
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!v6.contains("2001:db9::1".parse().unwrap()));
        assert_eq!(v6.to_string(), "2001:db8::/32");
    }

    #[test]
    fn edge_lengths() {
        let all = p("0.0.0.0/0").unwrap();
        assert!(all.is_default_route());
        assert!(all.contains("203.0.113.9".parse().unwrap()));
        let host = p("198.51.100.7/32").unwrap();
        assert!(host.contains("198.51.100.7".parse().unwrap()));
        assert!(!host.contains("198.51.100.6".parse().unwrap()));
        assert!(p("::/0").unwrap().contains("::1".parse().unwrap()));
        assert!(p("2001:db8::1/128").is_ok());
    }

    #[test]
    fn refusals() {
        assert_eq!(
            p("192.0.2.0"),
            Err(PrefixError::NoLength("192.0.2.0".into()))
        );
        assert!(matches!(p("192.0.2/24"), Err(PrefixError::BadAddress(..))));
        assert!(matches!(
            p("192.0.2.0/33"),
            Err(PrefixError::BadLength(_, _, 32))
        ));
        assert!(matches!(
            p("2001:db8::/129"),
            Err(PrefixError::BadLength(_, _, 128))
        ));
        assert!(matches!(p("192.0.2.0/+8"), Err(PrefixError::BadLength(..))));
        assert!(matches!(p("192.0.2.0/"), Err(PrefixError::BadLength(..))));
        let e = p("192.0.2.1/24").unwrap_err();
        assert_eq!(
            e.to_string(),
            "prefix \"192.0.2.1/24\" has host bits set (did you mean \"192.0.2.0/24\"?)"
        );
    }
}
