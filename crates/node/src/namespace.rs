//! One namespace at run time: what it hands out and where from.
//!
//! A sequence namespace with a cache keeps a [`Buffer`] behind a short `std::sync::Mutex`
//! (never held across `.await`) and one background refill task that reserves blocks from the
//! authority below the low-water mark, so in steady state no request waits on the authority. A
//! request that finds the buffer empty wakes the task and waits for its outcome, answering 503
//! if the authority fails or does not answer within `refill_wait`. With cache `off`, each request
//! reserves its ids from the authority itself.
//!
//! Invariants: ids come only from blocks the authority returned (invariant 1); the buffer refuses
//! a block that is not above everything it held, and the namespace then stops serving (`Internal`)
//! rather than risk a duplicate; the refill task finishes an in-flight reservation before it
//! stops, so the shutdown hand-back sees every block.

use crate::config::CacheMode;
use crate::error::IdError;
use crate::metrics::{Metrics, NamespaceLabels, RefillLabels};
use idmint_core::snowflake::ClockCheck;
use idmint_core::{
    Block, Buffer, BufferPolicy, Clock, Layout, NamespaceName, NextIdError, SequenceSpec,
    SnowflakeGenerator, SystemClock, UlidGenerator, Uuid7Generator,
};
use idmint_store::{Authority, GiveBack, StoreError};
use prometheus_client::metrics::counter::Counter;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};

/// Ids of one response: integers (sequence, snowflake) or canonical strings (uuid7, ulid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ids {
    /// 64-bit integer ids, increasing.
    Numbers(Vec<u64>),
    /// 128-bit ids in canonical text form, increasing.
    Text(Vec<String>),
}

impl Ids {
    /// How many.
    pub fn len(&self) -> usize {
        match self {
            Ids::Numbers(v) => v.len(),
            Ids::Text(v) => v.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A namespace being served.
#[derive(Debug)]
pub enum Namespace {
    /// Integers from leased blocks.
    Sequence(Arc<SequenceNamespace>),
    /// Snowflake ids.
    Snowflake(SnowflakeNamespace),
    /// UUIDv7.
    Uuid7(NamespaceName, Uuid7Generator),
    /// ULID.
    Ulid(NamespaceName, UlidGenerator),
}

impl Namespace {
    /// The namespace's name.
    pub fn name(&self) -> &NamespaceName {
        match self {
            Namespace::Sequence(s) => &s.name,
            Namespace::Snowflake(s) => &s.name,
            Namespace::Uuid7(n, _) | Namespace::Ulid(n, _) => n,
        }
    }

    /// `sequence`, `snowflake`, `uuid7` or `ulid`.
    pub fn kind(&self) -> &'static str {
        match self {
            Namespace::Sequence(_) => "sequence",
            Namespace::Snowflake(_) => "snowflake",
            Namespace::Uuid7(..) => "uuid7",
            Namespace::Ulid(..) => "ulid",
        }
    }

    /// `count` ids, increasing. Fewer only when a sequence namespace runs out of ids.
    pub async fn ids(&self, count: u64) -> Result<Ids, IdError> {
        match self {
            Namespace::Sequence(s) => s.ids(count).await.map(Ids::Numbers),
            Namespace::Snowflake(s) => s.ids(count).await.map(Ids::Numbers),
            Namespace::Uuid7(_, g) => Ok(Ids::Text(
                (0..count).map(|_| g.next_uuid().to_string()).collect(),
            )),
            Namespace::Ulid(_, g) => Ok(Ids::Text(
                (0..count).map(|_| g.next_ulid().to_string()).collect(),
            )),
        }
    }
}

/// The outcome of the latest refill, broadcast to requests waiting for one.
#[derive(Debug, Clone, Default)]
struct RefillOutcome {
    /// The authority's error, if the latest refill failed.
    error: Option<StoreError>,
}

/// A sequence namespace. See the module docs.
#[derive(Debug)]
pub struct SequenceNamespace {
    name: NamespaceName,
    spec: SequenceSpec,
    cache: CacheMode,
    authority: Arc<dyn Authority>,
    metrics: Arc<Metrics>,
    labels: NamespaceLabels,
    served_counter: Counter,
    buffer: Mutex<Buffer>,
    wake_refill: Notify,
    outcome: watch::Sender<RefillOutcome>,
    /// Ids requests are waiting for beyond the buffer's level, added to the next refill.
    shortfall: AtomicU64,
    /// The highest watermark the authority reported to this node.
    watermark: AtomicU64,
    /// Set when a consistency check failed: the namespace serves nothing more.
    poisoned: AtomicBool,
    refill_wait: Duration,
    clock: SystemClock,
}

/// Upper bound of one refill, whatever the shortfall.
const MAX_REFILL: u64 = 10_000_000;

impl SequenceNamespace {
    /// A sequence namespace whose durable state (from `ensure_namespace`) has `watermark`.
    pub fn new(
        name: NamespaceName,
        spec: SequenceSpec,
        cache: CacheMode,
        watermark: u64,
        authority: Arc<dyn Authority>,
        metrics: Arc<Metrics>,
        refill_wait: Duration,
    ) -> Arc<Self> {
        let policy = match cache {
            CacheMode::Buffered(p) => p,
            CacheMode::Off => BufferPolicy::default(),
        };
        let (outcome, _) = watch::channel(RefillOutcome::default());
        let labels = NamespaceLabels {
            namespace: name.to_string(),
        };
        let served_counter = metrics.ids_served.get_or_create(&labels).clone();
        Arc::new(SequenceNamespace {
            served_counter,
            labels,
            name,
            spec,
            cache,
            authority,
            metrics,
            buffer: Mutex::new(Buffer::new(policy)),
            wake_refill: Notify::new(),
            outcome,
            shortfall: AtomicU64::new(0),
            watermark: AtomicU64::new(watermark),
            poisoned: AtomicBool::new(false),
            refill_wait,
            clock: SystemClock::new(),
        })
    }

    /// The spec.
    pub fn spec(&self) -> SequenceSpec {
        self.spec
    }
    /// The cache mode.
    pub fn cache(&self) -> CacheMode {
        self.cache
    }
    /// Ids handed out by this node (ids and blocks), whatever the cache mode.
    pub fn served(&self) -> u64 {
        self.served_counter.get()
    }

    /// The highest watermark seen from the authority.
    pub fn watermark(&self) -> u64 {
        self.watermark.load(Ordering::Relaxed)
    }

    /// Runs `f` on the locked buffer. The buffer holds plain counters, so a panic elsewhere
    /// while it was locked cannot leave it half-updated in a way that repeats ids: a poisoned
    /// lock is taken over.
    pub fn with_buffer<R>(&self, f: impl FnOnce(&mut Buffer) -> R) -> R {
        let mut guard: MutexGuard<'_, Buffer> =
            self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    fn exhausted(&self) -> IdError {
        IdError::Exhausted {
            name: self.name.to_string(),
            bits: self.spec.width().bits(),
        }
    }

    fn map_store_error(&self, e: &StoreError) -> IdError {
        match e {
            StoreError::Exhausted { .. } => self.exhausted(),
            other => IdError::Unavailable {
                name: self.name.to_string(),
                reason: other.to_string(),
            },
        }
    }

    fn note_watermark(&self, w: u64) {
        self.watermark.fetch_max(w, Ordering::Relaxed);
    }

    /// `count` ids, increasing; fewer only when the namespace runs out.
    pub async fn ids(&self, count: u64) -> Result<Vec<u64>, IdError> {
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(IdError::Internal(self.name.to_string()));
        }
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 20));
        if let CacheMode::Off = self.cache {
            // Flickr ticket semantics: reservations straight from the authority. A ticket
            // server grants one id per reservation (fewer than asked), so reserve until `count`
            // ids are in hand; short only when the namespace runs out.
            while (out.len() as u64) < count {
                match self
                    .authority
                    .reserve(&self.name, count - out.len() as u64)
                    .await
                {
                    Ok(r) => {
                        self.note_watermark(r.watermark);
                        out.extend(r.block.ids());
                    }
                    Err(StoreError::Exhausted { .. }) if !out.is_empty() => break,
                    Err(e) => return Err(self.map_store_error(&e)),
                }
            }
            // Several reservations (several authorities) may interleave: one answer is still
            // increasing.
            out.sort_unstable();
            self.served_counter.inc_by(out.len() as u64);
            return Ok(out);
        }
        self.fill(count, |buf, want| buf.take(want, &mut out))
            .await?;
        Ok(out)
    }

    /// One contiguous block of up to `count` ids for a lower tier.
    pub async fn block(&self, count: u64) -> Result<Block, IdError> {
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(IdError::Internal(self.name.to_string()));
        }
        if let CacheMode::Off = self.cache {
            let r = self
                .authority
                .reserve(&self.name, count)
                .await
                .map_err(|e| self.map_store_error(&e))?;
            self.note_watermark(r.watermark);
            self.served_counter.inc_by(r.block.len());
            return Ok(r.block);
        }
        let mut got = None;
        self.fill(count, |buf, want| match buf.take_block(want) {
            Some(b) => {
                got = Some(b);
                // One block only: report the request as complete.
                want
            }
            None => 0,
        })
        .await?;
        got.ok_or_else(|| self.exhausted())
    }

    /// Takes from the buffer with `take(buffer, wanted) -> taken` until `count` are taken,
    /// waiting for refills when the buffer runs dry. Returns early (short) only on exhaustion
    /// after something was taken.
    async fn fill(
        &self,
        count: u64,
        mut take: impl FnMut(&mut Buffer, u64) -> u64,
    ) -> Result<(), IdError> {
        // Fast path: the buffer has enough, nothing to wait for.
        let (mut taken, wants_refill) = self.with_buffer(|b| (take(b, count), b.wants_refill()));
        if taken > 0 {
            self.served_counter.inc_by(taken);
        }
        if wants_refill || taken < count {
            self.wake_refill.notify_one();
        }
        if taken >= count {
            return Ok(());
        }
        let mut outcomes = self.outcome.subscribe();
        let deadline = tokio::time::Instant::now() + self.refill_wait;
        loop {
            outcomes.borrow_and_update();
            let got = self.with_buffer(|b| take(b, count - taken));
            taken += got;
            if got > 0 {
                self.served_counter.inc_by(got);
            }
            if taken >= count {
                self.wake_refill.notify_one();
                return Ok(());
            }
            // The buffer is empty. If the latest refill found the namespace exhausted, say so
            // now: waiting would outlast the refill task's backoff and answer a misleading 503.
            if let Some(StoreError::Exhausted { .. }) = &outcomes.borrow().error {
                return if taken > 0 {
                    Ok(())
                } else {
                    Err(self.exhausted())
                };
            }
            self.shortfall.fetch_add(count - taken, Ordering::Relaxed);
            self.wake_refill.notify_one();
            match tokio::time::timeout_at(deadline, outcomes.changed()).await {
                Err(_) => {
                    // The refill task may be backing off after a failure (up to 2 s, longer
                    // than `refill_wait`): say what the authority said, not only that we waited.
                    let latest = match &outcomes.borrow().error {
                        Some(e) => format!("; the latest refill failed: {e}"),
                        None => String::new(),
                    };
                    return Err(IdError::Unavailable {
                        name: self.name.to_string(),
                        reason: format!("no block arrived within {:?}{latest}", self.refill_wait),
                    });
                }
                Ok(Err(_)) => return Err(IdError::ShuttingDown),
                Ok(Ok(())) => {}
            }
            if self.poisoned.load(Ordering::Relaxed) {
                return Err(IdError::Internal(self.name.to_string()));
            }
            let error = outcomes.borrow().error.clone();
            if let Some(e) = error {
                let empty = self.with_buffer(|b| b.buffered() == 0);
                if empty {
                    if matches!(e, StoreError::Exhausted { .. }) && taken > 0 {
                        return Ok(());
                    }
                    return Err(self.map_store_error(&e));
                }
            }
        }
    }

    /// The refill loop: runs until `stop` turns true, finishing any reservation in flight first.
    pub async fn refill_loop(self: Arc<Self>, tick: Duration, mut stop: watch::Receiver<bool>) {
        if let CacheMode::Off = self.cache {
            return;
        }
        let mut backoff: Option<Duration> = None;
        let mut retry_at: Option<tokio::time::Instant> = None;
        // Fill the buffer at once on start.
        self.wake_refill.notify_one();
        loop {
            if *stop.borrow() {
                return;
            }
            tokio::select! {
                _ = self.wake_refill.notified() => {}
                _ = tokio::time::sleep(tick) => {}
                _ = stop.changed() => return,
            }
            if let Some(at) = retry_at {
                // After a failure, wait out the backoff even if a request woke us.
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = stop.changed() => return,
                }
            }
            let now = self.clock.monotonic_nanos();
            let Some(count) = self.with_buffer(|b| b.start_refill(now)) else {
                continue;
            };
            let count = count
                .saturating_add(self.shortfall.swap(0, Ordering::Relaxed))
                .min(MAX_REFILL);
            let started = Instant::now();
            let result = self.authority.reserve(&self.name, count).await;
            self.metrics
                .refill_seconds
                .get_or_create(&self.labels)
                .observe(started.elapsed().as_secs_f64());
            let outcome_label = if result.is_ok() { "ok" } else { "error" };
            self.metrics
                .refills
                .get_or_create(&RefillLabels {
                    namespace: self.name.to_string(),
                    outcome: outcome_label,
                })
                .inc();
            match result {
                Ok(r) => {
                    self.note_watermark(r.watermark);
                    if let Err(e) = self.with_buffer(|b| b.refill_done(r.block)) {
                        tracing::error!(namespace = %self.name, error = %e, "refusing a block; the namespace stops serving");
                        self.poisoned.store(true, Ordering::Relaxed);
                    }
                    backoff = None;
                    retry_at = None;
                    self.outcome.send_replace(RefillOutcome { error: None });
                }
                Err(e) => {
                    self.with_buffer(|b| b.refill_failed());
                    let next = match backoff {
                        None => Duration::from_millis(50),
                        Some(b) => (b * 2).min(Duration::from_secs(2)),
                    };
                    if !matches!(e, StoreError::Exhausted { .. }) {
                        tracing::warn!(namespace = %self.name, error = %e, retry_in = ?next, "refill failed");
                    }
                    backoff = Some(next);
                    retry_at = Some(tokio::time::Instant::now() + next);
                    self.outcome.send_replace(RefillOutcome { error: Some(e) });
                }
            }
        }
    }

    /// The latest refill error, if the latest refill failed.
    pub fn last_error(&self) -> Option<String> {
        self.outcome.borrow().error.as_ref().map(|e| e.to_string())
    }

    /// Hands the unused tail of the newest block back to the authority (graceful shutdown).
    /// Must run after the refill task stopped. Returns `(given_back, burned)` id counts.
    pub async fn give_back(&self) -> (u64, u64) {
        let before = self.with_buffer(|b| b.stats().burned);
        let Some(tail) = self.with_buffer(|b| b.take_unused_tail()) else {
            return (0, self.with_buffer(|b| b.stats().burned) - before);
        };
        let n = tail.len();
        let given = match self.authority.give_back(&self.name, tail).await {
            Ok(GiveBack::Returned) => {
                self.with_buffer(|b| b.record_given_back(n));
                n
            }
            Ok(GiveBack::Refused { watermark }) => {
                tracing::info!(namespace = %self.name, watermark, ids = n, "tail not returned: ids were reserved after it");
                self.with_buffer(|b| b.record_burned(n));
                0
            }
            Err(e) => {
                tracing::warn!(namespace = %self.name, error = %e, ids = n, "could not hand back the unused tail");
                self.with_buffer(|b| b.record_burned(n));
                0
            }
        };
        (given, self.with_buffer(|b| b.stats().burned) - before)
    }
}

/// A snowflake namespace.
#[derive(Debug)]
pub struct SnowflakeNamespace {
    name: NamespaceName,
    generator: SnowflakeGenerator<SystemClock>,
    metrics: Arc<Metrics>,
    labels: NamespaceLabels,
    served: AtomicU64,
}

impl SnowflakeNamespace {
    /// A namespace issuing ids of `layout` as worker `worker`.
    pub fn new(
        name: NamespaceName,
        layout: Layout,
        worker: u64,
        metrics: Arc<Metrics>,
    ) -> Result<Self, idmint_core::GeneratorError> {
        let generator = SnowflakeGenerator::new(layout, worker, SystemClock::new(), None)?;
        Ok(SnowflakeNamespace {
            labels: NamespaceLabels {
                namespace: name.to_string(),
            },
            name,
            generator,
            metrics,
            served: AtomicU64::new(0),
        })
    }

    /// The generator.
    pub fn generator(&self) -> &SnowflakeGenerator<SystemClock> {
        &self.generator
    }

    /// Ids served.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// `count` increasing ids, sleeping (asynchronously) through exhausted time units.
    pub async fn ids(&self, count: u64) -> Result<Vec<u64>, IdError> {
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 20));
        let mut remaining = count;
        while remaining > 0 {
            match self.generator.next_ids(remaining, &mut out) {
                Ok(n) => remaining -= n,
                Err(NextIdError::SequenceExhausted { wait }) => tokio::time::sleep(wait).await,
                Err(_) => return Err(IdError::TimeExhausted(self.name.to_string())),
            }
        }
        self.served.fetch_add(count, Ordering::Relaxed);
        self.metrics
            .ids_served
            .get_or_create(&self.labels)
            .inc_by(count);
        Ok(out)
    }

    /// Compares the wall clock with the generator's time; logs and records steps.
    pub fn check_clock(&self) {
        match self.generator.check_clock(Duration::from_millis(5)) {
            ClockCheck::InStep => {
                self.metrics
                    .clock_behind
                    .get_or_create(&self.labels)
                    .set(0.0);
            }
            ClockCheck::WallBehind { by } => {
                self.metrics
                    .clock_behind
                    .get_or_create(&self.labels)
                    .set(by.as_secs_f64());
                tracing::warn!(namespace = %self.name, behind = ?by, "wall clock stepped backwards; keeping monotonic time, ids stay increasing");
            }
            ClockCheck::WallAheadAdopted { by } => {
                tracing::info!(namespace = %self.name, ahead = ?by, "wall clock stepped forwards; generator time moved forward");
            }
        }
    }
}
