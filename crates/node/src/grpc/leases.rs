//! The worker-lease calls of a lower tier as `idmint.v1` messages: requests parsed into a
//! [`LeaseCall`], outcomes encoded as a [`proto::WorkerLeaseAnswer`]. Pure translation; the
//! node's authority decides ([`crate::node::leases`]).

use super::proto;
use crate::error::IdError;
use crate::node::leases::{LeaseCall, LeaseOutcome};
use idmint_core::NamespaceName;
use idmint_store::lease::{GroupRecord, WorkerSlot};
use idmint_store::{LeaseError, LeaseRequest, WorkerChoice, WorkerLease};
use proto::lease_refused::Reason;
use std::time::Duration;

/// `AcquireWorker` as a call.
pub fn acquire(req: proto::AcquireWorkerRequest) -> Result<LeaseCall, IdError> {
    Ok(LeaseCall::Acquire(LeaseRequest {
        group: NamespaceName::new(&req.group)?,
        workers: req.workers,
        choice: req
            .worker
            .map_or(WorkerChoice::LowestFree, WorkerChoice::Exactly),
        prefer_floor_at_most: req.prefer_floor_at_most,
        holder: req.holder,
        layout: req.layout,
        ttl: Duration::from_millis(req.ttl_ms),
    }))
}

/// `RenewWorker` (`release` false) or `ReleaseWorker` as a call.
pub fn renew_or_release(
    req: proto::RenewWorkerRequest,
    release: bool,
) -> Result<LeaseCall, IdError> {
    let lease = req
        .lease
        .ok_or_else(|| IdError::InvalidRequest("the request names no lease".into()))?;
    let lease = WorkerLease {
        group: NamespaceName::new(&lease.group)?,
        worker: lease.worker,
        token: lease.token,
        floor_unix_ms: lease.floor_unix_ms,
        ttl: Duration::from_millis(lease.ttl_ms),
        holder: lease.holder,
    };
    Ok(if release {
        LeaseCall::Release(lease, req.floor_unix_ms)
    } else {
        LeaseCall::Renew(lease, req.floor_unix_ms)
    })
}

/// An outcome as the answer message.
pub fn answer(outcome: LeaseOutcome) -> proto::WorkerLeaseAnswer {
    use proto::worker_lease_answer::Outcome;
    proto::WorkerLeaseAnswer {
        outcome: Some(match outcome {
            LeaseOutcome::Granted(lease) => Outcome::Lease(wire_lease(&lease)),
            LeaseOutcome::Refused(refused) => Outcome::Refused(refusal(refused)),
        }),
    }
}

/// A group as the answer message (`exists` false for `None`).
pub fn group(found: Option<(GroupRecord, Vec<WorkerSlot>)>) -> proto::WorkerGroupAnswer {
    match found {
        None => proto::WorkerGroupAnswer::default(),
        Some((record, slots)) => proto::WorkerGroupAnswer {
            exists: true,
            layout: record.layout,
            last_token: record.last_token,
            slots: slots.into_iter().map(wire_slot).collect(),
        },
    }
}

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

fn wire_slot(slot: WorkerSlot) -> proto::WorkerSlot {
    proto::WorkerSlot {
        worker: slot.worker,
        token: slot.token,
        holder: slot.holder,
        floor_unix_ms: slot.floor_unix_ms,
        expires_in_ms: slot.expires_in.map(millis),
    }
}

fn refusal(e: LeaseError) -> proto::LeaseRefused {
    let mut r = proto::LeaseRefused {
        message: e.to_string(),
        ..Default::default()
    };
    let reason = match e {
        LeaseError::PoolFull { workers, live, .. } => {
            r.workers = workers;
            r.live = live.into_iter().map(wire_slot).collect();
            Reason::PoolFull
        }
        LeaseError::Held {
            worker,
            holder,
            expires_in,
            ..
        } => {
            r.worker = worker;
            r.holder = holder;
            r.expires_in_ms = millis(expires_in);
            Reason::Held
        }
        LeaseError::OutOfRange {
            worker, workers, ..
        } => {
            r.worker = worker;
            r.workers = workers;
            Reason::OutOfRange
        }
        LeaseError::Superseded {
            worker,
            token,
            current,
            holder,
            ..
        } => {
            r.worker = worker;
            r.token = token;
            r.current = current;
            r.holder = holder;
            Reason::Superseded
        }
        LeaseError::LayoutConflict {
            recorded,
            requested,
            ..
        } => {
            r.recorded = recorded;
            r.requested = requested;
            Reason::LayoutConflict
        }
        LeaseError::Invalid { message, .. } => {
            r.message = message;
            Reason::Invalid
        }
        // Never a refusal (the node answers it as a status); kept total for a new variant.
        _ => Reason::Unspecified,
    };
    r.set_reason(reason);
    r
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
