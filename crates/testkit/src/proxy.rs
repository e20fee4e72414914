//! A fault-injecting TCP proxy.
//!
//! Every accepted connection is paired with a fresh connection to the upstream server and bytes
//! are pumped both ways. The [`Fault`] in force decides what happens to each chunk:
//!
//! - [`Fault::None`]: forwarded, after the configured latency (if any) per chunk;
//! - [`Fault::Stall`]: held until the fault changes (the peer sees a server that stopped
//!   answering, with the connection still open);
//! - [`Fault::Cut`]: every open connection is closed at once and new ones are closed as soon as
//!   they are accepted (the backend is unreachable);
//! - [`Fault::DropNextReply`]: the next chunk coming back from the server is discarded and that
//!   connection closed; then the proxy goes back to `None`. The request reached the server and
//!   may have committed; the client never learns it (an ambiguous commit).
//!
//! Invariants: the proxy never alters or reorders bytes it forwards; a fault change applies to
//! chunks read after it; it listens on 127.0.0.1 only.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward (with latency, if set).
    None,
    /// Hold every chunk until the fault changes.
    Stall,
    /// Close every connection, now and on accept.
    Cut,
    /// Discard the next server reply and close its connection, then back to `None`.
    DropNextReply,
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    fault: Fault,
    latency: Duration,
}

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    settings: Arc<watch::Sender<Settings>>,
    accept_task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on 127.0.0.1 (a free port) to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (tx, _) = watch::channel(Settings {
            fault: Fault::None,
            latency: Duration::ZERO,
        });
        let settings = Arc::new(tx);
        let accept_settings = settings.clone();
        let accept_task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if accept_settings.borrow().fault == Fault::Cut {
                    drop(client);
                    continue;
                }
                let settings = accept_settings.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    pair(client, server, settings).await;
                });
            }
        });
        Ok(FaultProxy {
            addr,
            settings,
            accept_task,
        })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the fault in force.
    pub fn set_fault(&self, fault: Fault) {
        self.settings.send_modify(|s| s.fault = fault);
    }

    /// The fault in force (`DropNextReply` turns back into `None` once it fired).
    pub fn fault(&self) -> Fault {
        self.settings.borrow().fault
    }

    /// Sets a delay applied to every forwarded chunk, both ways (a slow backend: a request and
    /// its reply each wait `latency`).
    pub fn set_latency(&self, latency: Duration) {
        self.settings.send_modify(|s| s.latency = latency);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
        // Closing connections: pumps end when their settings sender is gone.
        self.settings.send_modify(|s| s.fault = Fault::Cut);
    }
}

/// Pumps both directions until either side closes or a fault closes the pair.
async fn pair(client: TcpStream, server: TcpStream, settings: Arc<watch::Sender<Settings>>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, settings.subscribe(), None);
    let down = pump(
        server_read,
        client_write,
        settings.subscribe(),
        Some(settings.clone()),
    );
    // When one direction ends, end the other: the pair is one connection.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// Forwards chunks from `from` to `to` under the settings. `replies` is set on the
/// server-to-client direction, where `DropNextReply` applies.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut settings: watch::Receiver<Settings>,
    replies: Option<Arc<watch::Sender<Settings>>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = wait_for(&mut settings, |s| s.fault == Fault::Cut) => return,
        };
        // Apply the fault in force now to this chunk.
        loop {
            let s = *settings.borrow_and_update();
            match s.fault {
                Fault::Cut => return,
                Fault::Stall => {
                    if settings.changed().await.is_err() {
                        return;
                    }
                }
                Fault::DropNextReply => {
                    if let Some(tx) = &replies {
                        tx.send_modify(|s| {
                            if s.fault == Fault::DropNextReply {
                                s.fault = Fault::None;
                            }
                        });
                        // The reply is lost and the connection dies with it.
                        return;
                    }
                    break;
                }
                Fault::None => break,
            }
        }
        let latency = settings.borrow().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Resolves when `pred` holds for the settings (or the sender is gone).
async fn wait_for(settings: &mut watch::Receiver<Settings>, pred: impl Fn(&Settings) -> bool) {
    loop {
        if pred(&settings.borrow()) {
            return;
        }
        if settings.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An echo server that counts the requests it saw.
    async fn echo() -> (SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    loop {
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                if s.write_all(&b[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        (addr, seen)
    }

    async fn roundtrip(c: &mut TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
        c.write_all(msg).await?;
        let mut b = vec![0u8; msg.len()];
        c.read_exact(&mut b).await?;
        Ok(b)
    }

    #[tokio::test]
    async fn passes_cuts_and_drops_a_reply() {
        let (upstream, seen) = echo().await;
        let proxy = FaultProxy::start(upstream).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut c, b"ping").await.unwrap(), b"ping");

        // The reply is dropped after the server saw the request.
        proxy.set_fault(Fault::DropNextReply);
        let before = seen.load(std::sync::atomic::Ordering::SeqCst);
        assert!(roundtrip(&mut c, b"commit").await.is_err());
        assert_eq!(
            seen.load(std::sync::atomic::Ordering::SeqCst),
            before + 1,
            "the server got it"
        );
        assert_eq!(proxy.fault(), Fault::None);

        // Cut: new connections die at once.
        proxy.set_fault(Fault::Cut);
        let mut c2 = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(roundtrip(&mut c2, b"x").await.is_err());
        proxy.set_fault(Fault::None);
        let mut c3 = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut c3, b"back").await.unwrap(), b"back");
    }

    #[tokio::test]
    async fn stall_holds_until_released() {
        let (upstream, _) = echo().await;
        let proxy = FaultProxy::start(upstream).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.set_fault(Fault::Stall);
        c.write_all(b"held").await.unwrap();
        let mut b = [0u8; 4];
        let stalled = tokio::time::timeout(Duration::from_millis(200), c.read_exact(&mut b)).await;
        assert!(stalled.is_err(), "nothing may come back while stalled");
        proxy.set_fault(Fault::None);
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"held");
    }
}
