//! Accepting connections for a front-end, bounded in number and stopped by the node's
//! [`Shutdown`]: the one accept loop the HTTP and gRPC front-ends share.
//!
//! Invariants:
//! - a connection is accepted only with a permit of `max_connections` in hand, and the permit
//!   goes with it ([`Accepted::permit`]): the next connection waits in the operating system's
//!   listen backlog until one closes;
//! - once the node starts draining, [`Acceptor::next`] answers `None` and accepts nothing more;
//!   dropping the [`Acceptor`] closes the listening socket;
//! - an error of one incoming connection (refused, aborted, reset) is skipped; any other accept
//!   error (out of file descriptors, say) is logged and retried after [`ACCEPT_ERROR_PAUSE`],
//!   never a panic and never the end of the loop.

use crate::server::shutdown::Shutdown;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long the loop pauses after an accept error that is not the client's (out of file
/// descriptors, say) before trying again.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A connection and the permit it holds until it closes.
#[derive(Debug)]
pub struct Accepted {
    /// The connection, with `TCP_NODELAY` set (ids are small answers: send them at once).
    pub stream: TcpStream,
    /// One of `max_connections`; dropped with the connection.
    pub permit: OwnedSemaphorePermit,
}

/// See the module docs.
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    shutdown: Shutdown,
    /// The front-end's name, for logs ("http", "grpc").
    what: &'static str,
}

impl Acceptor {
    /// Accepts on `listener` at most `max_connections` connections at once until `shutdown`
    /// drains.
    pub fn new(
        listener: TcpListener,
        max_connections: usize,
        shutdown: Shutdown,
        what: &'static str,
    ) -> Self {
        Acceptor {
            listener,
            permits: Arc::new(Semaphore::new(max_connections)),
            shutdown,
            what,
        }
    }

    /// The next connection with its permit; `None` once draining began.
    pub async fn next(&self) -> Option<Accepted> {
        loop {
            let permit = tokio::select! {
                permit = self.permits.clone().acquire_owned() => permit.ok()?, // never closed
                _ = self.shutdown.draining() => return None,
            };
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                _ = self.shutdown.draining() => return None,
            };
            match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    return Some(Accepted { stream, permit });
                }
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    tracing::warn!(error = %e, front_end = self.what, "accepting a connection failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => {}
                        _ = self.shutdown.draining() => return None,
                    }
                }
            }
        }
    }
}

/// Errors of one incoming connection, not of the listener: the next accept may succeed.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
