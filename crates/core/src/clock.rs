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
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn wall_nanos(&self) -> u64 {
        (**self).wall_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        (**self).monotonic_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn wall_nanos(&self) -> u64 {
        (**self).wall_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        (**self).monotonic_nanos()
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
    fn system_clock_is_monotonic() {
        let c = SystemClock::new();
        let a = c.monotonic_nanos();
        let b = c.monotonic_nanos();
        assert!(b >= a);
        assert!(c.wall_nanos() > 1_600_000_000_000_000_000);
    }
}
