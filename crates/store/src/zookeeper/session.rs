//! The ZooKeeper authority's session and the plumbing of every call: the client, connected,
//! within the operation's deadline; calls bounded by it (`timed`); which failures are
//! transient and retried (reads only) after a [`Backoff`] pause; the errors.
//!
//! ## Sessions, timeouts and reconnection
//!
//! The authority holds one ZooKeeper session
//! ([`ZookeeperConfig::session_timeout`](super::ZookeeperConfig::session_timeout)) for its
//! reads and writes; the client library reconnects it by itself after a connection loss (to
//! any server of the connect string), and if the session expired (the ensemble was out of reach
//! for longer than its timeout) the next call opens a new one. Sessions carry no state of the
//! watermarks, so losing one loses nothing. Every call, connecting and waiting behind other
//! operations on the namespace included, is bounded by
//! [`ZookeeperConfig::op_timeout`](super::ZookeeperConfig::op_timeout).
//!
//! Invariant: every failure of a call is [`StoreError::Unavailable`]; only reads and the
//! create-if-absent of a namespace are tried again.

use super::{ZookeeperAuthority, KIND};
use crate::StoreError;
use idmint_core::Backoff;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client::{Client, Error as ZkError, MultiWriteError, SessionInfo, SessionState};

/// When an operation must be over, and the operation timeout (for messages).
pub(super) type Deadline = (Instant, Duration);

/// The outcome of a write that may lose a race: `Ok(None)` is a conflict (retry from a fresh
/// read).
pub(super) type Attempt<T> = Result<Option<T>, StoreError>;

/// The pauses before a read that failed with a connection loss, or a session that could not
/// be opened, is tried again (within the operation's deadline): random and exponential, from
/// 20 ms to 400 ms, so a reconnecting client is not flooded and a brief loss costs little.
pub(super) fn retry_backoff() -> Backoff {
    Backoff::new(Duration::from_millis(20), Duration::from_millis(400))
}

impl ZookeeperAuthority {
    /// The current session's client, connected, or a new session if there is none or it
    /// ended.
    ///
    /// While the library reconnects, this waits (within the deadline) until it is connected
    /// again rather than hand it a request: the library would keep such a request queued and
    /// send it once reconnected, long after its caller gave up, so a write made during an
    /// outage would land after it (still a compare-and-swap, so never a duplicate block, but a
    /// burned one and a watermark that moved while the caller was told nothing happened).
    ///
    /// A session that ended (expired, or given up by the library after failing to reconnect
    /// for 7/5 of its timeout, which also fails every request still queued in it) is replaced
    /// by a new one; opening one that fails at once (no server reachable) is tried again until
    /// the deadline, so every failure takes the operation timeout, as a stalled server does.
    pub(super) async fn client(&self, deadline: Deadline) -> Result<Client, StoreError> {
        let mut retries = retry_backoff();
        loop {
            let client = match self.session(deadline).await {
                Ok(client) => client,
                Err(e) => {
                    let pause = retries.delay();
                    if Instant::now() + pause >= deadline.0 {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let mut watcher = client.state_watcher();
            loop {
                let state = watcher.state();
                if state == SessionState::SyncConnected {
                    return Ok(client);
                }
                if state.is_terminated() {
                    break; // replaced by `session`
                }
                if tokio::time::timeout_at(deadline.0, watcher.changed())
                    .await
                    .is_err()
                {
                    return Err(self.timed_out("waiting for the connection to ZooKeeper"));
                }
            }
        }
    }

    /// The current session's client (connected or not), or a new session if there is none or
    /// it ended.
    async fn session(&self, deadline: Deadline) -> Result<Client, StoreError> {
        let mut current = match tokio::time::timeout_at(deadline.0, self.client.lock()).await {
            Ok(guard) => guard,
            Err(_) => return Err(self.timed_out("waiting for the ZooKeeper session")),
        };
        if let Some(client) = current.as_ref() {
            if !client.state().is_terminated() {
                return Ok(client.clone());
            }
        }
        *current = None;
        let client = open_session(
            &self.connect_string,
            self.config.session_timeout,
            None,
            false,
            deadline,
        )
        .await?;
        *current = Some(client.clone());
        Ok(client)
    }

    fn timed_out(&self, what: &str) -> StoreError {
        unavailable(format!(
            "{what}: no answer within {:?}",
            self.config.op_timeout
        ))
    }
}

/// A failed read: worth another try (the connection was lost under it), or not.
pub(super) enum Fail {
    Transient,
    Store(StoreError),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Store(e)
    }
}

/// A read's failure: transient if the connection or session was lost under it.
pub(super) fn fail(what: &str, e: ZkError) -> Fail {
    if transient(&e) {
        Fail::Transient
    } else {
        Fail::Store(failed(what, &e))
    }
}

/// Whether a call failed because the connection or the session went away (a read may be sent
/// again; a write's outcome is unknown).
pub(super) fn transient(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::ConnectionLoss
            | ZkError::SessionExpired
            | ZkError::SessionMoved
            | ZkError::ClientClosed
            | ZkError::Timeout
            | ZkError::NoHosts
            // The library's own connection failures (I/O errors, no response in time).
            | ZkError::Custom(_)
    )
}

/// Pauses before a read is tried again (the deadline bounds the next try).
pub(super) async fn retry_pause(deadline: Deadline, retries: &mut Backoff) {
    tokio::time::sleep_until(deadline.0.min(Instant::now() + retries.delay())).await;
}

/// A resumed lease session turned out to have expired (or be unknown to the ensemble).
#[derive(Debug)]
pub(super) struct SessionGone;

/// Opens a session (a new one, or `resume`'s), within `deadline`.
pub(super) async fn open_session(
    connect_string: &str,
    session_timeout: Duration,
    resume: Option<SessionInfo>,
    detached: bool,
    deadline: Deadline,
) -> Result<Client, StoreError> {
    let mut connector = Client::connector()
        .with_session_timeout(session_timeout)
        // The longest the library allows: a slow server is the operation timeout's to judge.
        .with_connection_timeout(session_timeout * 3 / 5)
        .with_fail_eagerly();
    if detached {
        connector = connector.with_detached();
    }
    if let Some(session) = resume {
        connector = connector.with_session(session);
    }
    match tokio::time::timeout_at(deadline.0, connector.connect(connect_string)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(failed(&format!("connecting to {connect_string}"), &e)),
        Err(_) => Err(unavailable(format!(
            "connecting to {connect_string}: no answer within {:?}",
            deadline.1
        ))),
    }
}

/// Reconnects to a detached lease session (restarting its timeout at the server) and lets go of
/// it again. `Err(SessionGone)` if that failed: it expired, or the ensemble cannot be reached
/// (then re-establishing the lease, which needs ZooKeeper too, reports what is wrong).
pub(super) async fn resume_session(
    connect_string: &str,
    session: SessionInfo,
    ttl: Duration,
    deadline: Deadline,
) -> Result<(), SessionGone> {
    let connector = Client::connector()
        .with_session_timeout(ttl)
        .with_connection_timeout(ttl * 3 / 5)
        .with_fail_eagerly()
        .with_detached()
        .with_session(session);
    match tokio::time::timeout_at(deadline.0, connector.connect(connect_string)).await {
        // Dropped at once: detached, so the session lives on with its timeout restarted.
        Ok(Ok(_client)) => Ok(()),
        // Expired, or any other failure: the lease is re-established under a new session,
        // which needs ZooKeeper too and reports what is wrong.
        Ok(Err(_)) | Err(_) => Err(SessionGone),
    }
}

/// Awaits a call under `deadline`; the outer error is the timeout.
pub(super) async fn timed<T, E>(
    (deadline, op_timeout): Deadline,
    what: &str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<Result<T, E>, StoreError> {
    match tokio::time::timeout_at(deadline, call).await {
        Ok(result) => Ok(result),
        Err(_) => Err(unavailable(format!(
            "{what}: no answer within {op_timeout:?}"
        ))),
    }
}

/// The outcome of a `multi`: `Ok(Some)` committed, `Ok(None)` lost a race (a version check, an
/// existing or missing znode), otherwise `Unavailable`.
pub(super) fn committed<T>(what: &str, result: Result<T, MultiWriteError>) -> Attempt<T> {
    match result {
        Ok(done) => Ok(Some(done)),
        Err(MultiWriteError::OperationFailed {
            source: ZkError::BadVersion | ZkError::NodeExists | ZkError::NoNode,
            ..
        }) => Ok(None),
        Err(MultiWriteError::OperationFailed { source, .. })
        | Err(MultiWriteError::RequestFailed { source }) => Err(failed(what, &source)),
    }
}

pub(super) fn unavailable(message: String) -> StoreError {
    StoreError::Unavailable {
        backend: KIND,
        message,
    }
}

/// A failed call: every client error is `Unavailable` (the outcome of a write is unknown).
pub(super) fn failed(what: &str, e: &ZkError) -> StoreError {
    unavailable(format!("{what}: {e}"))
}
