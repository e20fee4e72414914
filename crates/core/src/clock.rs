//! Time sources.
//!
//! A [`Clock`] gives two readings: wall time (nanoseconds since the Unix epoch, which may step
//! backwards or forwards when the operating system corrects it) and monotonic time (nanoseconds
//! from an arbitrary origin, which never decreases). Generators anchor their timestamps to wall
//! time once and then advance with monotonic time, so a wall-clock step cannot make them reissue
//! a timestamp.
//!
//! [`SystemClock`] is the only place in idmint-core that reads the operating system's clocks.
//! [`CoarseClock`] (the generators' default) and [`TickClock`] add cached readings refreshed by a
//! background thread. [`ManualClock`] is set by hand, for tests that step time without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of wall and monotonic time. Implementations must be cheap: generators read the
/// monotonic clock once per id.
pub trait Clock: Send + Sync {
    /// Nanoseconds since 1970-01-01T00:00:00Z. May jump in either direction.
    fn wall_nanos(&self) -> u64;
    /// Nanoseconds since an arbitrary origin fixed for the clock's lifetime. Never decreases.
    fn monotonic_nanos(&self) -> u64;
    /// A cheaper monotonic reading that may lag [`Clock::monotonic_nanos`] by up to the clock's
    /// tick, never run ahead of it, and never decreases. Generators use it on the hot path and
    /// re-read the precise clock before they would wait. Default: the precise reading.
    #[inline]
    fn coarse_monotonic_nanos(&self) -> u64 {
        self.monotonic_nanos()
    }
    /// A cheaper wall reading that may lag [`Clock::wall_nanos`] by up to the clock's tick.
    /// Default: the precise reading.
    #[inline]
    fn coarse_wall_nanos(&self) -> u64 {
        self.wall_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn wall_nanos(&self) -> u64 {
        (**self).wall_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        (**self).monotonic_nanos()
    }
    fn coarse_monotonic_nanos(&self) -> u64 {
        (**self).coarse_monotonic_nanos()
    }
    fn coarse_wall_nanos(&self) -> u64 {
        (**self).coarse_wall_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn wall_nanos(&self) -> u64 {
        (**self).wall_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        (**self).monotonic_nanos()
    }
    fn coarse_monotonic_nanos(&self) -> u64 {
        (**self).coarse_monotonic_nanos()
    }
    fn coarse_wall_nanos(&self) -> u64 {
        (**self).coarse_wall_nanos()
    }
}

/// The operating system's clocks: `SystemTime` for wall time and `Instant` for monotonic time.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A system clock whose monotonic origin is now.
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn wall_nanos(&self) -> u64 {
        // A wall clock set before 1970 reads as 1970: generators then refuse to issue
        // (their epoch is later), which is the clear failure we want.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
    #[inline]
    fn monotonic_nanos(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The system clock plus a cached copy of both readings, refreshed by a background thread every
/// `tick`: the coarse readings cost one atomic load instead of a clock call (tens of
/// nanoseconds on virtual machines). The precise readings are the system clock's.
///
/// Invariants: the cached readings are past readings of the system clock, so they never run
/// ahead of the precise ones; the cached monotonic reading never decreases. The thread holds only
/// a weak reference and stops within one tick of the last clone being dropped. Unlike
/// [`CoarseClock`] (one shared thread for the process, tick fixed at 1 ms), each `TickClock`
/// has its own thread and tick, and only exists when asked for.
#[derive(Debug, Clone)]
pub struct TickClock {
    inner: Arc<TickInner>,
}

#[derive(Debug)]
struct TickInner {
    system: SystemClock,
    mono: AtomicU64,
    wall: AtomicU64,
}

impl TickClock {
    /// Starts the refreshing thread; `tick` is the staleness bound of the coarse readings.
    pub fn start(tick: std::time::Duration) -> std::io::Result<TickClock> {
        let system = SystemClock::new();
        let inner = Arc::new(TickInner {
            system,
            mono: AtomicU64::new(system.monotonic_nanos()),
            wall: AtomicU64::new(system.wall_nanos()),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("idmint-clock".into())
            .spawn(move || {
                while let Some(inner) = weak.upgrade() {
                    inner
                        .mono
                        .fetch_max(inner.system.monotonic_nanos(), Ordering::Release);
                    inner
                        .wall
                        .store(inner.system.wall_nanos(), Ordering::Release);
                    drop(inner);
                    std::thread::sleep(tick);
                }
            })?;
        Ok(TickClock { inner })
    }
}

impl Clock for TickClock {
    fn wall_nanos(&self) -> u64 {
        self.inner.system.wall_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        // Refresh the cache on the way: a precise reading is never wasted.
        let now = self.inner.system.monotonic_nanos();
        self.inner.mono.fetch_max(now, Ordering::Release);
        now
    }
    #[inline]
    fn coarse_monotonic_nanos(&self) -> u64 {
        self.inner.mono.load(Ordering::Acquire)
    }
    #[inline]
    fn coarse_wall_nanos(&self) -> u64 {
        self.inner.wall.load(Ordering::Acquire)
    }
}

/// The process-wide coarse clock, the default clock of the generators
/// ([`crate::SnowflakeGenerator`], [`crate::UlidGenerator`], [`crate::Uuid7Generator`]).
///
/// Its coarse readings are one relaxed load of a `static` atomic, refreshed every
/// [`CoarseClock::TICK`] (1 ms) by one background thread per process, `idmint-coarse-clock`,
/// started by the first [`CoarseClock::new`] and running until the process exits (it sleeps
/// between ticks; about a thousand short wake-ups a second). Its precise readings are the
/// operating system's, as [`SystemClock`]'s (monotonic time from a process-wide origin), and every
/// precise monotonic reading also refreshes the cache.
///
/// Invariants, as [`TickClock`]'s: the cached readings are past readings of the system clock, so
/// they never run ahead of the precise ones; the cached monotonic reading never decreases. A
/// late tick (a loaded machine can delay the thread by many ticks) only makes the coarse readings
/// older: the generators re-read the precise clock before they would wait, and stamp ids with a
/// time that is never ahead of the precise clock. Values are `Copy` handles to the one shared
/// state; [`SystemClock`] itself is unchanged (it has no cache and starts no thread).
#[derive(Debug, Clone, Copy)]
pub struct CoarseClock {
    /// Only [`CoarseClock::new`] makes one, after the cache is filled and the thread started.
    _started: (),
}

/// The cached readings, alone in their cache line: only the ticker (and precise readings) write
/// it, and no unrelated static written elsewhere can evict it from the readers' caches.
#[repr(align(64))]
struct CoarseCache {
    mono: AtomicU64,
    wall: AtomicU64,
}

static COARSE: CoarseCache = CoarseCache {
    mono: AtomicU64::new(0),
    wall: AtomicU64::new(0),
};
static COARSE_ORIGIN: OnceLock<SystemClock> = OnceLock::new();
static COARSE_START: Once = Once::new();

impl CoarseClock {
    /// The staleness bound of the coarse readings when the refreshing thread runs on time.
    pub const TICK: std::time::Duration = std::time::Duration::from_millis(1);

    /// A handle to the process's coarse clock; the first call fills the cache and starts the
    /// refreshing thread. Panics only if the operating system refuses to start a thread.
    pub fn new() -> CoarseClock {
        COARSE_START.call_once(|| {
            let system = *COARSE_ORIGIN.get_or_init(SystemClock::new);
            COARSE
                .mono
                .fetch_max(system.monotonic_nanos(), Ordering::Release);
            COARSE.wall.store(system.wall_nanos(), Ordering::Release);
            #[allow(clippy::expect_used)]
            std::thread::Builder::new()
                .name("idmint-coarse-clock".into())
                .spawn(move || loop {
                    std::thread::sleep(Self::TICK);
                    COARSE
                        .mono
                        .fetch_max(system.monotonic_nanos(), Ordering::Release);
                    COARSE.wall.store(system.wall_nanos(), Ordering::Release);
                })
                .expect("idmint-core: cannot start the coarse clock thread");
        });
        CoarseClock { _started: () }
    }

    #[inline]
    fn system() -> SystemClock {
        // Set before any `CoarseClock` exists.
        COARSE_ORIGIN.get().copied().unwrap_or_default()
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CoarseClock {
    fn wall_nanos(&self) -> u64 {
        Self::system().wall_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        let now = Self::system().monotonic_nanos();
        COARSE.mono.fetch_max(now, Ordering::Release);
        now
    }
    #[inline]
    fn coarse_monotonic_nanos(&self) -> u64 {
        COARSE.mono.load(Ordering::Acquire)
    }
    #[inline]
    fn coarse_wall_nanos(&self) -> u64 {
        COARSE.wall.load(Ordering::Acquire)
    }
}

/// A clock moved by hand, for tests. Cloning shares the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug, Default)]
struct ManualInner {
    wall: AtomicU64,
    mono: AtomicU64,
}

impl ManualClock {
    /// A clock reading `wall_ms` milliseconds since the Unix epoch, monotonic time zero.
    pub fn at_unix_millis(wall_ms: u64) -> Self {
        let c = ManualClock::default();
        c.inner.wall.store(wall_ms * 1_000_000, Ordering::SeqCst);
        c
    }
    /// Lets `nanos` pass: both clocks move forward.
    pub fn advance_nanos(&self, nanos: u64) {
        self.inner.wall.fetch_add(nanos, Ordering::SeqCst);
        self.inner.mono.fetch_add(nanos, Ordering::SeqCst);
    }
    /// Lets `ms` milliseconds pass.
    pub fn advance_millis(&self, ms: u64) {
        self.advance_nanos(ms * 1_000_000);
    }
    /// Steps the wall clock alone by `delta_ms` (negative: backwards), as an NTP correction or
    /// an operator would. Monotonic time does not move.
    pub fn step_wall_millis(&self, delta_ms: i64) {
        let delta = delta_ms.unsigned_abs() * 1_000_000;
        if delta_ms >= 0 {
            self.inner.wall.fetch_add(delta, Ordering::SeqCst);
        } else {
            self.inner.wall.fetch_sub(delta, Ordering::SeqCst);
        }
    }
}

impl Clock for ManualClock {
    fn wall_nanos(&self) -> u64 {
        self.inner.wall.load(Ordering::SeqCst)
    }
    fn monotonic_nanos(&self) -> u64 {
        self.inner.mono.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_steps_wall_only() {
        let c = ManualClock::at_unix_millis(1_000);
        c.advance_millis(5);
        c.step_wall_millis(-3);
        assert_eq!(c.wall_nanos(), 1_002_000_000);
        assert_eq!(c.monotonic_nanos(), 5_000_000);
    }

    #[test]
    fn tick_clock_coarse_never_runs_ahead() {
        let c = TickClock::start(std::time::Duration::from_micros(200)).unwrap();
        let mut last = 0;
        for _ in 0..10_000 {
            let coarse = c.coarse_monotonic_nanos();
            assert!(coarse >= last, "coarse monotonic went back");
            assert!(coarse <= c.monotonic_nanos(), "coarse ran ahead of precise");
            last = coarse;
        }
    }

    #[test]
    fn coarse_clock_never_runs_ahead_and_follows_time() {
        let c = CoarseClock::new();
        let mut last = 0;
        for _ in 0..10_000 {
            let coarse = c.coarse_monotonic_nanos();
            assert!(coarse >= last, "coarse monotonic went back");
            assert!(coarse <= c.monotonic_nanos(), "coarse ran ahead of precise");
            last = coarse;
        }
        let wall = c.coarse_wall_nanos();
        assert!(wall <= c.wall_nanos() && wall > 1_600_000_000_000_000_000);
        let before = CoarseClock::default().coarse_monotonic_nanos();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            c.coarse_monotonic_nanos() > before,
            "the ticker refreshes the cache"
        );
    }

    #[test]
    fn system_clock_is_monotonic() {
        let c = SystemClock::new();
        let a = c.monotonic_nanos();
        let b = c.monotonic_nanos();
        assert!(b >= a);
        assert!(c.wall_nanos() > 1_600_000_000_000_000_000);
    }
}
