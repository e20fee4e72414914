//! The raw socket of a door: a TCP connection, with the TLS handshake done when the door is
//! TLS ([`connect`]), to send what no client library sends (nothing, half a request, garbage)
//! and watch when the node closes it ([`read_to_close`]); the client side of the test
//! certificates ([`client_tls`]); and the few HTTP/2 frames a raw gRPC request needs
//! ([`grpc_request`]).

use super::{Target, DEADLINE};
use idmint_node::server::Protocol;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A byte stream to a door: TCP, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A raw connection to a door.
pub struct Conn {
    io: Box<dyn Io>,
    /// Requests [`super::Door::one_request`] wrote on it so far.
    pub requests: u32,
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A rustls client configuration trusting only the CA `ca_pem`, announcing `protocol`'s ALPN
/// (none for RESP, as Redis clients).
pub fn client_tls(ca_pem: &str, protocol: Protocol) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(idmint_node::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = match protocol {
        Protocol::Http => vec![b"http/1.1".to_vec()],
        Protocol::Grpc => vec![b"h2".to_vec()],
        Protocol::Resp => Vec::new(),
    };
    Arc::new(config)
}

/// A connection to `target`, its TLS handshake done when it has TLS.
pub async fn connect(target: &Target) -> std::io::Result<Conn> {
    let tcp = TcpStream::connect(target.addr).await?;
    tcp.set_nodelay(true)?;
    let io: Box<dyn Io> = match &target.tls {
        None => Box::new(tcp),
        Some(config) => {
            let connector = tokio_rustls::TlsConnector::from(config.clone());
            let name = ServerName::try_from("localhost").unwrap();
            Box::new(connector.connect(name, tcp).await?)
        }
    };
    Ok(Conn { io, requests: 0 })
}

/// Reads until the node closes `conn` (end of stream, or an error: a reset, a TLS stream cut
/// without `close_notify`), for at most [`DEADLINE`]: what was read, and when it closed.
pub async fn read_to_close(conn: &mut (impl AsyncRead + Unpin + ?Sized)) -> (Vec<u8>, Instant) {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    tokio::time::timeout(DEADLINE, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the node did not close the connection");
    (got, Instant::now())
}

/// Reads from `conn` until `done` says the bytes read hold a whole answer; fails if the node
/// closes first or nothing whole arrives within [`DEADLINE`].
pub async fn read_answer(
    conn: &mut (impl AsyncRead + Unpin + ?Sized),
    mut done: impl FnMut(&[u8]) -> bool,
) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    tokio::time::timeout(DEADLINE, async {
        while !done(&got) {
            let n = conn.read(&mut buf).await.unwrap_or(0);
            assert!(
                n > 0,
                "closed before a whole answer: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("no whole answer in time");
    got
}

/// Writes `bytes` and ignores a failure: the node may close before reading all of it.
pub async fn write_lossy(conn: &mut (impl AsyncWrite + Unpin + ?Sized), bytes: &[u8]) {
    let _ = conn.write_all(bytes).await;
    let _ = conn.flush().await;
}

/// The HTTP/2 client preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK header field as a literal without indexing, new name, no Huffman (RFC 7541 6.2.2):
/// short names and values only.
fn literal(name: &str, value: &str) -> Vec<u8> {
    let mut out = vec![0u8, u8::try_from(name.len()).unwrap()];
    assert!(name.len() < 127 && value.len() < 127);
    out.extend_from_slice(name.as_bytes());
    out.push(u8::try_from(value.len()).unwrap());
    out.extend_from_slice(value.as_bytes());
    out
}

const SETTINGS: u8 = 0x4;
const HEADERS: u8 = 0x1;
const DATA: u8 = 0x0;
const RST_STREAM: u8 = 0x3;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// One gRPC call of `method` (`/idmint.v1.Idmint/Namespaces`) with an empty message, as raw
/// HTTP/2 frames on `conn`: the preface and SETTINGS on a new connection, then HEADERS and
/// DATA on the next client stream; then reads frames (acknowledging the node's SETTINGS and
/// PINGs) until the call's trailers end its stream. `tls` picks the `:scheme`. The connection
/// stays open.
pub async fn grpc_request(conn: &mut Conn, method: &str, tls: bool) {
    let stream_id = 2 * conn.requests + 1;
    let mut out = Vec::new();
    if conn.requests == 0 {
        out.extend(PREFACE);
        out.extend(frame(SETTINGS, 0, 0, &[]));
    }
    conn.requests += 1;
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", if tls { "https" } else { "http" }),
        (":path", method),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.extend(literal(name, value));
    }
    out.extend(frame(HEADERS, END_HEADERS, stream_id, &block));
    // One length-prefixed message of 0 bytes.
    out.extend(frame(DATA, END_STREAM, stream_id, &[0, 0, 0, 0, 0]));
    conn.write_all(&out).await.unwrap();
    conn.flush().await.unwrap();
    tokio::time::timeout(DEADLINE, async {
        loop {
            let mut head = [0u8; 9];
            conn.read_exact(&mut head)
                .await
                .expect("the node closed the HTTP/2 connection mid-call");
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.unwrap();
            match kind {
                SETTINGS if flags & ACK == 0 => {
                    conn.write_all(&frame(SETTINGS, ACK, 0, &[])).await.unwrap();
                }
                PING if flags & ACK == 0 => {
                    conn.write_all(&frame(PING, ACK, 0, &payload))
                        .await
                        .unwrap();
                }
                HEADERS if stream == stream_id && flags & END_STREAM != 0 => return,
                RST_STREAM | GOAWAY => panic!("the node refused the call (frame type {kind})"),
                _ => {}
            }
        }
    })
    .await
    .expect("no answer to the raw gRPC call");
}

/// Connects to `target` and sends nothing: returns the connection and when it was made.
pub async fn silent(target: &Target) -> (TcpStream, Instant) {
    let tcp = TcpStream::connect(target.addr).await.unwrap();
    (tcp, Instant::now())
}

/// Fails unless `closed - since` lies within `[at - 150 ms, at + slack]`: the node closed the
/// connection at its deadline `at`, not before, not much after. (`since` is when the client
/// saw its last byte go or come; the node's clock started a moment before or after.)
#[track_caller]
pub fn assert_closed_near(what: &str, since: Instant, closed: Instant, at: Duration) {
    let took = closed - since;
    let slack = Duration::from_millis(2500);
    assert!(
        took + Duration::from_millis(150) >= at && took <= at + slack,
        "{what}: closed after {took:?}, its deadline is {at:?} (slack {slack:?})"
    );
}
