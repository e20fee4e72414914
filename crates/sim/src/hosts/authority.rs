//! The authority the hosts talk to: one [`MemoryAuthority`] (the store, shared by every host),
//! seen by each run of each host through a [`FaultyAuthority`] that decides, on every call and
//! from the run's seed, the call's fate:
//!
//! - **fail before applying**: `Unavailable`, the store untouched;
//! - **apply and lose the reply**: the store applies the write, and after a timeout (1 to
//!   60 ms, while the other hosts act) the caller gets `Unavailable` (its outcome is unknown to
//!   the node, [`idmint_store::Outcome::Unknown`]);
//! - **refuse** (give-backs, parks and claims only): a definite error, the store untouched;
//! - **answer slowly**: the call waits in the host's simulated time before it reaches the
//!   store, or after it was applied and before its reply arrives (other hosts act meanwhile);
//! - otherwise it passes.
//!
//! Every call is a line of the trace, with its fate and what the store answered. The store
//! itself is the real `MemoryAuthority`, so every decision of the store (the watermark's
//! compare-and-swap, parks only of granted ids, one claim per key, a rebase dropping parked
//! blocks) is production code.

use super::world::Shared;
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use idmint_store::{
    Advance, Advanced, Authority, ClaimKey, GiveBack, Incarnation, MemoryAuthority, NamespaceState,
    Reservation, StoreError, WorkerLeases,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Per mille of calls: failed before applying.
const FAIL_BEFORE: u64 = 30;
/// Per mille of writes: applied, reply lost.
const LOSE_REPLY: u64 = 30;
/// Per mille of give-backs, parks and claims: refused.
const REFUSE: u64 = 20;
/// Per mille of calls: slow, before or after applying (1 to 60 ms).
const SLOW: u64 = 100;

/// What becomes of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pass,
    FailBefore,
    LoseReply(Duration),
    Refuse,
    SlowBefore(Duration),
    SlowAfter(Duration),
}

/// Which faults a call can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// A read: it can fail or be slow.
    Read,
    /// A write: also applied with its reply lost.
    Write,
    /// A write the store may refuse (give-back, park, claim).
    Refusable,
}

/// One host run's view of the shared store. See the module docs.
#[derive(Debug)]
pub struct FaultyAuthority {
    inner: Arc<MemoryAuthority>,
    who: String,
    shared: Arc<Shared>,
}

impl FaultyAuthority {
    /// `who` (say `h1#3`: host 1, its third run) names the caller in the trace.
    pub(crate) fn new(inner: Arc<MemoryAuthority>, who: String, shared: Arc<Shared>) -> Self {
        FaultyAuthority { inner, who, shared }
    }

    fn fate(&self, call: Call) -> Fate {
        self.shared.with_rng(|rng| {
            let roll = rng.below(1000);
            let write = call != Call::Read;
            let refusable = call == Call::Refusable;
            if roll < FAIL_BEFORE {
                Fate::FailBefore
            } else if write && roll < FAIL_BEFORE + LOSE_REPLY {
                Fate::LoseReply(Duration::from_micros(rng.range(1_000, 60_000)))
            } else if refusable && roll < FAIL_BEFORE + LOSE_REPLY + REFUSE {
                Fate::Refuse
            } else if roll >= 1000 - SLOW {
                let wait = Duration::from_micros(rng.range(1_000, 60_000));
                if rng.below(2) == 0 {
                    Fate::SlowBefore(wait)
                } else {
                    Fate::SlowAfter(wait)
                }
            } else {
                Fate::Pass
            }
        })
    }

    /// Runs `op` on the store under the fate drawn for it; `what` names the call and `answer`
    /// describes the store's answer in the trace.
    async fn call<T: Send>(
        &self,
        call: Call,
        what: String,
        op: impl Future<Output = Result<T, StoreError>> + Send,
        answer: impl Fn(&T) -> String + Send,
    ) -> Result<T, StoreError> {
        let fate = self.fate(call);
        if let Fate::SlowBefore(wait) = fate {
            tokio::time::sleep(wait).await;
        }
        let unavailable = |message: &str| StoreError::Unavailable {
            backend: "memory",
            message: message.to_string(),
        };
        let said = match fate {
            Fate::FailBefore => {
                self.note(format!("{what}: fails before it reaches the store"));
                return Err(unavailable("no answer (the request never arrived)"));
            }
            Fate::Refuse => {
                self.note(format!("{what}: refused by the store"));
                return Err(StoreError::InvalidSetup {
                    message: "refused by the simulation".into(),
                });
            }
            _ => op.await,
        };
        let text = match &said {
            Ok(t) => answer(t),
            Err(e) => format!("error: {e}"),
        };
        match fate {
            Fate::LoseReply(timeout) => {
                self.note(format!(
                    "{what}: store answered {text}; the reply is lost (timeout after {} us)",
                    timeout.as_micros()
                ));
                tokio::time::sleep(timeout).await;
                Err(unavailable("the reply was lost"))
            }
            Fate::SlowAfter(wait) => {
                self.note(format!(
                    "{what}: store answered {text}; the reply takes {} us",
                    wait.as_micros()
                ));
                tokio::time::sleep(wait).await;
                said
            }
            Fate::SlowBefore(wait) => {
                self.note(format!(
                    "{what}: after {} us, store answered {text}",
                    wait.as_micros()
                ));
                said
            }
            _ => {
                self.note(format!("{what}: {text}"));
                said
            }
        }
    }

    fn note(&self, text: String) {
        self.shared.trace(format!("{} {text}", self.who));
    }
}

fn block(b: &Block) -> String {
    if b.step() == 1 {
        format!("[{}, {})", b.start(), b.end())
    } else {
        format!("[{}, {}) step {}", b.start(), b.end(), b.step())
    }
}

#[async_trait]
impl Authority for FaultyAuthority {
    fn kind(&self) -> &'static str {
        "memory"
    }
    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        self.inner.worker_leases()
    }
    async fn incarnation(&self) -> Result<Option<Incarnation>, StoreError> {
        self.inner.incarnation().await
    }
    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        self.inner.create_incarnation(candidate).await
    }
    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        self.call(
            Call::Write,
            format!("advance {name} to {to} ({why:?})"),
            self.inner.advance(name, to, why),
            |a| format!("from {} to {}", a.from, a.state.watermark),
        )
        .await
    }
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        self.call(
            Call::Write,
            format!("ensure {name}"),
            self.inner.ensure_namespace(name, spec),
            |s| format!("watermark {}", s.watermark),
        )
        .await
    }
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        self.call(
            Call::Write,
            format!("reserve {count} of {name}"),
            self.inner.reserve(name, count),
            |r| block(&r.block),
        )
        .await
    }
    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.call(
            Call::Read,
            format!("state of {name}"),
            self.inner.state(name),
            |s| match s {
                Some(s) => format!("watermark {}", s.watermark),
                None => "none".into(),
            },
        )
        .await
    }
    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.call(Call::Read, "list".into(), self.inner.list(), |l| {
            format!("{} namespaces", l.len())
        })
        .await
    }
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.call(
            Call::Refusable,
            format!("give back {} of {name}", block(&tail)),
            self.inner.give_back(name, tail),
            |g| format!("{g:?}"),
        )
        .await
    }
    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        let list: Vec<String> = blocks.iter().map(block).collect();
        self.call(
            Call::Refusable,
            format!("park {} of {name}", list.join(" ")),
            self.inner.park(name, key, blocks),
            |()| "parked".into(),
        )
        .await
    }
    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        self.call(
            Call::Refusable,
            format!("claim the kept blocks of {name}"),
            self.inner.claim(name, key),
            |b| {
                let list: Vec<String> = b.iter().map(block).collect();
                format!("returns {}", list.join(" "))
            },
        )
        .await
    }
}
