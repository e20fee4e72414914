//! Time sources.
//!
//! A [`Clock`] gives two readings: wall time (nanoseconds since the Unix epoch, which may step
//! backwards or forwards when the operating system corrects it) and monotonic time (nanoseconds
//! from an arbitrary origin, which never decreases). Generators anchor their timestamps to wall
//! time once and then advance with monotonic time, so a wall-clock step cannot make them reissue
//! a timestamp.
//!
//! [`SystemClock`] is the only place in idmint-core that reads the operating system's clocks.
//! [`ManualClock`] is set by hand, for tests that step time without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
/// a weak reference and stops within one tick of the last clone being dropped. This is the one
/// thread idmint-core can start, and only when asked to.
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
    fn system_clock_is_monotonic() {
        let c = SystemClock::new();
        let a = c.monotonic_nanos();
        let b = c.monotonic_nanos();
        assert!(b >= a);
        assert!(c.wall_nanos() > 1_600_000_000_000_000_000);
    }
}
