//! The nodes a client talks to: one lazily connected gRPC channel per url, and fallback across
//! them.
//!
//! A call goes to the last node that answered; on a failure another node may not have
//! (`UNAVAILABLE`, `DEADLINE_EXCEEDED`, `CANCELLED`, `ABORTED`, `INTERNAL`, `UNKNOWN`, a
//! connection error, or no answer within the client's timeout) the next url is tried, in order,
//! each **at most once per call**. So a `Block` whose answer was lost is never sent again to the
//! node that may have granted it (design.md invariant 1: that block is burned, never served);
//! the next node grants a block of its own. Any other status is the node's answer and ends the
//! call.
//!
//! This is the same policy as `idmint_store::upstream` (`UpstreamAuthority::call`), whose
//! helpers are private to that crate and typed with its `StoreError`; it is kept small here
//! rather than shared (docs/client.md, "Several nodes").

use crate::error::{from_status, ClientError};
use idmint_proto::v1::idmint_client::IdmintClient;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// The nodes of one client.
#[derive(Debug)]
pub(crate) struct Nodes {
    channels: Vec<Channel>,
    /// The index of the node that answered last: calls start there.
    current: AtomicUsize,
    timeout: Duration,
}

/// How a call to the nodes failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No node answered; the failures, described.
    Unavailable(String),
    /// Node `.0` answered with this status.
    Status(usize, Status),
}

impl CallError {
    /// As a client error about `namespace`.
    pub(crate) fn into_client_error(self, namespace: &str) -> ClientError {
        match self {
            CallError::Unavailable(message) => ClientError::unavailable(message),
            CallError::Status(node, status) => from_status(namespace, node, &status),
        }
    }
}

impl Nodes {
    /// Channels to `urls`, connected lazily (nothing is contacted here). Must run inside a tokio
    /// runtime.
    pub(crate) fn new(urls: &[String], timeout: Duration) -> Result<Nodes, ClientError> {
        if urls.is_empty() {
            return Err(ClientError::InvalidConfig {
                message: "at least one node url is needed".into(),
            });
        }
        let mut channels = Vec::with_capacity(urls.len());
        for (i, url) in urls.iter().enumerate() {
            let endpoint =
                Endpoint::from_shared(url.clone()).map_err(|_| ClientError::InvalidConfig {
                    message: format!("url #{i} is not a valid http:// url"),
                })?;
            channels.push(
                endpoint
                    .connect_timeout(timeout)
                    .timeout(timeout)
                    .connect_lazy(),
            );
        }
        Ok(Nodes {
            channels,
            current: AtomicUsize::new(0),
            timeout,
        })
    }

    /// Runs `op` on the nodes from the current one on, each at most once, moving on after a
    /// failure another node may not have; the index of the node that answered, and its answer.
    pub(crate) async fn call<T, F, Fut>(&self, op: F) -> Result<(usize, T), CallError>
    where
        F: Fn(IdmintClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let n = self.channels.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut failures = Vec::new();
        for i in 0..n {
            let index = (first + i) % n;
            match self.call_one(index, &op).await {
                Ok(answer) => {
                    self.current.store(index, Ordering::Relaxed);
                    return Ok((index, answer));
                }
                Err(CallError::Unavailable(why)) => failures.push(why),
                Err(answer) => return Err(answer),
            }
        }
        Err(CallError::Unavailable(failures.join("; ")))
    }

    /// Runs `op` on node `index` alone, under the timeout.
    pub(crate) async fn call_one<T, F, Fut>(&self, index: usize, op: &F) -> Result<T, CallError>
    where
        F: Fn(IdmintClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let client = IdmintClient::new(self.channels[index].clone());
        match tokio::time::timeout(self.timeout, op(client)).await {
            Ok(Ok(answer)) => Ok(answer.into_inner()),
            Ok(Err(status)) if moves_on(&status) => Err(CallError::Unavailable(format!(
                "node #{index}: {} ({:?})",
                status.message(),
                status.code()
            ))),
            Ok(Err(status)) => Err(CallError::Status(index, status)),
            Err(_) => Err(CallError::Unavailable(format!(
                "node #{index}: no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }
}

/// Whether a status means "this node cannot serve now": try the next url.
fn moves_on(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unknown
            | Code::Internal
            | Code::Aborted
    )
}
