//! Collector URLs: `udp://host:port`, `tcp://host:port`, `file:///path`,
//! each with an optional query:
//!
//! | key       | values                       | default   |
//! |-----------|------------------------------|-----------|
//! | `format`  | `ipfix`, `nfv9`              | `ipfix`   |
//! | `mode`    | `biflow`, `uniflow`          | `biflow`  |
//! | `profile` | `xdprobe`, `ntop`            | `xdprobe` |
//! | `rate`    | UDP datagrams per second, `0`: unpaced | [`DEFAULT_UDP_RATE`] |
//!
//! e.g. `udp://127.0.0.1:2055?format=nfv9&profile=ntop`. NetFlow v9 is
//! refused for `file://` (RFC 5655 files hold IPFIX only). Host names are
//! resolved once, when the URL is parsed.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use crate::ExporterError;
use crate::template::{Format, Mode, Profile};

/// UDP messages per second a collector gets at most unless its URL says
/// `rate=`: a collector's socket buffer absorbs bursts only so long
/// (nfcapd with `-B 4194304`, docs/nfdump.md, received every one of a
/// million records' datagrams at this rate on a loaded 2-core machine; an
/// unpaced replay lost 11–41 %). 5000 datagrams are about 25,000 records
/// a second of the default biflow profile (five per 1472-byte datagram).
pub const DEFAULT_UDP_RATE: u32 = 5000;

/// Where the messages go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Udp(SocketAddr),
    Tcp(SocketAddr),
    /// RFC 5655 IPFIX file (a plain sequence of messages).
    File(PathBuf),
}

/// One collector: where, and how its records are encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectorSpec {
    pub target: Target,
    pub format: Format,
    pub mode: Mode,
    pub profile: Profile,
    /// UDP: datagrams per second at most (`rate=`; `None`: the default,
    /// `Some(0)`: unpaced).
    pub rate: Option<u32>,
    /// The URL as given, for logs.
    pub url: String,
}

fn bad(url: &str, why: impl Into<String>) -> ExporterError {
    ExporterError::BadCollector {
        url: url.to_string(),
        reason: why.into(),
    }
}

fn resolve(url: &str, hostport: &str) -> Result<SocketAddr, ExporterError> {
    if hostport.is_empty() {
        return Err(bad(url, "missing host:port"));
    }
    let mut addrs = hostport
        .to_socket_addrs()
        .map_err(|e| bad(url, format!("cannot resolve {hostport:?}: {e}")))?;
    addrs
        .next()
        .ok_or_else(|| bad(url, format!("{hostport:?} resolves to no address")))
}

impl CollectorSpec {
    /// Parse a collector URL (see the module documentation).
    pub fn parse(s: &str) -> Result<Self, ExporterError> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| bad(s, "expected scheme://"))?;
        let (location, query) = match rest.split_once('?') {
            Some((l, q)) => (l, Some(q)),
            None => (rest, None),
        };
        let mut spec = CollectorSpec {
            target: Target::File(PathBuf::new()),
            format: Format::Ipfix,
            mode: Mode::Biflow,
            profile: Profile::Xdprobe,
            rate: None,
            url: s.to_string(),
        };
        for kv in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|kv| !kv.is_empty())
        {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(s, format!("{kv:?}: expected key=value")))?;
            match (k, v) {
                ("format", "ipfix") => spec.format = Format::Ipfix,
                ("format", "nfv9" | "v9" | "netflow9") => spec.format = Format::NetflowV9,
                ("mode", "biflow") => spec.mode = Mode::Biflow,
                ("mode", "uniflow") => spec.mode = Mode::Uniflow,
                ("profile", "xdprobe") => spec.profile = Profile::Xdprobe,
                ("profile", "ntop") => spec.profile = Profile::Ntop,
                ("rate", v) => {
                    spec.rate = Some(v.parse::<u32>().map_err(|_| {
                        bad(
                            s,
                            format!("rate {v:?}: datagrams per second, 0 to 4294967295"),
                        )
                    })?);
                }
                ("format" | "mode" | "profile", _) => {
                    return Err(bad(s, format!("unknown value {v:?} for {k}")));
                }
                _ => return Err(bad(s, format!("unknown option {k:?}"))),
            }
        }
        if spec.rate.is_some() && scheme != "udp" {
            return Err(bad(s, "rate= paces UDP only"));
        }
        spec.target = match scheme {
            "udp" => Target::Udp(resolve(s, location)?),
            "tcp" => Target::Tcp(resolve(s, location)?),
            "file" => {
                if !location.starts_with('/') {
                    return Err(bad(s, "file URL needs an absolute path: file:///path"));
                }
                if spec.format == Format::NetflowV9 {
                    return Err(bad(s, "file output is IPFIX (RFC 5655) only"));
                }
                Target::File(PathBuf::from(location))
            }
            other => return Err(bad(s, format!("unknown scheme {other:?} (udp, tcp, file)"))),
        };
        Ok(spec)
    }
}

impl fmt::Display for CollectorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

impl std::str::FromStr for CollectorSpec {
    type Err = ExporterError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CollectorSpec::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme_and_option() {
        let c = CollectorSpec::parse("udp://127.0.0.1:4739").unwrap();
        assert_eq!(c.target, Target::Udp("127.0.0.1:4739".parse().unwrap()));
        assert_eq!(
            (c.format, c.mode, c.profile),
            (Format::Ipfix, Mode::Biflow, Profile::Xdprobe)
        );
        let c = CollectorSpec::parse("tcp://[::1]:4739?mode=uniflow&profile=ntop").unwrap();
        assert_eq!(c.target, Target::Tcp("[::1]:4739".parse().unwrap()));
        assert_eq!((c.mode, c.profile), (Mode::Uniflow, Profile::Ntop));
        let c = CollectorSpec::parse("udp://localhost:2055?format=nfv9").unwrap();
        assert_eq!(c.format, Format::NetflowV9);
        let c = CollectorSpec::parse("udp://127.0.0.1:2055?rate=0").unwrap();
        assert_eq!(c.rate, Some(0));
        let c = CollectorSpec::parse("file:///tmp/x.ipfix").unwrap();
        assert_eq!(c.target, Target::File("/tmp/x.ipfix".into()));
    }

    #[test]
    fn rejects_what_it_cannot_do() {
        for s in [
            "udp:/127.0.0.1:1",
            "sctp://127.0.0.1:1",
            "udp://127.0.0.1",
            "udp://:1",
            "file://relative",
            "file:///x?format=nfv9",
            "udp://127.0.0.1:1?format=v5",
            "udp://127.0.0.1:1?colour=red",
            "udp://127.0.0.1:1?mode",
            "udp://127.0.0.1:1?rate=-1",
            "tcp://127.0.0.1:1?rate=5",
        ] {
            assert!(CollectorSpec::parse(s).is_err(), "{s}");
        }
    }
}
