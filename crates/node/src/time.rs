//! The node's clock: monotonic time from tokio, wall time from the operating system.
//!
//! Every wait, timeout and backoff in the node is a `tokio::time` sleep, so a test that calls
//! `tokio::time::pause()` controls them. [`TokioClock`] makes the node's monotonic readings (the
//! demand averages that size refills) follow the same time, so under a paused runtime the node
//! sees time pass exactly as the test advances it, without waiting. Outside tests it reads the
//! same monotonic clock as `std::time::Instant`.
//!
//! Snowflake namespaces' generators run on the node's clock too ([`SharedClock`]), so a test can
//! step their wall clock (a clock stepped back while a node was down) with a `ManualClock`.

use idmint_core::Clock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Monotonic time from `tokio::time::Instant`, wall time from `SystemTime`. See the module docs.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose monotonic origin is now (in tokio's time).
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn wall_nanos(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
    fn monotonic_nanos(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_time() {
        let clock = TokioClock::new();
        let before = clock.monotonic_nanos();
        tokio::time::advance(Duration::from_secs(3)).await;
        let after = clock.monotonic_nanos();
        assert!(after - before >= 3_000_000_000, "{before} -> {after}");
        assert!(after - before < 3_100_000_000, "{before} -> {after}");
    }
}

/// A shared clock of any kind, printable in `Debug` output (as `Clock`).
#[derive(Clone)]
pub struct SharedClock(pub std::sync::Arc<dyn Clock>);

impl std::fmt::Debug for SharedClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

impl Clock for SharedClock {
    fn wall_nanos(&self) -> u64 {
        self.0.wall_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        self.0.monotonic_nanos()
    }
    fn coarse_monotonic_nanos(&self) -> u64 {
        self.0.coarse_monotonic_nanos()
    }
    fn coarse_wall_nanos(&self) -> u64 {
        self.0.coarse_wall_nanos()
    }
}

impl std::ops::Deref for SharedClock {
    type Target = dyn Clock;
    fn deref(&self) -> &(dyn Clock + 'static) {
        &*self.0
    }
}
