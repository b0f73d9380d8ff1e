//! Real handshakes in memory (rustls on both ends, certificates from
//! `fleet::certs`): who gets in, and which names a certificate speaks for.

use std::io::{Read, Write};
use std::path::PathBuf;

use rustls::{ClientConnection, ServerConnection};

use super::*;
use crate::fleet::certs;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xdprobe-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn agent_files(d: &Path, agent: &str) -> TlsFiles {
    TlsFiles {
        cert: d.join(format!("agent-{agent}.pem")),
        key: d.join(format!("agent-{agent}.key")),
        ca: Some(d.join("ca.pem")),
        pinned: Vec::new(),
    }
}

fn manager_files(d: &Path) -> TlsFiles {
    TlsFiles {
        cert: d.join("manager.pem"),
        key: d.join("manager.key"),
        ca: Some(d.join("ca.pem")),
        pinned: Vec::new(),
    }
}

/// Runs the handshake and one application message; the server's view of
/// the client certificate, or the first error either side saw.
fn handshake(
    server: &TlsFiles,
    client: &TlsFiles,
    name: &str,
) -> Result<CertificateDer<'static>, String> {
    let sc = server_config(server).map_err(|e| e.to_string())?;
    let cc = client_config(client).map_err(|e| e.to_string())?;
    let mut s = ServerConnection::new(sc).map_err(|e| e.to_string())?;
    let mut c = ClientConnection::new(cc, server_name(name).unwrap()).map_err(|e| e.to_string())?;
    c.writer().write_all(b"hello").unwrap();
    for _ in 0..20 {
        let mut buf = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut buf).unwrap();
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).unwrap();
            s.process_new_packets()
                .map_err(|e| format!("server: {e}"))?;
        }
        let mut buf = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut buf).unwrap();
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
            c.process_new_packets()
                .map_err(|e| format!("client: {e}"))?;
        }
        let mut got = [0u8; 5];
        if !s.is_handshaking() && s.reader().read_exact(&mut got).is_ok() {
            assert_eq!(&got, b"hello");
            let peer = s.peer_certificates().and_then(|p| p.first()).cloned();
            return peer.ok_or_else(|| "no client certificate".into());
        }
    }
    Err("no progress".into())
}

#[test]
fn a_ca_signed_agent_gets_in_and_speaks_only_for_its_own_name() {
    let d = dir("ca");
    certs::generate(
        &d,
        &["203.0.113.254".into(), "mgr.example".into()],
        &["web-1".into(), "web-2".into()],
    )
    .unwrap();
    let cert = handshake(
        &manager_files(&d),
        &agent_files(&d, "web-1"),
        "203.0.113.254",
    )
    .unwrap();
    assert!(cert_names_agent(&cert, "web-1"));
    assert!(!cert_names_agent(&cert, "web-2"));
    assert!(!cert_names_agent(&cert, "web-1.evil"));
    assert!(!cert_names_agent(&cert, ""));
    // The manager's certificate is checked for the name the agent dials.
    handshake(&manager_files(&d), &agent_files(&d, "web-1"), "mgr.example").unwrap();
    let e = handshake(&manager_files(&d), &agent_files(&d, "web-1"), "203.0.113.9").unwrap_err();
    assert!(e.contains("client"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn another_ca_or_an_unpinned_certificate_is_refused() {
    let (d, other) = (dir("mine"), dir("theirs"));
    certs::generate(&d, &["203.0.113.254".into()], &["a".into()]).unwrap();
    certs::generate(&other, &["203.0.113.254".into()], &["a".into()]).unwrap();
    // An agent certificate from another CA, presented to our manager.
    let mut forged = agent_files(&other, "a");
    forged.ca = Some(d.join("ca.pem"));
    let e = handshake(&manager_files(&d), &forged, "203.0.113.254").unwrap_err();
    assert!(e.starts_with("server"), "{e}");
    // Pinned: exactly the listed certificate, whatever signed it.
    let pinned = TlsFiles {
        ca: None,
        pinned: vec![d.join("agent-a.pem")],
        ..manager_files(&d)
    };
    handshake(&pinned, &agent_files(&d, "a"), "203.0.113.254").unwrap();
    let e = handshake(&pinned, &forged, "203.0.113.254").unwrap_err();
    assert!(e.starts_with("server"), "{e}");
    // The agent pins the manager's certificate instead of trusting a CA.
    let pin_mgr = TlsFiles {
        ca: None,
        pinned: vec![d.join("manager.pem")],
        ..agent_files(&d, "a")
    };
    handshake(&manager_files(&d), &pin_mgr, "any.name").unwrap();
    let pin_wrong = TlsFiles {
        ca: None,
        pinned: vec![other.join("manager.pem")],
        ..agent_files(&d, "a")
    };
    assert!(handshake(&manager_files(&d), &pin_wrong, "any.name").is_err());
    // Neither a CA nor pins: no config at all.
    let none = TlsFiles {
        ca: None,
        ..manager_files(&d)
    };
    assert!(matches!(server_config(&none), Err(TlsError::NoTrust)));
    for p in [d, other] {
        let _ = std::fs::remove_dir_all(p);
    }
}

#[test]
fn agent_names_must_be_dns_names_to_be_certified() {
    let d = dir("names");
    assert!(matches!(
        certs::generate(&d, &[], &["bad name".into()]),
        Err(certs::CertError::AgentName(_))
    ));
    let made = certs::generate(&d, &[], &["ok-1".into()]).unwrap();
    assert_eq!(made.len(), 4, "{made:?}");
    // The CA is reused: a second call adds an agent under the same CA.
    let made = certs::generate(&d, &[], &["ok-2".into()]).unwrap();
    assert_eq!(made.len(), 2, "{made:?}");
    let key_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(d.join("agent-ok-2.key"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(key_mode & 0o077, 0, "keys are private");
    let _ = std::fs::remove_dir_all(&d);
}
