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
//! What it does not do: make ids increase across members (as with Flickr's pair, each member's
//! stream increases; the interleaving does not), or move a namespace between members.

use crate::{Authority, GiveBack, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a member that failed is skipped before it is tried again.
const DOWN_BACKOFF: Duration = Duration::from_millis(500);

#[derive(Debug)]
struct Member {
    authority: Arc<dyn Authority>,
    offset: u64,
    down_until: Mutex<Option<Instant>>,
}

impl Member {
    fn is_down(&self, now: Instant) -> bool {
        self.down_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t > now)
    }
    fn mark(&self, down: bool) {
        *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) =
            down.then(|| Instant::now() + DOWN_BACKOFF);
    }
}

/// Authorities each owning a residue class of every namespace. See the module docs.
#[derive(Debug)]
pub struct MultiAuthority {
    members: Vec<Member>,
    next: AtomicUsize,
    /// Namespace-level specs (offset 0) seen by `ensure_namespace`, to set up late members.
    specs: Mutex<HashMap<NamespaceName, SequenceSpec>>,
}

impl MultiAuthority {
    /// Members with their offsets. At least two, offsets distinct.
    pub fn new(members: Vec<(Arc<dyn Authority>, u64)>) -> Result<Self, StoreError> {
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
        let now = Instant::now();
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
                    m.mark(false);
                    states.push(s);
                }
                Err(e @ StoreError::Unavailable { .. }) => {
                    m.mark(true);
                    last_unavailable = Some(e);
                }
                Err(StoreError::SpecConflict { existing, .. }) => {
                    return Err(StoreError::SpecConflict {
                        name: name.clone(),
                        existing: self.namespace_spec(&existing)?,
                        requested: spec,
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
                    m.mark(false);
                    return Ok(r);
                }
                Err(e @ StoreError::Unavailable { .. }) => {
                    m.mark(true);
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
