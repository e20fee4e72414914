//! Several authorities sharing namespaces, each owning one residue class: Flickr's odd/even
//! ticket servers generalised to N.
//!
//! Every member gets each namespace with the namespace's width, start and step, and its own
//! `offset`, so member `k` only ever grants ids `≡ offset_k (mod step)` (invariant 5): ids from
//! different members never collide, whatever each member's watermark. Reservations go
//! round-robin; a member that fails with [`StoreError::Unavailable`] is skipped for a back-off
//! period and tried again after it, so the node comes back to it when it recovers. A member that
//! was down when a namespace was set up gets it on first use.
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
//! The back-off is measured on an injected [`Clock`]'s monotonic time ([`SystemClock`] unless
//! [`MultiAuthority::with_clock`] is given another), so tests step time instead of sleeping.
//!
//! Locks: each member's state is behind a `std::sync::Mutex`, held only to read or swap a few
//! fields, never across `.await`; observers are called after it is released.
//!
//! What it does not do: make ids increase across members (as with Flickr's pair, each member's
//! stream increases; the interleaving does not), move a namespace between members, or retry a
//! pending member while nothing uses the authority (a reservation, a read, `/readyz`).

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
        }
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

/// Authorities each owning a residue class of every namespace. See the module docs.
pub struct MultiAuthority {
    members: Vec<Member>,
    next: AtomicUsize,
    /// Namespace-level specs (offset 0) seen by `ensure_namespace`, to set up late members.
    specs: Mutex<HashMap<NamespaceName, SequenceSpec>>,
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
        Ok(Some(NamespaceState {
            name: first.name.clone(),
            spec,
            watermark,
        }))
    }

    /// Member indices in the order to try: round-robin start, members not marked down first.
    fn order(&self) -> Vec<usize> {
        let n = self.members.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let now = self.clock.monotonic_nanos();
        let mut order: Vec<usize> = (0..n).map(|i| (start + i) % n).collect();
        order.sort_by_key(|i| self.members[*i].is_down(now));
        order
    }

    fn known_spec(&self, name: &NamespaceName) -> Option<SequenceSpec> {
        self.specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied()
    }
}

#[async_trait]
impl Authority for MultiAuthority {
    fn kind(&self) -> &'static str {
        "multi"
    }

    /// Every member in config order, as last seen.
    fn members(&self) -> Vec<MemberHealth> {
        self.members.iter().map(Member::health).collect()
    }

    /// Ensures the namespace on every reachable member with that member's offset. `Ok` once at
    /// least one member has it durably; members that were down get it on first use.
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let mut states = Vec::new();
        let mut last_unavailable = None;
        for m in &self.members {
            let member_spec = self.member_spec(spec, m.offset)?;
            let result = match m.authority(self).await {
                Ok(a) => a.ensure_namespace(name, member_spec).await,
                Err(e) => Err(e),
            };
            self.record(m, result.as_ref().map(|_| ()));
            match result {
                Ok(s) => states.push(s),
                Err(e @ StoreError::Unavailable { .. }) => last_unavailable = Some(e),
                Err(StoreError::SpecConflict { existing, .. }) => {
                    return Err(StoreError::SpecConflict {
                        name: name.clone(),
                        existing: self.namespace_spec(&existing)?,
                        requested: spec,
                        server: None,
                    })
                }
                Err(other) => return Err(other),
            }
        }
        self.specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), spec);
        match self.combined(states)? {
            Some(state) => Ok(state),
            None => Err(last_unavailable.unwrap_or(StoreError::Unavailable {
                backend: "multi",
                message: "no member".into(),
            })),
        }
    }

    /// Reserves from the next member in turn, skipping members that fail. The block is the
    /// member's alone (its residue class), durable as that member guarantees.
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        let mut last_error = None;
        for i in self.order() {
            let m = &self.members[i];
            let result = match m.authority(self).await {
                Ok(a) => {
                    let mut result = a.reserve(name, count).await;
                    if let Err(StoreError::UnknownNamespace { .. }) = result {
                        // A member that was down at set-up: create it there now.
                        if let Some(spec) = self.known_spec(name) {
                            let member_spec = self.member_spec(spec, m.offset)?;
                            result = match a.ensure_namespace(name, member_spec).await {
                                Ok(_) => a.reserve(name, count).await,
                                Err(e) => Err(e),
                            };
                        }
                    }
                    result
                }
                Err(e) => Err(e),
            };
            self.record(m, result.as_ref().map(|_| ()));
            match result {
                Ok(r) => return Ok(r),
                Err(e @ StoreError::Unavailable { .. }) => last_error = Some(e),
                Err(e @ StoreError::Exhausted { .. }) => last_error = Some(e),
                Err(e @ StoreError::UnknownNamespace { .. }) => last_error = Some(e),
                Err(other) => return Err(other),
            }
        }
        Err(last_error.unwrap_or(StoreError::Unavailable {
            backend: "multi",
            message: "no member".into(),
        }))
    }

    /// The namespace as the reachable members record it: the namespace-level spec (offset 0)
    /// and the highest member watermark.
    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        let mut states = Vec::new();
        let mut reached = false;
        let mut last_error = None;
        for m in &self.members {
            let result = match m.authority(self).await {
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
            let result = match m.authority(self).await {
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

    /// Hands the tail back to the member owning its residue class.
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let residue = tail.start() % tail.step();
        match self.members.iter().find(|m| m.offset == residue) {
            Some(m) => {
                let result = match m.authority(self).await {
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
        // Round-robin reaches `a` within two reservations; it fails and `b` answers.
        for _ in 0..2 {
            let r = multi.reserve(&n, 10).await.unwrap();
            assert_eq!(
                r.block.start() % 2,
                1,
                "only b's residue class while a is down"
            );
        }
        let asked = a.reserve_calls();
        assert_eq!(asked, 1, "a was asked once, failed, and is now marked down");

        // Within the back-off, `a` is tried only after `b`, so never while `b` answers.
        let backoff_ms = u64::try_from(DOWN_BACKOFF.as_millis()).unwrap();
        clock.advance_millis(backoff_ms - 1);
        for _ in 0..6 {
            multi.reserve(&n, 10).await.unwrap();
        }
        assert_eq!(a.reserve_calls(), asked, "a was asked during its back-off");

        // The back-off has passed: round-robin asks `a` again, and it is back.
        clock.advance_millis(1);
        a.set_down(false);
        let mut residues = Vec::new();
        for _ in 0..2 {
            residues.push(multi.reserve(&n, 10).await.unwrap().block.start() % 2);
        }
        assert!(
            a.reserve_calls() > asked,
            "a was not asked again after its back-off"
        );
        assert!(residues.contains(&0), "a answered again: {residues:?}");
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

    /// Regression (a member outage left no trace): the outage shows in `members()` and is
    /// reported once when the member goes down and once when it is back, however many
    /// reservations pass meanwhile.
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
            .members()
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
        assert!(
            a.reserve_calls() > 2,
            "a was retried: {}",
            a.reserve_calls()
        );
        let members = multi.members();
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
        assert!(multi.members()[0].up);
        assert_eq!(
            seen.got(),
            vec![(1, false), (1, true)],
            "one report of the recovery"
        );
    }

    /// Regression (a member down at start-up stopped the node): a pending member is not asked
    /// to connect during its back-off, is tried once it passes, stays down while the connector
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
        assert!(!multi.members()[0].up);

        reachable.store(true, Ordering::SeqCst);
        clock.advance_millis(backoff_ms);
        let mut classes = Vec::new();
        for _ in 0..4 {
            classes.push(multi.reserve(&n, 10).await.unwrap().block.start() % 2);
        }
        assert!(classes.contains(&0), "the late member serves: {classes:?}");
        assert_eq!(attempts.load(Ordering::SeqCst), 2, "connected once, kept");
        assert!(multi.members()[0].up);
        assert_eq!(seen.got(), vec![(1, false), (1, true)]);
        assert_eq!(
            Authority::state(&*late, &n)
                .await
                .unwrap()
                .unwrap()
                .spec
                .offset(),
            0,
            "the namespace was set up on the late member with its offset"
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
