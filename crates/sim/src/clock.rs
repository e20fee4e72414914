//! Simulated time: one monotonic reading for the whole world, and per node a wall clock with
//! its own skew, which the scheduler steps in either direction; [`RatedClock`] adds a monotonic
//! clock running at the node's own rate.

use idmint_core::Clock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// Wall time at simulated time 0: 2026-01-01T00:00:00Z.
pub const WALL_ORIGIN_NANOS: u64 = 1_767_225_600_000_000_000;

/// The world's monotonic time, nanoseconds since the run began.
#[derive(Debug, Clone, Default)]
pub struct Now(Arc<AtomicU64>);

impl Now {
    /// Nanoseconds since the run began.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Moves time forward by `by` nanoseconds.
    pub fn advance(&self, by: u64) {
        self.0.fetch_add(by, Ordering::Relaxed);
    }
}

/// A node's clock (or the store's, with no skew): monotonic time is the world's, wall time is
/// the world's plus the node's skew.
#[derive(Debug, Clone)]
pub struct SimClock {
    now: Now,
    skew: Arc<AtomicI64>,
}

impl SimClock {
    /// A clock on `now` with skew `skew_nanos`.
    pub fn new(now: Now, skew_nanos: i64) -> Self {
        SimClock {
            now,
            skew: Arc::new(AtomicI64::new(skew_nanos)),
        }
    }

    /// Steps the wall clock by `by` nanoseconds (negative: back).
    pub fn step(&self, by: i64) {
        self.skew.fetch_add(by, Ordering::Relaxed);
    }
}

impl Clock for SimClock {
    fn wall_nanos(&self) -> u64 {
        let base = WALL_ORIGIN_NANOS + self.now.get();
        base.saturating_add_signed(self.skew.load(Ordering::Relaxed))
    }

    fn monotonic_nanos(&self) -> u64 {
        self.now.get()
    }
}

/// A node's clock whose monotonic time runs at its own rate against the world's (a crystal
/// off by up to some percent), from its own origin; its wall clock is the world's plus a skew
/// that the scheduler steps in either direction.
#[derive(Debug, Clone)]
pub struct RatedClock {
    now: Now,
    /// Parts per million of the world's rate.
    rate_ppm: u64,
    /// Its monotonic reading at world time 0.
    offset: u64,
    skew: Arc<AtomicI64>,
}

impl RatedClock {
    /// A clock on `now` running at `rate_ppm`, reading `offset` at world time 0, with wall skew
    /// `skew_nanos`.
    pub fn new(now: Now, rate_ppm: u64, offset: u64, skew_nanos: i64) -> Self {
        RatedClock {
            now,
            rate_ppm,
            offset,
            skew: Arc::new(AtomicI64::new(skew_nanos)),
        }
    }

    /// Its monotonic reading at world time `at` (within u64 for runs of hours).
    pub fn local(&self, at: u64) -> u64 {
        self.offset + at.saturating_mul(self.rate_ppm) / 1_000_000
    }

    /// Steps the wall clock by `by` nanoseconds (negative: back).
    pub fn step(&self, by: i64) {
        self.skew.fetch_add(by, Ordering::Relaxed);
    }
}

impl Clock for RatedClock {
    fn wall_nanos(&self) -> u64 {
        let base = WALL_ORIGIN_NANOS + self.now.get();
        base.saturating_add_signed(self.skew.load(Ordering::Relaxed))
    }

    fn monotonic_nanos(&self) -> u64 {
        self.local(self.now.get())
    }
}

/// Polls a future of the in-memory authority once: its operations complete without waiting
/// (one mutex, taken and released inside the call), so one poll finishes them.
pub fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => {
            panic!("the in-memory authority's call did not complete at once")
        }
    }
}
