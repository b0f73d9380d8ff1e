//! `xdprobe manager gen-certs`: a private CA and the certificates the
//! fleet channel needs (`fleet::tls`), written as PEM files:
//!
//! ```text
//! ca.pem  ca.key                 the CA (keep ca.key off the hosts)
//! manager.pem  manager.key       SANs: the names/addresses agents dial
//! agent-NAME.pem  agent-NAME.key SAN: DNS NAME, the agent's --agent-name
//! ```
//!
//! Keys are ECDSA P-256, files created new (never through a symlink) with
//! mode 0600 for keys and 0644 for certificates. An existing CA in the
//! directory is reused, so agents can be added later.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use xdprobe_exporter::safe_file::{self, Existing};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating {what}: {source}")]
    Rcgen {
        what: String,
        #[source]
        source: rcgen::Error,
    },
    #[error(transparent)]
    File(#[from] safe_file::SafeFileError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{0:?} is not usable as an agent name in a certificate (a DNS name: letters, digits, '-', '.')"
    )]
    AgentName(String),
}

const CA_NAME: &str = "xdprobe fleet CA";

fn rc(what: &str) -> impl FnOnce(rcgen::Error) -> CertError + '_ {
    move |source| CertError::Rcgen {
        what: what.to_owned(),
        source,
    }
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), CertError> {
    let mut f = safe_file::create(path, mode, Existing::Truncate)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|source| CertError::Io {
            path: path.to_owned(),
            source,
        })
}

fn params(cn: &str, sans: Vec<String>, what: &str) -> Result<CertificateParams, CertError> {
    let mut p = CertificateParams::new(sans).map_err(rc(what))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    // Ten years: a private CA's certificates are replaced by hand.
    let now = rcgen::date_time_ymd(2025, 1, 1);
    p.not_before = now;
    p.not_after = rcgen::date_time_ymd(2035, 1, 1);
    Ok(p)
}

/// Whether `name` can be an agent's certificate name (a DNS name).
pub fn valid_agent_name(name: &str) -> bool {
    rustls::pki_types::DnsName::try_from(name).is_ok() && !name.ends_with('.')
}

fn ca_params() -> Result<CertificateParams, CertError> {
    let mut p = params(CA_NAME, Vec::new(), "the CA")?;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(p)
}

/// The CA in `dir`: read if both files exist, else made.
fn ca(dir: &Path, made: &mut Vec<PathBuf>) -> Result<Issuer<'static, KeyPair>, CertError> {
    let (cert, key) = (dir.join("ca.pem"), dir.join("ca.key"));
    if cert.exists() && key.exists() {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| CertError::Io {
                path: p.to_owned(),
                source,
            })
        };
        let k = KeyPair::from_pem(&read(&key)?).map_err(rc("the CA key"))?;
        // What a certificate names of its issuer (subject, key usages)
        // is rebuilt as made below; the signature is the CA key's.
        return Ok(Issuer::new(ca_params()?, k));
    }
    let p = ca_params()?;
    let k = KeyPair::generate().map_err(rc("the CA key"))?;
    let c = p.self_signed(&k).map_err(rc("the CA"))?;
    write(&key, &k.serialize_pem(), 0o600)?;
    write(&cert, &c.pem(), 0o644)?;
    made.extend([cert, key]);
    Ok(Issuer::new(p, k))
}

fn leaf(
    dir: &Path,
    stem: &str,
    cn: &str,
    sans: Vec<String>,
    eku: ExtendedKeyUsagePurpose,
    ca: &Issuer<'static, KeyPair>,
    made: &mut Vec<PathBuf>,
) -> Result<(), CertError> {
    let mut p = params(cn, sans, stem)?;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![eku];
    let k = KeyPair::generate().map_err(rc(stem))?;
    let c = p.signed_by(&k, ca).map_err(rc(stem))?;
    let (cert, key) = (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}.key")),
    );
    write(&key, &k.serialize_pem(), 0o600)?;
    write(&cert, &c.pem(), 0o644)?;
    made.extend([cert, key]);
    Ok(())
}

/// Writes the CA (unless there), the manager's certificate for
/// `manager_names` (host names or IP addresses the agents dial; none: no
/// manager certificate) and one certificate per agent. Returns the files
/// written.
pub fn generate(
    dir: &Path,
    manager_names: &[String],
    agents: &[String],
) -> Result<Vec<PathBuf>, CertError> {
    if let Some(bad) = agents.iter().find(|a| !valid_agent_name(a)) {
        return Err(CertError::AgentName(bad.clone()));
    }
    std::fs::create_dir_all(dir).map_err(|source| CertError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut made = Vec::new();
    let ca = ca(dir, &mut made)?;
    if !manager_names.is_empty() {
        leaf(
            dir,
            "manager",
            "xdprobe manager",
            manager_names.to_vec(),
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca,
            &mut made,
        )?;
    }
    for a in agents {
        leaf(
            dir,
            &format!("agent-{a}"),
            a,
            vec![a.clone()],
            ExtendedKeyUsagePurpose::ClientAuth,
            &ca,
            &mut made,
        )?;
    }
    Ok(made)
}
