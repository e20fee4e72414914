//! Several authorities sharing namespaces, each owning one residue class: Flickr's odd/even
//! ticket servers generalised to N.
//!
//! Every member gets each namespace with the namespace's width, start and step, and its own
//! `offset`, so member `k` only ever grants ids `≡ offset_k (mod step)` (invariant 5): ids from
//! different members never collide, whatever each member's watermark. Reservations go
//! round-robin; a member that fails with [`StoreError::Unavailable`] is skipped for a back-off
//! period and tried again after it, so the node comes back to it when it recovers.
//!
//! **Every namespace exists on every member** (docs/uniqueness.md, "Lost and stale members"):
//! a namespace is created only while every member answers, on all of them; a namespace some
//! member has is never created on another. So a member that answers "unknown namespace" for a
//! namespace that exists (on another member, or set up by this process) has lost its data (a
//! restored backup, a wiped or replaced server) or was added to a running deployment: its
//! residue class may already have been handed out, and re-creating the namespace there would
//! re-issue it. Such a member is **taken out of service** until the process restarts, with a
//! loud error, and at the next start it is found missing again: only an operator's re-seed
//! (`idmint admin reseed`) brings it back. The same happens to a member whose stored spec
//! disagrees with the configuration while others agree (a stale member), and to a member that
//! answers a hard error (corrupt data, an invalid setup): one member's fault never stops the
//! others. A member is checked against every namespace this process set up before it is used,
//! at start and each time it comes back from being down or pending.
//!
//! A member may start **pending**: [`crate::connect`] could not reach it at start-up, so its slot
//! holds a [`Connector`] instead of an authority. A pending member is treated as a member that is
//! down: on use, once its back-off has passed, the connector is tried again (one attempt at a
//! time); when it connects, the slot holds the authority from then on. So a node starts on the
//! members that answer and picks the others up as they come, exactly as it does at run time.
//!
//! Each member's health (up or down, the latest error) is kept per member, readable with
//! [`Authority::members`]; a [`MemberEvents`] observer hears each transition once (up to down,
//! down to up), never once per request. The crate has no logging: the binary logs from the
//! observer.
//!
//! **Parked blocks** ([`crate::parks`]) live with the member owning their residue class: a park
//! is split by class and parked at each owner under the same key (atomic per member, not across
//! members), and a claim asks every member and returns what all of them held, so the key needs
//! no record of which members it used. A member that has nothing under the key, or does not
//! answer, holds nothing of the claim while another member returned blocks; what an
//! unreachable member holds then stays parked, never claimed: burned, never served twice.
//!
//! The back-off is measured on an injected [`Clock`]'s monotonic time ([`SystemClock`] unless
//! [`MultiAuthority::with_clock`] is given another), so tests step time instead of sleeping.
//!
//! Locks: each member's state is behind a `std::sync::Mutex`, held only to read or swap a few
//! fields, never across `.await`; observers are called after it is released.
//!
//! What it does not do: make ids increase across members (as with Flickr's pair, each member's
//! stream increases; the interleaving does not; the node sorts each answer), move a namespace
//! between members, bring back a member taken out of service, or retry a pending member while
//! nothing uses the authority (a reservation, a read, `/readyz`). A process that crashed in the
//! middle of creating a namespace leaves it on some members only; the next start takes the
//! others out of service (safe, and an operator re-seeds them).

use crate::lease::{GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases, WorkerSlot};
use crate::{Authority, GiveBack, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, Clock, NamespaceName, SequenceSpec, SystemClock};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a member that failed is skipped before it is tried again.
const DOWN_BACKOFF: Duration = Duration::from_millis(500);

/// A member's health as the multi authority last saw it ([`Authority::members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberHealth {
    /// The member's place in the config, counted from 1.
    pub number: usize,
    /// The member's kind (`postgres`, `mysql`, ...).
    pub kind: &'static str,
    /// The residue class it owns.
    pub offset: u64,
    /// Whether its latest operation (or connection attempt) succeeded.
    pub up: bool,
    /// The latest failure, kept after it recovers (no connection URL: backends name host and
    /// port only).
    pub last_error: Option<String>,
    /// Why the member is out of service (lost data, a stale spec, a hard error); `None` while it
    /// serves. A member out of service stays out until the process restarts.
    pub out_of_service: Option<String>,
}

/// What an authority made of several tells about its members ([`Authority::members`]).
pub trait Members: Send + Sync {
    /// The health of each member, in config order, as last seen (no I/O).
    fn health(&self) -> Vec<MemberHealth>;

    /// What `idmint audit verify` (and the node's pruning of the audit ledger) reads instead
    /// of the whole: every member in config order, each with its own ledger and watermarks,
    /// or why it cannot be read (a member never connected). A verification that cannot read
    /// a member fails: it must not pass on the members it could read.
    fn audited(&self) -> Vec<AuditedMember>;
}

/// One member's ledger as [`Members::audited`] gives it.
pub struct AuditedMember {
    /// The member's place in the config, counted from 1.
    pub number: usize,
    /// The member's kind (`postgres`, `mysql`, ...).
    pub kind: &'static str,
    /// Its authority, or why there is none to read (the latest connection error).
    pub ledger: Result<Arc<dyn Authority>, String>,
}

impl fmt::Debug for AuditedMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditedMember")
            .field("number", &self.number)
            .field("kind", &self.kind)
            .field("connected", &self.ledger.is_ok())
            .finish()
    }
}

/// Hears each member's transitions: called once when a member goes down (or starts pending) and
/// once when it comes back, with its health after the change.
pub trait MemberEvents: Send + Sync + fmt::Debug {
    /// `member` changed state; `member.up` says to which.
    fn changed(&self, member: &MemberHealth);
}

/// Connects a member that could not be reached at start-up; the error is its message.
pub type Connector = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Arc<dyn Authority>, String>> + Send>>
        + Send
        + Sync,
>;

/// One member as given to [`MultiAuthority::with_slots`]: connected, or pending with the means
/// to connect it later.
pub struct MemberSlot {
    kind: &'static str,
    offset: u64,
    authority: Option<Arc<dyn Authority>>,
    connector: Option<Connector>,
    error: Option<String>,
}

impl fmt::Debug for MemberSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberSlot")
            .field("kind", &self.kind)
            .field("offset", &self.offset)
            .field("connected", &self.authority.is_some())
            .field("error", &self.error)
            .finish()
    }
}

impl MemberSlot {
    /// A connected member owning `offset`.
    pub fn connected(authority: Arc<dyn Authority>, offset: u64) -> Self {
        MemberSlot {
            kind: authority.kind(),
            offset,
            authority: Some(authority),
            connector: None,
            error: None,
        }
    }

    /// A member of `kind` owning `offset` that could not be connected (`error`); `connector` is
    /// tried again when the member's back-off has passed.
    pub fn pending(kind: &'static str, offset: u64, error: String, connector: Connector) -> Self {
        MemberSlot {
            kind,
            offset,
            authority: None,
            connector: Some(connector),
            error: Some(error),
        }
    }
}

/// What the multi authority knows of one member. Behind a `std::sync::Mutex`: a few fields read
/// or swapped, never held across `.await`.
#[derive(Debug)]
struct MemberState {
    /// `None` while pending.
    authority: Option<Arc<dyn Authority>>,
    /// Monotonic nanoseconds of the clock until which the member is skipped.
    down_until: Option<u64>,
    up: bool,
    last_error: Option<String>,
    /// Set when the member was taken out of service, with why; never cleared.
    out_of_service: Option<String>,
    /// Whether the member was checked against every namespace set up so far since it last
    /// connected or came back.
    verified: bool,
}

struct Member {
    number: usize,
    kind: &'static str,
    offset: u64,
    state: Mutex<MemberState>,
    connector: Option<Connector>,
    /// A connection attempt is in flight: others do not start a second one.
    connecting: AtomicBool,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("number", &self.number)
            .field("kind", &self.kind)
            .field("offset", &self.offset)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Clears [`Member::connecting`] however the attempt ends (also when its future is dropped).
struct Attempt<'a>(&'a AtomicBool);

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Member {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_down(&self, now_nanos: u64) -> bool {
        self.lock().down_until.is_some_and(|t| t > now_nanos)
    }

    fn health(&self) -> MemberHealth {
        let state = self.lock();
        MemberHealth {
            number: self.number,
            kind: self.kind,
            offset: self.offset,
            up: state.up,
            last_error: state.last_error.clone(),
            out_of_service: state.out_of_service.clone(),
        }
    }

    fn is_out_of_service(&self) -> bool {
        self.lock().out_of_service.is_some()
    }

    fn unavailable(&self, message: String) -> StoreError {
        StoreError::Unavailable {
            backend: self.kind,
            message: format!("member {} ({}): {message}", self.number, self.kind),
        }
    }

    /// The member's authority; a pending member is connected first if its back-off has passed
    /// and no other attempt is in flight, else it is unavailable.
    async fn authority(&self, multi: &MultiAuthority) -> Result<Arc<dyn Authority>, StoreError> {
        {
            let state = self.lock();
            if let Some(a) = &state.authority {
                return Ok(a.clone());
            }
        }
        let Some(connector) = &self.connector else {
            return Err(self.unavailable("not connected".into()));
        };
        if self.is_down(multi.clock.monotonic_nanos()) {
            return Err(self.unavailable("not connected yet; retrying after a back-off".into()));
        }
        if self.connecting.swap(true, Ordering::Acquire) {
            return Err(self.unavailable("a connection attempt is in flight".into()));
        }
        let _attempt = Attempt(&self.connecting);
        match connector().await {
            Ok(authority) => {
                let mut state = self.lock();
                let a = state.authority.get_or_insert(authority).clone();
                Ok(a)
            }
            Err(message) => {
                let e = self.unavailable(format!("not connected: {message}"));
                multi.record(self, Err(&e));
                Err(e)
            }
        }
    }
}

/// Whether an operation may write to a member ([`MultiAuthority::usable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// `state`, `list`: never writes.
    Read,
    /// `ensure_namespace`, `reserve`, `give_back`.
    Write,
}

/// A namespace this process set up.
#[derive(Debug, Clone)]
struct Setup {
    /// The namespace-level spec (offset 0).
    spec: SequenceSpec,
    /// Whether this process created it (no member had it): then a member it could not create
    /// it on is still to be created, not lost.
    created_here: bool,
    /// Per member (config order), whether it is known to hold the namespace.
    on: Vec<bool>,
}

/// Authorities each owning a residue class of every namespace. See the module docs.
pub struct MultiAuthority {
    members: Vec<Member>,
    next: AtomicUsize,
    /// The namespaces `ensure_namespace` set up in this process, and where.
    specs: Mutex<HashMap<NamespaceName, Setup>>,
    /// Measures the back-off of members that failed.
    clock: Arc<dyn Clock>,
    /// Hears members' transitions.
    events: Option<Arc<dyn MemberEvents>>,
}

impl fmt::Debug for MultiAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiAuthority")
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

impl MultiAuthority {
    /// Members with their offsets. At least two, offsets distinct. Back-offs are measured on
    /// the [`SystemClock`].
    pub fn new(members: Vec<(Arc<dyn Authority>, u64)>) -> Result<Self, StoreError> {
        Self::with_clock(members, Arc::new(SystemClock::new()))
    }

    /// [`MultiAuthority::new`], measuring the back-off of failed members on `clock`.
    pub fn with_clock(
        members: Vec<(Arc<dyn Authority>, u64)>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let slots = members
            .into_iter()
            .map(|(a, offset)| MemberSlot::connected(a, offset))
            .collect();
        Self::with_slots(slots, clock)
    }

    /// Members connected or pending, numbered from 1 in this order. At least two, offsets
    /// distinct, at least one connected. A pending member starts down (its back-off running)
    /// with its connection error as its latest error.
    pub fn with_slots(slots: Vec<MemberSlot>, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        if slots.len() < 2 {
            return Err(StoreError::InvalidSetup {
                message: "a multi authority needs at least two members".into(),
            });
        }
        let mut offsets: Vec<u64> = slots.iter().map(|s| s.offset).collect();
        offsets.sort_unstable();
        if offsets.windows(2).any(|w| w[0] == w[1]) {
            return Err(StoreError::InvalidSetup {
                message: "two members have the same offset; their ids would collide".into(),
            });
        }
        if slots.iter().all(|s| s.authority.is_none()) {
            return Err(StoreError::InvalidSetup {
                message: "no member of the multi authority is connected".into(),
            });
        }
        let backoff = u64::try_from(DOWN_BACKOFF.as_nanos()).unwrap_or(u64::MAX);
        let now = clock.monotonic_nanos();
        Ok(MultiAuthority {
            members: slots
                .into_iter()
                .enumerate()
                .map(|(i, slot)| {
                    let up = slot.authority.is_some();
                    Member {
                        number: i + 1,
                        kind: slot.kind,
                        offset: slot.offset,
                        state: Mutex::new(MemberState {
                            authority: slot.authority,
                            down_until: (!up).then(|| now.saturating_add(backoff)),
                            up,
                            last_error: slot.error,
                            out_of_service: None,
                            verified: false,
                        }),
                        connector: slot.connector,
                        connecting: AtomicBool::new(false),
                    }
                })
                .collect(),
            next: AtomicUsize::new(0),
            specs: Mutex::new(HashMap::new()),
            clock,
            events: None,
        })
    }

    /// Reports members' transitions to `events`; members that start pending are reported at
    /// once, as down.
    pub fn with_events(mut self, events: Arc<dyn MemberEvents>) -> Self {
        for m in &self.members {
            let health = m.health();
            if !health.up {
                events.changed(&health);
            }
        }
        self.events = Some(events);
        self
    }

    /// Records the outcome of an operation on `m`: an `Unavailable` error marks it down for the
    /// back-off, success marks it up; other errors (unknown namespace, exhausted, ...) say
    /// nothing of its health. A change of `up` is reported once to the observer.
    fn record(&self, m: &Member, outcome: Result<(), &StoreError>) {
        let changed = {
            let mut state = m.lock();
            let was_up = state.up;
            match outcome {
                Ok(()) => {
                    state.up = true;
                    state.down_until = None;
                }
                Err(e) if e.is_unavailable() => {
                    let backoff = u64::try_from(DOWN_BACKOFF.as_nanos()).unwrap_or(u64::MAX);
                    state.up = false;
                    state.verified = false;
                    state.down_until = Some(self.clock.monotonic_nanos().saturating_add(backoff));
                    state.last_error = Some(e.to_string());
                }
                Err(_) => return,
            }
            was_up != state.up
        };
        if changed {
            if let Some(events) = &self.events {
                events.changed(&m.health());
            }
        }
    }

    /// Takes `m` out of service for good (this process): it is skipped by every operation.
    /// Reported once to the observer.
    fn take_out(&self, m: &Member, reason: String) {
        {
            let mut state = m.lock();
            if state.out_of_service.is_some() {
                return;
            }
            state.up = false;
            state.last_error = Some(reason.clone());
            state.out_of_service = Some(reason);
        }
        if let Some(events) = &self.events {
            events.changed(&m.health());
        }
    }

    /// Why `m` cannot serve a namespace that exists elsewhere but not on it.
    fn lost_reason(&self, m: &Member, name: &NamespaceName) -> String {
        format!(
            "member {} ({}) has no record of namespace {name}, which exists on the other members: \
             it lost its data (a restored backup, a wiped or replaced server) or was added to a \
             running deployment, and its residue class {} may already have been handed out; it \
             stays out of service until an operator re-seeds it above every id it ever granted \
             (`idmint admin reseed`, docs/uniqueness.md)",
            m.number, m.kind, m.offset
        )
    }

    /// The authority of a member that may serve: not out of service, connected (a pending one
    /// is connected if its back-off has passed), and checked against every namespace set up so
    /// far. A member found to have lost a namespace, or to hold another spec, is taken out of
    /// service here. With `access` [`Access::Read`] nothing is written: a creation this process
    /// left unfinished on the member is finished by the next write, not by a read (the member
    /// stays unverified until then).
    async fn usable(&self, m: &Member, access: Access) -> Result<Arc<dyn Authority>, StoreError> {
        if let Some(reason) = m.lock().out_of_service.clone() {
            return Err(StoreError::Unavailable {
                backend: m.kind,
                message: format!(
                    "member {} ({}) is out of service: {reason}",
                    m.number, m.kind
                ),
            });
        }
        let a = m.authority(self).await?;
        if m.lock().verified {
            return Ok(a);
        }
        let known: Vec<(NamespaceName, Setup)> = self
            .specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect();
        let mut unfinished = false;
        for (name, setup) in known {
            let expected = self.member_spec(setup.spec, m.offset)?;
            let found = a.state(&name).await;
            self.record(m, found.as_ref().map(|_| ()));
            let reason = match found {
                Ok(Some(state)) if state.spec == expected => {
                    self.note_on(&name, m);
                    continue;
                }
                Ok(Some(state)) => format!(
                    "member {} ({}) holds namespace {name} with {} but the configuration \
                     gives it {}: a stale member, refused so that it never serves ids of \
                     another spec",
                    m.number,
                    m.kind,
                    crate::describe_spec(&state.spec),
                    crate::describe_spec(&expected)
                ),
                Ok(None)
                    if setup.created_here && !setup.on[m.number - 1] && access == Access::Read =>
                {
                    unfinished = true;
                    continue;
                }
                Ok(None) if setup.created_here && !setup.on[m.number - 1] => {
                    // This process created the namespace while this member failed: finish.
                    let created = a.ensure_namespace(&name, expected).await;
                    self.record(m, created.as_ref().map(|_| ()));
                    match created {
                        Ok(_) => {
                            self.note_on(&name, m);
                            continue;
                        }
                        Err(e) if e.is_unavailable() => return Err(e),
                        Err(e) => format!("member {} ({}) failed: {e}", m.number, m.kind),
                    }
                }
                Ok(None) => self.lost_reason(m, &name),
                Err(e) if e.is_unavailable() => return Err(e),
                Err(e) => format!("member {} ({}) failed: {e}", m.number, m.kind),
            };
            self.take_out(m, reason.clone());
            return Err(StoreError::Unavailable {
                backend: m.kind,
                message: reason,
            });
        }
        if !unfinished {
            m.lock().verified = true;
        }
        Ok(a)
    }

    fn member_spec(&self, spec: SequenceSpec, offset: u64) -> Result<SequenceSpec, StoreError> {
        SequenceSpec::new(spec.width(), spec.first(), spec.step(), offset).map_err(|e| {
            StoreError::InvalidSetup {
                message: format!("member offset {offset} with step {}: {e}", spec.step()),
            }
        })
    }

    /// The namespace-level spec: a member's, with offset 0.
    fn namespace_spec(&self, member: &SequenceSpec) -> Result<SequenceSpec, StoreError> {
        SequenceSpec::new(member.width(), member.first(), member.step(), 0).map_err(|e| {
            StoreError::Corrupt {
                message: format!("member spec: {e}"),
            }
        })
    }

    fn combined(&self, states: Vec<NamespaceState>) -> Result<Option<NamespaceState>, StoreError> {
        let Some(first) = states.first() else {
            return Ok(None);
        };
        let spec = self.namespace_spec(&first.spec)?;
        let watermark = states
            .iter()
            .map(|s| s.watermark)
            .max()
            .unwrap_or(first.watermark);
        // Retired once every member reached is: a retirement interrupted by a member that was
        // down is finished by running it again, and until then the others still serve.
        let retired = states.iter().all(|s| s.retired);
        Ok(Some(NamespaceState {
            name: first.name.clone(),
            spec,
            watermark,
            retired,
        }))
    }

    /// Member indices in the order to try: round-robin start, members not marked down first.
    fn order(&self) -> Vec<usize> {
        let n = self.members.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let now = self.clock.monotonic_nanos();
        let mut order: Vec<usize> = (0..n)
            .map(|i| (start + i) % n)
            .filter(|i| !self.members[*i].is_out_of_service())
            .collect();
        order.sort_by_key(|i| self.members[*i].is_down(now));
        order
    }

    fn known_spec(&self, name: &NamespaceName) -> Option<SequenceSpec> {
        self.specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|s| s.spec)
    }

    fn setup(&self, name: &NamespaceName) -> Option<Setup> {
        self.specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Records that member `m` holds `name`.
    fn note_on(&self, name: &NamespaceName, m: &Member) {
        if let Some(setup) = self
            .specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(name)
        {
            if let Some(on) = setup.on.get_mut(m.number - 1) {
                *on = true;
            }
        }
    }
}

impl Members for MultiAuthority {
    /// Every member in config order, as last seen.
    fn health(&self) -> Vec<MemberHealth> {
        self.members.iter().map(Member::health).collect()
    }

    /// Every member; a pending one with the error that kept it from connecting.
    fn audited(&self) -> Vec<AuditedMember> {
        self.members
            .iter()
            .map(|m| {
                let state = m.lock();
                let ledger = state.authority.clone().ok_or_else(|| {
                    state
                        .last_error
                        .clone()
                        .unwrap_or_else(|| "not connected".to_string())
                });
                AuditedMember {
                    number: m.number,
                    kind: m.kind,
                    ledger,
                }
            })
            .collect()
    }
}

#[async_trait]
impl Authority for MultiAuthority {
    fn kind(&self) -> &'static str {
        "multi"
    }

    fn members(&self) -> Option<&dyn Members> {
        Some(self)
    }

    /// The first member's leases ([`WorkerLeases`] below).
    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        Some(self)
    }

    /// The residue classes of the members, in config order.
    fn residues(&self, _spec: &SequenceSpec) -> Vec<u64> {
        self.members.iter().map(|m| m.offset).collect()
    }

    /// Sets the namespace up on every member, each with its own offset, keeping "every
    /// namespace exists on every member" (module docs):
    /// - no member has it: it is created on all of them, only if every member answers (else
    ///   `Unavailable`, naming the member that did not);
    /// - some members have it: members that answer without it have lost it (or were added) and
    ///   are taken out of service; members that hold another spec are taken out if some member
    ///   holds the configured one, and the whole call is a `SpecConflict` if none does (the
    ///   configuration changed the namespace, e.g. by adding a member);
    /// - `Ok` once at least one member serving it has it durably; members that were down are
    ///   checked when they come back.
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let earlier = self.setup(name);
        // A retry of a creation this process started (some member failed it): finish it.
        let creating_here = earlier.as_ref().is_some_and(|s| s.created_here);
        let mut present: Vec<(&Member, NamespaceState)> = Vec::new();
        let mut missing: Vec<(&Member, Arc<dyn Authority>)> = Vec::new();
        let mut disagreeing: Vec<(&Member, NamespaceState)> = Vec::new();
        let mut unreachable: Vec<(&Member, StoreError)> = Vec::new();
        for m in &self.members {
            let expected = self.member_spec(spec, m.offset)?;
            let a = match self.usable(m, Access::Write).await {
                Ok(a) => a,
                Err(e) => {
                    unreachable.push((m, e));
                    continue;
                }
            };
            let found = a.state(name).await;
            self.record(m, found.as_ref().map(|_| ()));
            match found {
                Ok(Some(state)) if state.spec == expected => present.push((m, state)),
                Ok(Some(state)) => disagreeing.push((m, state)),
                Ok(None) => missing.push((m, a)),
                Err(e) if e.is_unavailable() => unreachable.push((m, e)),
                Err(e) => {
                    self.take_out(m, format!("member {} ({}) failed: {e}", m.number, m.kind));
                    unreachable.push((m, e));
                }
            }
        }
        if present.is_empty() && !disagreeing.is_empty() {
            let (m, state) = &disagreeing[0];
            return Err(StoreError::InvalidSetup {
                message: format!(
                    "namespace {name} exists on member {} ({}) with {} but the configuration asks \
                     {}: a namespace's step and start cannot change, and a multi authority's \
                     members cannot be added or removed for an existing namespace, because that \
                     would re-issue ids; keep the [authority] members and the namespace's step as \
                     they were, or give the new setting to a new namespace",
                    m.number,
                    m.kind,
                    crate::describe_spec(&self.namespace_spec(&state.spec)?),
                    crate::describe_spec(&spec),
                ),
            });
        }
        for (m, state) in &disagreeing {
            self.take_out(
                m,
                format!(
                    "member {} ({}) holds namespace {name} with {}, the other members with the \
                     configured {}: a stale member, refused so that it never serves ids of another \
                     spec",
                    m.number,
                    m.kind,
                    crate::describe_spec(&state.spec),
                    crate::describe_spec(&self.member_spec(spec, m.offset)?),
                ),
            );
        }
        if present.is_empty() && !creating_here {
            // A new namespace: on every member at once, or not at all.
            if let Some((m, e)) = unreachable.first() {
                return Err(StoreError::Unavailable {
                    backend: "multi",
                    message: format!(
                        "cannot create namespace {name} while member {} ({}) does not answer \
                         ({e}): a namespace is created on every member at once, so that a member \
                         without it is known to have lost it",
                        m.number, m.kind
                    ),
                });
            }
        } else if !creating_here {
            for (m, _) in &missing {
                self.take_out(m, self.lost_reason(m, name));
            }
            missing.clear();
        }
        // From here on this process has set the namespace up: a member without it is created
        // only if this process is the one creating it (no member had it).
        let created_here = creating_here || present.is_empty();
        self.specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.clone())
            .or_insert_with(|| Setup {
                spec,
                created_here,
                on: vec![false; self.members.len()],
            });
        for (m, _) in &present {
            self.note_on(name, m);
        }
        let mut states: Vec<NamespaceState> = present.into_iter().map(|(_, s)| s).collect();
        for (m, a) in missing {
            let created = a
                .ensure_namespace(name, self.member_spec(spec, m.offset)?)
                .await;
            self.record(m, created.as_ref().map(|_| ()));
            match created {
                Ok(s) => {
                    self.note_on(name, m);
                    states.push(s)
                }
                Err(e) if e.is_unavailable() => unreachable.push((m, e)),
                Err(e) => {
                    self.take_out(m, format!("member {} ({}) failed: {e}", m.number, m.kind));
                    unreachable.push((m, e));
                }
            }
        }
        match self.combined(states)? {
            Some(state) => Ok(state),
            None => Err(unreachable
                .pop()
                .map(|(_, e)| e)
                .unwrap_or(StoreError::Unavailable {
                    backend: "multi",
                    message: "no member serves".into(),
                })),
        }
    }

    /// Reserves from the next member in turn, skipping members that fail. The block is the
    /// member's alone (its residue class), durable as that member guarantees. A member that
    /// answers "unknown namespace" for a namespace set up here, a block outside its class, or
    /// a hard error is taken out of service and the next member is asked.
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        let mut last_error = None;
        // A member that answered `Retired` decides the answer when no member grants a block:
        // the namespace was retired, whatever the other members answered.
        let mut retired = None;
        let spec = self.known_spec(name);
        for i in self.order() {
            let m = &self.members[i];
            let result = match self.usable(m, Access::Write).await {
                Ok(a) => a.reserve(name, count).await,
                Err(e) => Err(e),
            };
            self.record(m, result.as_ref().map(|_| ()));
            match result {
                Ok(r) => {
                    let fits = spec.is_none_or(|s| {
                        r.block.step() == s.step() && r.block.start() % s.step() == m.offset
                    });
                    if fits {
                        return Ok(r);
                    }
                    let reason = format!(
                        "member {} ({}) granted [{}, {}) step {}, outside its residue class {}",
                        m.number,
                        m.kind,
                        r.block.start(),
                        r.block.end(),
                        r.block.step(),
                        m.offset
                    );
                    self.take_out(m, reason.clone());
                    last_error = Some(StoreError::Corrupt { message: reason });
                }
                Err(e @ StoreError::Unavailable { .. }) => last_error = Some(e),
                Err(e @ StoreError::Exhausted { .. }) => last_error = Some(e),
                Err(e @ StoreError::Retired { .. }) => retired = Some(e),
                Err(e @ StoreError::InvalidCount) => return Err(e),
                Err(e @ StoreError::UnknownNamespace { .. }) if spec.is_none() => {
                    last_error = Some(e)
                }
                Err(StoreError::UnknownNamespace { .. }) => {
                    let reason = self.lost_reason(m, name);
                    self.take_out(m, reason.clone());
                    last_error = Some(StoreError::Lost {
                        name: name.clone(),
                        message: reason,
                    });
                }
                Err(other) => {
                    self.take_out(
                        m,
                        format!("member {} ({}) failed: {other}", m.number, m.kind),
                    );
                    last_error = Some(other);
                }
            }
        }
        Err(retired.or(last_error).unwrap_or(StoreError::Unavailable {
            backend: "multi",
            message: "no member in service".into(),
        }))
    }

    /// The namespace as the reachable members record it: the namespace-level spec (offset 0),
    /// the highest member watermark, retired when every member reached is.
    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        let mut states = Vec::new();
        let mut reached = false;
        let mut last_error = None;
        for m in &self.members {
            if m.is_out_of_service() {
                continue;
            }
            let result = match self.usable(m, Access::Read).await {
                Ok(a) => a.state(name).await,
                Err(e) => Err(e),
            };
            self.record(m, result.as_ref().map(|_| ()));
            match result {
                Ok(s) => {
                    reached = true;
                    states.extend(s);
                }
                Err(e) => last_error = Some(e),
            }
        }
        if !reached {
            return Err(last_error.unwrap_or(StoreError::Unavailable {
                backend: "multi",
                message: "no member".into(),
            }));
        }
        self.combined(states)
    }

    /// Every namespace of the reachable members. Also a health probe: it tries each member (a
    /// pending one is connected once its back-off has passed) and records the outcome.
    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let mut by_name: HashMap<NamespaceName, Vec<NamespaceState>> = HashMap::new();
        let mut reached = false;
        let mut last_error = None;
        for m in &self.members {
            if m.is_out_of_service() {
                continue;
            }
            let result = match self.usable(m, Access::Read).await {
                Ok(a) => a.list().await,
                Err(e) => Err(e),
            };
            self.record(m, result.as_ref().map(|_| ()));
            match result {
                Ok(list) => {
                    reached = true;
                    for s in list {
                        by_name.entry(s.name.clone()).or_default().push(s);
                    }
                }
                Err(e) => last_error = Some(e),
            }
        }
        if !reached {
            return Err(last_error.unwrap_or(StoreError::Unavailable {
                backend: "multi",
                message: "no member".into(),
            }));
        }
        let mut out = Vec::new();
        for (_, states) in by_name {
            out.extend(self.combined(states)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Moves every member's watermark up to `to`, each recorded in that member's ledger. Not
    /// atomic across members, but each move is forward-only and repeatable: after an error
    /// (a member down), the same call again finishes the job. `from` is the highest watermark
    /// a member had before.
    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: crate::Advance,
    ) -> Result<crate::Advanced, StoreError> {
        let mut from = 0;
        for m in &self.members {
            let result = match self.usable(m, Access::Write).await {
                Ok(a) => a.advance(name, to, why).await,
                Err(e) => Err(e),
            };
            self.record(m, result.as_ref().map(|_| ()));
            match result {
                Ok(advanced) => from = from.max(advanced.from),
                Err(e) if e.is_unavailable() => {
                    return Err(m.unavailable(format!(
                        "cannot move namespace {name}'s watermark on this member ({e}); the \
                         members before it moved: run the same command again when it answers"
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        let state = self
            .state(name)
            .await?
            .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() })?;
        Ok(crate::Advanced { from, state })
    }

    /// Hands the tail back to the member owning its residue class.
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let residue = tail.start() % tail.step();
        match self.members.iter().find(|m| m.offset == residue) {
            Some(m) => {
                let result = match self.usable(m, Access::Write).await {
                    Ok(a) => a.give_back(name, tail).await,
                    Err(e) => Err(e),
                };
                self.record(m, result.as_ref().map(|_| ()));
                result
            }
            None => Err(StoreError::InvalidTail {
                name: name.clone(),
                start: tail.start(),
                end: tail.end(),
                step: tail.step(),
                reason: "no member owns its residue class",
            }),
        }
    }

    /// Parks each block at the member owning its residue class, all under `key`, one park per
    /// member (atomic there, not across members). A block no member owns is refused before
    /// anything is parked; after an error the blocks parked at earlier members stay parked
    /// and unclaimed (burned: the caller keeps no key for a park that failed).
    async fn park(
        &self,
        name: &NamespaceName,
        key: &crate::ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        let mut per_member: Vec<(&Member, Vec<Block>)> = Vec::new();
        for block in blocks {
            let residue = block.start() % block.step();
            let Some(m) = self.members.iter().find(|m| m.offset == residue) else {
                return Err(StoreError::InvalidTail {
                    name: name.clone(),
                    start: block.start(),
                    end: block.end(),
                    step: block.step(),
                    reason: "no member owns its residue class",
                });
            };
            match per_member
                .iter_mut()
                .find(|(owner, _)| std::ptr::eq(*owner, m))
            {
                Some((_, owned)) => owned.push(*block),
                None => per_member.push((m, vec![*block])),
            }
        }
        if per_member.is_empty() {
            return Err(StoreError::InvalidSetup {
                message: format!("parking blocks of namespace {name}: nothing to park"),
            });
        }
        for (m, owned) in per_member {
            let result = match self.usable(m, Access::Write).await {
                Ok(a) => a.park(name, key, &owned).await,
                Err(e) => Err(e),
            };
            self.record(m, result.as_ref().map(|_| ()));
            result?;
        }
        Ok(())
    }

    /// Claims `key` at every member (a park may span several: [`Authority::park`] above) and
    /// returns the blocks of all, increasing. A member that has nothing under the key
    /// ([`StoreError::NotParked`]) or does not answer holds nothing of this claim as long as
    /// another member returned blocks (what an unreachable member holds stays parked, unclaimed:
    /// burned). With no blocks from any member: the first refusal a member answered
    /// (`NotParked` only when every member that answered said so), or, when none answered,
    /// [`StoreError::Unavailable`] (the outcome is unknown: the caller claims again).
    async fn claim(
        &self,
        name: &NamespaceName,
        key: &crate::ClaimKey,
    ) -> Result<Vec<Block>, StoreError> {
        let mut claimed: Vec<Block> = Vec::new();
        let (mut refused, mut not_parked, mut unavailable) = (None, None, None);
        for m in &self.members {
            let result = match self.usable(m, Access::Write).await {
                Ok(a) => a.claim(name, key).await,
                Err(e) => Err(e),
            };
            self.record(m, result.as_ref().map(|_| ()));
            match result {
                Ok(blocks) => claimed.extend(blocks),
                Err(e @ StoreError::NotParked { .. }) => {
                    not_parked.get_or_insert(e);
                }
                Err(e) if e.is_unavailable() => {
                    unavailable.get_or_insert(e);
                }
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        if !claimed.is_empty() {
            claimed.sort_by_key(Block::start);
            return Ok(claimed);
        }
        match refused.or(not_parked).or(unavailable) {
            Some(e) => Err(e),
            None => Err(StoreError::InvalidSetup {
                message: "a multi authority without members".into(),
            }),
        }
    }
}

/// Worker leases live in the **first member** only: a lease is exclusive only within one
/// store, and members are independent stores. Every node of a deployment lists the members in
/// one order (as it must for the offsets), so all of them lease from one store; while the
/// first member is down no lease can be acquired or renewed, and a holder stops issuing once
/// its lease's deadline passes, as with a single store.
#[async_trait]
impl WorkerLeases for MultiAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        let first = self.lease_member().await?;
        leases_of(&first)?.acquire(request).await
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let first = self.lease_member().await?;
        leases_of(&first)?.renew(lease, floor_unix_ms).await
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        let first = self.lease_member().await?;
        leases_of(&first)?.release(lease, floor_unix_ms).await
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        let first = self.lease_member().await?;
        leases_of(&first)?.group(group).await
    }
}

impl MultiAuthority {
    /// The member whose store holds the worker leases: the first.
    async fn lease_member(&self) -> Result<Arc<dyn Authority>, StoreError> {
        let first = self
            .members
            .first()
            .ok_or_else(|| StoreError::InvalidSetup {
                message: "a multi authority without members".into(),
            })?;
        self.usable(first, Access::Write).await
    }
}

/// `member`'s leases, or why it has none.
fn leases_of(member: &Arc<dyn Authority>) -> Result<&dyn WorkerLeases, LeaseError> {
    member.worker_leases().ok_or_else(|| {
        LeaseError::Store(StoreError::NotSupported {
            backend: member.kind(),
            what: "worker leases (the first member of a multi authority holds them)",
        })
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_core::{ManualClock, Width};
    use std::sync::atomic::AtomicBool;

    use crate::conformance::SwitchedAuthority as Switchable;

    /// A member that failed is skipped (not even asked) until `DOWN_BACKOFF` has passed on the
    /// injected clock, then asked again; no test sleeps.
    #[tokio::test]
    async fn a_failed_member_is_skipped_until_the_backoff_passes() {
        let clock = Arc::new(ManualClock::at_unix_millis(1_000));
        let a = Arc::new(Switchable::default());
        let b = Arc::new(Switchable::default());
        let multi = MultiAuthority::with_clock(
            vec![(a.clone() as Arc<dyn Authority>, 0), (b.clone(), 1)],
            clock.clone(),
        )
        .unwrap();
        let n = NamespaceName::new("photos").unwrap();
        multi
            .ensure_namespace(&n, SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap())
            .await
            .unwrap();

        a.set_down(true);
        let before = a.calls();
        // Round-robin reaches `a` within two reservations; it fails and `b` answers.
        for _ in 0..2 {
            let r = multi.reserve(&n, 10).await.unwrap();
            assert_eq!(
                r.block.start() % 2,
                1,
                "only b's residue class while a is down"
            );
        }
        let asked = a.calls();
        assert_eq!(
            asked - before,
            1,
            "a was asked once, failed, and is now marked down"
        );

        // Within the back-off, `a` is tried only after `b`, so never while `b` answers.
        let backoff_ms = u64::try_from(DOWN_BACKOFF.as_millis()).unwrap();
        clock.advance_millis(backoff_ms - 1);
        for _ in 0..6 {
            multi.reserve(&n, 10).await.unwrap();
        }
        assert_eq!(a.calls(), asked, "a was asked during its back-off");

        // The back-off has passed: round-robin asks `a` again, and it is back.
        clock.advance_millis(1);
        a.set_down(false);
        let mut residues = Vec::new();
        for _ in 0..2 {
            residues.push(multi.reserve(&n, 10).await.unwrap().block.start() % 2);
        }
        assert!(
            a.calls() > asked,
            "a was not asked again after its back-off"
        );
        assert!(residues.contains(&0), "a answered again: {residues:?}");
    }

    fn spec(step: u64, offset: u64) -> SequenceSpec {
        SequenceSpec::new(Width::Bits64, 1, step, offset).unwrap()
    }

    fn multi_of(members: &[&Arc<Switchable>]) -> MultiAuthority {
        MultiAuthority::new(
            members
                .iter()
                .enumerate()
                .map(|(i, m)| ((*m).clone() as Arc<dyn Authority>, i as u64))
                .collect(),
        )
        .unwrap()
    }

    /// A member that lost its namespace (its row deleted, an empty backup
    /// restored, the server replaced) is taken out of service, never re-created, at run time
    /// and at the next start; the other member keeps serving and no id repeats.
    #[tokio::test]
    async fn a_member_that_lost_its_data_is_taken_out_and_never_recreated() {
        let (a, b) = (
            Arc::new(Switchable::default()),
            Arc::new(Switchable::default()),
        );
        let n = NamespaceName::new("photos").unwrap();
        let mut seen = std::collections::HashSet::new();
        {
            let multi = multi_of(&[&a, &b]);
            multi.ensure_namespace(&n, spec(2, 0)).await.unwrap();
            for _ in 0..4 {
                let r = multi.reserve(&n, 10).await.unwrap();
                assert!(r.block.ids().all(|id| seen.insert(id)));
            }
            a.wipe();
            for _ in 0..8 {
                let r = multi.reserve(&n, 10).await.unwrap();
                assert_eq!(r.block.start() % 2, 1, "only b serves: {r:?}");
                assert!(r.block.ids().all(|id| seen.insert(id)), "repeated: {r:?}");
            }
            let members = multi.health();
            let why = members[0].out_of_service.as_deref().unwrap();
            assert!(why.contains("no record of namespace photos"), "{why}");
            assert!(!members[0].up && members[1].out_of_service.is_none());
        }
        assert_eq!(Authority::state(&*a, &n).await.unwrap(), None, "re-created");
        // The next start finds it missing again.
        let multi = multi_of(&[&a, &b]);
        multi.ensure_namespace(&n, spec(2, 0)).await.unwrap();
        for _ in 0..8 {
            let r = multi.reserve(&n, 10).await.unwrap();
            assert!(r.block.ids().all(|id| seen.insert(id)), "repeated: {r:?}");
        }
        assert!(multi.health()[0].out_of_service.is_some());
        assert_eq!(Authority::state(&*a, &n).await.unwrap(), None, "re-created");
    }

    /// A retirement marks every member; until the last is marked (one was down) the others
    /// still serve and the namespace is not reported retired; afterwards every reservation is
    /// `Retired`, even with a member down.
    #[tokio::test]
    async fn a_retirement_reaches_every_member() {
        let (a, b) = (
            Arc::new(Switchable::default()),
            Arc::new(Switchable::default()),
        );
        let multi = multi_of(&[&a, &b]);
        let n = NamespaceName::new("photos").unwrap();
        multi.ensure_namespace(&n, spec(2, 0)).await.unwrap();
        let ceiling = Width::Bits64.max_id() + 1;
        b.set_down(true);
        assert!(multi
            .advance(&n, ceiling, crate::Advance::Retire)
            .await
            .unwrap_err()
            .is_unavailable());
        b.set_down(false);
        assert!(Authority::state(&*a, &n).await.unwrap().unwrap().retired);
        assert!(!multi.state(&n).await.unwrap().unwrap().retired);
        let served = multi.reserve(&n, 10).await.unwrap();
        assert_eq!(served.block.start() % 2, 1, "only b serves: {served:?}");
        let done = multi
            .advance(&n, ceiling, crate::Advance::Retire)
            .await
            .unwrap();
        assert!(
            done.state.retired && done.state.watermark == ceiling,
            "{done:?}"
        );
        assert!(multi.list().await.unwrap()[0].retired);
        for down in [false, true] {
            a.set_down(down);
            let err = multi.reserve(&n, 1).await.unwrap_err();
            assert!(err.is_retired(), "member a down: {down}: {err:?}");
        }
    }

    /// A park spans the members owning its blocks' classes; the claim gathers them from every
    /// member, once; a member that does not answer holds nothing of the claim while another
    /// returned blocks.
    #[tokio::test]
    async fn parks_span_the_members_and_are_claimed_from_all() {
        let (a, b) = (
            Arc::new(Switchable::default()),
            Arc::new(Switchable::default()),
        );
        let multi = multi_of(&[&a, &b]);
        let n = NamespaceName::new("photos").unwrap();
        multi.ensure_namespace(&n, spec(2, 0)).await.unwrap();
        let mut blocks = Vec::new();
        for _ in 0..2 {
            blocks.push(multi.reserve(&n, 10).await.unwrap().block);
        }
        blocks.sort_by_key(Block::start);
        assert_ne!(blocks[0].start() % 2, blocks[1].start() % 2, "{blocks:?}");
        let key = crate::ClaimKey::random();
        multi.park(&n, &key, &blocks).await.unwrap();
        for (member, residue) in [(&a, 0), (&b, 1)] {
            let mine: Vec<Block> = blocks
                .iter()
                .copied()
                .filter(|x| x.start() % 2 == residue)
                .collect();
            let other = crate::ClaimKey::random();
            assert!(
                member.park(&n, &other, &mine).await.is_err(),
                "parked at the member owning the class"
            );
        }
        assert_eq!(multi.claim(&n, &key).await.unwrap(), blocks);
        assert!(matches!(
            multi.claim(&n, &key).await,
            Err(StoreError::NotParked { .. })
        ));

        let again: Vec<Block> = {
            let mut v = Vec::new();
            for _ in 0..2 {
                v.push(multi.reserve(&n, 10).await.unwrap().block);
            }
            v.sort_by_key(Block::start);
            v
        };
        let key = crate::ClaimKey::random();
        multi.park(&n, &key, &again).await.unwrap();
        b.set_down(true);
        let from_a: Vec<Block> = again
            .iter()
            .copied()
            .filter(|x| x.start() % 2 == 0)
            .collect();
        assert_eq!(
            multi.claim(&n, &key).await.unwrap(),
            from_a,
            "b holds its part"
        );
        assert!(matches!(
            multi.claim(&n, &key).await,
            Err(StoreError::NotParked { .. })
        ));
        a.set_down(true);
        assert!(multi.claim(&n, &key).await.unwrap_err().is_unavailable());
    }

    /// A new namespace is created on every member at once, or not at all.
    #[tokio::test]
    async fn a_new_namespace_needs_every_member() {
        let (a, b) = (
            Arc::new(Switchable::default()),
            Arc::new(Switchable::default()),
        );
        let multi = multi_of(&[&a, &b]);
        let n = NamespaceName::new("photos").unwrap();
        a.set_down(true);
        let err = multi.ensure_namespace(&n, spec(2, 0)).await.unwrap_err();
        assert!(err.is_unavailable(), "{err}");
        assert!(err.to_string().contains("every member at once"), "{err}");
        assert_eq!(Authority::state(&*b, &n).await.unwrap(), None);
    }

    /// Members set up with step 2 by an earlier start, and a third member added with step 3: a configuration error naming what to do, not a silent mix.
    #[tokio::test]
    async fn adding_a_member_to_an_existing_namespace_is_a_configuration_error() {
        let (a, b, c) = (
            Arc::new(Switchable::default()),
            Arc::new(Switchable::default()),
            Arc::new(Switchable::default()),
        );
        let n = NamespaceName::new("photos").unwrap();
        multi_of(&[&a, &b])
            .ensure_namespace(&n, spec(2, 0))
            .await
            .unwrap();
        let err = multi_of(&[&a, &b, &c])
            .ensure_namespace(&n, spec(3, 0))
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("step 2") && message.contains("cannot be added or removed"),
            "{message}"
        );
        assert_eq!(Authority::state(&*c, &n).await.unwrap(), None);
    }

    /// A member that was unreachable while the others moved on holds a
    /// stale spec; when it comes back it is refused, and no block of it is ever returned.
    #[tokio::test]
    async fn a_member_returning_with_a_stale_spec_is_refused() {
        let clock = Arc::new(ManualClock::at_unix_millis(1_000));
        let (a, b, c) = (
            Arc::new(Switchable::default()),
            Arc::new(Switchable::default()),
            Arc::new(Switchable::default()),
        );
        let n = NamespaceName::new("photos").unwrap();
        Authority::ensure_namespace(&*a, &n, spec(2, 0))
            .await
            .unwrap();
        Authority::ensure_namespace(&*b, &n, spec(3, 1))
            .await
            .unwrap();
        Authority::ensure_namespace(&*c, &n, spec(3, 2))
            .await
            .unwrap();
        a.set_down(true);
        let multi = MultiAuthority::with_clock(
            vec![
                (a.clone() as Arc<dyn Authority>, 0),
                (b.clone(), 1),
                (c.clone(), 2),
            ],
            clock.clone(),
        )
        .unwrap();
        multi.ensure_namespace(&n, spec(3, 0)).await.unwrap();
        a.set_down(false);
        clock.advance_millis(u64::try_from(DOWN_BACKOFF.as_millis()).unwrap());
        for _ in 0..9 {
            let r = multi.reserve(&n, 10).await.unwrap();
            assert_eq!(r.block.step(), 3, "{r:?}");
            assert_ne!(r.block.start() % 3, 0, "the stale member served: {r:?}");
        }
        let why = multi.health()[0].out_of_service.clone().unwrap();
        assert!(why.contains("stale member"), "{why}");
    }

    /// One member's hard error takes that member out; the others serve.
    #[tokio::test]
    async fn a_members_hard_error_takes_only_that_member_out() {
        let (a, b) = (
            Arc::new(Switchable::default()),
            Arc::new(Switchable::default()),
        );
        let multi = multi_of(&[&a, &b]);
        let n = NamespaceName::new("photos").unwrap();
        multi.ensure_namespace(&n, spec(2, 0)).await.unwrap();
        a.set_corrupt(true);
        for _ in 0..6 {
            let r = multi.reserve(&n, 10).await.unwrap();
            assert_eq!(r.block.start() % 2, 1, "{r:?}");
        }
        let why = multi.health()[0].out_of_service.clone().unwrap();
        assert!(why.contains("made corrupt by the test"), "{why}");
        assert_eq!(multi.residues(&spec(2, 0)), vec![0, 1]);
    }

    /// Records every transition it hears.
    #[derive(Debug, Default)]
    struct Seen(Mutex<Vec<(usize, bool)>>);

    impl MemberEvents for Seen {
        fn changed(&self, m: &MemberHealth) {
            self.0.lock().unwrap().push((m.number, m.up));
        }
    }

    impl Seen {
        fn got(&self) -> Vec<(usize, bool)> {
            self.0.lock().unwrap().clone()
        }
    }

    /// Guards against a member outage that leaves no trace: the outage shows in the members'
    /// health and is reported once when the member goes down and once when it is back, however
    /// many reservations pass meanwhile.
    #[tokio::test]
    async fn member_transitions_are_reported_once_each_way() {
        let clock = Arc::new(ManualClock::at_unix_millis(1_000));
        let a = Arc::new(Switchable::default());
        let b = Arc::new(Switchable::default());
        let seen = Arc::new(Seen::default());
        let multi = MultiAuthority::with_clock(
            vec![(a.clone() as Arc<dyn Authority>, 0), (b.clone(), 1)],
            clock.clone(),
        )
        .unwrap()
        .with_events(seen.clone());
        let n = NamespaceName::new("photos").unwrap();
        multi
            .ensure_namespace(&n, SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap())
            .await
            .unwrap();
        assert!(multi
            .health()
            .iter()
            .all(|m| m.up && m.last_error.is_none()));
        assert_eq!(seen.got(), vec![]);

        a.set_down(true);
        let backoff_ms = u64::try_from(DOWN_BACKOFF.as_millis()).unwrap();
        for _ in 0..5 {
            for _ in 0..4 {
                multi.reserve(&n, 10).await.unwrap();
            }
            clock.advance_millis(backoff_ms);
        }
        assert!(a.calls() > 2, "a was retried: {}", a.calls());
        let members = multi.health();
        assert_eq!(
            (
                members[0].number,
                members[0].kind,
                members[0].offset,
                members[0].up
            ),
            (1, "memory", 0, false)
        );
        assert!(
            members[0]
                .last_error
                .as_deref()
                .unwrap()
                .contains("switched off"),
            "{members:?}"
        );
        assert!(members[1].up, "{members:?}");
        assert_eq!(seen.got(), vec![(1, false)], "one report of the outage");

        a.set_down(false);
        for _ in 0..4 {
            multi.reserve(&n, 10).await.unwrap();
        }
        assert!(multi.health()[0].up);
        assert_eq!(
            seen.got(),
            vec![(1, false), (1, true)],
            "one report of the recovery"
        );
    }

    /// Guards against a member down at start-up stopping the node: a pending member is not
    /// asked to connect during its back-off, is tried once it passes, stays down while the connector
    /// fails, and serves its class once it connects.
    #[tokio::test]
    async fn a_pending_member_connects_after_its_backoff() {
        let clock = Arc::new(ManualClock::at_unix_millis(1_000));
        let b = Arc::new(Switchable::default());
        let late = Arc::new(Switchable::default());
        let reachable = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(AtomicUsize::new(0));
        let connector: Connector = {
            let (late, reachable, attempts) = (late.clone(), reachable.clone(), attempts.clone());
            Arc::new(move || {
                attempts.fetch_add(1, Ordering::SeqCst);
                let result = if reachable.load(Ordering::SeqCst) {
                    Ok(late.clone() as Arc<dyn Authority>)
                } else {
                    Err("connection refused".to_owned())
                };
                Box::pin(async move { result })
            })
        };
        let seen = Arc::new(Seen::default());
        let multi = MultiAuthority::with_slots(
            vec![
                MemberSlot::pending("test", 0, "connection refused".into(), connector),
                MemberSlot::connected(b.clone(), 1),
            ],
            clock.clone(),
        )
        .unwrap()
        .with_events(seen.clone());
        assert_eq!(seen.got(), vec![(1, false)], "reported down at start");
        let n = NamespaceName::new("photos").unwrap();
        // The namespace was set up on both members by an earlier run: a namespace is only
        // created while every member answers.
        Authority::ensure_namespace(
            &*late,
            &n,
            SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap(),
        )
        .await
        .unwrap();
        Authority::ensure_namespace(&*b, &n, SequenceSpec::new(Width::Bits64, 1, 2, 1).unwrap())
            .await
            .unwrap();
        multi
            .ensure_namespace(&n, SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap())
            .await
            .unwrap();
        for _ in 0..4 {
            let r = multi.reserve(&n, 10).await.unwrap();
            assert_eq!(r.block.start() % 2, 1, "{r:?}");
        }
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            0,
            "tried during its back-off"
        );

        let backoff_ms = u64::try_from(DOWN_BACKOFF.as_millis()).unwrap();
        clock.advance_millis(backoff_ms);
        for _ in 0..4 {
            let r = multi.reserve(&n, 10).await.unwrap();
            assert_eq!(r.block.start() % 2, 1, "{r:?}");
        }
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            1,
            "one attempt per back-off"
        );
        assert!(!multi.health()[0].up);

        reachable.store(true, Ordering::SeqCst);
        clock.advance_millis(backoff_ms);
        let mut classes = Vec::new();
        for _ in 0..4 {
            classes.push(multi.reserve(&n, 10).await.unwrap().block.start() % 2);
        }
        assert!(classes.contains(&0), "the late member serves: {classes:?}");
        assert_eq!(attempts.load(Ordering::SeqCst), 2, "connected once, kept");
        assert!(multi.health()[0].up);
        assert_eq!(seen.got(), vec![(1, false), (1, true)]);
        assert_eq!(
            Authority::state(&*late, &n)
                .await
                .unwrap()
                .unwrap()
                .spec
                .offset(),
            0,
            "the late member keeps its offset"
        );
    }

    /// A multi authority needs one connected member to start.
    #[test]
    fn all_pending_is_refused() {
        let connector: Connector = Arc::new(|| Box::pin(async { Err("down".to_owned()) }));
        let err = MultiAuthority::with_slots(
            vec![
                MemberSlot::pending("test", 0, "down".into(), connector.clone()),
                MemberSlot::pending("test", 1, "down".into(), connector),
            ],
            Arc::new(ManualClock::at_unix_millis(0)),
        )
        .unwrap_err();
        assert!(matches!(err, StoreError::InvalidSetup { .. }), "{err}");
    }
}
