//! [`Namespace`]: one namespace's ids on a client, its handle for the hot path, and waiting.
//!
//! [`Namespace::try_next`] never waits: a sequence id is one `fetch_add` on the window while it
//! lasts (see `window.rs`); a time-ordered id is a short lock on its queue.
//! [`Namespace::next`] and [`Namespace::next_batch`] wait only when the buffer is empty: they
//! wake the refill task and wait for the outcome of a refill, at most `refill_wait`; if a
//! refill finished after they began waiting, failed, and left them nothing, they answer its
//! error (as a node does, design.md section 5: "answers 503 only when the buffer is empty").
//!
//! Invariants: the ids of one handle's namespace are the ones the kind's state hands out
//! (`sequence.rs`, `timed.rs`): increasing per namespace per client, each once. A batch that
//! fails or is dropped while waiting puts its sequence ids back in front of the buffer
//! (`Buffer::put_back`), or burns them if others took since; never hands them out twice.

use crate::config::{ClientConfig, MAX_BATCH};
use crate::error::ClientError;
use crate::id::{Id, Kind};
use crate::nodes::Nodes;
use crate::sequence::{Refilled, SequenceIds};
use crate::timed::TimedIds;
use idmint_core::buffer::Taken;
use idmint_core::Backoff;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

/// A namespace's state, shared by its handles and its refill task.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) name: String,
    pub(crate) ids: Ids,
    pub(crate) nodes: Arc<Nodes>,
    pub(crate) clock: crate::config::SharedClock,
    pub(crate) config: Arc<ClientConfig>,
    /// Wakes the refill task.
    pub(crate) wake: Notify,
    /// Told after every refill round that did something.
    pub(crate) arrived: Notify,
    /// Refill rounds that did something, finished.
    pub(crate) rounds: AtomicU64,
    pub(crate) waits: AtomicU64,
    pub(crate) failures: AtomicU64,
    /// The latest refill's error, cleared by the next success. A std mutex: held to copy it.
    pub(crate) last_error: Mutex<Option<ClientError>>,
}

/// The kind's ids. One per namespace, inside an `Arc`: the sequence variant is large (its
/// window's cache-line-aligned slots) and is kept inline, boxing it would cost the hot path an
/// indirection.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Ids {
    Sequence(SequenceIds),
    Timed(TimedIds),
}

/// One namespace's ids on a [`Client`](crate::Client): cheap to clone, for the hot path
/// (no name lookup). Get one with [`Client::namespace`](crate::Client::namespace).
#[derive(Debug, Clone)]
pub struct Namespace {
    pub(crate) state: Arc<State>,
}

/// A namespace's state on the client, for status pages and metrics.
///
/// For a sequence namespace, at rest (no call in flight), exactly: ids received from nodes =
/// `served + buffered + burned + given_back`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NamespaceStats {
    /// What the namespace hands out.
    pub kind: Kind,
    /// Ids held and not handed out yet (fresh ones, for a time-ordered namespace).
    pub buffered: u64,
    /// Ids handed out. Exact once no call is in flight (a `try_next` whose claim races a window
    /// change burns that one id and counts it in `burned`, window.rs) and no
    /// [`LocalIds`](crate::LocalIds) is alive: a live handle's chunk counts as served until
    /// the handle drops and its unused tail goes back or is counted burned.
    pub served: u64,
    /// Ids received but never to be handed out: a tail refused or not sent back, a block part
    /// below ids already held, time-ordered ids dropped as out of order or at close.
    pub burned: u64,
    /// Sequence ids handed back to the node at close.
    pub given_back: u64,
    /// Time-ordered ids dropped because they were older than the validity limit.
    pub expired: u64,
    /// Blocks (or batches) received.
    pub refills: u64,
    /// Refill calls that failed.
    pub refill_failures: u64,
    /// Calls that found the buffer empty and had to wait for a refill.
    pub waits: u64,
    /// The demand average, ids per second (sequence namespaces: the core buffer's EWMA).
    pub demand_per_sec: f64,
    /// The size of the next block (or batch) asked for.
    pub next_fetch: u64,
    /// The latest refill's error, until a refill succeeds.
    pub last_error: Option<ClientError>,
}

impl Namespace {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// What it hands out.
    pub fn kind(&self) -> Kind {
        match &self.state.ids {
            Ids::Sequence(_) => Kind::Sequence,
            Ids::Timed(t) => t.kind(),
        }
    }

    /// The next id if one is buffered (and fresh, for a time-ordered namespace); `None` without
    /// waiting otherwise (the background refill is woken). Never touches the network.
    #[inline]
    pub fn try_next(&self) -> Option<Id> {
        let state = &self.state;
        match &state.ids {
            Ids::Sequence(s) => s.try_next(|| state.wake.notify_one()).map(Id::Sequence),
            Ids::Timed(t) => t.take_one(state.clock.monotonic_nanos(), || state.wake.notify_one()),
        }
    }

    /// A handle for one owner that takes a chunk of sequence ids at a time and hands them out
    /// without any atomic operation: the fastest way to take many ids on one thread. Its ids
    /// increase per handle, not across handles (see [`LocalIds`](crate::LocalIds)).
    pub fn local(&self) -> crate::LocalIds {
        crate::LocalIds::new(self.clone())
    }

    /// The next id, waiting for a refill only when none is buffered.
    pub async fn next(&self) -> Result<Id, ClientError> {
        if let Some(id) = self.try_next() {
            return Ok(id);
        }
        self.state.waits.fetch_add(1, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + self.state.config.refill_wait;
        loop {
            let arrived = self.state.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let seen = self.state.rounds.load(Ordering::SeqCst);
            if let Some(id) = self.try_next() {
                return Ok(id);
            }
            self.closed()?;
            if let Err(e) = self.wait(arrived, deadline, seen).await {
                // A round may have brought ids before a later one failed: those come first.
                return self.try_next().ok_or(e);
            }
        }
    }

    /// `count` ids (1 to 10,000,000), increasing, waiting for refills as needed.
    pub async fn next_batch(&self, count: u64) -> Result<Vec<Id>, ClientError> {
        if count == 0 || count > MAX_BATCH {
            return Err(ClientError::InvalidCount {
                count,
                max: MAX_BATCH,
            });
        }
        match &self.state.ids {
            Ids::Sequence(s) => self.sequence_batch(s, count).await,
            Ids::Timed(t) => self.timed_batch(t, count).await,
        }
    }

    async fn sequence_batch(&self, s: &SequenceIds, count: u64) -> Result<Vec<Id>, ClientError> {
        let state = &self.state;
        let mut guard = PutBackOnDrop {
            ids: s,
            taken: Some(Taken::new()),
        };
        let deadline = tokio::time::Instant::now() + state.config.refill_wait;
        let mut waited = false;
        loop {
            let arrived = state.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let seen = state.rounds.load(Ordering::SeqCst);
            let taken = guard.taken.get_or_insert_with(Taken::new);
            let want = count - taken.len();
            if s.take_into(taken, want, || state.wake.notify_one()) {
                return Err(ClientError::Closed);
            }
            if taken.len() == count {
                let taken = guard.taken.take().unwrap_or_default();
                return Ok(taken.ids().map(Id::Sequence).collect());
            }
            if !waited {
                waited = true;
                state.waits.fetch_add(1, Ordering::Relaxed);
            }
            if let Err(e) = self.wait(arrived, deadline, seen).await {
                // A round may have brought ids before a later one failed: take them first;
                // still short, the guard puts the ids back.
                let taken = guard.taken.get_or_insert_with(Taken::new);
                let want = count - taken.len();
                if !s.take_into(taken, want, || state.wake.notify_one()) && taken.len() == count {
                    let taken = guard.taken.take().unwrap_or_default();
                    return Ok(taken.ids().map(Id::Sequence).collect());
                }
                return Err(e);
            }
        }
    }

    async fn timed_batch(&self, t: &TimedIds, count: u64) -> Result<Vec<Id>, ClientError> {
        let state = &self.state;
        let mut out: Vec<(Id, u64)> = Vec::new();
        let mut deadline = tokio::time::Instant::now() + state.config.refill_wait;
        let mut waited = false;
        loop {
            let arrived = state.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let seen = state.rounds.load(Ordering::SeqCst);
            let now = state.clock.monotonic_nanos();
            // Ids taken earlier that went stale while this call waited are not handed out.
            let stale = out
                .iter()
                .take_while(|(_, stamp)| !t.fresh(*stamp, now))
                .count();
            if stale > 0 {
                out.drain(..stale);
                t.unserve_expired(stale as u64);
            }
            let want = count - out.len() as u64;
            t.take(want, now, &mut out, || state.wake.notify_one());
            if out.len() as u64 == count {
                return Ok(out.into_iter().map(|(id, _)| id).collect());
            }
            self.closed()?;
            if !waited {
                waited = true;
                state.waits.fetch_add(1, Ordering::Relaxed);
            }
            if self.wait(arrived, deadline, seen).await.is_err() {
                // A round may have brought ids before a later one failed: take them first.
                let now = state.clock.monotonic_nanos();
                t.take(count - out.len() as u64, now, &mut out, || {
                    state.wake.notify_one()
                });
                if out.len() as u64 == count {
                    return Ok(out.into_iter().map(|(id, _)| id).collect());
                }
                if out.is_empty() {
                    return Err(self.error());
                }
            }
            // Progress was made: a fresh deadline for the rest.
            if tokio::time::Instant::now() >= deadline {
                deadline = tokio::time::Instant::now() + state.config.refill_wait;
            }
        }
    }

    /// Waits for a refill round after `seen`, until `deadline`: `Err` if the deadline passed,
    /// or a round finished, failed, and this call still has nothing.
    async fn wait(
        &self,
        arrived: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        deadline: tokio::time::Instant,
        seen: u64,
    ) -> Result<(), ClientError> {
        self.state.wake.notify_one();
        if tokio::time::timeout_at(deadline, arrived).await.is_err() {
            return Err(self.error());
        }
        if self.state.rounds.load(Ordering::SeqCst) > seen && self.last_error().is_some() {
            return Err(self.error());
        }
        Ok(())
    }

    fn closed(&self) -> Result<(), ClientError> {
        let closed = match &self.state.ids {
            Ids::Sequence(s) => s.is_closed(),
            Ids::Timed(t) => t.is_closed(),
        };
        if closed {
            Err(ClientError::Closed)
        } else {
            Ok(())
        }
    }

    fn last_error(&self) -> Option<ClientError> {
        self.state
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The error of a call that got nothing: the latest refill's, else "nothing in time".
    fn error(&self) -> ClientError {
        if self.closed().is_err() {
            return ClientError::Closed;
        }
        self.last_error().unwrap_or_else(|| {
            ClientError::unavailable(format!(
                "no ids of {} within {} ms",
                self.state.name,
                self.state.config.refill_wait.as_millis()
            ))
        })
    }

    /// A snapshot of the namespace's state.
    pub fn stats(&self) -> NamespaceStats {
        let state = &self.state;
        let waits = state.waits.load(Ordering::Relaxed);
        let refill_failures = state.failures.load(Ordering::Relaxed);
        let last_error = self.last_error();
        match &state.ids {
            Ids::Sequence(s) => {
                let st = s.stats();
                NamespaceStats {
                    kind: Kind::Sequence,
                    buffered: st.buffered,
                    served: st.served,
                    burned: st.burned,
                    given_back: st.given_back,
                    expired: 0,
                    refills: st.refills,
                    refill_failures,
                    waits,
                    demand_per_sec: st.demand_per_sec,
                    next_fetch: st.block_size,
                    last_error,
                }
            }
            Ids::Timed(t) => {
                let st = t.stats();
                NamespaceStats {
                    kind: t.kind(),
                    buffered: st.buffered,
                    served: st.served,
                    burned: st.discarded,
                    given_back: 0,
                    expired: st.expired,
                    refills: st.refills,
                    refill_failures,
                    waits,
                    demand_per_sec: 0.0,
                    next_fetch: st.batch,
                    last_error,
                }
            }
        }
    }
}

/// A sequence batch's ids, put back if the batch does not complete.
struct PutBackOnDrop<'a> {
    ids: &'a SequenceIds,
    taken: Option<Taken>,
}

impl Drop for PutBackOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(taken) = self.taken.take() {
            self.ids.put_back(taken);
        }
    }
}

impl State {
    /// One refill round of the namespace.
    pub(crate) async fn refill(&self) -> Refilled {
        let outcome = match &self.ids {
            Ids::Sequence(s) => {
                s.refill(&self.name, &self.nodes, self.clock.monotonic_nanos())
                    .await
            }
            Ids::Timed(t) => {
                t.refill(&self.name, &self.nodes, || self.clock.monotonic_nanos())
                    .await
            }
        };
        match &outcome {
            Refilled::Idle => return outcome,
            Refilled::Filled => {
                *self
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = None;
            }
            Refilled::Failed(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                *self
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(e.clone());
            }
        }
        self.rounds.fetch_add(1, Ordering::SeqCst);
        self.arrived.notify_waiters();
        outcome
    }
}

/// The pauses after failed refill rounds: random and exponential from 50 ms to 2 s.
fn refill_backoff() -> Backoff {
    Backoff::new(Duration::from_millis(50), Duration::from_secs(2))
}

/// The background refill of one namespace: every `refill_tick`, or at once when woken (a taker
/// went below the low-water mark or found nothing), one refill round; after a failure it pauses
/// ([`refill_backoff`]), not woken by takers meanwhile. Ends when `stop` says so, never in
/// the middle of a round, so a block in flight lands in the buffer before `close` hands the
/// tail back (design.md invariant 3).
pub(crate) async fn refill_loop(state: Arc<State>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let tick = state.config.refill_tick;
    let mut backoff = refill_backoff();
    let mut pause: Option<Duration> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        match pause {
            Some(pause) => {
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            None => {
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = state.wake.notified() => {}
                    _ = tokio::time::sleep(tick) => {}
                }
            }
        }
        if *stop.borrow() {
            return;
        }
        // A few rounds in a row while blocks keep being wanted (a burst drained the buffer).
        for _ in 0..4 {
            match state.refill().await {
                Refilled::Idle => {
                    backoff.reset();
                    pause = None;
                    break;
                }
                Refilled::Filled => {
                    backoff.reset();
                    pause = None;
                }
                Refilled::Failed(_) => {
                    pause = Some(backoff.delay());
                    break;
                }
            }
        }
    }
}
