//! The rig's fleet TLS files, made with `xdprobe manager gen-certs` as an
//! operator would: a CA, the manager's certificate for its management
//! addresses, and agents a, b and mallory (an attacker with a certificate
//! of its own).

use std::path::Path;

use super::{M4, M6, Rig};

pub fn make(pki: &Path) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xdprobe"))
        .args(["manager", "gen-certs", "--dir", pki.to_str().unwrap()])
        .args(["--manager", M4, "--manager", M6])
        .args(["--agent", "a", "--agent", "b", "--agent", "mallory"])
        .output()
        .expect("gen-certs");
    assert!(out.status.success(), "gen-certs: {out:?}");
}

impl Rig {
    /// The TLS keys of `[manager]`.
    pub fn manager_tls(&self) -> String {
        let p = |f: &str| self.path(&format!("pki/{f}")).display().to_string();
        format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"\ntls_ca = \"{}\"\n",
            p("manager.pem"),
            p("manager.key"),
            p("ca.pem")
        )
    }

    /// An agent's TLS arguments, with the certificate of `cert_of`.
    pub fn agent_tls(&self, cert_of: &str) -> Vec<String> {
        let p = |f: &str| self.path(&format!("pki/{f}")).display().to_string();
        vec![
            "--manager-cert".into(),
            p(&format!("agent-{cert_of}.pem")),
            "--manager-key".into(),
            p(&format!("agent-{cert_of}.key")),
            "--manager-ca".into(),
            p("ca.pem"),
        ]
    }
}
