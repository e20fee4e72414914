//! Ids a sequence namespace served (and refills it made) over the last hour, for its exhaustion
//! projection ([`idmint_api::SequenceState::projected_exhaustion`], docs/api.md) and the status
//! page's sparklines ([`ServedWindow::history`]).
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
//! History: [`ServedWindow::history`] is what moved between consecutive kept samples (one
//! minute each, longer across a gap in sampling), then from the newest kept sample to the
//! latest reading (the minute in progress), oldest first: at most [`HISTORY_POINTS`], each
//! ending within [`WINDOW`] of the latest reading. A counter that went down (it never should)
//! reads as 0, never as a wrapped difference.
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

/// The most intervals [`ServedWindow::history`] returns: an hour of minutes.
pub const HISTORY_POINTS: usize = 60;

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

/// What moved between two readings ([`ServedWindow::history`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    /// How long before the latest reading it ended (zero for the minute in progress).
    pub ended_ago: Duration,
    /// How long it lasted: a minute, longer across a gap in sampling, shorter for the minute
    /// in progress.
    pub length: Duration,
    /// Ids served in it.
    pub served: u64,
    /// Refills completed in it.
    pub refills: u64,
}

impl Delta {
    /// Whether it is the minute in progress (the only interval shorter than [`SAMPLE_EVERY`]:
    /// a reading that far from the newest kept sample is kept).
    pub fn in_progress(&self) -> bool {
        self.length < SAMPLE_EVERY
    }
}

/// One reading: monotonic nanoseconds, ids served, refills completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    at: u64,
    served: u64,
    refills: u64,
}

#[derive(Debug, Default)]
struct Samples {
    /// One per [`SAMPLE_EVERY`], oldest first.
    kept: VecDeque<Sample>,
    /// The newest reading.
    latest: Option<Sample>,
}

impl ServedWindow {
    /// Records that `served` ids were served and `refills` refills completed by `now_nanos`
    /// (monotonic).
    pub fn record(&self, now_nanos: u64, served: u64, refills: u64) {
        let sample = Sample {
            at: now_nanos,
            served,
            refills,
        };
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        s.latest = Some(sample);
        let every = nanos(SAMPLE_EVERY);
        if s.kept
            .back()
            .is_none_or(|k| now_nanos.saturating_sub(k.at) >= every)
        {
            s.kept.push_back(sample);
        }
        let window = nanos(WINDOW);
        while s
            .kept
            .get(1)
            .is_some_and(|k| now_nanos.saturating_sub(k.at) >= window)
        {
            s.kept.pop_front();
        }
    }

    /// What moved in each kept minute of the last hour, and in the minute in progress, oldest
    /// first (see the module docs). Empty before two readings apart in time.
    pub fn history(&self) -> Vec<Delta> {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let Some(latest) = s.latest else {
            return Vec::new();
        };
        let window = nanos(WINDOW);
        let mut out: Vec<Delta> = s
            .kept
            .iter()
            .chain(std::iter::once(&latest))
            .zip(s.kept.iter().skip(1).chain(std::iter::once(&latest)))
            .filter(|(a, b)| b.at > a.at && latest.at.saturating_sub(b.at) < window)
            .map(|(a, b)| Delta {
                ended_ago: Duration::from_nanos(latest.at.saturating_sub(b.at)),
                length: Duration::from_nanos(b.at - a.at),
                served: b.served.saturating_sub(a.served),
                refills: b.refills.saturating_sub(a.refills),
            })
            .collect();
        let extra = out.len().saturating_sub(HISTORY_POINTS);
        out.drain(..extra);
        out
    }

    /// The rate over the window, once two readings are apart in time.
    pub fn rate(&self) -> Option<ServedRate> {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let Sample {
            at: t1,
            served: served1,
            ..
        } = s.latest?;
        let Sample {
            at: t0,
            served: served0,
            ..
        } = *s.kept.front()?;
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
        w.record(5 * SECOND, 100, 1);
        assert_eq!(w.rate(), None);
    }

    /// A burst on a young node counts as its share of an hour, not at its own rate.
    #[test]
    fn a_burst_is_divided_by_an_hour() {
        let w = ServedWindow::default();
        w.record(0, 0, 0);
        w.record(10 * SECOND, 1_000_000, 4);
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
            w.record(second * SECOND, second * 50, second / 10);
        }
        let rate = w.rate().unwrap();
        assert!((rate.per_second - 50.0).abs() < 1e-9, "{rate:?}");
        assert!(rate.observed >= WINDOW && rate.observed <= WINDOW + SAMPLE_EVERY);
        assert!(w.samples.lock().unwrap().kept.len() <= 62);
    }

    const MINUTE: u64 = 60 * SECOND;

    fn delta(ended_ago: u64, length: u64, served: u64, refills: u64) -> Delta {
        Delta {
            ended_ago: Duration::from_nanos(ended_ago),
            length: Duration::from_nanos(length),
            served,
            refills,
        }
    }

    /// Sampled every second for two hours at 50 ids and one refill per 10 s: the last 60
    /// minutes, one minute each, ending with the minute in progress.
    #[test]
    fn history_is_the_last_hour_by_minute() {
        let w = ServedWindow::default();
        assert_eq!(w.history(), Vec::new());
        for second in 0..=7230u64 {
            w.record(second * SECOND, second * 50, second / 10);
        }
        let h = w.history();
        assert_eq!(h.len(), HISTORY_POINTS);
        // The minute in progress: kept samples fall on whole minutes, the latest is 30 s past.
        assert_eq!(h[59], delta(0, 30 * SECOND, 1500, 3));
        assert!(h[59].in_progress());
        for (i, d) in h[..59].iter().enumerate() {
            let ago = (59 - i as u64) * MINUTE - 30 * SECOND;
            assert_eq!(*d, delta(ago, MINUTE, 3000, 6), "minute {i}");
            assert!(!d.in_progress());
        }
        assert!(h.iter().all(|d| d.ended_ago < WINDOW));
    }

    /// A node younger than an hour has a point per minute it ran; one younger than a minute,
    /// the minute in progress only.
    #[test]
    fn a_young_node_has_the_minutes_it_ran() {
        let w = ServedWindow::default();
        w.record(0, 0, 0);
        assert_eq!(w.history(), Vec::new());
        w.record(15 * SECOND, 25, 1);
        assert_eq!(w.history(), vec![delta(0, 15 * SECOND, 25, 1)]);
        for second in 16..=(5 * 60 + 20) {
            w.record(second * SECOND, 25, 1);
        }
        let h = w.history();
        assert_eq!(h.len(), 6, "{h:?}");
        assert_eq!(h[0], delta(4 * MINUTE + 20 * SECOND, MINUTE, 25, 1));
        assert_eq!(h[5], delta(0, 20 * SECOND, 0, 0));
    }

    /// Counters that do not move are zeros, not gaps; a sampling gap is one longer interval;
    /// a counter that went down reads as 0.
    #[test]
    fn still_counters_gaps_and_a_counter_going_down() {
        let w = ServedWindow::default();
        w.record(0, 100, 7);
        w.record(MINUTE, 100, 7);
        w.record(2 * MINUTE, 100, 7);
        assert_eq!(
            w.history(),
            vec![delta(MINUTE, MINUTE, 0, 0), delta(0, MINUTE, 0, 0)]
        );
        // Nothing sampled for five minutes, then 500 ids and 5 refills.
        w.record(7 * MINUTE, 600, 12);
        assert_eq!(w.history()[2], delta(0, 5 * MINUTE, 500, 5));
        w.record(8 * MINUTE, 590, 12);
        assert_eq!(w.history()[3], delta(0, MINUTE, 0, 0));
    }

    /// A gap longer than the window leaves the interval that crossed it and what came after.
    #[test]
    fn a_gap_longer_than_the_window() {
        let w = ServedWindow::default();
        w.record(0, 0, 0);
        w.record(MINUTE, 10, 1);
        w.record(3 * 3600 * SECOND, 1000, 9);
        assert_eq!(
            w.history(),
            vec![delta(0, 3 * 3600 * SECOND - MINUTE, 990, 8)]
        );
    }
}
