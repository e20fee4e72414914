//! TLS from an authority to its server (`tls` and `ca_file` in the PostgreSQL authority's
//! table): the mode, and the rustls client configuration it makes.
//!
//! Invariants:
//! - `verify-full` checks the server's certificate chain against the CA of `ca_file` (and only
//!   that CA) and the host name (or address) dialled against the certificate's names; a server
//!   that fails either is refused, the error naming why;
//! - `require` encrypts without checking who the server is (libpq's `sslmode=require`): it
//!   protects against a passive eavesdropper only, and says so in the docs; `ca_file` with it
//!   is refused rather than silently ignored;
//! - the crypto provider is rustls' `ring`, chosen explicitly (as the node's listeners do);
//! - the CA file is read when the authority connects, and an error names the file.
//!
//! What it does not do: client certificates, the system's trust store.

use serde::Deserialize;
use std::fmt;

/// How an authority secures its connections (`tls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    /// Plain TCP (the default), or whatever the URL's own options ask for.
    #[default]
    Off,
    /// Encrypted; the server's certificate is not checked.
    Require,
    /// Encrypted; the certificate must chain to `ca_file` and name the host dialled.
    VerifyFull,
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsMode::Off => "off",
            TlsMode::Require => "require",
            TlsMode::VerifyFull => "verify-full",
        })
    }
}

#[cfg(feature = "postgres")]
pub(crate) use client::client_config;

/// Checks `mode` against `ca_file` and, for `verify-full`, reads the CA file: its PEM text.
/// The message of an error names the key or the file at fault.
#[cfg(any(
    feature = "postgres",
    feature = "mysql",
    feature = "etcd",
    feature = "redis"
))]
pub(crate) fn ca_pem(
    mode: TlsMode,
    ca_file: Option<&std::path::Path>,
) -> Result<Option<Vec<u8>>, String> {
    match (mode, ca_file) {
        (TlsMode::Off | TlsMode::Require, None) => Ok(None),
        (TlsMode::Off, Some(_)) => {
            Err("ca_file is set but tls is off: set tls = \"verify-full\"".into())
        }
        (TlsMode::Require, Some(_)) => Err(
            "ca_file is set but tls = \"require\" does not check the server's certificate: set tls = \"verify-full\"".into(),
        ),
        (TlsMode::VerifyFull, None) => Err(
            "tls = \"verify-full\" needs ca_file: the PEM file of the CA that signed the server's certificate".into(),
        ),
        (TlsMode::VerifyFull, Some(ca)) => {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("ca_file {}: cannot read: {e}", ca.display()))?;
            if !pem
                .windows(27)
                .any(|w| w == b"-----BEGIN CERTIFICATE-----")
            {
                return Err(format!("ca_file {}: no PEM certificate in it", ca.display()));
            }
            Ok(Some(pem))
        }
    }
}

#[cfg(feature = "postgres")]
mod client {
    use super::TlsMode;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};
    use std::path::Path;
    use std::sync::Arc;

    /// The rustls client configuration of `mode` (`None` for [`TlsMode::Off`]); the message of
    /// an error names the key or the file at fault.
    pub(crate) fn client_config(
        mode: TlsMode,
        ca_file: Option<&Path>,
    ) -> Result<Option<rustls::ClientConfig>, String> {
        let pem = super::ca_pem(mode, ca_file)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        match (mode, pem, ca_file) {
            (TlsMode::Off, _, _) => Ok(None),
            (TlsMode::Require, _, _) => Ok(Some(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(NoVerifier(provider)))
                    .with_no_client_auth(),
            )),
            (TlsMode::VerifyFull, Some(pem), Some(ca)) => {
                let roots = roots(ca, &pem)?;
                Ok(Some(
                    builder.with_root_certificates(roots).with_no_client_auth(),
                ))
            }
            (TlsMode::VerifyFull, _, _) => Err("tls = \"verify-full\" needs ca_file".into()),
        }
    }

    /// The certificates of `pem`, read from `ca`, as trust anchors.
    fn roots(ca: &Path, pem: &[u8]) -> Result<rustls::RootCertStore, String> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("ca_file {}: {e}", ca.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "ca_file {}: no PEM certificate in it",
                ca.display()
            ));
        }
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("ca_file {}: {e}", ca.display()))?;
        }
        Ok(roots)
    }

    /// `tls = "require"`: any certificate, but the handshake's signatures are still checked
    /// (so the session key is the holder's of the certificate presented).
    #[derive(Debug)]
    struct NoVerifier(Arc<CryptoProvider>);

    impl ServerCertVerifier for NoVerifier {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
}
