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
//! The back-off is measured on an injected [`Clock`]'s monotonic time ([`SystemClock`] unless
//! [`MultiAuthority::with_clock`] is given another), so tests step time instead of sleeping.
//!
//! What it does not do: make ids increase across members (as with Flickr's pair, each member's
//! stream increases; the interleaving does not), or move a namespace between members.

use crate::{Authority, GiveBack, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, Clock, NamespaceName, SequenceSpec, SystemClock};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a member that failed is skipped before it is tried again.
const DOWN_BACKOFF: Duration = Duration::from_millis(500);

#[derive(Debug)]
struct Member {
    authority: Arc<dyn Authority>,
    offset: u64,
    /// Monotonic nanoseconds of the member's clock until which it is skipped.
    down_until: Mutex<Option<u64>>,
}

impl Member {
    fn is_down(&self, now_nanos: u64) -> bool {
        self.down_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t > now_nanos)
    }
    fn mark(&self, down: bool, clock: &dyn Clock) {
        let until = down.then(|| {
            let backoff = u64::try_from(DOWN_BACKOFF.as_nanos()).unwrap_or(u64::MAX);
            clock.monotonic_nanos().saturating_add(backoff)
        });
        *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) = until;
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
        if members.len() < 2 {
            return Err(StoreError::InvalidSetup {
                message: "a multi authority needs at least two members".into(),
            });
        }
        let mut offsets: Vec<u64> = members.iter().map(|(_, o)| *o).collect();
        offsets.sort_unstable();
        if offsets.windows(2).any(|w| w[0] == w[1]) {
            return Err(StoreError::InvalidSetup {
                message: "two members have the same offset; their ids would collide".into(),
            });
        }
        Ok(MultiAuthority {
            members: members
                .into_iter()
                .map(|(authority, offset)| Member {
                    authority,
                    offset,
                    down_until: Mutex::new(None),
                })
                .collect(),
            next: AtomicUsize::new(0),
            specs: Mutex::new(HashMap::new()),
            clock,
        })
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
            match m.authority.ensure_namespace(name, member_spec).await {
                Ok(s) => {
                    m.mark(false, self.clock.as_ref());
                    states.push(s);
                }
                Err(e @ StoreError::Unavailable { .. }) => {
                    m.mark(true, self.clock.as_ref());
                    last_unavailable = Some(e);
                }
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
            let mut result = m.authority.reserve(name, count).await;
            if let Err(StoreError::UnknownNamespace { .. }) = result {
                // A member that was down at set-up: create it there now.
                if let Some(spec) = self.known_spec(name) {
                    let member_spec = self.member_spec(spec, m.offset)?;
                    result = match m.authority.ensure_namespace(name, member_spec).await {
                        Ok(_) => m.authority.reserve(name, count).await,
                        Err(e) => Err(e),
                    };
                }
            }
            match result {
                Ok(r) => {
                    m.mark(false, self.clock.as_ref());
                    return Ok(r);
                }
                Err(e @ StoreError::Unavailable { .. }) => {
                    m.mark(true, self.clock.as_ref());
                    last_error = Some(e);
                }
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
            match m.authority.state(name).await {
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

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let mut by_name: HashMap<NamespaceName, Vec<NamespaceState>> = HashMap::new();
        let mut reached = false;
        let mut last_error = None;
        for m in &self.members {
            match m.authority.list().await {
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
            Some(m) => m.authority.give_back(name, tail).await,
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
    use crate::MemoryAuthority;
    use idmint_core::{ManualClock, Width};
    use std::sync::atomic::AtomicBool;

    /// An in-memory member that can be switched off, counting the reservations it is asked for.
    #[derive(Debug, Default)]
    struct Switchable {
        inner: MemoryAuthority,
        down: AtomicBool,
        reserve_calls: AtomicUsize,
    }

    impl Switchable {
        fn check(&self) -> Result<(), StoreError> {
            if self.down.load(Ordering::SeqCst) {
                Err(StoreError::Unavailable {
                    backend: "test",
                    message: "switched off".into(),
                })
            } else {
                Ok(())
            }
        }
        fn calls(&self) -> usize {
            self.reserve_calls.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl Authority for Switchable {
        fn kind(&self) -> &'static str {
            "test"
        }
        async fn ensure_namespace(
            &self,
            name: &NamespaceName,
            spec: SequenceSpec,
        ) -> Result<NamespaceState, StoreError> {
            self.check()?;
            self.inner.ensure_namespace(name, spec).await
        }
        async fn reserve(
            &self,
            name: &NamespaceName,
            count: u64,
        ) -> Result<Reservation, StoreError> {
            self.reserve_calls.fetch_add(1, Ordering::SeqCst);
            self.check()?;
            self.inner.reserve(name, count).await
        }
        async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
            self.check()?;
            self.inner.state(name).await
        }
        async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
            self.check()?;
            self.inner.list().await
        }
        async fn give_back(
            &self,
            name: &NamespaceName,
            tail: Block,
        ) -> Result<GiveBack, StoreError> {
            self.check()?;
            self.inner.give_back(name, tail).await
        }
    }

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

        a.down.store(true, Ordering::SeqCst);
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
        assert_eq!(asked, 1, "a was asked once, failed, and is now marked down");

        // Within the back-off, `a` is tried only after `b`, so never while `b` answers.
        let backoff_ms = u64::try_from(DOWN_BACKOFF.as_millis()).unwrap();
        clock.advance_millis(backoff_ms - 1);
        for _ in 0..6 {
            multi.reserve(&n, 10).await.unwrap();
        }
        assert_eq!(a.calls(), asked, "a was asked during its back-off");

        // The back-off has passed: round-robin asks `a` again, and it is back.
        clock.advance_millis(1);
        a.down.store(false, Ordering::SeqCst);
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
}
