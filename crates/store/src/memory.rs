//! The in-memory authority, for tests.
//!
//! Every operation runs under one `std::sync::Mutex`, taken and released inside the call (never
//! across an `.await`), so operations are atomic and linearizable. "Durable" here means "recorded
//! for as long as this value lives": nothing survives the process, and two `MemoryAuthority`
//! values share nothing. Use it for unit tests, never for a real node.
//!
//! Its audit ledger ([`AuditLog`]) is a list under the same lock as the namespaces, appended in
//! the same critical section as the write it records; lease entries are appended under the
//! lease lock, with sequence numbers from one counter.
//!
//! Its worker leases ([`WorkerLeases`]) expire by the monotonic reading of its clock
//! ([`MemoryAuthority::with_clock`]; the operating system's by default), so a test steps lease
//! expiry with a `ManualClock` instead of sleeping.

use crate::audit::{self, Advance, Advanced, AuditEntry, AuditEvent, AuditLog};
use crate::lease::{
    is_current, plan_acquire, superseded, GroupRecord, LeaseError, LeaseRequest, WorkerLease,
    WorkerLeases, WorkerSlot,
};
use crate::parks::{self, ClaimKey, Parks};
use crate::{ops, Authority, GiveBack, Incarnation, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, Clock, NamespaceName, SequenceSpec, SystemClock};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// An authority held in memory. Clone the `Arc` it is held in to share it.
#[derive(Debug)]
pub struct MemoryAuthority {
    namespaces: Mutex<BTreeMap<NamespaceName, NamespaceState>>,
    /// Parked blocks per namespace ([`crate::parks`]); taken only while `namespaces` is held.
    parks: Mutex<BTreeMap<NamespaceName, Parks>>,
    /// The audit ledger: the last sequence number given, and the entries kept.
    audit: Mutex<(u64, Vec<AuditEntry>)>,
    leases: Mutex<BTreeMap<NamespaceName, MemoryGroup>>,
    incarnation: Mutex<Option<Incarnation>>,
    clock: LeaseClock,
}

/// A lease group: its record and, per worker id, its slot and its expiry (monotonic nanos of
/// the authority's clock; `None` once released).
#[derive(Debug)]
struct MemoryGroup {
    record: GroupRecord,
    slots: BTreeMap<u64, (WorkerSlot, Option<u64>)>,
}

struct LeaseClock(Arc<dyn Clock>);

impl std::fmt::Debug for LeaseClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

impl Default for MemoryAuthority {
    fn default() -> Self {
        Self::with_clock(Arc::new(SystemClock::new()))
    }
}

impl MemoryAuthority {
    /// An empty authority.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty authority whose worker leases expire by `clock`'s monotonic time.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryAuthority {
            namespaces: Mutex::new(BTreeMap::new()),
            parks: Mutex::new(BTreeMap::new()),
            audit: Mutex::new((0, Vec::new())),
            leases: Mutex::new(BTreeMap::new()),
            incarnation: Mutex::new(None),
            clock: LeaseClock(clock),
        }
    }

    fn lease_groups(&self) -> MutexGuard<'_, BTreeMap<NamespaceName, MemoryGroup>> {
        // As for namespaces: every write is computed first, then assigned.
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slots of `group` with their liveness as of `now` (monotonic nanos).
    fn slots_at(group: &MemoryGroup, now: u64) -> Vec<WorkerSlot> {
        group
            .slots
            .values()
            .map(|(slot, expires)| {
                let mut slot = slot.clone();
                slot.expires_in = expires
                    .filter(|&at| at > now)
                    .map(|at| Duration::from_nanos(at - now));
                slot
            })
            .collect()
    }

    /// Appends an entry. Called while the lock of the write it records is held, so entries of
    /// one subject are in the order of their writes.
    fn record(&self, subject: &NamespaceName, event: AuditEvent) {
        self.record_by(subject, event, audit::holder());
    }

    /// Deletes lease group `group`'s records (its record, worker records and live leases) and
    /// nothing else, as an operator's mistake or a partial restore would: for tests and the
    /// simulation, which check that the group is never created again.
    pub fn delete_lease_group_records(&self, group: &NamespaceName) {
        self.lease_groups().remove(group);
    }

    /// Whether the ledger holds a trace of lease group `group` ([`crate::lease::is_group_trace`]).
    /// Called with the lease groups' lock held (one order: groups, then the ledger).
    fn ledger_shows_group(&self, group: &NamespaceName) -> bool {
        let guard = self.audit.lock().unwrap_or_else(PoisonError::into_inner);
        guard
            .1
            .iter()
            .any(|e| &e.subject == group && crate::lease::is_group_trace(&e.event))
    }

    /// [`Self::record`], granted to `holder`.
    fn record_by(&self, subject: &NamespaceName, event: AuditEvent, holder: &str) {
        let mut guard = self.audit.lock().unwrap_or_else(PoisonError::into_inner);
        let (last, log) = &mut *guard;
        *last += 1;
        let seq = *last;
        log.push(AuditEntry {
            seq,
            at_unix_ms: audit::now_unix_ms(),
            subject: subject.clone(),
            event,
            holder: holder.to_string(),
        });
    }

    /// The parks, taken while the namespaces' lock is held (one order: namespaces, then parks).
    fn parks(&self) -> MutexGuard<'_, BTreeMap<NamespaceName, Parks>> {
        self.parks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<NamespaceName, NamespaceState>> {
        // Every operation computes its result before it writes, and each write is a single
        // assignment, so the map is consistent even if a holder panicked: ignore the poison.
        self.namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Authority for MemoryAuthority {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn incarnation(&self) -> Result<Option<Incarnation>, StoreError> {
        Ok(self
            .incarnation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }

    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        Ok(self
            .incarnation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(|| candidate.clone())
            .clone())
    }

    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        Some(self)
    }

    fn audit_log(&self) -> Option<&dyn AuditLog> {
        Some(self)
    }

    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        let mut map = self.lock();
        let state = map
            .get_mut(name)
            .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() })?;
        let from = state.watermark;
        if let Some(next) = ops::advance(state, to, why)? {
            self.record(name, ops::advance_event(why, from, next.watermark));
            *state = next;
        }
        let mut parks = self.parks();
        if let Some(p) = parks.get_mut(name) {
            *p = p.after_advance(state, to);
        }
        Ok(Advanced {
            from,
            state: state.clone(),
        })
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let mut map = self.lock();
        match ops::ensure(name, map.get(name), spec)? {
            Some(created) => {
                map.insert(name.clone(), created.clone());
                Ok(created)
            }
            None => map
                .get(name)
                .cloned()
                .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() }),
        }
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        let mut map = self.lock();
        let state = map
            .get_mut(name)
            .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() })?;
        let block = ops::reserve(state, count)?;
        state.watermark = block.end();
        self.record(
            name,
            AuditEvent::Granted {
                start: block.start(),
                end: block.end(),
            },
        );
        Ok(Reservation {
            block,
            watermark: block.end(),
        })
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        Ok(self.lock().get(name).cloned())
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        // A BTreeMap iterates in key order: sorted by name.
        Ok(self.lock().values().cloned().collect())
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let mut map = self.lock();
        let state = map
            .get_mut(name)
            .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() })?;
        match ops::give_back(state, tail)? {
            Ok(watermark) => {
                state.watermark = watermark;
                self.record(
                    name,
                    AuditEvent::GivenBack {
                        start: tail.start(),
                        end: tail.end(),
                    },
                );
                Ok(GiveBack::Returned)
            }
            Err(refused) => Ok(refused),
        }
    }

    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        let map = self.lock();
        let state = map
            .get(name)
            .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() })?;
        let mut parks = self.parks();
        let next = parks
            .get(name)
            .cloned()
            .unwrap_or_default()
            .park(state, key, blocks)?;
        parks.insert(name.clone(), next);
        for event in parks::events(blocks, false) {
            self.record(name, event);
        }
        Ok(())
    }

    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        let map = self.lock();
        let state = map
            .get(name)
            .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() })?;
        let mut parks = self.parks();
        let (next, blocks) = parks
            .get(name)
            .cloned()
            .unwrap_or_default()
            .claim(state, key)?;
        parks.insert(name.clone(), next);
        for event in parks::events(&blocks, true) {
            self.record(name, event);
        }
        Ok(blocks)
    }
}

#[async_trait]
impl AuditLog for MemoryAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        let guard = self.audit.lock().unwrap_or_else(PoisonError::into_inner);
        let mut subjects: Vec<NamespaceName> = guard.1.iter().map(|e| e.subject.clone()).collect();
        subjects.sort();
        subjects.dedup();
        Ok(subjects)
    }

    async fn entries(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let guard = self.audit.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(guard
            .1
            .iter()
            .filter(|e| &e.subject == subject && after.is_none_or(|a| e.seq > a))
            .take(limit)
            .cloned()
            .collect())
    }

    /// The process clock stamps the entries: it is this store's clock.
    async fn now_unix_ms(&self) -> Result<u64, StoreError> {
        Ok(audit::now_unix_ms())
    }

    async fn fold(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
    ) -> Result<u64, StoreError> {
        let mut guard = self.audit.lock().unwrap_or_else(PoisonError::into_inner);
        let log = &mut guard.1;
        let Some(kept) = log
            .iter_mut()
            .find(|e| &e.subject == subject && e.seq == through)
        else {
            return Ok(0);
        };
        kept.event = checkpoint;
        let before = log.len();
        log.retain(|e| &e.subject != subject || e.seq >= through);
        Ok((before - log.len()) as u64)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[async_trait]
impl WorkerLeases for MemoryAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        let now = self.clock.0.monotonic_nanos();
        let mut groups = self.lease_groups();
        let existing = groups.get(&request.group);
        if existing.is_none() && self.ledger_shows_group(&request.group) {
            return Err(crate::lease::lost_group(&request.group, "memory"));
        }
        let slots = existing.map_or_else(Vec::new, |g| Self::slots_at(g, now));
        let grant = plan_acquire(request, existing.map(|g| &g.record), &slots)?;
        let slot = WorkerSlot {
            worker: grant.worker,
            token: grant.token,
            holder: request.holder.clone(),
            floor_unix_ms: grant.floor_unix_ms,
            expires_in: Some(request.ttl),
        };
        let group = groups
            .entry(request.group.clone())
            .or_insert_with(|| MemoryGroup {
                record: grant.group.clone(),
                slots: BTreeMap::new(),
            });
        group.record = grant.group;
        group.slots.insert(
            grant.worker,
            (slot, Some(now.saturating_add(nanos(request.ttl)))),
        );
        self.record_by(
            &request.group,
            AuditEvent::Leased {
                worker: grant.worker,
                token: grant.token,
            },
            &request.holder,
        );
        Ok(WorkerLease {
            group: request.group.clone(),
            worker: grant.worker,
            token: grant.token,
            floor_unix_ms: grant.floor_unix_ms,
            ttl: request.ttl,
            holder: request.holder.clone(),
        })
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let now = self.clock.0.monotonic_nanos();
        let mut groups = self.lease_groups();
        let entry = groups
            .get_mut(&lease.group)
            .and_then(|g| g.slots.get_mut(&lease.worker));
        let (slot, expires) = match entry {
            Some((slot, expires)) if is_current(lease, slot) => (slot, expires),
            other => return Err(superseded(lease, other.map(|(s, _)| &*s))),
        };
        slot.floor_unix_ms = crate::lease::kept_floor(slot.floor_unix_ms, floor_unix_ms);
        *expires = Some(now.saturating_add(nanos(lease.ttl)));
        Ok(WorkerLease {
            floor_unix_ms: slot.floor_unix_ms,
            ..lease.clone()
        })
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        let mut groups = self.lease_groups();
        let entry = groups
            .get_mut(&lease.group)
            .and_then(|g| g.slots.get_mut(&lease.worker));
        match entry {
            Some((slot, expires)) if is_current(lease, slot) => {
                slot.floor_unix_ms = crate::lease::kept_floor(slot.floor_unix_ms, floor_unix_ms);
                *expires = None;
                Ok(())
            }
            other => Err(superseded(lease, other.map(|(s, _)| &*s))),
        }
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        let now = self.clock.0.monotonic_nanos();
        let groups = self.lease_groups();
        Ok(groups
            .get(group)
            .map(|g| (g.record.clone(), Self::slots_at(g, now))))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_conformance_suite() {
        let authority = Arc::new(MemoryAuthority::new());
        // A memory authority "reopens" as itself: its state lives as long as the value.
        crate::conformance::run_all(move || {
            let authority = authority.clone();
            async move { authority as Arc<dyn Authority> }
        })
        .await;
    }

    #[tokio::test]
    async fn reserve_moves_the_watermark() {
        let a = MemoryAuthority::new();
        let name = NamespaceName::new("m").unwrap();
        a.ensure_namespace(&name, SequenceSpec::default_64())
            .await
            .unwrap();
        let r = a.reserve(&name, 10).await.unwrap();
        assert_eq!((r.block.start(), r.block.end(), r.watermark), (1, 11, 11));
        assert_eq!(a.state(&name).await.unwrap().unwrap().watermark, 11);
    }
}
