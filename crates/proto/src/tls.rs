//! How an idmint client trusts a node and shows who it is (cargo feature `tls`): [`ClientTls`],
//! shared by every client path (the CLI over HTTPS, the upstream authority and idmint-client
//! over gRPC through [`crate::nodes`], idmint-store's etcd authority), so they all follow one
//! rule.
//!
//! Invariants:
//! - with a CA (a file or PEM bytes), that CA and only that CA is trusted; without one, the
//!   public roots of the Mozilla bundle compiled in (`webpki-roots`), the same on every system;
//! - the server's certificate must chain to a trusted root and name the host dialled (rustls'
//!   WebPKI verifier, one instance shared by the HTTPS and gRPC configurations);
//! - a client certificate (mutual TLS) is a chain and the private key that matches it, checked
//!   when the [`ClientTls`] is built;
//! - every file is read once, when the [`ClientTls`] is built, and every error names the file
//!   (or which PEM input) and what is wrong with it;
//! - the crypto provider is rustls' `ring` ([`provider`]), chosen explicitly.
//!
//! What it does not do: read the operating system's trust store, revocation (CRL, OCSP), or
//! `SSLKEYLOGFILE`.

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

/// The crypto provider of every TLS connection idmint makes or accepts: rustls' `ring`.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Where a PEM input came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A file.
    File(PathBuf),
    /// Bytes given in code: which input (`CA certificate`, `client certificate`, `client key`).
    Bytes(&'static str),
}

impl fmt::Display for PemSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PemSource::File(path) => write!(f, "{}", path.display()),
            PemSource::Bytes(what) => write!(f, "the {what} PEM"),
        }
    }
}

/// Why a [`ClientTls`] could not be built; each variant names its input.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientTlsError {
    /// A file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The input holds no PEM `CERTIFICATE` block, or one that does not parse.
    #[error("{from}: no PEM certificate in it ({why})")]
    NoCertificate {
        /// The input.
        from: PemSource,
        /// What the PEM reader said.
        why: String,
    },
    /// A CA certificate that cannot be a trust anchor.
    #[error("{from}: not a usable CA certificate ({why})")]
    BadCa {
        /// The input.
        from: PemSource,
        /// What rustls said.
        why: String,
    },
    /// The input holds no PEM private key (PKCS#8, PKCS#1 or SEC1).
    #[error("{from}: no PEM private key in it ({why})")]
    NoKey {
        /// The input.
        from: PemSource,
        /// What the PEM reader said.
        why: String,
    },
    /// rustls refused the client certificate and key (a key that does not match the
    /// certificate, an unsupported key type).
    #[error("{cert} and {key}: {why}")]
    Refused {
        /// The certificate input.
        cert: PemSource,
        /// The key input.
        key: PemSource,
        /// What rustls said.
        why: String,
    },
}

/// One PEM input: where from, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pem {
    from: PemSource,
    bytes: Vec<u8>,
}

impl Pem {
    fn file(path: &Path) -> Result<Pem, ClientTlsError> {
        let bytes = std::fs::read(path).map_err(|source| ClientTlsError::Read {
            path: path.to_owned(),
            source,
        })?;
        Ok(Pem {
            from: PemSource::File(path.to_owned()),
            bytes,
        })
    }

    fn bytes(what: &'static str, bytes: &[u8]) -> Pem {
        Pem {
            from: PemSource::Bytes(what),
            bytes: bytes.to_vec(),
        }
    }

    /// Its certificates, at least one.
    fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, ClientTlsError> {
        let certs = CertificateDer::pem_slice_iter(&self.bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientTlsError::NoCertificate {
                from: self.from.clone(),
                why: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(ClientTlsError::NoCertificate {
                from: self.from.clone(),
                why: "no `BEGIN CERTIFICATE` block".to_owned(),
            });
        }
        Ok(certs)
    }

    fn private_key(&self) -> Result<PrivateKeyDer<'static>, ClientTlsError> {
        PrivateKeyDer::from_pem_slice(&self.bytes).map_err(|e| ClientTlsError::NoKey {
            from: self.from.clone(),
            why: e.to_string(),
        })
    }
}

/// A client certificate and its key, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    cert: Pem,
    key: Pem,
}

/// How a client trusts nodes and, for mutual TLS, which certificate it presents; cheap to
/// clone. Its `Debug` output names its inputs, never a key.
#[derive(Clone)]
pub struct ClientTls {
    /// The CA given; `None`: the public roots.
    ca: Option<Pem>,
    identity: Option<Identity>,
    /// The verifier of `config`, for tonic's channels.
    #[cfg(feature = "nodes")]
    verifier: Arc<WebPkiServerVerifier>,
    /// No ALPN: [`ClientTls::rustls_config`] sets each caller's.
    config: Arc<rustls::ClientConfig>,
}

impl PartialEq for ClientTls {
    /// The same inputs (the built configurations follow from them).
    fn eq(&self, other: &Self) -> bool {
        self.ca == other.ca && self.identity == other.identity
    }
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ca = self.ca.as_ref().map(|ca| ca.from.to_string());
        let cert = self.identity.as_ref().map(|i| i.cert.from.to_string());
        f.debug_struct("ClientTls")
            .field("ca", &ca.as_deref().unwrap_or("public roots"))
            .field("client_cert", &cert)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trusts the public roots (the Mozilla bundle compiled in); no client certificate.
    pub fn public_roots() -> ClientTls {
        // Without inputs nothing can fail: the bundle is never empty and ring supports the
        // default protocol versions.
        match Self::from_inputs(None, None) {
            Ok(tls) => tls,
            Err(e) => unreachable!("the public roots make a configuration: {e}"),
        }
    }

    /// Trusts only the CA certificates of the PEM file `ca` (all of them) when given, else the
    /// public roots; presents the certificate chain of the PEM file `identity.0` (leaf first)
    /// with the private key of `identity.1` when given.
    pub fn from_files(
        ca: Option<&Path>,
        identity: Option<(&Path, &Path)>,
    ) -> Result<ClientTls, ClientTlsError> {
        let ca = ca.map(Pem::file).transpose()?;
        let identity = match identity {
            Some((cert, key)) => Some(Identity {
                cert: Pem::file(cert)?,
                key: Pem::file(key)?,
            }),
            None => None,
        };
        Self::from_inputs(ca, identity)
    }

    /// [`ClientTls::from_files`] with the PEM text itself.
    pub fn from_pem(
        ca: Option<&[u8]>,
        identity: Option<(&[u8], &[u8])>,
    ) -> Result<ClientTls, ClientTlsError> {
        let ca = ca.map(|pem| Pem::bytes("CA certificate", pem));
        let identity = identity.map(|(cert, key)| Identity {
            cert: Pem::bytes("client certificate", cert),
            key: Pem::bytes("client key", key),
        });
        Self::from_inputs(ca, identity)
    }

    fn from_inputs(ca: Option<Pem>, identity: Option<Identity>) -> Result<Self, ClientTlsError> {
        let roots = match &ca {
            Some(pem) => {
                let mut roots = RootCertStore::empty();
                for cert in pem.certificates()? {
                    roots.add(cert).map_err(|e| ClientTlsError::BadCa {
                        from: pem.from.clone(),
                        why: e.to_string(),
                    })?;
                }
                roots
            }
            None => {
                let mut roots = RootCertStore::empty();
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                roots
            }
        };
        Self::build(ca, roots, identity)
    }

    fn build(
        ca: Option<Pem>,
        roots: RootCertStore,
        identity: Option<Identity>,
    ) -> Result<Self, ClientTlsError> {
        let provider = provider();
        let ca_from = || {
            ca.as_ref()
                .map_or(PemSource::Bytes("public roots"), |pem| pem.from.clone())
        };
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| ClientTlsError::BadCa {
                    from: ca_from(),
                    why: e.to_string(),
                })?;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientTlsError::BadCa {
                from: ca_from(),
                why: e.to_string(),
            })?
            .with_webpki_verifier(Arc::clone(&verifier));
        let config = match &identity {
            None => builder.with_no_client_auth(),
            Some(id) => {
                let chain = id.cert.certificates()?;
                let key = id.key.private_key()?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| ClientTlsError::Refused {
                        cert: id.cert.from.clone(),
                        key: id.key.from.clone(),
                        why: e.to_string(),
                    })?
            }
        };
        Ok(ClientTls {
            ca,
            identity,
            #[cfg(feature = "nodes")]
            verifier,
            config: Arc::new(config),
        })
    }

    /// Whether a client certificate is presented.
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// The rustls client configuration, announcing `alpn` (none when empty), for a caller that
    /// makes its own connections (the CLI's HTTPS).
    pub fn rustls_config(&self, alpn: &[&[u8]]) -> rustls::ClientConfig {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config
    }

    /// tonic's configuration of the same trust and identity (ALPN `h2`), with the verifier to
    /// give `Endpoint::tls_config_with_verifier`, each handshake bounded by `timeout`: for
    /// every gRPC channel a client dials (the nodes', the etcd authority's).
    #[cfg(feature = "nodes")]
    pub fn tonic_config(
        &self,
        timeout: std::time::Duration,
    ) -> (
        tonic::transport::ClientTlsConfig,
        Arc<dyn rustls::client::danger::ServerCertVerifier>,
    ) {
        let mut config = tonic::transport::ClientTlsConfig::new().timeout(timeout);
        if let Some(id) = &self.identity {
            config = config.identity(tonic::transport::Identity::from_pem(
                &id.cert.bytes,
                &id.key.bytes,
            ));
        }
        (config, self.verifier.clone())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A CA, and a leaf signed by it with its key (PEM), made at test time.
    fn ca_and_leaf() -> (String, String, String) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["client".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (ca_pem, leaf.pem(), key.serialize_pem())
    }

    #[test]
    fn errors_name_the_input_and_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a pem file\n").unwrap();
        let e = ClientTls::from_files(Some(&missing), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing.pem") && e.contains("cannot read"),
            "{e}"
        );
        let e = ClientTls::from_files(Some(&garbage), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("garbage.pem") && e.contains("no PEM certificate"),
            "{e}"
        );

        let (ca, cert, key) = ca_and_leaf();
        let e = ClientTls::from_pem(Some(ca.as_bytes()), Some((cert.as_bytes(), b"nope")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("client key PEM") && e.contains("no PEM private key"),
            "{e}"
        );
        // A key that is not the certificate's.
        let (_, _, other_key) = ca_and_leaf();
        let e = ClientTls::from_pem(None, Some((cert.as_bytes(), other_key.as_bytes())))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("client certificate PEM and the client key PEM"),
            "{e}"
        );

        let tls = ClientTls::from_pem(Some(ca.as_bytes()), Some((cert.as_bytes(), key.as_bytes())))
            .unwrap();
        assert!(tls.has_identity());
        let debug = format!("{tls:?}");
        assert!(
            debug.contains("CA certificate PEM") && !debug.contains("PRIVATE"),
            "{debug}"
        );
        assert_eq!(
            tls.rustls_config(&[b"http/1.1"]).alpn_protocols,
            vec![b"http/1.1".to_vec()]
        );
        assert_ne!(tls, ClientTls::public_roots());
        assert_eq!(ClientTls::public_roots(), ClientTls::public_roots());
    }
}
