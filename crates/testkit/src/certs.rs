//! Certificates made at test time: a private CA and server certificates signed by it, written
//! as PEM files into a temporary directory, for the TLS tests (the node's listeners, and the
//! PostgreSQL, MySQL and etcd servers the tests start).
//!
//! Every certificate names `localhost` and `127.0.0.1`, so a client may dial either. Nothing
//! here is fit for production: the keys live in a temporary directory, removed on drop.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

/// A CA and one server certificate signed by it, as PEM strings and files.
#[derive(Debug)]
pub struct TestCerts {
    /// The CA certificate (PEM): what clients trust.
    pub ca_pem: String,
    /// The server certificate (PEM), signed by the CA.
    pub cert_pem: String,
    /// The server's private key (PKCS#8 PEM).
    pub key_pem: String,
    /// `ca.pem`, `server.pem` and `server.key` in this directory (mode 0600 for the key).
    pub dir: tempfile::TempDir,
}

impl TestCerts {
    /// A fresh CA and a server certificate for `localhost` and `127.0.0.1`.
    ///
    /// # Panics
    /// If the certificates cannot be made or written: a test environment failure.
    pub fn new() -> Self {
        Self::for_names(&["localhost"])
    }

    /// As [`TestCerts::new`], naming `names` (DNS names) and `127.0.0.1`.
    ///
    /// # Panics
    /// If the certificates cannot be made or written.
    pub fn for_names(names: &[&str]) -> Self {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "idmint test CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate().expect("server key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("server params");
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let cert = params.signed_by(&key, &issuer).expect("server certificate");

        let certs = TestCerts {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            dir: tempfile::tempdir().expect("a temporary directory for certificates"),
        };
        std::fs::write(certs.ca_file(), &certs.ca_pem).expect("writing ca.pem");
        std::fs::write(certs.cert_file(), &certs.cert_pem).expect("writing server.pem");
        std::fs::write(certs.key_file(), &certs.key_pem).expect("writing server.key");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // PostgreSQL refuses a key file others can read.
            std::fs::set_permissions(certs.key_file(), std::fs::Permissions::from_mode(0o600))
                .expect("chmod 600 server.key");
        }
        certs
    }

    /// `ca.pem`.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// `server.pem`.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }

    /// `server.key`.
    pub fn key_file(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }
}

impl Default for TestCerts {
    fn default() -> Self {
        Self::new()
    }
}
