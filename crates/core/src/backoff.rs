//! Exponential backoff with jitter: how long to wait before the next try of something that
//! failed. Sans-IO: [`Backoff::next`] answers a delay and the caller sleeps (the node and the
//! stores on `tokio::time`, so tests run it on paused time).
//!
//! Invariants, counted from the last [`Backoff::reset`]:
//! - the first `immediate` delays are zero (retry at once); after them the `n`th delay
//!   (from 0) lies in `[c / 2, c]` with `c = min(cap, first · 2^n)` ("equal jitter"): no delay
//!   exceeds `cap`, and until `c` reaches it no delay is shorter than the one before;
//! - with a limit, at most `limit` delays (the immediate ones included) are handed out, then
//!   [`Backoff::next`] answers `None` (give up); without one, [`Backoff::delay`] answers the
//!   next delay for ever;
//! - jitter comes from the thread's CSPRNG (`rand::rng()`), or from the generator given to
//!   [`Backoff::with_rng`], which makes the delays repeatable in tests; with the `seeded`
//!   feature, a thread that called [`seed_thread`] draws from its own seeded generator instead
//!   (the deterministic simulation replays a seed with the node's own retry schedules).

use rand::{Rng, RngCore};
use std::fmt;
use std::time::Duration;

/// One retry schedule's state (see the module docs).
pub struct Backoff {
    first: Duration,
    cap: Duration,
    immediate: u32,
    limit: Option<u32>,
    /// Delays handed out since the last reset.
    tries: u32,
    /// `None`: the thread's CSPRNG, drawn at each delay (it is not `Send`).
    rng: Option<Box<dyn RngCore + Send>>,
}

impl Backoff {
    /// Delays from `first`, doubling up to `cap` (a `cap` below `first` is `first`), each
    /// jittered down by up to half; no limit, nothing immediate.
    pub fn new(first: Duration, cap: Duration) -> Self {
        Backoff {
            first,
            cap: cap.max(first),
            immediate: 0,
            limit: None,
            tries: 0,
            rng: None,
        }
    }

    /// The first `tries` delays are zero: retry at once before backing off.
    #[must_use]
    pub fn immediate(mut self, tries: u32) -> Self {
        self.immediate = tries;
        self
    }

    /// Hands out at most `tries` delays, then [`Backoff::next`] answers `None`.
    #[must_use]
    pub fn limit(mut self, tries: u32) -> Self {
        self.limit = Some(tries);
        self
    }

    /// Draws the jitter from `rng` instead of the thread's CSPRNG: a seeded generator gives
    /// the same delays every run.
    #[must_use]
    pub fn with_rng(mut self, rng: impl RngCore + Send + 'static) -> Self {
        self.rng = Some(Box::new(rng));
        self
    }

    /// The delay before the next try, or `None` once the limit's delays were all handed out.
    #[allow(clippy::should_implement_trait)] // a schedule, not a sequence to iterate
    pub fn next(&mut self) -> Option<Duration> {
        if self.limit.is_some_and(|limit| self.tries >= limit) {
            return None;
        }
        let n = self.tries;
        self.tries = self.tries.saturating_add(1);
        let Some(doublings) = n.checked_sub(self.immediate) else {
            return Some(Duration::ZERO);
        };
        Some(self.jittered(self.ceiling(doublings)))
    }

    /// The delay before the next try of a backoff without a limit, counted as [`Backoff::next`]
    /// counts; a backoff whose limit is spent answers its cap (use `next` where a limit
    /// applies).
    pub fn delay(&mut self) -> Duration {
        self.next().unwrap_or(self.cap)
    }

    /// Starts again from the first delay (after a success).
    pub fn reset(&mut self) {
        self.tries = 0;
    }

    /// The delays handed out since the last reset.
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// The longest delay this backoff ever answers.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// `min(cap, first · 2^doublings)`.
    fn ceiling(&self, doublings: u32) -> Duration {
        // 2^31 doublings of a nanosecond already exceed any useful cap.
        let factor = 1u32 << doublings.min(31);
        self.first.saturating_mul(factor).min(self.cap)
    }

    /// A delay drawn uniformly from `[ceiling / 2, ceiling]`, to the nanosecond.
    fn jittered(&mut self, ceiling: Duration) -> Duration {
        let high = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        let low = high - high / 2;
        let nanos = match &mut self.rng {
            Some(rng) => rng.random_range(low..=high),
            None => thread_jitter(low, high),
        };
        Duration::from_nanos(nanos)
    }
}

/// Uniform in `low..=high` from the thread's CSPRNG, or from its seeded generator
/// ([`seed_thread`]).
fn thread_jitter(low: u64, high: u64) -> u64 {
    #[cfg(feature = "seeded")]
    if let Some(drawn) = SEEDED.with(|s| {
        let mut state = s.get()?;
        let draw = splitmix(&mut state);
        s.set(Some(state));
        Some(low + draw % (high - low).saturating_add(1).max(1))
    }) {
        return drawn;
    }
    rand::rng().random_range(low..=high)
}

#[cfg(feature = "seeded")]
thread_local! {
    static SEEDED: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// From now on, every [`Backoff`] without a generator of its own draws its jitter on this
/// thread from a generator seeded with `seed` (`None`: the CSPRNG again). For the
/// deterministic simulation, which runs nodes on one thread and must replay their retries.
#[cfg(feature = "seeded")]
pub fn seed_thread(seed: Option<u64>) {
    SEEDED.with(|s| s.set(seed));
}

/// SplitMix64's step.
#[cfg(feature = "seeded")]
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backoff")
            .field("first", &self.first)
            .field("cap", &self.cap)
            .field("immediate", &self.immediate)
            .field("limit", &self.limit)
            .field("tries", &self.tries)
            .field("seeded", &self.rng.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    const MS: Duration = Duration::from_millis(1);

    fn seeded(first: Duration, cap: Duration, seed: u64) -> Backoff {
        Backoff::new(first, cap).with_rng(StdRng::seed_from_u64(seed))
    }

    fn draw(backoff: &mut Backoff, n: usize) -> Vec<Duration> {
        (0..n).map_while(|_| backoff.next()).collect()
    }

    #[test]
    fn each_delay_lies_between_half_its_ceiling_and_the_ceiling() {
        for seed in 0..200 {
            let mut b = seeded(10 * MS, 10_000 * MS, seed);
            for (n, delay) in draw(&mut b, 12).into_iter().enumerate() {
                let ceiling = (10 * MS * (1 << n)).min(10_000 * MS);
                assert!(
                    delay >= ceiling / 2 && delay <= ceiling,
                    "delay {n} = {delay:?}, ceiling {ceiling:?}"
                );
            }
        }
    }

    #[test]
    fn delays_grow_until_the_cap() {
        let mut b = seeded(MS, 64 * MS, 7);
        let delays = draw(&mut b, 20);
        // Ceilings 1, 2, 4, ... 64 ms: the first seven delays.
        assert!(delays[..7].windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert!(delays.iter().all(|d| *d <= 64 * MS), "{delays:?}");
        // The ceiling doubles: the seventh delay is at least 32 ms, the first at most 1 ms.
        assert!(delays[0] <= MS && delays[6] >= 32 * MS, "{delays:?}");
    }

    #[test]
    fn no_delay_exceeds_the_cap_however_many_tries() {
        // The thread's CSPRNG, as in production.
        let mut b = Backoff::new(MS, 50 * MS);
        for _ in 0..1_000 {
            let delay = b.delay();
            assert!(delay <= 50 * MS, "{delay:?}");
        }
        assert_eq!(b.tries(), 1_000);
        let mut limited = seeded(MS, 50 * MS, 9).limit(1);
        assert!(limited.delay() <= MS);
        assert_eq!(limited.delay(), 50 * MS);
        // A cap below the first delay is the first delay.
        assert_eq!(Backoff::new(10 * MS, MS).cap(), 10 * MS);
    }

    #[test]
    fn reset_starts_again_from_the_first_delay() {
        let mut b = seeded(MS, Duration::from_secs(1), 3);
        let first = draw(&mut b, 5);
        assert_eq!(b.tries(), 5);
        b.reset();
        assert_eq!(b.tries(), 0);
        let again = b.next().unwrap_or(Duration::MAX);
        assert!(again <= MS, "{again:?} after reset, {first:?} before");
    }

    #[test]
    fn a_limit_ends_the_schedule_until_reset() {
        let mut b = seeded(MS, 8 * MS, 1).limit(3);
        assert_eq!(draw(&mut b, 10).len(), 3);
        assert_eq!(b.next(), None);
        b.reset();
        assert!(b.next().is_some());
    }

    #[test]
    fn immediate_tries_come_first_and_count_towards_the_limit() {
        let mut b = seeded(4 * MS, 64 * MS, 2).immediate(2).limit(4);
        let delays = draw(&mut b, 10);
        assert_eq!(delays.len(), 4);
        assert_eq!(&delays[..2], &[Duration::ZERO, Duration::ZERO]);
        assert!(delays[2] >= 2 * MS && delays[2] <= 4 * MS, "{delays:?}");
        assert!(delays[3] >= 4 * MS && delays[3] <= 8 * MS, "{delays:?}");
    }

    #[test]
    fn a_seeded_backoff_repeats_its_delays() {
        let a = draw(&mut seeded(MS, Duration::from_secs(2), 42), 15);
        let b = draw(&mut seeded(MS, Duration::from_secs(2), 42), 15);
        assert_eq!(a, b);
        let c = draw(&mut seeded(MS, Duration::from_secs(2), 43), 15);
        assert_ne!(a, c);
    }

    #[test]
    fn huge_counts_saturate_instead_of_overflowing() {
        let mut b = seeded(Duration::from_secs(1), Duration::MAX, 5);
        for _ in 0..100 {
            assert!(b.next().is_some());
        }
        let zero = seeded(Duration::ZERO, Duration::ZERO, 5).next();
        assert_eq!(zero, Some(Duration::ZERO));
    }
}
