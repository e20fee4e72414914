//! Ids a sequence namespace served over the last hour, for its exhaustion projection
//! ([`idmint_api::SequenceState::projected_exhaustion`], docs/api.md).
//!
//! Definition: the node samples each served namespace's `served` count once a second
//! ([`ServedWindow::record`]); a sample is kept once a minute, and kept samples older than
//! [`WINDOW`] are dropped, except the newest of them, which marks the window's start. The rate
//! is the ids served since the window's start divided by its length, **but by at least
//! [`WINDOW`]**: a node younger than an hour reports the rate of an hour in which nothing was
//! served before it started. So one burst (a lower tier's large block, a batch job) moves the
//! projection by its share of an hour, never by the burst's own rate, and a steady demand is
//! projected exactly once the node has served for an hour.
//!
//! Invariants: recording and reading take a `std::sync::Mutex` for a few loads and stores,
//! never across `.await`, and off the request path; at most `WINDOW / SAMPLE_EVERY + 1`
//! samples are kept.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// The window the projection's rate is taken over, and the least it is divided by.
pub const WINDOW: Duration = Duration::from_secs(3600);

/// How often a sample is kept.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// A rate of ids served, and the window it was measured over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServedRate {
    /// Ids per second over the window (divided by at least [`WINDOW`]).
    pub per_second: f64,
    /// How long the samples span, at most [`WINDOW`] plus [`SAMPLE_EVERY`].
    pub observed: Duration,
}

/// The samples of one namespace. See the module docs.
#[derive(Debug, Default)]
pub struct ServedWindow {
    samples: Mutex<Samples>,
}

#[derive(Debug, Default)]
struct Samples {
    /// `(monotonic nanoseconds, served)`, one per [`SAMPLE_EVERY`], oldest first.
    kept: VecDeque<(u64, u64)>,
    /// The newest reading.
    latest: Option<(u64, u64)>,
}

impl ServedWindow {
    /// Records that `served` ids were served by `now_nanos` (monotonic).
    pub fn record(&self, now_nanos: u64, served: u64) {
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        s.latest = Some((now_nanos, served));
        let every = nanos(SAMPLE_EVERY);
        if s.kept
            .back()
            .is_none_or(|(t, _)| now_nanos.saturating_sub(*t) >= every)
        {
            s.kept.push_back((now_nanos, served));
        }
        let window = nanos(WINDOW);
        while s
            .kept
            .get(1)
            .is_some_and(|(t, _)| now_nanos.saturating_sub(*t) >= window)
        {
            s.kept.pop_front();
        }
    }

    /// The rate over the window, once two readings are apart in time.
    pub fn rate(&self) -> Option<ServedRate> {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let (t1, served1) = s.latest?;
        let (t0, served0) = *s.kept.front()?;
        let span = t1.checked_sub(t0).filter(|span| *span > 0)?;
        let divisor = span.max(nanos(WINDOW)) as f64 / 1e9;
        Some(ServedRate {
            per_second: served1.saturating_sub(served0) as f64 / divisor,
            observed: Duration::from_nanos(span),
        })
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn nothing_to_say_before_two_readings() {
        let w = ServedWindow::default();
        assert_eq!(w.rate(), None);
        w.record(5 * SECOND, 100);
        assert_eq!(w.rate(), None);
    }

    /// A burst on a young node counts as its share of an hour, not at its own rate.
    #[test]
    fn a_burst_is_divided_by_an_hour() {
        let w = ServedWindow::default();
        w.record(0, 0);
        w.record(10 * SECOND, 1_000_000);
        let rate = w.rate().unwrap();
        assert!(
            (rate.per_second - 1_000_000.0 / 3600.0).abs() < 1e-6,
            "{rate:?}"
        );
        assert_eq!(rate.observed, Duration::from_secs(10));
    }

    /// A steady demand, sampled every second for two hours: exact once an hour has passed, over
    /// a window of at most an hour and a minute, with at most 62 samples kept.
    #[test]
    fn a_steady_demand_is_exact_after_an_hour() {
        let w = ServedWindow::default();
        for second in 0..=7200u64 {
            w.record(second * SECOND, second * 50);
        }
        let rate = w.rate().unwrap();
        assert!((rate.per_second - 50.0).abs() < 1e-9, "{rate:?}");
        assert!(rate.observed >= WINDOW && rate.observed <= WINDOW + SAMPLE_EVERY);
        assert!(w.samples.lock().unwrap().kept.len() <= 62);
    }
}
