//! One namespace's buffered supply of sequence ids at one tier: a [`Buffer`] of blocks from a
//! [`BlockSource`], refilled in the background, and the hand-back of the unused tail.
//!
//! This is the one refill loop, the one place for adaptive sizing (the core's [`Buffer`] sizes
//! each refill from demand) and the one place for give-back, whatever the source: an authority
//! today, an upstream idmint node or a node serving a client library in the tiers to come.
//!
//! The buffer sits behind a short `std::sync::Mutex`, never held across `.await` (as in
//! mini-redis's `Db`: the critical sections are a few integer operations, and an async mutex
//! would cost more than the contention it avoids). One background task per supply reserves
//! blocks below the low-water mark, so in steady state no request waits on the source. A request
//! that finds the buffer empty wakes the task and waits for its outcome, answering
//! [`IdError::Unavailable`] if the source fails or nothing arrives within `refill_wait`. With
//! cache `off`, each request reserves its ids from the source itself.
//!
//! Time is injected: demand is measured on the supply's [`Clock`] and every wait and backoff is a
//! `tokio::time` sleep, so tests drive it with `tokio::time::pause()` and a clock that follows
//! tokio's time ([`crate::time::TokioClock`]).
//!
//! Invariants (docs/design.md): ids come only from blocks the source returned (invariant 1); the
//! buffer refuses a block that is not above everything it held, and the supply then stops serving
//! ([`IdError::Internal`]) rather than risk a duplicate; the refill task finishes a reservation in
//! flight before it stops, so the shutdown hand-back sees every block (invariant 3); the
//! hand-back is the source's compare-and-swap (invariant 2).
//!
//! A failed request loses nothing silently: the ids it took from the buffer (before the source
//! failed, `refill_wait` passed, the node began shutting down, or the request's future was
//! dropped) go back to the front of the buffer, to be the first ids of the next answer, when
//! nothing was taken from the buffer since the request's first take; otherwise they count as
//! burned ([`Buffer::put_back`] states the guarantee). So no id is handed out twice, and the
//! ids of returned answers, in the order they were taken from the buffer, still strictly
//! increase (per residue class): a put-back never lets a lower id follow a higher one. The
//! supply's `served` counts only ids of answers actually returned; the buffer's own counters
//! keep `received = served + buffered + burned + given back` at every moment (their `served`
//! includes ids of requests still in flight), so per namespace reserved = served + buffered +
//! burned + given back whenever no request is in flight.
//!
//! A lower tier's unused tail comes back only through [`Supply::lease`] and
//! [`Supply::take_back`]: the newest lease's exact tail, once (the lease is consumed), with its
//! random token; back in front of the buffer only if nothing was taken from the buffer since
//! the lease ([`Buffer::take_back_tail`]), else burned. So a tail can never put back an id that
//! was handed out to anyone else.
//!
//! What it does not do: create namespaces, decide the spec, or export metrics (it reports to a
//! [`SupplyEvents`]).

use crate::block_gate::{BlockGate, IdSpace};
use crate::config::CacheMode;
use crate::error::IdError;
use crate::time::SharedClock;
use idmint_core::buffer::{PutBack, Taken};
use idmint_core::{Backoff, Block, Buffer, BufferPolicy, BufferStats, Clock, NamespaceName};
use idmint_store::{BlockSource, GiveBack, Outcome, StoreError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Whether `e` says the namespace hands out no id any more (exhausted or retired): a request
/// answers it at once, with the ids it already has if any, rather than waiting for a refill.
fn ends_namespace(e: &StoreError) -> bool {
    e.is_exhausted() || e.is_retired()
}

/// Upper bound of one refill, whatever the shortfall.
pub const MAX_REFILL: u64 = 10_000_000;
/// The first wait after a failed refill; it doubles up to [`MAX_BACKOFF`], jittered.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two failed refills.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What a supply reports as it works: the node turns these into metrics.
pub trait SupplyEvents: Send + Sync + std::fmt::Debug {
    /// `ids` were handed out.
    fn served(&self, ids: u64);
    /// A reservation from the source finished after `took`, successfully or not.
    fn refilled(&self, ok: bool, took: Duration);
    /// A request could not be served from the buffer and starts waiting for a refill (once per
    /// request, however many refills it waits for).
    fn waited(&self) {}
}

/// Decides, after a request took its ids from the buffer and before they are answered,
/// whether they may be: a strict namespace's leader term ([`crate::strict`]). Checking after
/// the take (not before) is what makes a term's end exact: no id taken after it is answered.
/// Refused ids go back to the front of the buffer, as a failed request's do.
pub trait ServeGate: Send + Sync + std::fmt::Debug {
    /// `Ok` if ids taken now may be answered.
    fn admit(&self, name: &NamespaceName) -> Result<(), IdError>;
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
#[cfg(test)]
pub struct NoEvents;

#[cfg(test)]
impl SupplyEvents for NoEvents {
    fn served(&self, _: u64) {}
    fn refilled(&self, _: bool, _: Duration) {}
}

/// The outcome of the latest refill, broadcast to requests waiting for one.
#[derive(Debug, Clone, Default)]
struct RefillOutcome {
    /// The source's error, if the latest refill failed.
    error: Option<StoreError>,
}

/// What a graceful hand-back did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandBack {
    /// Ids returned to the source.
    pub given_back: u64,
    /// Ids burned at shutdown (buffered, neither served, returned nor kept).
    pub burned: u64,
    /// Unused blocks neither returned nor burned, in increasing order: the caller keeps them
    /// to serve after a restart.
    pub kept: Vec<Block>,
}

/// A point-in-time view of a supply, for status pages and metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SupplySnapshot {
    /// Ids buffered now.
    pub buffered: u64,
    /// Buffer counters: refills, burned, given back.
    pub stats: BufferStats,
    /// Demand average, ids per second (0 with cache `off`).
    pub demand_per_sec: f64,
    /// Size of the next refill (0 with cache `off`).
    pub target_block: u64,
    /// Ids handed out.
    pub served: u64,
    /// Ids this supply reserved from its source: received in blocks, or reserved per request
    /// with cache `off`. At rest, reserved = served + buffered + burned + given back.
    pub reserved: u64,
    /// The highest watermark the source reported.
    pub watermark: u64,
    /// Whether the source reported the namespace retired ([`Supply::note_retired`]).
    pub retired: bool,
    /// The most reservations from the source that were ever in flight at once.
    pub source_requests_peak: u64,
    /// The most block or lease requests of a lower tier ever answered at once.
    pub block_requests_peak: u64,
}

/// What a supply handed to lower tiers ([`Supply::below`]): counted since the node started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Below {
    /// Block and lease requests answered with a block.
    pub blocks: u64,
    /// Ids in those blocks (some may have come back since, as a leased tail).
    pub ids: u64,
    /// The most block or lease requests ever answered at once.
    pub requests_peak: u64,
    /// The newest leased block whose tail may still come back ([`Supply::take_back`]).
    pub open_lease: Option<Block>,
}

/// A count of operations in flight and its peak ([`InFlight::enter`]).
#[derive(Debug, Default)]
struct InFlight {
    now: AtomicU64,
    peak: AtomicU64,
}

impl InFlight {
    /// Counts one more in flight until the guard drops (also when a future is dropped).
    fn enter(&self) -> InFlightGuard<'_> {
        let now = self.now.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak.fetch_max(now, Ordering::AcqRel);
        InFlightGuard(self)
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }
}

struct InFlightGuard<'a>(&'a InFlight);

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A namespace's supply. See the module docs.
#[derive(Debug)]
pub struct Supply {
    name: NamespaceName,
    cache: CacheMode,
    source: Arc<dyn BlockSource>,
    clock: SharedClock,
    events: Arc<dyn SupplyEvents>,
    buffer: Mutex<Buffer>,
    wake_refill: Notify,
    outcome: watch::Sender<RefillOutcome>,
    /// Ids requests are waiting for beyond the buffer's level, added to the next refill.
    shortfall: AtomicU64,
    /// The highest watermark the source reported.
    watermark: AtomicU64,
    /// Whether the source reported the namespace retired; never cleared.
    retired: AtomicBool,
    /// Set by [`Supply::advanced`]: a block that starts below it was reserved before an
    /// operator moved the watermark past it, and is burned on arrival, never served.
    /// Reservations from the source in flight now, and the most ever at once: one by
    /// construction (the refill task is the only caller with a buffer), which is what keeps a
    /// recovering tier from stampeding the one above.
    to_source: InFlight,
    /// Block and lease requests of a lower tier being answered now, and the most at once.
    from_below: InFlight,
    /// Ids handed out.
    served: AtomicU64,
    /// Ids reserved by requests straight from the source (cache `off`).
    reserved_direct: AtomicU64,
    /// Set when a consistency check failed: the supply serves nothing more.
    poisoned: AtomicBool,
    /// Admits each answer after its take (strict namespaces); none: every answer is admitted.
    serve_gate: std::sync::OnceLock<Arc<dyn ServeGate>>,
    refill_wait: Duration,
    /// Checks every block from the source.
    gate: BlockGate,
    /// The newest block leased to a lower tier ([`Supply::lease`]): its token and take record,
    /// until its tail comes back ([`Supply::take_back`]). Locked before the buffer, never the
    /// other way round, and never across `.await`.
    lease: Mutex<Option<(u64, Taken)>>,
    /// Keys the lease tokens: SipHash with random keys over a counter, so a token cannot be
    /// guessed from the ones seen before.
    tokens: std::collections::hash_map::RandomState,
    leases: AtomicU64,
    /// Blocks answered to lower tiers ([`Supply::block`], [`Supply::lease`]), and their ids.
    blocks_below: AtomicU64,
    ids_below: AtomicU64,
}

/// A block leased to a lower tier ([`Supply::lease`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The ids.
    pub block: Block,
    /// What [`Supply::take_back`] asks for with the block's unused tail; `None` when the tail
    /// can never come back (cache `off`: there is no buffer to put it in front of).
    pub token: Option<u64>,
    /// The first id the lease covers: `block.start()`, or the start of the caller's previous
    /// lease when this one joined it (`extends`); a tail handed back may start at any of the
    /// lease's ids from here.
    pub from: u64,
}

/// What [`Supply::take_back`] did with a lower tier's unused tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeBack {
    /// This many ids are back in front of the buffer and will be handed out next.
    Restored(u64),
    /// The tail is the leased block's, but ids were handed out after the lease: its ids are
    /// counted as burned and never handed out again.
    Burned(u64),
    /// Not accepted, nothing changed (the tail's ids stay burned by the lower tier); the reason.
    Refused(String),
}

/// How a [`Supply`] is set up.
#[derive(Debug, Clone)]
pub struct SupplyConfig {
    /// Buffered (with its sizing policy) or off.
    pub cache: CacheMode,
    /// How long a request waits for a refill before failing.
    pub refill_wait: Duration,
    /// The watermark the source reported when the namespace was set up.
    pub watermark: u64,
    /// The namespace's ids: every block from the source is checked against them
    /// ([`BlockGate`]) before any id of it is buffered or answered.
    pub space: IdSpace,
}

impl Supply {
    /// A supply of `name`'s ids from `source`.
    pub fn new(
        name: NamespaceName,
        config: SupplyConfig,
        source: Arc<dyn BlockSource>,
        clock: Arc<dyn Clock>,
        events: Arc<dyn SupplyEvents>,
    ) -> Arc<Self> {
        let policy = match config.cache {
            CacheMode::Buffered(p) => p,
            CacheMode::Off => BufferPolicy::default(),
        };
        let (outcome, _) = watch::channel(RefillOutcome::default());
        Arc::new(Supply {
            name,
            cache: config.cache,
            source,
            clock: SharedClock(clock),
            events,
            buffer: Mutex::new(Buffer::new(policy)),
            wake_refill: Notify::new(),
            outcome,
            shortfall: AtomicU64::new(0),
            watermark: AtomicU64::new(config.watermark),
            retired: AtomicBool::new(false),
            to_source: InFlight::default(),
            from_below: InFlight::default(),
            served: AtomicU64::new(0),
            reserved_direct: AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
            serve_gate: std::sync::OnceLock::new(),
            refill_wait: config.refill_wait,
            gate: BlockGate::new(config.space),
            lease: Mutex::new(None),
            tokens: std::collections::hash_map::RandomState::new(),
            leases: AtomicU64::new(0),
            blocks_below: AtomicU64::new(0),
            ids_below: AtomicU64::new(0),
        })
    }

    /// The namespace.
    pub fn name(&self) -> &NamespaceName {
        &self.name
    }
    /// The namespace's ids, against which every block is checked.
    pub fn space(&self) -> &IdSpace {
        self.gate.space()
    }
    /// The cache mode.
    pub fn cache(&self) -> CacheMode {
        self.cache
    }
    /// The source's kind, for messages.
    pub fn source_kind(&self) -> &'static str {
        self.source.kind()
    }

    /// The state now.
    pub fn snapshot(&self) -> SupplySnapshot {
        let buffered_cache = matches!(self.cache, CacheMode::Buffered(_));
        let (buffered, stats, demand, target) = self.with_buffer(|b| {
            (
                b.buffered(),
                b.stats(),
                b.demand_per_sec(),
                b.target_block(),
            )
        });
        SupplySnapshot {
            buffered,
            stats,
            demand_per_sec: if buffered_cache { demand } else { 0.0 },
            target_block: if buffered_cache { target } else { 0 },
            served: self.served.load(Ordering::Relaxed),
            reserved: stats.received + self.reserved_direct.load(Ordering::Relaxed),
            watermark: self.watermark.load(Ordering::Relaxed),
            retired: self.retired.load(Ordering::Relaxed),
            source_requests_peak: self.to_source.peak(),
            block_requests_peak: self.from_below.peak(),
        }
    }

    /// What it handed to lower tiers so far, and the lease still open.
    pub fn below(&self) -> Below {
        Below {
            blocks: self.blocks_below.load(Ordering::Relaxed),
            ids: self.ids_below.load(Ordering::Relaxed),
            requests_peak: self.from_below.peak(),
            open_lease: self
                .lock_lease()
                .as_ref()
                .and_then(|(_, taken)| taken.blocks().first().copied()),
        }
    }

    /// Counts `block` as answered to a lower tier.
    fn count_below(&self, block: &Block) {
        self.blocks_below.fetch_add(1, Ordering::Relaxed);
        self.ids_below.fetch_add(block.len(), Ordering::Relaxed);
    }

    /// The latest refill's error, if the latest refill failed.
    pub fn last_error(&self) -> Option<String> {
        self.outcome.borrow().error.as_ref().map(|e| e.to_string())
    }

    /// Runs `f` on the locked buffer. The buffer holds plain counters, so a panic elsewhere
    /// while it was locked cannot leave it half-updated in a way that repeats ids: a poisoned
    /// lock is taken over.
    fn with_buffer<R>(&self, f: impl FnOnce(&mut Buffer) -> R) -> R {
        let mut guard: MutexGuard<'_, Buffer> =
            self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    fn exhausted(&self, bits: u32) -> IdError {
        IdError::Exhausted {
            name: self.name.to_string(),
            bits,
        }
    }

    fn map_store_error(&self, e: &StoreError) -> IdError {
        if self.poisoned.load(Ordering::Relaxed) {
            return IdError::Internal(self.name.to_string());
        }
        match e {
            StoreError::Exhausted { bits, .. } => self.exhausted(*bits),
            StoreError::Retired { .. } => {
                self.note_retired();
                IdError::Retired(self.name.to_string())
            }
            StoreError::Lost { .. } | StoreError::StoreLost { .. } => IdError::Lost {
                name: self.name.to_string(),
                reason: e.to_string(),
            },
            other => IdError::Unavailable {
                name: self.name.to_string(),
                reason: other.to_string(),
            },
        }
    }

    /// The error of a request the namespace's end (`e`: [`ends_namespace`]) refuses. A
    /// retirement known here wins over the refill's older `Exhausted`: an exhausted namespace
    /// retired afterwards answers `namespace_retired` at once, not after the refill task's next
    /// try.
    fn ended_error(&self, e: &StoreError, bits: u32) -> IdError {
        match e {
            _ if self.retired.load(Ordering::Relaxed) => IdError::Retired(self.name.to_string()),
            StoreError::Exhausted { .. } => self.exhausted(bits),
            other => self.map_store_error(other),
        }
    }

    /// The source reported the namespace retired (its state, or a reservation's
    /// [`StoreError::Retired`]): the snapshot says so from now on.
    pub fn note_retired(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// An operator moved the source's watermark to at least `to` (`idmint admin rebase`, or
    /// `retire`: then `retired` is true): the buffer's floor rises to `to`
    /// ([`Buffer::raise_floor`]), so every path that puts ids into the buffer (a refill in
    /// flight, a failed request's put-back, a lower tier's tail) burns what falls below it, and
    /// the outstanding lease ends (its tail can no longer come back). Returns the ids burned
    /// now.
    pub fn advanced(&self, to: u64, retired: bool) -> u64 {
        self.note_watermark(to);
        if retired {
            self.note_retired();
        }
        let burned = self.with_buffer(|b| b.raise_floor(to));
        *self.lock_lease() = None;
        if burned > 0 {
            tracing::info!(namespace = %self.name, burned, watermark = to, "watermark moved by an operator; buffered ids below it burned");
        }
        burned
    }

    /// Puts `gate` in front of every answer from now on ([`ServeGate`]); once per supply
    /// (a second gate is ignored and `false` returned).
    pub fn set_serve_gate(&self, gate: Arc<dyn ServeGate>) -> bool {
        self.serve_gate.set(gate).is_ok()
    }

    /// A strict namespace's new leader term: nothing below `watermark` (the authority's, read
    /// once the term began, so above every id an earlier leader served) is served any more;
    /// what the buffer holds below it is burned ([`Buffer::raise_floor`]). Returns the ids
    /// burned.
    pub fn start_above(&self, watermark: u64) -> u64 {
        self.note_watermark(watermark);
        self.with_buffer(|b| b.raise_floor(watermark))
    }

    fn note_watermark(&self, w: u64) {
        self.watermark.fetch_max(w, Ordering::Relaxed);
    }

    fn count_served(&self, n: u64) {
        if n > 0 {
            self.served.fetch_add(n, Ordering::Relaxed);
            self.events.served(n);
        }
    }

    fn check_poisoned(&self) -> Result<(), IdError> {
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(IdError::Internal(self.name.to_string()));
        }
        Ok(())
    }

    /// A reservation straight from the source (cache `off`), reported to the events like a
    /// refill: with no buffer, every request is a round trip to the authority. A block below
    /// the buffer's floor (reserved before a rebase) is burned and another reserved.
    async fn reserve_direct(&self, count: u64) -> Result<idmint_store::Reservation, StoreError> {
        let started = tokio::time::Instant::now();
        let result = {
            let _in_flight = self.to_source.enter();
            self.source.reserve(&self.name, count).await
        };
        self.events.refilled(result.is_ok(), started.elapsed());
        if let Ok(r) = &result {
            self.reserved_direct
                .fetch_add(r.block.len(), Ordering::Relaxed);
            self.admit(&r.block, false)?;
            // Reserved before an operator moved the watermark past it: burned, never served.
            // The source's watermark is above the floor now, so the next one is above it.
            let floor = self.with_buffer(|b| b.floor());
            if r.block.start() < floor {
                self.with_buffer(|b| b.record_burned(r.block.len()));
                return Box::pin(self.reserve_direct(count)).await;
            }
        }
        result
    }

    /// Passes `block` through the gate (`ordered`: the refill task's blocks, one at a time;
    /// else a request's, concurrent with others); a refused block stops the namespace for good
    /// (the source cannot be trusted any more) and is burned, never served.
    fn admit(&self, block: &Block, ordered: bool) -> Result<(), StoreError> {
        let admitted = if ordered {
            self.gate.admit(block)
        } else {
            self.gate.admit_concurrent(block)
        };
        admitted.map_err(|e| {
            tracing::error!(
                namespace = %self.name,
                block = %format_args!("[{}, {}) step {}", block.start(), block.end(), block.step()),
                error = %e,
                "refusing a block from the authority; the namespace stops serving"
            );
            self.poisoned.store(true, Ordering::Relaxed);
            self.with_buffer(|b| b.record_burned(block.len()));
            StoreError::Corrupt {
                message: format!("block refused: {e}"),
            }
        })
    }

    /// `count` ids, increasing; fewer only when the namespace runs out (`bits` is its width,
    /// for the error).
    pub async fn ids(&self, count: u64, bits: u32) -> Result<Vec<u64>, IdError> {
        self.check_poisoned()?;
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 20));
        if let CacheMode::Off = self.cache {
            // Flickr ticket semantics: reservations straight from the source. A ticket server
            // grants one id per reservation (fewer than asked), so reserve until `count` ids are
            // in hand; short only when the namespace runs out.
            while (out.len() as u64) < count {
                match self.reserve_direct(count - out.len() as u64).await {
                    Ok(r) => {
                        self.note_watermark(r.watermark);
                        out.extend(r.block.ids());
                    }
                    Err(e) if ends_namespace(&e) && !out.is_empty() => break,
                    Err(e) => {
                        // Reserved for this answer, which now fails: nobody will see them, and
                        // without a buffer they cannot go back anywhere. Counted, not lost.
                        let n = out.len() as u64;
                        if n > 0 {
                            self.with_buffer(|b| b.record_burned(n));
                        }
                        return Err(self.map_store_error(&e));
                    }
                }
            }
            // Several reservations (several authorities) may interleave: one answer is still
            // increasing.
            out.sort_unstable();
            self.count_served(out.len() as u64);
            return Ok(out);
        }
        let taken = self.fill(count, bits, Buffer::take_for).await?;
        out.extend(taken.ids());
        // With several authorities (multi) one answer may span two members' blocks, taken in
        // buffer order (e.g. …47, 49 then 2, 4): every answer is strictly increasing, as
        // documented. The ids are distinct, so sorting keeps it strict.
        if !out.is_sorted() {
            out.sort_unstable();
        }
        Ok(out)
    }

    /// One contiguous block of up to `count` ids for a lower tier.
    pub async fn block(&self, count: u64, bits: u32) -> Result<Block, IdError> {
        if let CacheMode::Off = self.cache {
            return Ok(self.lease(count, bits, 0, 0).await?.block);
        }
        let _in_flight = self.from_below.enter();
        self.check_poisoned()?;
        // One block only: the request is complete as soon as anything was taken.
        let taken = self
            .fill(count, bits, |buf, taken, want| {
                buf.take_block_for(taken, want).map_or(0, |_| want)
            })
            .await?;
        let block = taken
            .blocks()
            .first()
            .copied()
            .ok_or_else(|| self.exhausted(bits))?;
        self.count_below(&block);
        Ok(block)
    }

    /// Exactly `count` consecutive ids as one block (RESP `INCRBY`), or `None` when the
    /// namespace's blocks held fewer than `count` consecutive ids [`CONSECUTIVE_BURNS`] times
    /// in a row. A shorter remainder met on the way is burned and counted as burned
    /// ([`Buffer::take_consecutive_for`]): serving it later would hand one client a lower id
    /// after a higher one.
    pub async fn consecutive(&self, count: u64, bits: u32) -> Result<Option<Block>, IdError> {
        self.check_poisoned()?;
        if let CacheMode::Off = self.cache {
            for _ in 0..CONSECUTIVE_BURNS {
                let r = self
                    .reserve_direct(count)
                    .await
                    .map_err(|e| self.map_store_error(&e))?;
                self.note_watermark(r.watermark);
                if r.block.len() == count {
                    self.count_served(count);
                    return Ok(Some(r.block));
                }
                // No buffer to keep it in, and serving it later would break the order.
                self.with_buffer(|b| b.record_burned(r.block.len()));
            }
            return Ok(None);
        }
        let mut budget = CONSECUTIVE_BURNS;
        let taken = self
            .fill(count, bits, |buf, taken, want| {
                match buf.take_consecutive_for(taken, want, &mut budget) {
                    Some(_) => want,
                    // Budget spent: stop the request (nothing taken) rather than wait.
                    None if budget == 0 => want,
                    None => 0,
                }
            })
            .await?;
        Ok(taken.blocks().first().copied())
    }

    /// Like [`Supply::block`], for a lower tier that may hand the block's unused tail back
    /// ([`Supply::take_back`] with the lease's token). Only the newest lease's tail can come
    /// back; a lease replaces the one before.
    ///
    /// With `min_start` above the buffer's lowest id (a lower tier that restarted and must not
    /// go below what it served before), the block is reserved straight from the source, whose
    /// next block starts above everything granted; the buffer stays for other callers. That
    /// block carries no lease: its tail cannot come back.
    ///
    /// `extends` is the caller's newest lease token (0: none). When it is this namespace's
    /// newest lease and the new block follows its block with nothing handed out in between
    /// ([`Taken::joined`]), the new lease covers both, so the caller can hand back a tail that
    /// starts in the older block: a lower tier that refills ahead burns nothing at a clean
    /// stop.
    pub async fn lease(
        &self,
        count: u64,
        bits: u32,
        min_start: u64,
        extends: u64,
    ) -> Result<Lease, IdError> {
        let below = min_start > 0
            && self
                .with_buffer(|b| b.lowest())
                .is_some_and(|lowest| lowest < min_start);
        if below || matches!(self.cache, CacheMode::Off) {
            let _in_flight = self.from_below.enter();
            self.check_poisoned()?;
            let r = self
                .reserve_direct(count)
                .await
                .map_err(|e| self.map_store_error(&e))?;
            self.note_watermark(r.watermark);
            self.count_served(r.block.len());
            self.count_below(&r.block);
            return Ok(Lease {
                block: r.block,
                token: None,
                from: r.block.start(),
            });
        }
        let _in_flight = self.from_below.enter();
        self.check_poisoned()?;
        let taken = self
            .fill(count, bits, |buf, taken, want| {
                buf.take_block_for(taken, want).map_or(0, |_| want)
            })
            .await?;
        let block = *taken.blocks().first().ok_or_else(|| self.exhausted(bits))?;
        let nth = self.leases.fetch_add(1, Ordering::Relaxed);
        let token = std::hash::BuildHasher::hash_one(&self.tokens, nth).max(1);
        let from = {
            let mut lease = self.lock_lease();
            let joined = match lease.as_ref() {
                Some((newest, prev)) if extends != 0 && *newest == extends => {
                    Taken::joined(prev, &taken)
                }
                _ => None,
            };
            let taken = joined.unwrap_or(taken);
            let from = taken.blocks().first().map_or(block.start(), Block::start);
            *lease = Some((token, taken));
            from
        };
        self.count_below(&block);
        Ok(Lease {
            block,
            token: Some(token),
            from,
        })
    }

    fn lock_lease(&self) -> MutexGuard<'_, Option<(u64, Taken)>> {
        // Only an `Option` swap happens under it: a panic cannot leave it half-updated.
        self.lease.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes back `tail`, the unused end of the newest leased block (`token` is its lease's).
    /// Accepted at most once per lease, and only if `tail` ends where the block ends and starts
    /// on one of its ids ([`Buffer::take_back_tail`]); then its ids go back in front of the
    /// buffer if nothing was handed out since the lease, and are counted as burned otherwise.
    /// Anything else is [`TakeBack::Refused`] and changes nothing: the tail stays burned, which
    /// is always safe. The lower tier must not use a tail it handed back, whatever the answer.
    pub fn take_back(&self, token: u64, tail: Block) -> TakeBack {
        let mut lease = self.lock_lease();
        let Some((leased, taken)) = lease.as_ref() else {
            return TakeBack::Refused(
                "no block lease of this namespace is open on this node (none was leased, its \
                 tail already came back, or the node restarted)"
                    .into(),
            );
        };
        if *leased != token {
            return TakeBack::Refused(
                "the lease is not this namespace's newest on this node (a later block was \
                 leased, or the token is wrong)"
                    .into(),
            );
        }
        let outcome = self.with_buffer(|b| b.take_back_tail(taken, tail));
        let taken_back = match outcome {
            None => {
                return TakeBack::Refused(
                    "the range is not a tail of the leased block (same step and end, starting \
                     on one of its ids)"
                        .into(),
                )
            }
            Some(PutBack::Restored(n)) => TakeBack::Restored(n),
            Some(PutBack::Burned(n)) => TakeBack::Burned(n),
        };
        // Once only: a second take-back of the same tail would hand its ids out twice.
        *lease = None;
        let n = match taken_back {
            TakeBack::Restored(n) | TakeBack::Burned(n) => n,
            TakeBack::Refused(_) => 0,
        };
        self.served.fetch_sub(n, Ordering::Relaxed);
        taken_back
    }

    /// Takes from the buffer with `take(buffer, record, wanted) -> progress` until `count` is
    /// reached, waiting for refills when the buffer runs dry. Returns early (short) only on
    /// exhaustion after something was taken. On an error, or if the future is dropped, what
    /// was taken goes back ([`Request`]); only the returned ids count as served.
    async fn fill(
        &self,
        count: u64,
        bits: u32,
        mut take: impl FnMut(&mut Buffer, &mut Taken, u64) -> u64,
    ) -> Result<Taken, IdError> {
        let mut request = Request {
            supply: self,
            taken: Taken::new(),
        };
        // Fast path: the buffer has enough, nothing to wait for.
        let (mut taken, wants_refill) =
            self.with_buffer(|b| (take(b, &mut request.taken, count), b.wants_refill()));
        if wants_refill || taken < count {
            self.wake_refill.notify_one();
        }
        if taken >= count {
            return request.done();
        }
        let mut outcomes = self.outcome.subscribe();
        let deadline = tokio::time::Instant::now() + self.refill_wait;
        let mut waited = false;
        loop {
            outcomes.borrow_and_update();
            taken += self.with_buffer(|b| take(b, &mut request.taken, count - taken));
            if taken >= count {
                self.wake_refill.notify_one();
                return request.done();
            }
            // The buffer is empty. If the latest refill found the namespace exhausted or
            // retired, say so now: waiting would outlast the refill task's backoff and answer a
            // misleading 503.
            let ended = outcomes.borrow().error.clone().filter(ends_namespace);
            if let Some(e) = ended {
                if taken > 0 {
                    return request.done();
                }
                return Err(self.ended_error(&e, bits));
            }
            self.shortfall.fetch_add(count - taken, Ordering::Relaxed);
            self.wake_refill.notify_one();
            if !waited {
                waited = true;
                self.events.waited();
            }
            match tokio::time::timeout_at(deadline, outcomes.changed()).await {
                Err(_) => {
                    // The refill task may be backing off after a failure (up to 2 s, longer
                    // than `refill_wait`): say what the source said, not only that we waited.
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
            self.check_poisoned()?;
            let error = outcomes.borrow().error.clone();
            if let Some(e) = error {
                let empty = self.with_buffer(|b| b.buffered() == 0);
                if empty {
                    if ends_namespace(&e) {
                        if taken > 0 {
                            return request.done();
                        }
                        return Err(self.ended_error(&e, bits));
                    }
                    return Err(self.map_store_error(&e));
                }
            }
        }
    }

    /// The refill loop: runs until `stop` turns true, finishing any reservation in flight first.
    /// Every `tick` it folds demand into the buffer's averages and checks the low-water mark;
    /// a request that finds the buffer low wakes it at once.
    pub async fn refill_loop(self: Arc<Self>, tick: Duration, mut stop: watch::Receiver<bool>) {
        if let CacheMode::Off = self.cache {
            return;
        }
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let mut retry_at: Option<tokio::time::Instant> = None;
        // Fill the buffer at once on start.
        self.wake_refill.notify_one();
        loop {
            if *stop.borrow() {
                return;
            }
            // Biased, in this order: a stop wins, and a request's wake-up is taken before the
            // tick, so what the loop does never depends on tokio's random branch order (the
            // deterministic simulation replays it).
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                _ = self.wake_refill.notified() => {}
                _ = tokio::time::sleep(tick) => {}
            }
            if let Some(at) = retry_at {
                // After a failure, wait out the backoff even if a request woke us.
                tokio::select! {
                    biased;
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep_until(at) => {}
                }
            }
            let now = self.clock.monotonic_nanos();
            let Some(count) = self.with_buffer(|b| b.start_refill(now)) else {
                continue;
            };
            let count = count
                .saturating_add(self.shortfall.swap(0, Ordering::Relaxed))
                .min(MAX_REFILL);
            let started = tokio::time::Instant::now();
            let result = {
                let _in_flight = self.to_source.enter();
                self.source.reserve(&self.name, count).await
            };
            self.events.refilled(result.is_ok(), started.elapsed());
            match result {
                Ok(r) if self.admit(&r.block, true).is_err() => {
                    self.with_buffer(|b| b.refill_failed());
                    self.outcome.send_replace(RefillOutcome { error: None });
                    return;
                }
                Ok(r) => {
                    self.note_watermark(r.watermark);
                    // A block reserved before an operator moved the watermark past it is
                    // received and burned whole by the buffer (its floor), so no request sees it.
                    let landed = self.with_buffer(|b| {
                        let before = b.stats().burned;
                        b.refill_done(r.block).map(|()| b.stats().burned - before)
                    });
                    match landed {
                        Err(e) => {
                            tracing::error!(namespace = %self.name, error = %e, "refusing a block; the namespace stops serving");
                            self.poisoned.store(true, Ordering::Relaxed);
                        }
                        Ok(burned) if burned > 0 => {
                            tracing::info!(namespace = %self.name, burned, "a block reserved before the watermark moved is burned");
                        }
                        Ok(_) => {}
                    }
                    backoff.reset();
                    retry_at = None;
                    self.outcome.send_replace(RefillOutcome { error: None });
                }
                Err(e) => {
                    self.with_buffer(|b| b.refill_failed());
                    let next = backoff.delay();
                    if e.is_retired() {
                        self.note_retired();
                    }
                    if !ends_namespace(&e) {
                        tracing::warn!(namespace = %self.name, error = %e, retry_in = ?next, "refill failed");
                    }
                    retry_at = Some(tokio::time::Instant::now() + next);
                    self.outcome.send_replace(RefillOutcome { error: Some(e) });
                }
            }
        }
    }

    /// Empties the buffer at a graceful shutdown (after the refill task stopped). The newest
    /// block's unused tail goes back to the source. With `keep`, every unused id that is still
    /// this node's (older blocks, and whatever of the tail the source answered it did not take)
    /// is handed to the caller in [`HandBack::kept`], to park in the store and claim after a
    /// restart ([`idmint_store::parks`]); without, those ids are burned.
    ///
    /// A tail whose give-back outcome is unknown (no answer, a lost reply) is burned, whatever
    /// `keep` says: the source may have taken it and granted it again (invariant 3).
    pub async fn give_back(&self, keep: bool) -> HandBack {
        let mut unused = self.with_buffer(|b| b.take_unused());
        let Some(tail) = unused.pop() else {
            return HandBack::default();
        };
        let mut kept = unused;
        let n = tail.len();
        let (given_back, not_returned, unknown) = match self
            .source
            .give_back(&self.name, tail)
            .await
        {
            Outcome::Applied(GiveBack::Returned) => (n, None, 0),
            Outcome::Applied(GiveBack::Partly { ids }) => {
                // The source took the tail's last `ids`; its first ones are still this node's.
                let ids = ids.min(n);
                tracing::info!(namespace = %self.name, given_back = ids, not_returned = n - ids, "only the newest block's part of the tail was returned");
                let rest_end = tail.start() + (n - ids) * tail.step();
                (ids, Block::new(tail.start(), rest_end, tail.step()), 0)
            }
            Outcome::Applied(GiveBack::Refused { watermark }) => {
                tracing::info!(namespace = %self.name, watermark, ids = n, "tail not returned: ids were reserved after it");
                (0, Some(tail), 0)
            }
            Outcome::Refused(e) => {
                tracing::warn!(namespace = %self.name, error = %e, ids = n, "the source refused the unused tail");
                (0, Some(tail), 0)
            }
            #[cfg(feature = "planted")]
            Outcome::Unknown(e)
                if idmint_core::planted::on(idmint_core::planted::GIVEBACK_UNKNOWN_KEPT) =>
            {
                tracing::warn!(namespace = %self.name, error = %e, ids = n, "the source refused the unused tail");
                (0, Some(tail), 0)
            }
            Outcome::Unknown(e) => {
                tracing::warn!(namespace = %self.name, error = %e, ids = n, "the unused tail's give-back has no known outcome; burned");
                (0, None, n)
            }
        };
        kept.extend(not_returned);
        let mut burned = unknown;
        if !keep {
            burned += kept.iter().map(Block::len).sum::<u64>();
            kept.clear();
        }
        self.with_buffer(|b| {
            b.record_given_back(given_back);
            b.record_burned(burned);
        });
        HandBack {
            given_back,
            burned,
            kept,
        }
    }

    /// Puts blocks kept at the previous clean stop ([`Supply::give_back`]) into the empty
    /// buffer, before anything is served: each passes the gate like a refill's block. Returns
    /// the ids taken in; a block refused (not of this namespace, or out of order) is burned.
    pub fn adopt(&self, blocks: &[Block]) -> u64 {
        let mut adopted = 0;
        for block in blocks {
            if self.admit(block, true).is_err() {
                continue;
            }
            match self.with_buffer(|b| b.push(*block)) {
                Ok(()) => {
                    self.note_watermark(block.end());
                    adopted += block.len();
                }
                Err(e) => {
                    tracing::warn!(namespace = %self.name, error = %e, "a kept block is not above what the buffer holds; burned");
                    self.with_buffer(|b| b.record_burned(block.len()));
                }
            }
        }
        adopted
    }
}

/// How many too-short block remainders [`Supply::consecutive`] burns before giving up.
pub const CONSECUTIVE_BURNS: u32 = 4;

/// The ids one request took while it is being answered. Dropped without [`Request::done`]
/// (an error, or the request's future dropped) it puts them back into the buffer, or has them
/// counted as burned when that is not possible: never counted as served.
struct Request<'a> {
    supply: &'a Supply,
    taken: Taken,
}

impl Request<'_> {
    /// The request is answered with what it took, if the supply's [`ServeGate`] admits it now:
    /// count it as served. Refused, the ids go back ([`Request`]'s drop).
    fn done(mut self) -> Result<Taken, IdError> {
        if let Some(gate) = self.supply.serve_gate.get() {
            gate.admit(&self.supply.name)?;
        }
        let taken = std::mem::take(&mut self.taken);
        self.supply.count_served(taken.len());
        Ok(taken)
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if self.taken.is_empty() {
            return;
        }
        let taken = std::mem::take(&mut self.taken);
        match self.supply.with_buffer(|b| b.put_back(taken)) {
            PutBack::Restored(ids) => {
                tracing::debug!(namespace = %self.supply.name, ids, "request failed; its ids went back to the buffer");
            }
            PutBack::Burned(ids) => {
                tracing::info!(namespace = %self.supply.name, ids, "request failed after later ids were taken; its ids are burned");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The supply on tokio's paused time: every wait, timeout and backoff is virtual, so these
    //! tests take no wall-clock time and no timing can flake. The source is a real
    //! [`MemoryAuthority`] behind a switch that makes it answer `Unavailable` (an outage).
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::time::TokioClock;
    use async_trait::async_trait;
    use idmint_core::{BufferConfig, SequenceSpec, Sizing};
    use idmint_store::{Authority, MemoryAuthority, Reservation};

    #[derive(Debug, Default)]
    struct Switched {
        inner: MemoryAuthority,
        down: AtomicBool,
        /// Each reservation takes 5 (virtual) seconds.
        slow: AtomicBool,
        attempts: AtomicU64,
    }

    #[async_trait]
    impl BlockSource for Switched {
        fn kind(&self) -> &'static str {
            "memory"
        }
        async fn reserve(
            &self,
            name: &NamespaceName,
            count: u64,
        ) -> Result<Reservation, StoreError> {
            self.attempts.fetch_add(1, Ordering::Relaxed);
            if self.slow.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            if self.down.load(Ordering::Relaxed) {
                return Err(StoreError::Unavailable {
                    backend: "memory",
                    message: "switched off by the test".into(),
                });
            }
            Authority::reserve(&self.inner, name, count).await
        }
        async fn give_back(&self, name: &NamespaceName, tail: Block) -> Outcome<GiveBack> {
            Outcome::of(Authority::give_back(&self.inner, name, tail).await)
        }
    }

    const TICK: Duration = Duration::from_millis(100);
    const WAIT: Duration = Duration::from_secs(1);

    struct Running {
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Running {
        async fn stop(self) {
            self.stop.send_replace(true);
            self.task.await.unwrap();
        }
    }

    async fn supply(block: u64) -> (Arc<Supply>, Arc<Switched>, Running) {
        supply_with(block, Arc::new(NoEvents)).await
    }

    async fn supply_with(
        block: u64,
        events: Arc<dyn SupplyEvents>,
    ) -> (Arc<Supply>, Arc<Switched>, Running) {
        supply_of(block, events, IdSpace::single(SequenceSpec::default_64())).await
    }

    /// A supply whose namespace is `space`, from a source whose stored namespace is
    /// `SequenceSpec::default_64()`.
    async fn supply_of(
        block: u64,
        events: Arc<dyn SupplyEvents>,
        space: IdSpace,
    ) -> (Arc<Supply>, Arc<Switched>, Running) {
        let source = Arc::new(Switched::default());
        let name = NamespaceName::new("orders").unwrap();
        let state = source
            .inner
            .ensure_namespace(&name, SequenceSpec::default_64())
            .await
            .unwrap();
        let policy = BufferPolicy::new(BufferConfig {
            sizing: Sizing::Fixed(block),
            ..BufferConfig::default()
        })
        .unwrap();
        let s = Supply::new(
            name,
            SupplyConfig {
                cache: CacheMode::Buffered(policy),
                refill_wait: WAIT,
                watermark: state.watermark,
                space,
            },
            source.clone(),
            Arc::new(TokioClock::new()),
            events,
        );
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(s.clone().refill_loop(TICK, stopped));
        (s, source, Running { stop, task })
    }

    fn assert_increasing(ids: &[u64]) {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids not strictly increasing: {ids:?}"
        );
    }

    /// Guards against a source that grants blocks of another shape than the namespace's
    /// (a stale member's step) is refused before any id of it is served, with a refill or with
    /// the cache off, and the namespace stops serving.
    #[tokio::test(start_paused = true)]
    async fn a_block_that_does_not_fit_the_namespace_is_never_served() {
        let step3 =
            IdSpace::single(SequenceSpec::new(idmint_core::Width::Bits64, 1, 3, 0).unwrap());
        let (s, _source, running) = supply_of(100, Arc::new(NoEvents), step3).await;
        let err = s.ids(5, 64).await.unwrap_err();
        assert_eq!(err, IdError::Internal("orders".into()));
        assert_eq!(s.snapshot().served, 0);
        running.stop().await;
    }

    /// One floor on every path: after a rebase, neither a lower tier's tail leased before it,
    /// nor a refill that was in flight, nor a failed request's put-back brings an id below the
    /// base back. The refill is kept from committing while the rebase happens (the buffer is
    /// empty then): the interleaving in which a give-back path that skips the floor fails.
    #[tokio::test(start_paused = true)]
    async fn nothing_below_a_rebase_comes_back_on_any_path() {
        let (s, source, running) = supply(1000).await;
        assert_eq!(s.ids(6, 64).await.unwrap(), [1, 2, 3, 4, 5, 6]);
        source.slow.store(true, Ordering::Relaxed);
        // The whole buffer, leased to a lower tier: nothing is buffered at the rebase.
        let lease = s.lease(10_000, 64, 0, 0).await.unwrap();
        assert_eq!(lease.block.start(), 7);
        assert_eq!(s.snapshot().buffered, 0);
        let base = 20_001_002;
        let name = NamespaceName::new("orders").unwrap();
        Authority::advance(&source.inner, &name, base, idmint_store::Advance::Rebase)
            .await
            .unwrap();
        assert_eq!(s.advanced(base, false), 0, "the buffer was empty");
        let tail = Block::new(8, lease.block.end(), 1).unwrap();
        let back = s.take_back(lease.token.unwrap(), tail);
        assert!(
            !matches!(back, TakeBack::Restored(_)),
            "a tail below the rebase came back: {back:?}"
        );
        source.slow.store(false, Ordering::Relaxed);
        // The refill in flight (reserved before the rebase) lands and is burned.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let ids = s.ids(5, 64).await.unwrap();
        assert!(ids.iter().all(|&id| id >= base), "{ids:?}");
        // A request that fails puts its ids back only above the floor: here everything is.
        let snap = s.snapshot();
        assert_eq!(
            snap.reserved,
            snap.served + snap.buffered + snap.stats.burned + snap.stats.given_back,
            "{snap:?}"
        );
        running.stop().await;
    }

    /// Steady demand below the block size is served from the buffer: the refill task keeps
    /// ahead, every id is handed out once, in order, and the accounting adds up.
    #[tokio::test(start_paused = true)]
    async fn refills_keep_ahead_of_steady_demand() {
        let (s, source, running) = supply(100).await;
        let mut all = Vec::new();
        for _ in 0..200 {
            all.extend(s.ids(7, 64).await.unwrap());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(all.len(), 1400);
        assert_increasing(&all);
        running.stop().await;
        let done = s.give_back(false).await;
        let snap = s.snapshot();
        let reserved = Authority::state(&source.inner, s.name())
            .await
            .unwrap()
            .unwrap()
            .watermark
            - 1;
        // Everything reserved was served, returned, or burned: nothing vanished.
        assert_eq!(
            snap.served + done.given_back + snap.stats.burned + snap.buffered,
            reserved + done.given_back,
            "{snap:?} {done:?}"
        );
        assert_eq!(snap.served, 1400);
    }

    /// An outage with an empty buffer answers `Unavailable` as soon as the refill it waited for
    /// fails (within `refill_wait`, on the virtual clock), naming the source's error; once the
    /// source is back the supply recovers by itself and ids continue above everything served.
    #[tokio::test(start_paused = true)]
    async fn outage_is_unavailable_with_the_sources_error_then_recovers() {
        let (s, source, _stop) = supply(10).await;
        let before = s.ids(10, 64).await.unwrap();
        source.down.store(true, Ordering::Relaxed);
        // Drain what is left, then ask for more than the buffer can hold.
        let mut served = before.clone();
        let started = tokio::time::Instant::now();
        let err = loop {
            match s.ids(5, 64).await {
                Ok(ids) => served.extend(ids),
                Err(e) => break e,
            }
        };
        let waited = started.elapsed();
        assert!(
            matches!(&err, IdError::Unavailable { reason, .. } if reason.contains("switched off")),
            "{err:?}"
        );
        assert!(waited <= WAIT, "waited {waited:?}, more than refill_wait");
        source.down.store(false, Ordering::Relaxed);
        let after = loop {
            match s.ids(5, 64).await {
                Ok(ids) => break ids,
                Err(IdError::Unavailable { .. }) => continue,
                Err(e) => panic!("{e:?}"),
            }
        };
        served.extend(after);
        assert_increasing(&served);
    }

    /// No stampede on recovery: 50 requests wait on an empty buffer while the source is down,
    /// then it comes back slow (5 virtual seconds a reservation); every request is answered
    /// and at most one reservation was ever in flight, however many requests waited.
    #[tokio::test(start_paused = true)]
    async fn waiting_requests_share_one_refill_in_flight() {
        let (s, source, _stop) = supply(10).await;
        s.ids(10, 64).await.unwrap();
        source.down.store(true, Ordering::Relaxed);
        while s.ids(1, 64).await.is_ok() {}
        source.down.store(false, Ordering::Relaxed);
        source.slow.store(true, Ordering::Relaxed);
        let waiting: Vec<_> = (0..50)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move {
                    loop {
                        match s.ids(1, 64).await {
                            Ok(ids) => return ids,
                            Err(IdError::Unavailable { .. }) => continue,
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                })
            })
            .collect();
        let mut all = Vec::new();
        for w in waiting {
            all.extend(w.await.unwrap());
        }
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 50, "every waiting request got its own id");
        assert_eq!(
            s.snapshot().source_requests_peak,
            1,
            "one reservation in flight at a time"
        );
    }

    /// During an outage the refill task backs off (50 ms doubling to 2 s, each pause jittered
    /// down by up to half) instead of hammering the source: over 20 virtual seconds it tries at
    /// most 26 times, and keeps trying.
    #[tokio::test(start_paused = true)]
    async fn failed_refills_back_off() {
        let (_s, source, _stop) = supply(10).await;
        source.down.store(true, Ordering::Relaxed);
        let at_start = source.attempts.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(20)).await;
        let tried = source.attempts.load(Ordering::Relaxed) - at_start;
        // Ceilings 0.05+0.1+0.2+0.4+0.8+1.6 s, then 2 s: 13 attempts in 20 s at the ceilings,
        // 25 at half of them.
        assert!((8..=26).contains(&tried), "{tried} attempts in 20 s");
    }

    /// Waits (virtually) until the refill task filled the buffer to `n` ids.
    async fn buffered(s: &Supply, n: u64) {
        for _ in 0..100 {
            if s.snapshot().buffered == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("buffer never held {n} ids: {:?}", s.snapshot());
    }

    /// Ids reserved from the source so far (the memory authority's spec starts at 1).
    async fn reserved(s: &Supply, source: &Switched) -> u64 {
        Authority::state(&source.inner, s.name())
            .await
            .unwrap()
            .unwrap()
            .watermark
            - 1
    }

    /// Every id reserved is served, buffered, burned or given back.
    async fn assert_accounted(s: &Supply, source: &Switched) {
        let snap = s.snapshot();
        let st = snap.stats;
        assert_eq!(
            reserved(s, source).await,
            snap.served + snap.buffered + st.burned + st.given_back,
            "{snap:?}"
        );
        assert_eq!(
            st.received,
            st.served + snap.buffered + st.burned + st.given_back
        );
    }

    /// Guards against lost ids: a `count=60` request that meets 38 buffered ids and an
    /// unreachable authority answers 503, and the 38 ids go back to the front of the buffer
    /// and are the first ids of the next answer (never counted as served and lost).
    #[tokio::test(start_paused = true)]
    async fn a_failed_request_puts_its_ids_back_in_front() {
        let (s, source, _running) = supply(38).await;
        buffered(&s, 38).await;
        source.down.store(true, Ordering::Relaxed);
        let err = s.ids(60, 64).await.unwrap_err();
        assert!(matches!(err, IdError::Unavailable { .. }), "{err:?}");
        let snap = s.snapshot();
        assert_eq!(snap.buffered, 38, "{snap:?}");
        assert_eq!(snap.served, 0, "{snap:?}");
        assert_eq!(snap.stats.served, 0, "{snap:?}");
        assert_eq!(snap.stats.burned, 0, "{snap:?}");
        assert_accounted(&s, &source).await;
        source.down.store(false, Ordering::Relaxed);
        let ids = loop {
            match s.ids(60, 64).await {
                Ok(ids) => break ids,
                Err(IdError::Unavailable { .. }) => continue,
                Err(e) => panic!("{e:?}"),
            }
        };
        assert_eq!(ids.len(), 60);
        assert_eq!(ids[..38], (1..=38).collect::<Vec<u64>>()[..], "{ids:?}");
        assert_increasing(&ids);
        let more = s.ids(100, 64).await.unwrap();
        assert!(more[0] > ids[59]);
        assert_increasing(&more);
        assert_eq!(s.snapshot().served, 160);
        assert_accounted(&s, &source).await;
    }

    /// A request abandoned while it waits (the client went away, a handler timeout dropped the
    /// future) loses nothing either: its ids go back when the future is dropped.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_request_puts_its_ids_back() {
        let (s, source, _running) = supply(38).await;
        buffered(&s, 38).await;
        source.slow.store(true, Ordering::Relaxed);
        let gone = tokio::time::timeout(Duration::from_millis(20), s.ids(60, 64)).await;
        assert!(gone.is_err(), "the request should still be waiting");
        let snap = s.snapshot();
        assert_eq!((snap.buffered, snap.served), (38, 0), "{snap:?}");
        assert_accounted(&s, &source).await;
        assert_eq!(s.ids(5, 64).await.unwrap(), vec![1, 2, 3, 4, 5]);
    }

    /// The block path counts as served the ids of the block it returns, not the count asked
    /// for (counting `count` would overstate `served` whenever the block is shorter).
    #[tokio::test(start_paused = true)]
    async fn a_short_block_counts_only_its_ids_as_served() {
        let (s, source, _running) = supply(38).await;
        buffered(&s, 38).await;
        source.down.store(true, Ordering::Relaxed);
        let block = s.block(1000, 64).await.unwrap();
        assert_eq!((block.start(), block.len()), (1, 38));
        assert_eq!(s.snapshot().served, 38);
        assert_accounted(&s, &source).await;
        // Nothing left and the source down: the failure takes nothing and counts nothing.
        let err = s.block(10, 64).await.unwrap_err();
        assert!(matches!(err, IdError::Unavailable { .. }), "{err:?}");
        assert_eq!(s.snapshot().served, 38);
        assert_accounted(&s, &source).await;
    }

    /// What went below is counted per block answered; the open lease is the newest leased
    /// block until its tail comes back; a failed request counts nothing.
    #[tokio::test(start_paused = true)]
    async fn below_counts_blocks_and_shows_the_open_lease() {
        let (s, source, running) = supply(100).await;
        let nothing = Below {
            blocks: 0,
            ids: 0,
            requests_peak: 0,
            open_lease: None,
        };
        assert_eq!(s.below(), nothing);
        s.ids(3, 64).await.unwrap();
        assert_eq!(s.below(), nothing, "ids are not blocks");
        let block = s.block(10, 64).await.unwrap();
        let lease = s.lease(20, 64, 0, 0).await.unwrap();
        let below = s.below();
        assert_eq!(
            (below.blocks, below.ids),
            (2, block.len() + lease.block.len())
        );
        assert_eq!(below.requests_peak, 1);
        assert_eq!(below.open_lease, Some(lease.block));
        let tail = Block::new(lease.block.end() - 5, lease.block.end(), 1).unwrap();
        assert!(matches!(
            s.take_back(lease.token.unwrap(), tail),
            TakeBack::Restored(_)
        ));
        assert_eq!(s.below().open_lease, None);
        source.down.store(true, Ordering::Relaxed);
        let before = s.below();
        while s.snapshot().buffered > 0 {
            s.ids(s.snapshot().buffered, 64).await.unwrap();
        }
        assert!(s.block(10, 64).await.is_err());
        assert_eq!(s.below(), before);
        running.stop().await;
    }

    /// A lower tier that refilled ahead holds the end of its previous lease and all of the
    /// newest: a lease that extends the previous one covers both, so one tail gives back
    /// everything unused.
    #[tokio::test(start_paused = true)]
    async fn a_lease_that_extends_the_newest_takes_back_a_tail_from_both() {
        let (s, _source, running) = supply(1000).await;
        let first = s.lease(10, 64, 0, 0).await.unwrap();
        assert_eq!(first.from, first.block.start());
        let second = s.lease(20, 64, 0, first.token.unwrap()).await.unwrap();
        assert_eq!(second.block.start(), first.block.end());
        assert_eq!(second.from, first.block.start());
        assert_eq!(
            s.below().open_lease,
            Block::new(first.block.start(), second.block.end(), 1)
        );
        let tail = Block::new(first.block.start() + 3, second.block.end(), 1).unwrap();
        assert_eq!(
            s.take_back(second.token.unwrap(), tail),
            TakeBack::Restored(27)
        );
        assert_eq!(s.ids(1, 64).await.unwrap(), [first.block.start() + 3]);
        // Not joined: a token that is not the newest lease, or ids handed out in between.
        let third = s.lease(5, 64, 0, 0).await.unwrap();
        let fourth = s.lease(5, 64, 0, second.token.unwrap()).await.unwrap();
        assert_eq!(fourth.from, fourth.block.start());
        s.ids(1, 64).await.unwrap();
        let fifth = s.lease(5, 64, 0, fourth.token.unwrap()).await.unwrap();
        assert_eq!(fifth.from, fifth.block.start());
        let tail = Block::new(third.block.start(), fifth.block.end(), 1).unwrap();
        assert!(matches!(
            s.take_back(fifth.token.unwrap(), tail),
            TakeBack::Refused(_)
        ));
        running.stop().await;
    }

    /// Counts requests that waited for a refill.
    #[derive(Debug, Default)]
    struct Waits(AtomicU64);

    impl SupplyEvents for Waits {
        fn served(&self, _: u64) {}
        fn refilled(&self, _: bool, _: Duration) {}
        fn waited(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `waited` is reported
    /// once per request that the buffer could not serve, however many refills it waits for, and
    /// never for a request served from the buffer.
    #[tokio::test(start_paused = true)]
    async fn a_request_that_waits_for_a_refill_is_reported_once() {
        let waits = Arc::new(Waits::default());
        let (s, _source, running) = supply_with(100, waits.clone()).await;
        let waited = || waits.0.load(Ordering::Relaxed);
        s.ids(1, 64).await.unwrap();
        assert_eq!(waited(), 1, "the first request found the buffer empty");
        s.ids(5, 64).await.unwrap();
        assert_eq!(waited(), 1, "served from the buffer");
        assert_eq!(s.ids(250, 64).await.unwrap().len(), 250);
        assert_eq!(waited(), 2, "one request, however many refills");
        running.stop().await;
    }
}
