//! Rate quotas: one token bucket per token on each namespace, on an injected clock.
//!
//! A bucket holds up to `burst` ids and refills at `rate` ids per second. A request for `n`
//! ids passes when the bucket holds at least `min(n, burst)`, and takes `n`: a request larger
//! than the burst is let through from a full bucket and leaves it in debt, so it is delayed
//! rather than refused forever, and the long-run rate still holds. A refused request is told
//! how long until it would pass.
//!
//! Invariants: each namespace the node serves owns its [`Buckets`], created with it, so quota
//! state exists only for namespaces that exist and is bounded by the configured tokens (one
//! bucket per token hash); nothing is swept. Time is given in monotonic nanoseconds by the
//! caller ([`Buckets::take`]), so tests step it by hand and nothing here reads a clock or
//! sleeps. A namespace's buckets sit behind a `std::sync::Mutex` held for a few arithmetic
//! operations, never across an `.await`.

use super::TokenHash;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

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
    /// Ids available; negative while in debt.
    level: f64,
    /// When `level` was computed, monotonic nanoseconds.
    at: u64,
}

impl Bucket {
    fn refill(&mut self, rate: Rate, now: u64) {
        let elapsed = now.saturating_sub(self.at) as f64 / 1e9;
        self.level = (self.level + elapsed * rate.per_second).min(rate.burst);
        self.at = self.at.max(now);
    }
}

/// One namespace's buckets, one per token.
#[derive(Debug, Default)]
pub struct Buckets {
    buckets: Mutex<HashMap<TokenHash, Bucket>>,
}

impl Buckets {
    /// Takes `count` ids from `token`'s bucket at `now` (monotonic nanoseconds), or answers how
    /// long to wait before the request would pass.
    pub fn take(&self, token: TokenHash, rate: Rate, count: u64, now: u64) -> Result<(), Duration> {
        // Short critical section: arithmetic on one entry.
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets.entry(token).or_insert(Bucket {
            level: rate.burst,
            at: now,
        });
        bucket.refill(rate, now);
        let need = (count as f64).min(rate.burst);
        if bucket.level >= need {
            bucket.level -= count as f64;
            Ok(())
        } else {
            let wait = (need - bucket.level) / rate.per_second;
            Err(Duration::from_secs_f64(wait.max(0.0)))
        }
    }

    /// How many buckets it holds (one per token that took from this namespace).
    pub fn len(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no token took from this namespace yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    fn token(n: u8) -> TokenHash {
        TokenHash::of(&[n])
    }

    #[test]
    fn a_full_bucket_passes_the_burst_then_refuses_until_refilled() {
        let q = Buckets::default();
        let r = rate(10.0, 10.0);
        assert_eq!(q.take(token(0), r, 10, 0), Ok(()));
        assert_eq!(q.take(token(0), r, 5, 0), Err(Duration::from_millis(500)));
        // Half a second later: 5 ids back.
        assert_eq!(q.take(token(0), r, 5, SEC / 2), Ok(()));
        assert!(q.take(token(0), r, 1, SEC / 2).is_err());
        // Never more than the burst, however long it waited.
        assert_eq!(q.take(token(0), r, 10, 100 * SEC), Ok(()));
        assert!(q.take(token(0), r, 1, 100 * SEC).is_err());
    }

    #[test]
    fn buckets_are_per_token() {
        let q = Buckets::default();
        let r = rate(1.0, 1.0);
        assert_eq!(q.take(token(0), r, 1, 0), Ok(()));
        assert!(q.take(token(0), r, 1, 0).is_err());
        assert_eq!(q.take(token(1), r, 1, 0), Ok(()));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_request_above_the_burst_passes_from_a_full_bucket_and_leaves_debt() {
        let q = Buckets::default();
        let r = rate(100.0, 100.0);
        assert_eq!(q.take(token(0), r, 300, 0), Ok(()));
        // 200 in debt, then 100 needed for the next large request: 3 s.
        assert_eq!(q.take(token(0), r, 300, 0), Err(Duration::from_secs(3)));
        assert!(q.take(token(0), r, 1, 2 * SEC).is_err());
        assert_eq!(q.take(token(0), r, 1, 2 * SEC + SEC / 10), Ok(()));
    }

    #[test]
    fn a_clock_that_reads_earlier_does_not_refill_or_panic() {
        let q = Buckets::default();
        let r = rate(1.0, 2.0);
        assert_eq!(q.take(token(0), r, 2, 10 * SEC), Ok(()));
        assert!(q.take(token(0), r, 1, 5 * SEC).is_err());
    }
}
