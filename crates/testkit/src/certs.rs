//! Certificates made at test time: a private CA, server certificates and client certificates
//! (mutual TLS) signed by it, written as PEM files into a temporary directory, for the TLS
//! tests (the node's listeners and its clients, and the PostgreSQL, MySQL and etcd servers the
//! tests start).
//!
//! Every server certificate names `localhost` and `127.0.0.1`, so a client may dial either.
//! Nothing here is fit for production: the keys live in a temporary directory, removed on drop.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

/// A certificate signed by a [`TestCerts`] CA, and its key.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// Its DER bytes: what a peer sees in the handshake.
    pub cert_der: Vec<u8>,
    /// The private key (PKCS#8 PEM).
    pub key_pem: String,
}

impl Issued {
    /// Writes the certificate to `cert` and the key to `key` (mode 0600), each replaced at
    /// once (written aside, then renamed), so a reader never sees half a file.
    ///
    /// # Panics
    /// If the files cannot be written.
    pub fn write_to(&self, cert: &Path, key: &Path) {
        replace(cert, &self.cert_pem);
        replace(key, &self.key_pem);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600))
                .expect("chmod 600 of a key");
        }
    }
}

/// Writes `text` to `path` through a file beside it renamed over it.
fn replace(path: &Path, text: &str) {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".new");
    std::fs::write(&aside, text).expect("writing a certificate file");
    std::fs::rename(&aside, path).expect("renaming a certificate file into place");
}

/// A CA and one server certificate signed by it, as PEM strings and files; it signs more
/// ([`TestCerts::server`], [`TestCerts::client`]).
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
    /// The CA's parameters and key, to sign more.
    issuer: Issuer<'static, KeyPair>,
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
        let server = sign(
            &issuer,
            names,
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
        );

        let certs = TestCerts {
            ca_pem: ca_cert.pem(),
            cert_pem: server.cert_pem,
            key_pem: server.key_pem,
            dir: tempfile::tempdir().expect("a temporary directory for certificates"),
            issuer,
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

impl TestCerts {
    /// Another server certificate of this CA, for `localhost` and `127.0.0.1`, with the common
    /// name `common_name` (how a test tells two certificates apart).
    ///
    /// # Panics
    /// If the certificate cannot be made.
    pub fn server(&self, common_name: &str) -> Issued {
        sign(
            &self.issuer,
            &["localhost"],
            common_name,
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate of this CA (mutual TLS) with the common name `name`.
    ///
    /// # Panics
    /// If the certificate cannot be made.
    pub fn client(&self, name: &str) -> Issued {
        sign(&self.issuer, &[], name, ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// [`TestCerts::client`], written as `client-NAME.pem` and `client-NAME.key` in
    /// [`TestCerts::dir`]: the two paths.
    ///
    /// # Panics
    /// If the certificate cannot be made or written.
    pub fn client_files(&self, name: &str) -> (PathBuf, PathBuf) {
        let cert = self.dir.path().join(format!("client-{name}.pem"));
        let key = self.dir.path().join(format!("client-{name}.key"));
        self.client(name).write_to(&cert, &key);
        (cert, key)
    }
}

/// A certificate signed by `issuer` for the DNS names `names` (and `127.0.0.1` when there are
/// any), with `common_name` and the extended key usage `usage`.
fn sign(
    issuer: &Issuer<'static, KeyPair>,
    names: &[&str],
    common_name: &str,
    usage: ExtendedKeyUsagePurpose,
) -> Issued {
    let key = KeyPair::generate().expect("a key");
    let dns: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(dns).expect("certificate params");
    if !names.is_empty() {
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![usage];
    let cert = params
        .signed_by(&key, issuer)
        .expect("a signed certificate");
    Issued {
        cert_pem: cert.pem(),
        cert_der: cert.der().to_vec(),
        key_pem: key.serialize_pem(),
    }
}

impl Default for TestCerts {
    fn default() -> Self {
        Self::new()
    }
}
