//! Collector URL syntax: `udp|tcp://HOST:PORT` or `file:///PATH`, with an
//! optional `?format=ipfix|nfv9&mode=biflow|uniflow&profile=xdprobe|ntop`.
//!
//! Only the syntax, so a typo gets a line number; the exporter crate owns the
//! meaning (`xdprobe_exporter::CollectorSpec::parse`, which also resolves
//! host names): `xdprobe check-config` and the daemon run it too. The
//! vocabulary below mirrors that parser's table; if they ever disagree the
//! exporter's parse, run by both, is the one that counts.

use std::net::{Ipv4Addr, Ipv6Addr};

const SCHEMES: &[&str] = &["udp", "tcp", "file"];
/// Query keys and their values, as the exporter accepts them.
const OPTIONS: &[(&str, &[&str])] = &[
    ("format", &["ipfix", "nfv9", "v9", "netflow9"]),
    ("mode", &["biflow", "uniflow"]),
    ("profile", &["xdprobe", "ntop"]),
];

/// `Ok` if `url` is well formed; otherwise the reason, for the operator.
pub fn check_collector(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("expected SCHEME://HOST:PORT, like \"udp://127.0.0.1:4739\"".to_owned());
    };
    if !SCHEMES.contains(&scheme) {
        return Err(format!(
            "scheme {scheme:?} is not one of: {}",
            SCHEMES.join(", ")
        ));
    }
    let (authority, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    check_query(query)?;
    if scheme == "file" {
        if !authority.starts_with('/') {
            return Err("a file collector needs an absolute path: file:///PATH".to_owned());
        }
        if query.is_some_and(|q| {
            q.split('&')
                .any(|kv| matches!(kv, "format=nfv9" | "format=v9" | "format=netflow9"))
        }) {
            return Err("file output is IPFIX only (RFC 5655)".to_owned());
        }
        return Ok(());
    }
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    let (host, port) = split_host_port(authority)?;
    check_host(host)?;
    match port.parse::<u16>() {
        Ok(p) if p != 0 && !port.starts_with('+') => {}
        _ => return Err(format!("port {port:?} is not a number from 1 to 65535")),
    }
    Ok(())
}

fn check_query(query: Option<&str>) -> Result<(), String> {
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|kv| !kv.is_empty())
    {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!("option {pair:?} is not KEY=VALUE"));
        };
        match OPTIONS.iter().find(|(key, _)| *key == k) {
            None => {
                let known: Vec<&str> = OPTIONS.iter().map(|(k, _)| *k).collect();
                return Err(format!(
                    "unknown option {k:?} (known: {})",
                    known.join(", ")
                ));
            }
            Some((_, values)) if !values.contains(&v) => {
                return Err(format!("{k} {v:?} is not one of: {}", values.join(", ")));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn split_host_port(authority: &str) -> Result<(&str, &str), String> {
    if let Some(inner) = authority.strip_prefix('[') {
        let Some((host, after)) = inner.split_once(']') else {
            return Err("unclosed '[' in IPv6 address".to_owned());
        };
        let Some(port) = after.strip_prefix(':') else {
            return Err("missing :PORT after the IPv6 address".to_owned());
        };
        if host.parse::<Ipv6Addr>().is_err() {
            return Err(format!("{host:?} is not an IPv6 address"));
        }
        return Ok((host, port));
    }
    match authority.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => {
            Err("write an IPv6 address in brackets, like \"udp://[2001:db8::1]:4739\"".to_owned())
        }
        Some((host, port)) => Ok((host, port)),
        None => Err("missing :PORT (IPFIX collectors usually listen on 4739)".to_owned()),
    }
}

fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("missing host".to_owned());
    }
    if host.parse::<Ipv4Addr>().is_ok() || host.parse::<Ipv6Addr>().is_ok() {
        return Ok(());
    }
    // Looks like a dotted quad but is not one: a typo, not a host name.
    if host.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!("{host:?} is not an IPv4 address"));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if host.len() <= 253 && host.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(format!("{host:?} is not a host name or IP address"))
    }
}

#[cfg(test)]
mod tests {
    use super::check_collector;

    #[test]
    fn accepts() {
        for ok in [
            "udp://127.0.0.1:4739",
            "tcp://198.51.100.7:4739?format=nfv9",
            "udp://[2001:db8::1]:2055?format=ipfix",
            "udp://collector.example.net:4739",
            "tcp://localhost:4739/",
            "udp://127.0.0.1:2055?format=nfv9&profile=ntop&mode=uniflow",
            "file:///var/lib/xdprobe/flows.ipfix",
        ] {
            assert_eq!(check_collector(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refuses() {
        let cases = [
            ("127.0.0.1:4739", "expected SCHEME://HOST:PORT"),
            ("sctp://127.0.0.1:4739", "scheme \"sctp\""),
            ("udp://127.0.0.1", "missing :PORT"),
            ("udp://127.0.0.1:0", "port \"0\""),
            ("udp://127.0.0.1:70000", "port \"70000\""),
            ("udp://:4739", "missing host"),
            ("udp://300.1.2.3:4739", "not an IPv4 address"),
            ("udp://2001:db8::1:4739", "in brackets"),
            ("udp://[2001:db8::1:4739", "unclosed"),
            ("udp://[zz::1]:4739", "not an IPv6 address"),
            ("udp://bad_host:4739", "not a host name"),
            (
                "udp://127.0.0.1:4739?format=v5",
                "format \"v5\" is not one of",
            ),
            ("udp://127.0.0.1:4739?fmt=nfv9", "unknown option \"fmt\""),
            (
                "udp://127.0.0.1:4739?mode=both",
                "mode \"both\" is not one of: biflow, uniflow",
            ),
            ("file://flows.ipfix", "absolute path"),
            ("file:///tmp/f?format=nfv9", "IPFIX only"),
            ("udp://127.0.0.1:4739?nfv9", "not KEY=VALUE"),
        ];
        for (url, want) in cases {
            let err = check_collector(url).expect_err(url);
            assert!(err.contains(want), "{url}: {err:?} lacks {want:?}");
        }
    }
}
