//! Worker leases through the tier above: [`WorkerLeases`] of the upstream authority, one gRPC
//! call per operation (`AcquireWorker`, `RenewWorker`, `ReleaseWorker`, `WorkerGroup`). The
//! upper node acquires, renews and releases each lease in its own authority, so every
//! invariant of [`crate::lease`] holds as it does there: exclusive per worker id, fenced by
//! token and holder, expiring by that authority's clock, with a durable time floor. Two lower
//! nodes below any upper nodes on one store never share a worker id.
//!
//! Any url may answer any call: the upper nodes of a tier share their store, where the leases
//! live. A lost answer to an acquisition leaves a lease nobody renews; it expires by the
//! store's clock. Refusals are answers ([`proto::LeaseRefused`]) mapped back to the
//! [`LeaseError`] they were on the upper node; a failed call is [`LeaseError::Store`]
//! (unavailable: the lower node stops issuing once its lease's deadline passes).

use super::UpstreamAuthority;
use crate::lease::{
    GroupRecord, LeaseError, LeaseRequest, WorkerChoice, WorkerLease, WorkerLeases, WorkerSlot,
};
use crate::StoreError;
use async_trait::async_trait;
use idmint_core::NamespaceName;
use idmint_proto::nodes::CallError;
use idmint_proto::v1 as proto;
use proto::lease_refused::Reason;
use std::time::Duration;

#[async_trait]
impl WorkerLeases for UpstreamAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        let call = proto::AcquireWorkerRequest {
            group: request.group.to_string(),
            workers: request.workers,
            worker: match request.choice {
                WorkerChoice::Exactly(worker) => Some(worker),
                WorkerChoice::LowestFree => None,
            },
            prefer_floor_at_most: request.prefer_floor_at_most,
            holder: request.holder.clone(),
            layout: request.layout.clone(),
            ttl_ms: millis(request.ttl),
        };
        let answer = self
            .nodes
            .call(|mut c| {
                let call = call.clone();
                async move { c.acquire_worker(call).await }
            })
            .await;
        self.lease_of(&request.group, answer)
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let call = proto::RenewWorkerRequest {
            lease: Some(wire_lease(lease)),
            floor_unix_ms,
        };
        let answer = self
            .nodes
            .call(|mut c| {
                let call = call.clone();
                async move { c.renew_worker(call).await }
            })
            .await;
        self.lease_of(&lease.group, answer)
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        let call = proto::RenewWorkerRequest {
            lease: Some(wire_lease(lease)),
            floor_unix_ms,
        };
        let answer = self
            .nodes
            .call(|mut c| {
                let call = call.clone();
                async move { c.release_worker(call).await }
            })
            .await;
        self.lease_of(&lease.group, answer).map(|_| ())
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        let call = proto::WorkerGroupRequest {
            group: group.to_string(),
        };
        let (_, answer) = self
            .nodes
            .call(|mut c| {
                let call = call.clone();
                async move { c.worker_group(call).await }
            })
            .await
            .map_err(|e| LeaseError::Store(self.error(group, e)))?;
        if !answer.exists {
            return Ok(None);
        }
        let record = GroupRecord {
            layout: answer.layout,
            last_token: answer.last_token,
        };
        Ok(Some((
            record,
            answer.slots.into_iter().map(slot_of).collect(),
        )))
    }
}

impl UpstreamAuthority {
    /// The lease of an answer, or the error it stands for.
    fn lease_of(
        &self,
        group: &NamespaceName,
        answer: Result<(usize, proto::WorkerLeaseAnswer), CallError>,
    ) -> Result<WorkerLease, LeaseError> {
        let (_, answer) = answer.map_err(|e| LeaseError::Store(self.error(group, e)))?;
        match answer.outcome {
            Some(proto::worker_lease_answer::Outcome::Lease(lease)) => lease_from(group, lease),
            Some(proto::worker_lease_answer::Outcome::Refused(refused)) => {
                Err(refusal(group, refused))
            }
            None => Err(corrupt(
                group,
                "an answer with neither a lease nor a refusal",
            )),
        }
    }
}

/// A lease as the wire carries it.
fn wire_lease(lease: &WorkerLease) -> proto::WorkerLease {
    proto::WorkerLease {
        group: lease.group.to_string(),
        worker: lease.worker,
        token: lease.token,
        floor_unix_ms: lease.floor_unix_ms,
        ttl_ms: millis(lease.ttl),
        holder: lease.holder.clone(),
    }
}

/// The lease an upper node answered for `group`: it must be of that group.
fn lease_from(group: &NamespaceName, lease: proto::WorkerLease) -> Result<WorkerLease, LeaseError> {
    if lease.group != group.as_str() || lease.token == 0 {
        return Err(corrupt(
            group,
            &format!(
                "a lease of group {:?} with token {}",
                lease.group, lease.token
            ),
        ));
    }
    Ok(WorkerLease {
        group: group.clone(),
        worker: lease.worker,
        token: lease.token,
        floor_unix_ms: lease.floor_unix_ms,
        ttl: Duration::from_millis(lease.ttl_ms),
        holder: lease.holder,
    })
}

fn slot_of(slot: proto::WorkerSlot) -> WorkerSlot {
    WorkerSlot {
        worker: slot.worker,
        token: slot.token,
        holder: slot.holder,
        floor_unix_ms: slot.floor_unix_ms,
        expires_in: slot.expires_in_ms.map(Duration::from_millis),
    }
}

/// The [`LeaseError`] an upper node's refusal stands for.
fn refusal(group: &NamespaceName, r: proto::LeaseRefused) -> LeaseError {
    let group = group.clone();
    match r.reason() {
        Reason::PoolFull => LeaseError::PoolFull {
            group,
            workers: r.workers,
            live: r.live.into_iter().map(slot_of).collect(),
        },
        Reason::Held => LeaseError::Held {
            group,
            worker: r.worker,
            holder: r.holder,
            expires_in: Duration::from_millis(r.expires_in_ms),
        },
        Reason::OutOfRange => LeaseError::OutOfRange {
            group,
            worker: r.worker,
            workers: r.workers,
        },
        Reason::Superseded => LeaseError::Superseded {
            group,
            worker: r.worker,
            token: r.token,
            current: r.current,
            holder: r.holder,
        },
        Reason::LayoutConflict => LeaseError::LayoutConflict {
            group,
            recorded: r.recorded,
            requested: r.requested,
        },
        Reason::Invalid => LeaseError::Invalid {
            group,
            message: r.message,
        },
        Reason::Unspecified => LeaseError::Store(StoreError::Corrupt {
            message: format!(
                "the upper tier refused a lease of group {group} for no known reason: {}",
                r.message
            ),
        }),
    }
}

fn corrupt(group: &NamespaceName, what: &str) -> LeaseError {
    LeaseError::Store(StoreError::Corrupt {
        message: format!("the upper tier answered {what} for lease group {group}"),
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
