//! The worker-lease calls a local generator makes (gRPC `AcquireWorker`, `RenewWorker`,
//! `ReleaseWorker`, docs/grpc.md), each to any node (the nodes share the store where leases
//! live), and the nodes' refusals as [`ClientError`]s with stable codes.
//!
//! A refusal is an answer: `layout_conflict` (the group records another layout: ids of the two
//! would collide), `worker_pool_full` (every worker id is leased), `lease_superseded` (the lease
//! was taken over or is gone: never issue under it again), `lease_refused` (any other).

use super::generation::Lease;
use crate::error::ClientError;
use crate::nodes::{IntoClientError, Nodes};
use idmint_proto::v1 as proto;
use proto::lease_refused::Reason;
use proto::worker_lease_answer::Outcome;
use std::time::Duration;

/// The code of a renewal refused because the lease was taken over or is gone.
pub(crate) const SUPERSEDED: &str = "lease_superseded";

/// What an acquisition asks for.
#[derive(Debug, Clone)]
pub(crate) struct Acquire {
    pub(crate) group: String,
    pub(crate) workers: u64,
    pub(crate) prefer_floor_at_most: u64,
    pub(crate) holder: String,
    pub(crate) layout: String,
    pub(crate) ttl: Duration,
}

/// A new lease on the lowest free worker id (preferring one whose floor is reachable).
pub(crate) async fn acquire(nodes: &Nodes, ns: &str, a: &Acquire) -> Result<Lease, ClientError> {
    let request = proto::AcquireWorkerRequest {
        group: a.group.clone(),
        workers: a.workers,
        worker: None,
        prefer_floor_at_most: Some(a.prefer_floor_at_most),
        holder: a.holder.clone(),
        layout: a.layout.clone(),
        ttl_ms: millis(a.ttl),
    };
    let answer = nodes
        .call(|mut c| {
            let request = request.clone();
            async move { c.acquire_worker(request).await }
        })
        .await
        .map_err(|e| e.into_client_error(ns))?;
    lease_of(&a.group, answer.1)
}

/// Extends `lease` and raises its floor to `floor_unix_ms` (never lowered by the store).
pub(crate) async fn renew(
    nodes: &Nodes,
    ns: &str,
    lease: &Lease,
    floor_unix_ms: u64,
) -> Result<Lease, ClientError> {
    let request = proto::RenewWorkerRequest {
        lease: Some(wire(lease)),
        floor_unix_ms,
    };
    let answer = nodes
        .call(|mut c| {
            let request = request.clone();
            async move { c.renew_worker(request).await }
        })
        .await
        .map_err(|e| e.into_client_error(ns))?;
    lease_of(&lease.group, answer.1)
}

/// Ends `lease`, recording `floor_unix_ms` (kept if the stored one is higher).
pub(crate) async fn release(
    nodes: &Nodes,
    ns: &str,
    lease: &Lease,
    floor_unix_ms: u64,
) -> Result<(), ClientError> {
    let request = proto::RenewWorkerRequest {
        lease: Some(wire(lease)),
        floor_unix_ms,
    };
    let answer = nodes
        .call(|mut c| {
            let request = request.clone();
            async move { c.release_worker(request).await }
        })
        .await
        .map_err(|e| e.into_client_error(ns))?;
    lease_of(&lease.group, answer.1).map(|_| ())
}

fn wire(lease: &Lease) -> proto::WorkerLease {
    proto::WorkerLease {
        group: lease.group.clone(),
        worker: lease.worker,
        token: lease.token,
        floor_unix_ms: lease.floor_unix_ms,
        ttl_ms: millis(lease.ttl),
        holder: lease.holder.clone(),
    }
}

/// The lease of an answer for `group`, or the refusal it carries.
fn lease_of(group: &str, answer: proto::WorkerLeaseAnswer) -> Result<Lease, ClientError> {
    match answer.outcome {
        Some(Outcome::Lease(l)) if l.group == group && l.token != 0 => Ok(Lease {
            group: l.group,
            worker: l.worker,
            token: l.token,
            floor_unix_ms: l.floor_unix_ms,
            ttl: Duration::from_millis(l.ttl_ms),
            holder: l.holder,
        }),
        Some(Outcome::Lease(l)) => Err(ClientError::node(format!(
            "a lease of group {:?} with token {} answered for group {group:?}",
            l.group, l.token
        ))),
        Some(Outcome::Refused(r)) => Err(refusal(&r)),
        None => Err(ClientError::node(
            "a lease answer with neither a lease nor a refusal",
        )),
    }
}

fn refusal(r: &proto::LeaseRefused) -> ClientError {
    let message = r.message.clone();
    match r.reason() {
        Reason::LayoutConflict => ClientError::Rejected {
            code: Some("layout_conflict".into()),
            message,
        },
        Reason::PoolFull => ClientError::Exhausted {
            code: Some("worker_pool_full".into()),
            message,
        },
        Reason::Superseded => ClientError::Rejected {
            code: Some(SUPERSEDED.into()),
            message,
        },
        _ => ClientError::Rejected {
            code: Some("lease_refused".into()),
            message,
        },
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
