//! TLS on the node's listeners (`server.tls_cert` / `server.tls_key`, `--tls-cert` /
//! `--tls-key`), and mutual TLS (`server.client_ca_file`, `--tls-client-ca`): one certificate
//! chain and key, served by rustls (the `ring` provider) on the HTTP, gRPC and RESP listeners
//! alike; with a client CA, every listener requires a client certificate signed by it.
//!
//! Invariants:
//! - the rule is here and only here: each front-end gets an [`Acceptor`] from
//!   [`ServerTls::acceptor`] and runs [`handshake`], so no listener can be plain, or skip the
//!   client certificate, while the others ask for it;
//! - the PEM files are read by [`ServerTls::from_files`] and again by [`ServerTls::reload`],
//!   and every failure names the file and what is wrong with it (missing, unreadable, no
//!   certificate in it, no private key in it, a key that does not match the certificate, a
//!   client CA that cannot be a trust anchor): a node with a bad certificate never starts;
//! - a reload swaps the configuration atomically (an [`ArcSwap`]) only once every file read
//!   and the new configuration is built: a bad file keeps the old configuration, whole. New
//!   handshakes use the configuration current when they start; a connection already
//!   established keeps the session it negotiated, so a reload drops nothing;
//! - the handshake runs in the connection's own task, never in the accept loop, and within a
//!   deadline (the caller's `server.header_read_timeout_ms`): a client that connects and
//!   stalls, or speaks plain text to a TLS port, costs one connection slot for at most that
//!   long and never delays another connection;
//! - a failed handshake (no client certificate, one of another CA) is logged at debug level and
//!   closes that connection only;
//! - each front-end announces its own ALPN protocol: `http/1.1` for HTTP, `h2` for gRPC, none
//!   for RESP.
//!
//! What it does not do: watch the files (the binary calls [`ServerTls::reload`] on SIGHUP),
//! SNI with several certificates, or revocation lists.

use crate::config::TlsFiles;
use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Why the certificate, key or client CA could not be loaded; every variant names the file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file holds no PEM `CERTIFICATE` block, or one that does not parse.
    #[error("{}: no PEM certificate in it ({why})", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
        /// What the PEM reader said.
        why: String,
    },
    /// The file holds no PEM private key (PKCS#8, PKCS#1 or SEC1).
    #[error("{}: no PEM private key in it ({why})", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
        /// What the PEM reader said.
        why: String,
    },
    /// rustls refused the pair (a key that does not match the certificate, an unsupported key
    /// type).
    #[error("{} and {}: {why}", cert.display(), key.display())]
    Refused {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        why: String,
    },
    /// The client CA file's certificates cannot verify client certificates.
    #[error("{}: not a usable client CA ({why})", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        why: String,
    },
    /// [`ServerTls::reload`] on a configuration made from certificates in memory.
    #[error("no files to reload: this TLS configuration was not loaded from files")]
    NoFiles,
}

/// The listeners' TLS configuration, reloadable; cheap to clone (clones share it, so a reload
/// through one is seen by every acceptor made from any of them).
#[derive(Clone)]
pub struct ServerTls {
    shared: Arc<Shared>,
}

struct Shared {
    /// What [`ServerTls::reload`] reads again; `None` for [`ServerTls::from_der`].
    files: Option<TlsFiles>,
    /// ALPN unset; each acceptor derives its own from the current one.
    current: ArcSwap<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.shared.files)
            .finish_non_exhaustive()
    }
}

/// The crypto provider of every TLS connection idmint makes or accepts (`ring`).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    idmint_proto::tls::provider()
}

impl ServerTls {
    /// Reads the certificate chain (PEM, leaf first) from `cert` and the private key (PEM) from
    /// `key`; no client certificates asked for.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        Self::from_files(&TlsFiles {
            cert: cert.to_owned(),
            key: key.to_owned(),
            client_ca: None,
        })
    }

    /// Reads `files`: the certificate chain, its key and, when set, the client CA (PEM, every
    /// certificate in it trusted), whose certificates clients must then present.
    pub fn from_files(files: &TlsFiles) -> Result<Self, TlsError> {
        let config = read_config(files)?;
        Ok(ServerTls {
            shared: Arc::new(Shared {
                files: Some(files.clone()),
                current: ArcSwap::from_pointee(config),
            }),
        })
    }

    /// A certificate chain (leaf first) and its key, already parsed; no client certificates
    /// asked for, nothing to reload.
    pub fn from_der(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<Self, String> {
        let config = server_config(chain, key, None)?;
        Ok(ServerTls {
            shared: Arc::new(Shared {
                files: None,
                current: ArcSwap::from_pointee(config),
            }),
        })
    }

    /// The files this configuration reads (`None` for [`ServerTls::from_der`]).
    pub fn files(&self) -> Option<&TlsFiles> {
        self.shared.files.as_ref()
    }

    /// Reads the same files again and, once all of them made a valid configuration, makes
    /// every acceptor's next handshakes use it. On an error the configuration in use stays,
    /// whole; connections already established are never touched.
    pub fn reload(&self) -> Result<(), TlsError> {
        let files = self.shared.files.as_ref().ok_or(TlsError::NoFiles)?;
        let config = read_config(files)?;
        self.shared.current.store(Arc::new(config));
        Ok(())
    }

    /// An acceptor announcing `alpn` (`b"h2"`, `b"http/1.1"`; none when empty). It follows
    /// [`ServerTls::reload`].
    pub fn acceptor(&self, alpn: &[&[u8]]) -> Acceptor {
        let alpn: Arc<[Vec<u8>]> = alpn.iter().map(|p| p.to_vec()).collect();
        let base = self.shared.current.load_full();
        let derived = Derived::of(base, &alpn);
        Acceptor {
            shared: self.shared.clone(),
            alpn,
            derived: Arc::new(ArcSwap::from_pointee(derived)),
        }
    }
}

/// Reads `files` and builds their configuration.
fn read_config(files: &TlsFiles) -> Result<rustls::ServerConfig, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let (cert_pem, key_pem) = (read(&files.cert)?, read(&files.key)?);
    let chain = certificates(&files.cert, &cert_pem)?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::NoKey {
        path: files.key.clone(),
        why: e.to_string(),
    })?;
    let client_roots = match &files.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(ca, &read(ca)?)? {
                roots.add(cert).map_err(|e| TlsError::ClientCa {
                    path: ca.clone(),
                    why: e.to_string(),
                })?;
            }
            Some((ca, roots))
        }
        None => None,
    };
    let verifier = match client_roots {
        Some((ca, roots)) => Some(
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsError::ClientCa {
                    path: ca.clone(),
                    why: e.to_string(),
                })?,
        ),
        None => None,
    };
    server_config(chain, private, verifier).map_err(|why| TlsError::Refused {
        cert: files.cert.clone(),
        key: files.key.clone(),
        why,
    })
}

/// The certificates of `pem`, read from `path`: at least one.
fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::NoCertificate {
            path: path.to_owned(),
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
            why: "no `BEGIN CERTIFICATE` block".to_owned(),
        });
    }
    Ok(certs)
}

/// The server configuration of a chain and key, requiring client certificates that `verifier`
/// accepts when given.
fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
) -> Result<rustls::ServerConfig, String> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(chain, key)
        .map_err(|e| e.to_string())
}

/// A front-end's configuration: the shared one it was derived from, with the front-end's ALPN.
struct Derived {
    base: Arc<rustls::ServerConfig>,
    acceptor: TlsAcceptor,
}

impl Derived {
    fn of(base: Arc<rustls::ServerConfig>, alpn: &[Vec<u8>]) -> Derived {
        let mut config = (*base).clone();
        config.alpn_protocols = alpn.to_vec();
        Derived {
            base,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        }
    }
}

/// One front-end's TLS acceptor (the listeners' configuration with its ALPN); cheap to clone.
/// Each handshake uses the configuration current when it starts: derived again (once) after a
/// [`ServerTls::reload`], otherwise one pointer comparison.
#[derive(Clone)]
pub struct Acceptor {
    shared: Arc<Shared>,
    alpn: Arc<[Vec<u8>]>,
    derived: Arc<ArcSwap<Derived>>,
}

impl Acceptor {
    /// The acceptor of the current configuration.
    fn current(&self) -> TlsAcceptor {
        let base = self.shared.current.load_full();
        let derived = self.derived.load();
        if Arc::ptr_eq(&derived.base, &base) {
            return derived.acceptor.clone();
        }
        let fresh = Derived::of(base, &self.alpn);
        let acceptor = fresh.acceptor.clone();
        self.derived.store(Arc::new(fresh));
        acceptor
    }
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor").finish_non_exhaustive()
    }
}

/// A connection as a front-end serves it: plain TCP, or TLS over TCP once the handshake is done.
#[derive(Debug)]
pub enum MaybeTls {
    /// No TLS on this listener.
    Plain(TcpStream),
    /// The handshake is done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl MaybeTls {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            MaybeTls::Plain(s) => s,
            MaybeTls::Tls(s) => s.get_ref().0,
        }
    }
}

/// Makes `stream` ready to serve: as it is without `tls`, else after a TLS handshake finished
/// within `timeout`. `None` (logged at debug level, naming `what`) when the handshake failed or
/// took too long: the caller drops the connection.
pub async fn handshake(
    stream: TcpStream,
    tls: Option<&Acceptor>,
    timeout: Duration,
    what: &'static str,
) -> Option<MaybeTls> {
    let Some(acceptor) = tls else {
        return Some(MaybeTls::Plain(stream));
    };
    let peer = stream.peer_addr().ok();
    match tokio::time::timeout(timeout, acceptor.current().accept(stream)).await {
        Ok(Ok(tls)) => Some(MaybeTls::Tls(Box::new(tls))),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, ?peer, front_end = what, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(?peer, front_end = what, ?timeout, "TLS handshake timed out");
            None
        }
    }
}

impl AsyncRead for MaybeTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MaybeTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(s) => s.is_write_vectored(),
            MaybeTls::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_testkit::certs::TestCerts;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const DEADLINE: Duration = Duration::from_secs(30);

    #[test]
    fn load_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a pem file\n").unwrap();
        let e = ServerTls::load(&missing, &garbage).unwrap_err().to_string();
        assert!(
            e.contains("missing.pem") && e.contains("cannot read"),
            "{e}"
        );
        let e = ServerTls::load(&garbage, &garbage).unwrap_err().to_string();
        assert!(
            e.contains("garbage.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
        let certs = TestCerts::new();
        let files = |client_ca: &Path| TlsFiles {
            cert: certs.cert_file(),
            key: certs.key_file(),
            client_ca: Some(client_ca.to_owned()),
        };
        let e = ServerTls::from_files(&files(&garbage))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("garbage.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = ServerTls::from_files(&files(&missing))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let e = ServerTls::from_der(
            Vec::new(),
            PrivateKeyDer::from_pem_slice(certs.key_pem.as_bytes()).unwrap(),
        );
        assert!(e.is_err());
    }

    /// Echoes every TLS connection `tls` accepts on a loopback port: the port.
    async fn echo(tls: &ServerTls) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tls.acceptor(&[]);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Some(stream) = handshake(stream, Some(&acceptor), DEADLINE, "test").await
                    {
                        let (mut r, mut w) = tokio::io::split(stream);
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                    }
                });
            }
        });
        addr
    }

    /// A client trusting `certs`' CA, presenting `identity` (certificate and key PEM) if given.
    fn client(certs: &TestCerts, identity: Option<(&str, &str)>) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(certs.ca_pem.as_bytes()).unwrap())
            .unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cert.as_bytes())
                        .collect::<Result<_, _>>()
                        .unwrap(),
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
        };
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// Connects, sends `ping` and reads it back: the certificate the server presented, or the
    /// error that ended the exchange.
    async fn round_trip(
        connector: &tokio_rustls::TlsConnector,
        addr: std::net::SocketAddr,
    ) -> Result<(Vec<u8>, tokio_rustls::client::TlsStream<TcpStream>), io::Error> {
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from("localhost").unwrap();
        let mut stream = connector.connect(name, tcp).await?;
        ping(&mut stream).await?;
        let served = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default();
        Ok((served, stream))
    }

    async fn ping(stream: &mut tokio_rustls::client::TlsStream<TcpStream>) -> io::Result<()> {
        stream.write_all(b"ping").await?;
        let mut back = [0u8; 4];
        tokio::time::timeout(DEADLINE, stream.read_exact(&mut back))
            .await
            .map_err(|_| io::Error::other("no echo"))??;
        assert_eq!(&back, b"ping");
        Ok(())
    }

    #[tokio::test]
    async fn a_reload_serves_new_certificates_and_keeps_open_connections() {
        let certs = TestCerts::new();
        let first = certs.server("first");
        first.write_to(&certs.cert_file(), &certs.key_file());
        let tls = ServerTls::load(&certs.cert_file(), &certs.key_file()).unwrap();
        let addr = echo(&tls).await;
        let connector = client(&certs, None);
        let (served, mut open) = round_trip(&connector, addr).await.unwrap();
        assert_eq!(served, first.cert_der);

        let second = certs.server("second");
        second.write_to(&certs.cert_file(), &certs.key_file());
        tls.reload().unwrap();
        let (served, _) = round_trip(&connector, addr).await.unwrap();
        assert_eq!(
            served, second.cert_der,
            "a new connection gets the new certificate"
        );
        ping(&mut open).await.unwrap();

        // A bad file: the error names it, and the configuration in use stays.
        std::fs::write(certs.cert_file(), "garbage\n").unwrap();
        let e = tls.reload().unwrap_err().to_string();
        assert!(
            e.contains("server.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
        let (served, _) = round_trip(&connector, addr).await.unwrap();
        assert_eq!(served, second.cert_der);
        ping(&mut open).await.unwrap();

        let memory = ServerTls::from_der(
            vec![CertificateDer::from(second.cert_der.clone())],
            PrivateKeyDer::from_pem_slice(second.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
        assert!(matches!(memory.reload(), Err(TlsError::NoFiles)));
    }

    #[tokio::test]
    async fn a_client_ca_requires_a_certificate_it_signed() {
        let certs = TestCerts::new();
        let files = TlsFiles {
            cert: certs.cert_file(),
            key: certs.key_file(),
            client_ca: Some(certs.ca_file()),
        };
        let tls = ServerTls::from_files(&files).unwrap();
        let addr = echo(&tls).await;

        assert!(round_trip(&client(&certs, None), addr).await.is_err());
        let stranger = TestCerts::new().client("stranger");
        let foreign = client(&certs, Some((&stranger.cert_pem, &stranger.key_pem)));
        assert!(round_trip(&foreign, addr).await.is_err());
        let ours = certs.client("ours");
        let known = client(&certs, Some((&ours.cert_pem, &ours.key_pem)));
        round_trip(&known, addr).await.unwrap();

        // The client CA is reloaded with the rest: another CA's clients get in, ours no more.
        let other = TestCerts::new();
        std::fs::copy(other.ca_file(), certs.ca_file()).unwrap();
        tls.reload().unwrap();
        assert!(round_trip(&known, addr).await.is_err());
        let theirs = other.client("theirs");
        round_trip(
            &client(&certs, Some((&theirs.cert_pem, &theirs.key_pem))),
            addr,
        )
        .await
        .unwrap();
    }
}
