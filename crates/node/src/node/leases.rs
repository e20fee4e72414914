//! Worker leases held for a lower tier (gRPC `AcquireWorker`, `RenewWorker`, `ReleaseWorker`,
//! `WorkerGroup`): the same steps as every operation ([`super::requests`]): who, may it (scope
//! `tier` on the group's name), carry out in this node's authority, count. A lower node's
//! snowflake namespace leases its worker id here, so the authority's exclusivity, fencing,
//! clock and time floor hold for it as for this node's own (docs/uniqueness.md, invariant 4).
//!
//! Invariants (nodes trust only nodes):
//! - **lower tiers and local generators only**: every call needs the `tier` scope (a lower
//!   tier of nodes) or the `workers` scope (an application's local snowflake generator) on
//!   the group; `ids`, `blocks` and `read` grant none of it;
//! - **internal groups are unreachable**: a strict namespace's leader group (`<ns>:leader`)
//!   and an owned namespace's shard ranges (`<ns>:shards`) are the nodes' own; no call
//!   reaches a group of either form, with `[auth]` or without ([`is_internal_group`]):
//!   releasing one would let two nodes lead or hold one shard, acquiring one would name a
//!   leader the nodes forward to;
//! - **the holder proves it is the holder**: an acquisition's holder name gets a secret made
//!   here ([`idmint_store::lease::unique_holder`] of the name's public part), answered to the
//!   caller alone; renewals and releases are matched on the whole name by the authority, and
//!   every other answer (a group read, a refusal) carries only the public part
//!   ([`idmint_store::lease::public_holder`]), so knowing a token and a group is not enough
//!   to release another node's lease;
//! - a floor never goes down ([`idmint_store::lease::kept_floor`], in every backend).
//!
//! A refusal of the authority (held, pool full, superseded, another layout, out of range) is
//! an answer, [`LeaseOutcome::Refused`], carried to the lower tier as the error it is; a
//! failure of the authority is an [`IdError`] (unavailable, or the store lost).

use super::requests::Credentials;
use super::Node;
use crate::auth::Scope;
use crate::error::IdError;
use idmint_core::NamespaceName;
use idmint_store::lease::{public_holder, unique_holder, GroupRecord, WorkerSlot};
use idmint_store::{LeaseError, LeaseRequest, WorkerLease, WorkerLeases};

/// One lease operation a lower tier asks for.
#[derive(Debug, Clone)]
pub enum LeaseCall {
    /// A new lease, as the request says.
    Acquire(LeaseRequest),
    /// Extends the lease and raises its floor to the given ms since the Unix epoch.
    Renew(WorkerLease, u64),
    /// Ends the lease with the given floor.
    Release(WorkerLease, u64),
}

impl LeaseCall {
    /// The group the call is about.
    pub fn group(&self) -> &NamespaceName {
        match self {
            LeaseCall::Acquire(r) => &r.group,
            LeaseCall::Renew(l, _) | LeaseCall::Release(l, _) => &l.group,
        }
    }
}

/// What the authority answered a [`LeaseCall`].
#[derive(Debug, Clone)]
pub enum LeaseOutcome {
    /// The lease acquired or renewed; for a release, the lease released.
    Granted(WorkerLease),
    /// A refusal: never [`LeaseError::Store`].
    Refused(LeaseError),
}

/// Whether `group` is a lease group the nodes keep for themselves, which no lower tier may
/// acquire, renew, release or read: a strict namespace's leader
/// ([`crate::strict::leader_group`]) or an owned namespace's shard ranges
/// ([`crate::shards::shard_group`]). Judged by the name alone, whatever this node serves: the
/// group may be another node's.
pub fn is_internal_group(group: &NamespaceName) -> bool {
    let name = group.as_str();
    name.ends_with(crate::strict::LEADER_SUFFIX) || name.ends_with(crate::shards::SHARDS_SUFFIX)
}

impl Node {
    /// Carries out `call` in this node's authority for a lower tier.
    pub async fn worker_lease(
        &self,
        who: Credentials<'_>,
        call: LeaseCall,
    ) -> Result<LeaseOutcome, IdError> {
        let result = async {
            let leases = self.admit_leases(who, call.group())?;
            let group = call.group().clone();
            let answer = match call {
                LeaseCall::Acquire(mut request) => {
                    request.holder = unique_holder(public_holder(&request.holder));
                    leases.acquire(&request).await
                }
                LeaseCall::Renew(lease, floor) => leases.renew(&lease, floor).await,
                LeaseCall::Release(lease, floor) => {
                    leases.release(&lease, floor).await.map(|()| lease)
                }
            };
            match answer {
                Ok(lease) => Ok(LeaseOutcome::Granted(lease)),
                Err(LeaseError::Store(e)) => Err(super::authority_error(group.as_str(), e)),
                Err(refused) => Ok(LeaseOutcome::Refused(refused.public())),
            }
        }
        .await;
        self.counted(result)
    }

    /// The lease group `group` as this node's authority records it; `None` if never acquired.
    pub async fn worker_group(
        &self,
        who: Credentials<'_>,
        group: &str,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, IdError> {
        let result = async {
            let name = NamespaceName::new(group)?;
            let leases = self.admit_leases(who, &name)?;
            let found = leases.group(&name).await.map_err(|e| match e {
                LeaseError::Store(e) => super::authority_error(group, e),
                other => IdError::Internal(other.to_string()),
            })?;
            Ok(found.map(|(record, slots)| {
                (record, slots.into_iter().map(WorkerSlot::public).collect())
            }))
        }
        .await;
        self.counted(result)
    }

    /// Steps 1 and 3 for a lease group (scope `workers` or `tier`; an internal group is refused to every
    /// caller), then this node's authority's leases.
    fn admit_leases(
        &self,
        who: Credentials<'_>,
        group: &NamespaceName,
    ) -> Result<&dyn WorkerLeases, IdError> {
        let caller = self.caller(who)?;
        // `workers` (an application's local snowflake generator) or `tier` (a lower node):
        // the same calls, on the same ordinary groups, under the same holder and floor rules.
        self.auth()
            .admit_either(caller, group.as_str(), [Scope::Workers, Scope::Tier], 0)?;
        if is_internal_group(group) {
            return Err(IdError::Forbidden(format!(
                "lease group {group} is the nodes' own (a strict namespace's leader or an \
                 owned namespace's shard ranges): no lower tier may lease or read it"
            )));
        }
        self.authority().worker_leases().ok_or_else(|| {
            IdError::WrongKind(format!(
                "this node's {} authority stores no worker leases: a lower tier cannot lease \
                 worker ids of group {group} here",
                self.authority().kind()
            ))
        })
    }
}
