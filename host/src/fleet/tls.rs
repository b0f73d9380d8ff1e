//! The manager ↔ agent channel's authentication: mutual TLS 1.3
//! (rustls, `ring` crypto). Each side proves itself with a certificate
//! and checks the other's against either a CA or a list of pinned
//! certificates (exact DER match, as SSH's `known_hosts`):
//!
//! - the agent checks the manager's certificate for the name or address
//!   it connects to (`--manager`, or `--manager-name`);
//! - the manager checks the agent's certificate, then binds the agent
//!   name of the HELLO to it: the certificate must be valid for that name
//!   as a DNS name (a subjectAltName, as `xdprobe manager gen-certs`
//!   writes). A stolen HELLO is worth nothing without the agent's key,
//!   and one agent's key cannot speak for another agent.
//!
//! Building configs is all that happens here; the bytes go through
//! `rustls::{ServerConnection, ClientConnection}` driven by the callers'
//! non-blocking loops (`read_tls` / `write_tls`).

use std::path::{Path, PathBuf};

/// The TLS stack, for the callers that drive connections.
pub use rustls;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {what}")]
    File { path: PathBuf, what: String },
    #[error("{path}: no certificate in it")]
    NoCert { path: PathBuf },
    #[error("neither a CA nor pinned certificates to check the peer against")]
    NoTrust,
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("TLS setup: {0}")]
    Verifier(String),
    #[error("{0:?} is not a valid server name")]
    ServerName(String),
}

/// Where a side's own identity and its trust come from (PEM files).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// This side's certificate (chain) and private key.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA certificates the peer's certificate must chain to.
    pub ca: Option<PathBuf>,
    /// Peer certificates accepted as they are (no CA needed).
    pub pinned: Vec<PathBuf>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let it = CertificateDer::pem_file_iter(path).map_err(|e| TlsError::File {
        path: path.to_owned(),
        what: e.to_string(),
    })?;
    let v: Vec<CertificateDer<'static>> =
        it.collect::<Result<_, _>>().map_err(|e| TlsError::File {
            path: path.to_owned(),
            what: e.to_string(),
        })?;
    if v.is_empty() {
        return Err(TlsError::NoCert {
            path: path.to_owned(),
        });
    }
    Ok(v)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        path: path.to_owned(),
        what: format!("private key: {e}"),
    })
}

fn roots(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut r = RootCertStore::empty();
    for c in certs(ca)? {
        r.add(c).map_err(|e| TlsError::File {
            path: ca.to_owned(),
            what: format!("CA certificate: {e}"),
        })?;
    }
    Ok(r)
}

fn pinned(files: &[PathBuf]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut v = Vec::new();
    for p in files {
        // The first certificate of each file: the peer's own.
        v.extend(certs(p)?.into_iter().take(1));
    }
    Ok(v)
}

/// The manager's side: agents must present a certificate (no anonymous
/// client), TLS 1.3 only, no session tickets (nothing to resume).
pub fn server_config(f: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let p = provider();
    let ca = match &f.ca {
        Some(ca) => Some(
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), p.clone())
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?,
        ),
        None => None,
    };
    let verifier: Arc<dyn ClientCertVerifier> = match ca {
        None if f.pinned.is_empty() => return Err(TlsError::NoTrust),
        Some(ca) if f.pinned.is_empty() => ca,
        ca => Arc::new(Pinned {
            certs: pinned(&f.pinned)?,
            ca,
            algs: p.signature_verification_algorithms,
        }),
    };
    let mut c = ServerConfig::builder_with_provider(p)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(&f.cert)?, key(&f.key)?)?;
    c.send_tls13_tickets = 0;
    Ok(Arc::new(c))
}

/// The agent's side: checks the manager (CA or pinned) and presents its
/// own certificate.
pub fn client_config(f: &TlsFiles) -> Result<Arc<ClientConfig>, TlsError> {
    let p = provider();
    let b = ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let b = if f.pinned.is_empty() {
        let Some(ca) = &f.ca else {
            return Err(TlsError::NoTrust);
        };
        b.with_root_certificates(roots(ca)?)
    } else {
        b.dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedServer {
                certs: pinned(&f.pinned)?,
                algs: p.signature_verification_algorithms,
            }))
    };
    let c = b.with_client_auth_cert(certs(&f.cert)?, key(&f.key)?)?;
    Ok(Arc::new(c))
}

/// The name the agent checks the manager's certificate for.
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(host.to_owned()).map_err(|_| TlsError::ServerName(host.to_owned()))
}

/// Whether `cert` (an agent's, already verified by the handshake) may
/// speak as `agent`: the certificate must be valid for it as a DNS name.
pub fn cert_names_agent(cert: &CertificateDer<'_>, agent: &str) -> bool {
    let Ok(name) = ServerName::try_from(agent) else {
        return false;
    };
    let Ok(ee) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    ee.verify_is_valid_for_subject_name(&name).is_ok()
}

/// Agents accepted by their exact certificate (and, if a CA is given
/// too, any certificate it signed).
#[derive(Debug)]
struct Pinned {
    certs: Vec<CertificateDer<'static>>,
    ca: Option<Arc<dyn ClientCertVerifier>>,
    algs: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if self.certs.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            return Ok(ClientCertVerified::assertion());
        }
        match &self.ca {
            Some(ca) => ca.verify_client_cert(end_entity, intermediates, now),
            None => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The manager accepted by its exact certificate (the agent's
/// `--manager-pinned`): no CA, no name check (the pin is the identity).
#[derive(Debug)]
struct PinnedServer {
    certs: Vec<CertificateDer<'static>>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.certs.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

#[cfg(test)]
mod tests;
