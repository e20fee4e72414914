//! Worker leases: which node may issue snowflake (and Instagram-shard) ids under which worker
//! id, with a fencing token and a durable time floor (docs/design.md invariant 4, docs/uniqueness.md).
//!
//! A **group** is a set of worker ids `0..workers` that must never be used by two nodes at once:
//! by default one snowflake namespace (its layout's node field), or several namespaces that
//! share a layout's node bits (`worker_group` in the node's config). A node holds a
//! [`WorkerLease`] on one worker id of a group for a TTL and renews it; the authority that
//! stores the namespace's watermarks stores its leases too, behind [`WorkerLeases`].
//!
//! Invariants every backend keeps (the conformance suite checks each, for every backend):
//! - **exclusive**: at any time at most one live lease per `(group, worker)`; concurrent
//!   acquisitions, from this process or others, get different worker ids or an error;
//! - **fenced**: every acquisition gets a token strictly greater than every token granted
//!   before in its group; [`WorkerLeases::renew`] and [`WorkerLeases::release`] succeed only
//!   while the worker id's record names their lease, by token **and** holder, so a holder
//!   whose lease was taken over learns it ([`LeaseError::Superseded`]) and never writes again.
//!   The holder is unique per acquisition ([`unique_holder`]): a store that lost its records
//!   starts its tokens again at 1, so a token alone could name another node's lease, and a
//!   renewal must never extend (take over) a lease it did not acquire;
//! - **expiry by the authority's clock**: a lease is live until the authority's own clock
//!   (SQL `now()`, an etcd lease, a ZooKeeper session) says its TTL ran out; a node's clock
//!   never decides whether another node's lease expired;
//! - **time floor**: each worker id carries `floor_unix_ms`, above every timestamp any holder
//!   of it ever issued. A holder raises it with `renew` *before* issuing up to it (the node keeps
//!   it some seconds ahead of its clock); it is never removed and **never lowered**: `renew`
//!   and `release` store [`kept_floor`] of the stored floor and the one they name, so a
//!   release naming a lower floor (a stale read, a caller that is not the holder, a holder
//!   that renewed in between) cannot reopen timestamps a holder may have issued. A new holder
//!   never issues below it, so a restart, a takeover, or a clock stepped back while the node
//!   was down cannot repeat a timestamp;
//! - **the holder's secret**: a holder name is `<who> lease <16 hex digits>` ([`unique_holder`]);
//!   the digits are random, and whoever knows the whole name (with the token) may renew or
//!   release the lease. Only the part before them is ever shown ([`public_holder`]): error
//!   messages here, and every answer a node gives about leases, carry that part alone;
//! - **never created again**: a group is created by its first acquisition, which writes a
//!   `leased` entry to the audit ledger in the same atomic write, like every acquisition. An
//!   acquisition that finds no record of its group but a trace of it in the ledger
//!   ([`is_group_trace`]: a `leased` entry, or a checkpoint that folded some) is refused as
//!   lost ([`lost_group`]), in the same atomic step that would create it: the group's records
//!   were deleted (by hand, a partial restore, a wiped table or key prefix) while the store
//!   kept its incarnation and ledger, and a group made afresh would start again at token 1 and
//!   floor 0 under nodes that may still issue. A store that lost everything lost its
//!   incarnation too, which the node record refuses (crate::node_record);
//! - **layout lock**: the first acquisition of a group records its layout; a later one with
//!   another layout is [`LeaseError::LayoutConflict`] (ids already issued under the recorded
//!   layout could collide with ids of the new one).
//!
//! The decision (which worker id, which token, which error) is one pure function,
//! [`plan_acquire`], that every backend runs inside its atomic read-modify-write of the group,
//! so backends differ only in how they make that atomic and durable, as for watermarks.

use crate::audit::AuditEvent;
use crate::StoreError;
use async_trait::async_trait;
use idmint_core::NamespaceName;
use std::time::Duration;
use thiserror::Error;

/// Which worker id to acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerChoice {
    /// The lowest worker id without a live lease.
    LowestFree,
    /// This worker id, or [`LeaseError::Held`] if it has a live lease.
    Exactly(u64),
}

/// A request for a worker lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The group (by default the namespace's name).
    pub group: NamespaceName,
    /// The group's size: worker ids `0..workers` (a layout's `max_node() + 1`). At least 1.
    pub workers: u64,
    /// Which worker id.
    pub choice: WorkerChoice,
    /// With [`WorkerChoice::LowestFree`]: prefer the lowest free worker id whose floor is at or
    /// below this (ms since the Unix epoch; the holder's clock plus the wait it accepts), so a
    /// node restarted just after a crash takes a worker id it can use at once rather than one
    /// whose floor it would have to wait for. A free worker id never held has floor 0. If every
    /// free worker id's floor is higher, the lowest free one anyway. `None`: the lowest free.
    pub prefer_floor_at_most: Option<u64>,
    /// Who asks, for messages and listings, and the lease's identity: renewals and releases
    /// are matched on token and holder. Unique per acquisition: [`unique_holder`].
    pub holder: String,
    /// The layout the holder will issue ids of, in a canonical text form; recorded by the first
    /// acquisition of the group and compared by every later one.
    pub layout: String,
    /// How long the lease lives without a renewal, by the authority's clock. Backends may round
    /// it up to their own minimum (etcd: whole seconds) and report what they granted.
    pub ttl: Duration,
}

/// A lease held on one worker id of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLease {
    /// The group.
    pub group: NamespaceName,
    /// The worker id.
    pub worker: u64,
    /// The fencing token: greater than every token granted before in the group.
    pub token: u64,
    /// The time floor (ms since the Unix epoch) as recorded: on acquisition, every id any
    /// earlier holder of this worker id issued has a timestamp below it; after a renewal, the
    /// floor the holder recorded.
    pub floor_unix_ms: u64,
    /// The TTL the authority granted (at least the one asked for).
    pub ttl: Duration,
    /// The holder it was granted to.
    pub holder: String,
}

/// A worker id of a group as the authority records it, live or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSlot {
    /// The worker id.
    pub worker: u64,
    /// The token of its latest acquisition.
    pub token: u64,
    /// Its latest holder (kept after release or expiry, for messages).
    pub holder: String,
    /// Its time floor, ms since the Unix epoch.
    pub floor_unix_ms: u64,
    /// `Some(time left)` while a lease on it is live, by the authority's clock; `None` if free.
    pub expires_in: Option<Duration>,
}

impl WorkerSlot {
    /// The slot with its holder cut to the [`public_holder`] part.
    pub fn public(self) -> WorkerSlot {
        WorkerSlot {
            holder: public_holder(&self.holder).to_owned(),
            ..self
        }
    }

    /// Whether a lease on it is live.
    pub fn is_live(&self) -> bool {
        self.expires_in.is_some()
    }
}

/// A group as the authority records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    /// The layout recorded by its first acquisition.
    pub layout: String,
    /// The largest token granted so far.
    pub last_token: u64,
}

/// What an acquisition writes, as [`plan_acquire`] decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The worker id to take.
    pub worker: u64,
    /// Its new token (the group's `last_token` becomes this).
    pub token: u64,
    /// The floor it keeps (0 for a worker id never held).
    pub floor_unix_ms: u64,
    /// The group record to write (created on the first acquisition).
    pub group: GroupRecord,
}

/// Errors of worker leases.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Every worker id of the group has a live lease.
    #[error("{}", describe_full(group, *workers, live))]
    PoolFull {
        /// The group.
        group: NamespaceName,
        /// Its size.
        workers: u64,
        /// The live leases.
        live: Vec<WorkerSlot>,
    },
    /// The worker id asked for has a live lease.
    #[error("worker {worker} of group {group} is held by {} (lease expires in {} ms); \
             two nodes with one worker id would issue the same ids",
             public_holder(holder), expires_in.as_millis())]
    Held {
        /// The group.
        group: NamespaceName,
        /// The worker id.
        worker: u64,
        /// Its holder.
        holder: String,
        /// Time left on its lease, by the authority's clock.
        expires_in: Duration,
    },
    /// The worker id does not fit the group.
    #[error("worker {worker} is outside group {group}'s worker ids 0..{workers}")]
    OutOfRange {
        /// The group.
        group: NamespaceName,
        /// The worker id asked for.
        worker: u64,
        /// The group's size.
        workers: u64,
    },
    /// The lease was taken over (the worker id's record names another token or holder) or
    /// never existed (the store lost it): its holder must not issue under it any more.
    #[error(
        "the lease on worker {worker} of group {group} (token {token}) was superseded \
             (current token {current}, holder {})",
        public_holder(holder)
    )]
    Superseded {
        /// The group.
        group: NamespaceName,
        /// The worker id.
        worker: u64,
        /// The token held.
        token: u64,
        /// The worker id's current token (0 if it has none).
        current: u64,
        /// Its current holder.
        holder: String,
    },
    /// The group was created with another layout.
    #[error(
        "group {group} issues ids of layout {recorded}, but {requested} was configured: \
             ids of the two could collide; keep the recorded layout or use a new namespace"
    )]
    LayoutConflict {
        /// The group.
        group: NamespaceName,
        /// The layout it recorded.
        recorded: String,
        /// The layout asked for.
        requested: String,
    },
    /// The request itself is invalid (no worker ids, a zero TTL).
    #[error("invalid lease request for group {group}: {message}")]
    Invalid {
        /// The group.
        group: NamespaceName,
        /// What is wrong.
        message: String,
    },
    /// The authority failed (unreachable: the outcome of a write is unknown; or corrupt).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl LeaseError {
    /// The error with every holder name it carries cut to its [`public_holder`] part: what
    /// may be answered to anyone but the holder.
    pub fn public(self) -> LeaseError {
        match self {
            LeaseError::PoolFull {
                group,
                workers,
                live,
            } => LeaseError::PoolFull {
                group,
                workers,
                live: live.into_iter().map(WorkerSlot::public).collect(),
            },
            LeaseError::Held {
                group,
                worker,
                holder,
                expires_in,
            } => LeaseError::Held {
                group,
                worker,
                holder: public_holder(&holder).to_owned(),
                expires_in,
            },
            LeaseError::Superseded {
                group,
                worker,
                token,
                current,
                holder,
            } => LeaseError::Superseded {
                group,
                worker,
                token,
                current,
                holder: public_holder(&holder).to_owned(),
            },
            other => other,
        }
    }

    /// Whether the authority could not be reached (retry later).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, LeaseError::Store(e) if e.is_unavailable())
    }
}

fn describe_full(group: &NamespaceName, workers: u64, live: &[WorkerSlot]) -> String {
    let mut s = format!("all {workers} worker ids of group {group} are leased:");
    for (i, slot) in live.iter().enumerate() {
        if i == 8 {
            s.push_str(&format!(" … and {} more", live.len() - 8));
            break;
        }
        let left = slot.expires_in.unwrap_or_default();
        s.push_str(&format!(
            " {} by {} (expires in {} ms);",
            slot.worker,
            public_holder(&slot.holder),
            left.as_millis()
        ));
    }
    s
}

/// Leases of worker ids, stored by an authority next to its watermarks. See the module docs for
/// the invariants. Obtain one with [`crate::Authority::worker_leases`].
#[async_trait]
pub trait WorkerLeases: Send + Sync + std::fmt::Debug + 'static {
    /// Acquires a lease as `request` says. On `Ok` the lease is durable and live for its TTL by
    /// the authority's clock, its token is larger than every token granted before in the group,
    /// and its floor is the worker id's recorded floor (0 if never held).
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError>;

    /// Extends `lease` by its TTL from now (the authority's clock) and raises the worker id's
    /// floor to `floor_unix_ms` (a lower value leaves it: [`kept_floor`]). Succeeds even after the lease
    /// expired, as long as nobody acquired the worker id since (the record still names the
    /// lease's token and holder: [`is_current`]); otherwise [`LeaseError::Superseded`] and
    /// nothing is written: a renewal never extends another holder's lease.
    /// Returns the lease with its new floor.
    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError>;

    /// Ends `lease` and raises the worker id's floor to `floor_unix_ms`, which the holder
    /// guarantees is above every timestamp it issued; a value below the stored floor leaves
    /// the stored one ([`kept_floor`]), so a floor recorded with `renew` stays even where the
    /// holder did not reach it. The worker id is free at once. [`LeaseError::Superseded`] (nothing written) unless the record still
    /// names the lease ([`is_current`]).
    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError>;

    /// The group's recorded layout and worker ids (live or not), sorted by worker id; `None` if
    /// the group was never acquired.
    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError>;
}

/// The acquisition `request` makes of a group whose record is `group` and whose worker ids
/// are `slots` (any order; absent ids were never held), each with its liveness by the
/// authority's clock. Every backend calls this inside its atomic read-modify-write.
pub fn plan_acquire(
    request: &LeaseRequest,
    group: Option<&GroupRecord>,
    slots: &[WorkerSlot],
) -> Result<Grant, LeaseError> {
    let name = &request.group;
    if request.workers == 0 {
        return Err(LeaseError::Invalid {
            group: name.clone(),
            message: "the group has no worker ids".into(),
        });
    }
    if request.ttl.is_zero() {
        return Err(LeaseError::Invalid {
            group: name.clone(),
            message: "the TTL is zero".into(),
        });
    }
    let record = match group {
        Some(g) if g.layout != request.layout => {
            return Err(LeaseError::LayoutConflict {
                group: name.clone(),
                recorded: g.layout.clone(),
                requested: request.layout.clone(),
            })
        }
        Some(g) => g.clone(),
        None => GroupRecord {
            layout: request.layout.clone(),
            last_token: 0,
        },
    };
    let slot_of = |w: u64| slots.iter().find(|s| s.worker == w);
    let worker = match request.choice {
        WorkerChoice::Exactly(w) => {
            if w >= request.workers {
                return Err(LeaseError::OutOfRange {
                    group: name.clone(),
                    worker: w,
                    workers: request.workers,
                });
            }
            if let Some(s) = slot_of(w).filter(|s| s.is_live()) {
                return Err(LeaseError::Held {
                    group: name.clone(),
                    worker: w,
                    holder: s.holder.clone(),
                    expires_in: s.expires_in.unwrap_or_default(),
                });
            }
            w
        }
        WorkerChoice::LowestFree => {
            let live = |w: u64| slot_of(w).is_some_and(WorkerSlot::is_live);
            let floor = |w: u64| slot_of(w).map_or(0, |s| s.floor_unix_ms);
            // Walk the free ids upward. Only ids with a record can be live or have a floor, so
            // the walk ends within `slots.len() + 1` steps of the first free id.
            let mut lowest_free = None;
            let mut chosen = None;
            let mut w = 0u64;
            while w < request.workers {
                if !live(w) {
                    lowest_free.get_or_insert(w);
                    match request.prefer_floor_at_most {
                        Some(limit) if floor(w) > limit => {}
                        _ => {
                            chosen = Some(w);
                            break;
                        }
                    }
                    if slot_of(w).is_none() {
                        break; // every later id without a record is like this one
                    }
                }
                w += 1;
            }
            match chosen.or(lowest_free) {
                Some(w) => w,
                None => {
                    let mut live: Vec<WorkerSlot> =
                        slots.iter().filter(|s| s.is_live()).cloned().collect();
                    live.sort_by_key(|s| s.worker);
                    return Err(LeaseError::PoolFull {
                        group: name.clone(),
                        workers: request.workers,
                        live,
                    });
                }
            }
        }
    };
    let token = record
        .last_token
        .max(slots.iter().map(|s| s.token).max().unwrap_or(0))
        .checked_add(1)
        .ok_or_else(|| StoreError::Corrupt {
            message: format!("group {name}: fencing token overflow"),
        })?;
    Ok(Grant {
        worker,
        token,
        floor_unix_ms: slot_of(worker).map_or(0, |s| s.floor_unix_ms),
        group: GroupRecord {
            layout: record.layout,
            last_token: token,
        },
    })
}

/// The floor `renew` and `release` store when the worker id's record holds `stored` and the
/// call names `asked`: the larger. The one rule by which a floor never goes down, on every
/// backend (the SQL backends write it as `GREATEST(floor_unix_ms, ?)` in the statement that
/// checks the lease, which is the same comparison inside the database's atomic update).
pub fn kept_floor(stored: u64, asked: u64) -> u64 {
    stored.max(asked)
}

/// Whether a ledger entry of a group's subject shows the group was acquired before: a
/// `leased` entry, or a checkpoint that folded leases (its token above 0). A sequence namespace
/// of the same name leaves neither.
pub fn is_group_trace(event: &AuditEvent) -> bool {
    match event {
        AuditEvent::Leased { .. } => true,
        AuditEvent::Checkpoint { token, .. } => *token > 0,
        _ => false,
    }
}

/// Whether `ledger` holds a trace of `group` ([`is_group_trace`]), read page by page: for the
/// backends whose acquisition is an optimistic read-then-conditional-write, which read this
/// when the group is absent and write only if it still is.
pub async fn ledger_shows_group(
    ledger: &dyn crate::AuditLog,
    group: &NamespaceName,
) -> Result<bool, StoreError> {
    const PAGE: usize = 256;
    let mut after = None;
    loop {
        let page = ledger.entries(group, after, PAGE).await?;
        if page.iter().any(|e| is_group_trace(&e.event)) {
            return Ok(true);
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = Some(last.seq),
            _ => return Ok(false),
        }
    }
}

/// The refusal of an acquisition that finds no record of `group` in the `kind` authority while
/// its audit ledger shows the group was acquired before ([`is_group_trace`]).
pub fn lost_group(group: &NamespaceName, kind: &str) -> LeaseError {
    LeaseError::Store(StoreError::StoreLost {
        message: format!(
            "lease group {group}: the {kind} authority has no record of it, but its audit ledger \
             shows it was leased before: its records were deleted (by hand, a partial restore, \
             a wiped table or key prefix). A group made afresh would hand out worker ids from \
             token 1 and floor 0 while earlier holders may still issue under them, so idmint \
             will not. Restore the group's records, or stop every node of the group, wait \
             [leases] floor_ahead_ms, and give its namespaces a new worker_group (docs/uniqueness.md, \"Stores that moved or lost \
             data\")"
        ),
    })
}

/// `base` (who asks: `host pid N`) made unique to one acquisition: `base lease <16 hex
/// digits>`, random. The holder of a [`LeaseRequest`].
pub fn unique_holder(base: &str) -> String {
    use rand::RngCore;
    format!("{base} lease {:016x}", rand::rng().next_u64())
}

/// The part of `holder` that may be shown to anyone: the name before its secret ` lease
/// <digits>` ([`unique_holder`]); a name without one is shown whole.
pub fn public_holder(holder: &str) -> &str {
    holder
        .split_once(" lease ")
        .map_or(holder, |(public, _)| public)
}

/// Whether the record `slot` names `lease`: its token and its holder. The one test of
/// `renew` and `release` in every backend.
pub fn is_current(lease: &WorkerLease, slot: &WorkerSlot) -> bool {
    #[cfg(feature = "planted")]
    if idmint_core::planted::on(idmint_core::planted::TOKEN_WITHOUT_HOLDER) {
        return slot.token == lease.token;
    }
    slot.token == lease.token && slot.holder == lease.holder
}

/// Checks that `lease` is still the current one of `slot` (`None`: the worker id has no record),
/// for `renew` and `release`: [`is_current`].
pub fn check_current(lease: &WorkerLease, slot: Option<&WorkerSlot>) -> Result<(), LeaseError> {
    match slot {
        Some(s) if is_current(lease, s) => Ok(()),
        other => Err(superseded(lease, other)),
    }
}

/// The [`LeaseError::Superseded`] of `lease`, whose worker id's record is now `slot`.
pub fn superseded(lease: &WorkerLease, slot: Option<&WorkerSlot>) -> LeaseError {
    LeaseError::Superseded {
        group: lease.group.clone(),
        worker: lease.worker,
        token: lease.token,
        current: slot.map_or(0, |s| s.token),
        holder: slot.map_or_else(String::new, |s| s.holder.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn request(choice: WorkerChoice) -> LeaseRequest {
        LeaseRequest {
            group: NamespaceName::new("events").unwrap(),
            workers: 3,
            choice,
            prefer_floor_at_most: None,
            holder: "me".into(),
            layout: "L".into(),
            ttl: Duration::from_secs(10),
        }
    }

    fn slot(worker: u64, token: u64, live: bool, floor: u64) -> WorkerSlot {
        WorkerSlot {
            worker,
            token,
            holder: format!("h{worker}"),
            floor_unix_ms: floor,
            expires_in: live.then(|| Duration::from_secs(5)),
        }
    }

    #[test]
    fn lowest_free_skips_live_and_keeps_floors() {
        let group = GroupRecord {
            layout: "L".into(),
            last_token: 7,
        };
        let slots = [slot(0, 7, true, 100), slot(1, 3, false, 200)];
        let g = plan_acquire(&request(WorkerChoice::LowestFree), Some(&group), &slots).unwrap();
        assert_eq!((g.worker, g.token, g.floor_unix_ms), (1, 8, 200));
        assert_eq!(g.group.last_token, 8);
        let g = plan_acquire(&request(WorkerChoice::LowestFree), None, &[]).unwrap();
        assert_eq!((g.worker, g.token, g.floor_unix_ms), (0, 1, 0));
    }

    #[test]
    fn lowest_free_prefers_a_floor_it_can_use_at_once() {
        let slots = [
            slot(0, 1, false, 9_000),
            slot(1, 2, false, 500),
            slot(2, 3, true, 0),
        ];
        let mut req = request(WorkerChoice::LowestFree);
        req.prefer_floor_at_most = Some(1_000);
        assert_eq!(plan_acquire(&req, None, &slots).unwrap().worker, 1);
        req.prefer_floor_at_most = Some(100);
        // 0 and 1 are ahead; 3 was never held (floor 0).
        let mut four = req.clone();
        four.workers = 4;
        assert_eq!(plan_acquire(&four, None, &slots).unwrap().worker, 3);
        // Only 3 worker ids: none can be used at once, so the lowest free.
        assert_eq!(plan_acquire(&req, None, &slots).unwrap().worker, 0);
    }

    #[test]
    fn full_pool_names_every_live_lease() {
        let slots = [
            slot(2, 3, true, 0),
            slot(0, 1, true, 0),
            slot(1, 2, true, 0),
        ];
        let err = plan_acquire(&request(WorkerChoice::LowestFree), None, &slots).unwrap_err();
        let text = err.to_string();
        assert!(matches!(&err, LeaseError::PoolFull { live, .. } if live.len() == 3));
        for h in ["h0", "h1", "h2"] {
            assert!(text.contains(h), "{text}");
        }
    }

    #[test]
    fn exact_worker_held_or_out_of_range_is_refused() {
        let slots = [slot(1, 4, true, 0)];
        let err = plan_acquire(&request(WorkerChoice::Exactly(1)), None, &slots).unwrap_err();
        assert!(matches!(&err, LeaseError::Held { worker: 1, holder, .. } if holder == "h1"));
        let err = plan_acquire(&request(WorkerChoice::Exactly(3)), None, &slots).unwrap_err();
        assert!(matches!(err, LeaseError::OutOfRange { worker: 3, .. }));
        let g = plan_acquire(&request(WorkerChoice::Exactly(2)), None, &slots).unwrap();
        assert_eq!((g.worker, g.token), (2, 5), "tokens grow past every slot's");
    }

    #[test]
    fn another_layout_is_a_conflict() {
        let group = GroupRecord {
            layout: "other".into(),
            last_token: 1,
        };
        let err = plan_acquire(&request(WorkerChoice::LowestFree), Some(&group), &[]).unwrap_err();
        assert!(matches!(err, LeaseError::LayoutConflict { .. }));
        assert!(err.to_string().contains("other"));
    }

    #[test]
    fn only_the_current_token_renews() {
        let lease = WorkerLease {
            group: NamespaceName::new("events").unwrap(),
            worker: 1,
            token: 4,
            floor_unix_ms: 0,
            ttl: Duration::from_secs(1),
            holder: "me".into(),
        };
        let mine = WorkerSlot {
            holder: "me".into(),
            ..slot(1, 4, false, 0)
        };
        assert!(check_current(&lease, Some(&mine)).is_ok());
        let err = check_current(&lease, Some(&slot(1, 5, true, 0))).unwrap_err();
        assert!(matches!(err, LeaseError::Superseded { current: 5, .. }));
        assert!(check_current(&lease, None).is_err());
        // The same token by another holder: a store that lost its records and granted token
        // 4 again. Never the same lease.
        let err = check_current(&lease, Some(&slot(1, 4, true, 0))).unwrap_err();
        assert!(
            matches!(&err, LeaseError::Superseded { current: 4, holder, .. } if holder == "h1"),
            "{err}"
        );
    }

    #[test]
    fn holders_are_unique_per_acquisition() {
        let a = unique_holder("web-1 pid 7");
        assert!(a.starts_with("web-1 pid 7 lease "), "{a}");
        assert_ne!(a, unique_holder("web-1 pid 7"));
    }

    /// The secret part of a holder name appears in no message and no public form of an error
    /// or a slot; the part before it (host, pid, url) does.
    #[test]
    fn holder_secrets_are_never_shown() {
        let holder = unique_holder("web-1 pid 7 at http://10.0.0.7:7879");
        let secret = holder.rsplit(' ').next().unwrap().to_owned();
        assert_eq!(
            public_holder(&holder),
            "web-1 pid 7 at http://10.0.0.7:7879"
        );
        assert_eq!(public_holder("plain"), "plain");
        let group = NamespaceName::new("events").unwrap();
        let live = WorkerSlot {
            holder: holder.clone(),
            ..slot(0, 1, true, 0)
        };
        let errors = [
            LeaseError::Held {
                group: group.clone(),
                worker: 0,
                holder: holder.clone(),
                expires_in: Duration::from_secs(1),
            },
            LeaseError::Superseded {
                group: group.clone(),
                worker: 0,
                token: 1,
                current: 2,
                holder: holder.clone(),
            },
            LeaseError::PoolFull {
                group,
                workers: 1,
                live: vec![live.clone()],
            },
        ];
        for e in errors {
            assert!(!e.to_string().contains(&secret), "{e}");
            let public = e.public();
            assert!(!format!("{public:?}").contains(&secret), "{public:?}");
            assert!(format!("{public:?}").contains("web-1 pid 7 at http://10.0.0.7:7879"));
        }
        assert_eq!(live.public().holder, "web-1 pid 7 at http://10.0.0.7:7879");
    }
}
