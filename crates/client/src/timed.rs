//! A snowflake, UUIDv7 or ULID namespace's ids on the client: batches fetched with `Next`,
//! handed out only while they are fresh.
//!
//! Invariants:
//! - only ids a node returned are handed out, each once, in increasing order per client: an id
//!   not above every id the client held of the namespace (another node's, after a failover) is
//!   dropped, never handed out;
//! - **validity**: each batch is stamped with the client clock's monotonic reading taken
//!   *before* its request was sent, so every id in it was made after the stamp; an id is handed
//!   out only while `now <= stamp + validity` (Hazelcast's `prefetchValidityMillis`), older ones
//!   are dropped and counted as expired. The clock is injected (`idmint_core::Clock`);
//! - batch size: starts at 16 and doubles (up to `max_time_batch`) each time a batch was used
//!   up with nothing expiring, halves when ids expired, so a slow consumer fetches little and
//!   wastes little;
//! - the mutex is a `std::sync::Mutex` held for the queue's bookkeeping only, never across
//!   `.await`.
//!
//! What it does not do: give anything back (time-ordered ids are not leased; an unused one is
//! simply never handed out).

use crate::error::ClientError;
use crate::id::{Id, Kind};
use crate::nodes::{IntoClientError, Nodes};
use crate::sequence::Refilled;
use idmint_core::{Ulid, Uuid7};
use idmint_proto::v1 as proto;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

const FIRST_BATCH: u64 = 16;

#[derive(Debug)]
struct Batch {
    /// Monotonic nanoseconds before the request was sent.
    stamp: u64,
    ids: VecDeque<Id>,
}

#[derive(Debug)]
struct Inner {
    batches: VecDeque<Batch>,
    cached: u64,
    /// The highest id ever accepted.
    highest: Option<u128>,
    /// The size of the next fetch.
    batch: u64,
    served: u64,
    served_at_last_fetch: u64,
    expired: u64,
    expired_at_last_fetch: u64,
    discarded: u64,
    refills: u64,
    closed: bool,
    /// A taker found nothing: fetch even without recent demand.
    shortfall: bool,
}

/// A time-ordered namespace's ids. See the module docs.
#[derive(Debug)]
pub(crate) struct TimedIds {
    kind: Kind,
    validity_nanos: u64,
    max_batch: u64,
    inner: Mutex<Inner>,
}

/// Counters of a time-ordered namespace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimedStats {
    pub(crate) buffered: u64,
    pub(crate) served: u64,
    pub(crate) expired: u64,
    pub(crate) discarded: u64,
    pub(crate) refills: u64,
    pub(crate) batch: u64,
}

impl TimedIds {
    pub(crate) fn new(kind: Kind, validity_nanos: u64, max_batch: u64) -> TimedIds {
        TimedIds {
            kind,
            validity_nanos,
            max_batch,
            inner: Mutex::new(Inner {
                batches: VecDeque::new(),
                cached: 0,
                highest: None,
                batch: FIRST_BATCH.min(max_batch),
                served: 0,
                served_at_last_fetch: 0,
                expired: 0,
                expired_at_last_fetch: 0,
                discarded: 0,
                refills: 0,
                closed: false,
                shortfall: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the batches too old at `now`.
    fn expire(&self, inner: &mut Inner, now: u64) {
        while let Some(front) = inner.batches.front() {
            if now <= front.stamp.saturating_add(self.validity_nanos) && !front.ids.is_empty() {
                break;
            }
            let n = front.ids.len() as u64;
            inner.expired += n;
            inner.cached -= n;
            inner.batches.pop_front();
        }
    }

    /// Up to `max` fresh ids at `now`, with their stamps, appended to `out`.
    pub(crate) fn take(&self, max: u64, now: u64, out: &mut Vec<(Id, u64)>, wake: impl Fn()) {
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        self.expire(&mut inner, now);
        let mut taken = 0;
        while taken < max {
            let Some(front) = inner.batches.front_mut() else {
                break;
            };
            let stamp = front.stamp;
            match front.ids.pop_front() {
                Some(id) => {
                    out.push((id, stamp));
                    taken += 1;
                }
                None => {
                    inner.batches.pop_front();
                }
            }
        }
        inner.cached -= taken;
        inner.served += taken;
        if taken < max {
            inner.shortfall = true;
            wake();
        } else if inner.cached < (inner.batch / 2).max(1) {
            wake();
        }
    }

    /// One fresh id at `now`, if any.
    pub(crate) fn take_one(&self, now: u64, wake: impl Fn()) -> Option<Id> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        self.expire(&mut inner, now);
        while let Some(front) = inner.batches.front_mut() {
            if let Some(id) = front.ids.pop_front() {
                inner.cached -= 1;
                inner.served += 1;
                if inner.cached < (inner.batch / 2).max(1) {
                    wake();
                }
                return Some(id);
            }
            inner.batches.pop_front();
        }
        inner.shortfall = true;
        wake();
        None
    }

    /// Ids taken but not handed out (a batch call found some too old at the end): they count as
    /// expired.
    pub(crate) fn unserve_expired(&self, n: u64) {
        let mut inner = self.lock();
        inner.served -= n;
        inner.expired += n;
    }

    /// Whether `stamp` is still fresh at `now`.
    pub(crate) fn fresh(&self, stamp: u64, now: u64) -> bool {
        now <= stamp.saturating_add(self.validity_nanos)
    }

    /// One refill round: when the fresh ids run below half a batch and there was demand since
    /// the last fetch (or a taker found none), one `Next` call across the nodes. `now` is read
    /// before the request is sent and stamps the batch.
    pub(crate) async fn refill(
        &self,
        name: &str,
        nodes: &Nodes,
        now: impl Fn() -> u64,
    ) -> Refilled {
        let stamp = now();
        let count = {
            let mut inner = self.lock();
            if inner.closed {
                return Refilled::Idle;
            }
            self.expire(&mut inner, stamp);
            let demand = inner.served > inner.served_at_last_fetch;
            let low = inner.cached < (inner.batch / 2).max(1);
            if !(inner.shortfall || (demand && low)) {
                return Refilled::Idle;
            }
            // Size from how the last batch went: expiries halve it, a batch used up doubles it.
            if inner.expired > inner.expired_at_last_fetch {
                inner.batch = (inner.batch / 2).max(1);
            } else if demand && inner.refills > 0 {
                inner.batch = (inner.batch * 2).min(self.max_batch);
            }
            inner.served_at_last_fetch = inner.served;
            inner.expired_at_last_fetch = inner.expired;
            inner.batch
        };
        let request = proto::NextRequest {
            namespace: name.to_owned(),
            count: Some(count),
            shard: None,
            key: None,
        };
        let answer = nodes
            .call(|mut c| {
                let request = request.clone();
                async move { c.next(request).await }
            })
            .await;
        let ids = match answer {
            Ok((_, ids)) => ids,
            Err(e) => return Refilled::Failed(e.into_client_error(name)),
        };
        let values = match self.values(ids) {
            Ok(values) => values,
            Err(e) => return Refilled::Failed(e),
        };
        let mut inner = self.lock();
        let mut batch = VecDeque::with_capacity(values.len());
        for v in values {
            if inner.highest.is_some_and(|h| v.as_u128() <= h) {
                inner.discarded += 1;
            } else {
                inner.highest = Some(v.as_u128());
                batch.push_back(v);
            }
        }
        inner.cached += batch.len() as u64;
        inner.refills += 1;
        inner.shortfall = false;
        inner.batches.push_back(Batch { stamp, ids: batch });
        Refilled::Filled
    }

    /// The answer's ids, checked to be of this namespace's kind.
    fn values(&self, ids: proto::Ids) -> Result<Vec<Id>, ClientError> {
        use proto::ids::Ids as Kinds;
        let wrong = || {
            ClientError::node(format!(
                "the node answered ids of another kind than {}",
                self.kind.name()
            ))
        };
        match (self.kind, ids.ids) {
            (Kind::Snowflake, Some(Kinds::U64(list))) => {
                Ok(list.ids.into_iter().map(Id::Snowflake).collect())
            }
            (Kind::Uuid7, Some(Kinds::Uuid7(list))) | (Kind::Ulid, Some(Kinds::Ulid(list))) => list
                .ids
                .iter()
                .map(|b| {
                    let bytes: [u8; 16] = b.as_slice().try_into().map_err(|_| wrong())?;
                    if self.kind == Kind::Ulid {
                        return Ok(Id::Ulid(Ulid::from_bytes(bytes)));
                    }
                    Uuid7::from_bytes(bytes).map(Id::Uuid7).map_err(|_| wrong())
                })
                .collect(),
            _ => Err(wrong()),
        }
    }

    /// Stops handing out ids.
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        inner.discarded += inner.cached;
        inner.cached = 0;
        inner.batches.clear();
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    pub(crate) fn stats(&self) -> TimedStats {
        let inner = self.lock();
        TimedStats {
            buffered: inner.cached,
            served: inner.served,
            expired: inner.expired,
            discarded: inner.discarded,
            refills: inner.refills,
            batch: inner.batch,
        }
    }
}
