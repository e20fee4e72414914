//! Rate quotas: one token bucket per (token, namespace), on an injected clock.
//!
//! A bucket holds up to `burst` ids and refills at `rate` ids per second. A request for `n`
//! ids passes when the bucket holds at least `min(n, burst)`, and takes `n`: a request larger
//! than the burst is let through from a full bucket and leaves it in debt, so it is delayed
//! rather than refused forever, and the long-run rate still holds. A refused request is told
//! how long until it would pass.
//!
//! Time is given in monotonic nanoseconds by the caller ([`Quotas::take`]), so tests step it by
//! hand and nothing here reads a clock or sleeps. The map of buckets sits behind a
//! `std::sync::Mutex` held for a few arithmetic operations, never across an `.await`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Most buckets kept at once; past it, buckets that are full again (indistinguishable from new
/// ones) are dropped first.
pub const MAX_BUCKETS: usize = 100_000;

/// A token's rate: `per_second` ids per second, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Ids per second, above 0.
    pub per_second: f64,
    /// The bucket's size, at least 1.
    pub burst: f64,
}

/// One bucket's state.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// The rate it refills at (its token's), so a sweep judges every bucket by its own.
    rate: Rate,
    /// Ids available; negative while in debt.
    level: f64,
    /// When `level` was computed, monotonic nanoseconds.
    at: u64,
}

impl Bucket {
    fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.at) as f64 / 1e9;
        self.level = (self.level + elapsed * self.rate.per_second).min(self.rate.burst);
        self.at = self.at.max(now);
    }
}

/// The buckets of every (token, namespace).
#[derive(Debug, Default)]
pub struct Quotas {
    buckets: Mutex<HashMap<(usize, String), Bucket>>,
}

impl Quotas {
    /// Takes `count` ids from the bucket of (`token`, `namespace`) at `now` (monotonic
    /// nanoseconds), or answers how long to wait before the request would pass.
    pub fn take(
        &self,
        token: usize,
        namespace: &str,
        rate: Rate,
        count: u64,
        now: u64,
    ) -> Result<(), Duration> {
        // Short critical section: arithmetic on one entry (and, rarely, a sweep).
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(&(token, namespace.to_owned())) {
            buckets.retain(|_, b| {
                let mut b = *b;
                b.refill(now);
                b.level < b.rate.burst
            });
        }
        let bucket = buckets
            .entry((token, namespace.to_owned()))
            .or_insert(Bucket {
                rate,
                level: rate.burst,
                at: now,
            });
        bucket.rate = rate;
        bucket.refill(now);
        let need = (count as f64).min(rate.burst);
        if bucket.level >= need {
            bucket.level -= count as f64;
            Ok(())
        } else {
            let wait = (need - bucket.level) / rate.per_second;
            Err(Duration::from_secs_f64(wait.max(0.0)))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn rate(per_second: f64, burst: f64) -> Rate {
        Rate { per_second, burst }
    }

    #[test]
    fn a_full_bucket_passes_the_burst_then_refuses_until_refilled() {
        let q = Quotas::default();
        let r = rate(10.0, 10.0);
        assert_eq!(q.take(0, "a", r, 10, 0), Ok(()));
        assert_eq!(q.take(0, "a", r, 5, 0), Err(Duration::from_millis(500)));
        // Half a second later: 5 ids back.
        assert_eq!(q.take(0, "a", r, 5, SEC / 2), Ok(()));
        assert!(q.take(0, "a", r, 1, SEC / 2).is_err());
        // Never more than the burst, however long it waited.
        assert_eq!(q.take(0, "a", r, 10, 100 * SEC), Ok(()));
        assert!(q.take(0, "a", r, 1, 100 * SEC).is_err());
    }

    #[test]
    fn buckets_are_per_token_and_namespace() {
        let q = Quotas::default();
        let r = rate(1.0, 1.0);
        assert_eq!(q.take(0, "a", r, 1, 0), Ok(()));
        assert!(q.take(0, "a", r, 1, 0).is_err());
        assert_eq!(q.take(0, "b", r, 1, 0), Ok(()));
        assert_eq!(q.take(1, "a", r, 1, 0), Ok(()));
    }

    #[test]
    fn a_request_above_the_burst_passes_from_a_full_bucket_and_leaves_debt() {
        let q = Quotas::default();
        let r = rate(100.0, 100.0);
        assert_eq!(q.take(0, "a", r, 300, 0), Ok(()));
        // 200 in debt, then 100 needed for the next large request: 3 s.
        assert_eq!(q.take(0, "a", r, 300, 0), Err(Duration::from_secs(3)));
        assert!(q.take(0, "a", r, 1, 2 * SEC).is_err());
        assert_eq!(q.take(0, "a", r, 1, 2 * SEC + SEC / 10), Ok(()));
    }

    #[test]
    fn a_clock_that_reads_earlier_does_not_refill_or_panic() {
        let q = Quotas::default();
        let r = rate(1.0, 2.0);
        assert_eq!(q.take(0, "a", r, 2, 10 * SEC), Ok(()));
        assert!(q.take(0, "a", r, 1, 5 * SEC).is_err());
    }
}
