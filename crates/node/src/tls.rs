//! TLS on the node's listeners (`server.tls_cert` / `server.tls_key`, `--tls-cert` /
//! `--tls-key`): one certificate chain and key, loaded once at start, served by rustls (the
//! `ring` provider) on the HTTP, gRPC and RESP listeners alike.
//!
//! Invariants:
//! - the PEM files are read once, by [`ServerTls::load`], and every failure names the file and
//!   what is wrong with it (missing, unreadable, no certificate in it, no private key in it, a
//!   key that does not match the certificate): a node with a bad certificate never starts;
//! - the handshake runs in the connection's own task, never in the accept loop, and within a
//!   deadline (the caller's `server.header_read_timeout_ms`): a client that connects and
//!   stalls, or speaks plain text to a TLS port, costs one connection slot for at most that
//!   long and never delays another connection;
//! - a failed handshake is logged at debug level and closes that connection only;
//! - each front-end announces its own ALPN protocol: `http/1.1` for HTTP, `h2` for gRPC, none
//!   for RESP.
//!
//! What it does not do: client certificates (mutual TLS), reloading the certificate while
//! running (restart the node), or SNI with several certificates.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
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

/// Why the certificate or key could not be loaded; every variant names the file.
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
}

/// The node's certificate and key, ready to serve; cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    /// ALPN unset; each front-end clones it and sets its own.
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

/// The crypto provider of every TLS connection idmint makes or accepts.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ServerTls {
    /// Reads the certificate chain (PEM, leaf first) from `cert` and the private key (PEM) from
    /// `key`.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let cert_pem = std::fs::read(cert).map_err(|source| TlsError::Read {
            path: cert.to_owned(),
            source,
        })?;
        let key_pem = std::fs::read(key).map_err(|source| TlsError::Read {
            path: key.to_owned(),
            source,
        })?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::NoCertificate {
                path: cert.to_owned(),
                why: e.to_string(),
            })?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: cert.to_owned(),
                why: "no `BEGIN CERTIFICATE` block".to_owned(),
            });
        }
        let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::NoKey {
            path: key.to_owned(),
            why: e.to_string(),
        })?;
        Self::from_der(chain, private).map_err(|why| TlsError::Refused {
            cert: cert.to_owned(),
            key: key.to_owned(),
            why,
        })
    }

    /// A certificate chain (leaf first) and its key, already parsed.
    pub fn from_der(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<Self, String> {
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())?;
        Ok(ServerTls {
            config: Arc::new(config),
        })
    }

    /// An acceptor announcing `alpn` (`b"h2"`, `b"http/1.1"`; none when empty).
    pub fn acceptor(&self, alpn: &[&[u8]]) -> Acceptor {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Acceptor(TlsAcceptor::from(Arc::new(config)))
    }
}

/// One front-end's TLS acceptor (its certificate and ALPN); cheap to clone.
#[derive(Clone)]
pub struct Acceptor(TlsAcceptor);

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
    match tokio::time::timeout(timeout, acceptor.0.accept(stream)).await {
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
    use super::*;

    #[test]
    fn load_errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("idmint-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let garbage = dir.join("garbage.pem");
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
        let _ = std::fs::remove_dir_all(&dir);
    }
}
