//! Sequence headroom of a snowflake namespace: how many ids its worker issued in one time unit
//! lately, against the `2^sequence_bits` it may issue per unit
//! ([`idmint_api::SequenceHeadroom`], docs/api.md).
//!
//! Definition: every time a request takes ids from the worker's generator, the ids it gets
//! come from one time unit and the last one's sequence field plus one is the number of ids the
//! worker issued in that unit so far (the generator starts each unit at sequence 0). The
//! **peak** is the largest such count seen in a window of [`WINDOW`] (windows aligned to the
//! layout's epoch, in the generator's time units); a request that found its unit used up and
//! waited counts the unit as full. A report covers the current window and the one before, so a
//! burst is forgotten after one to two windows.
//!
//! Invariants: recording is lock-free and cheap enough for the request path (one load, and a
//! compare-and-swap only when the peak rises or a window turns); it never touches the
//! generator, so it cannot change an id. At a window's turn a request still recording into the
//! old window may be missed (the old window's peak then stays as the turn saw it): the peak
//! can only be under-reported, by that race, never over-reported.

use idmint_api as api;
use idmint_core::Layout;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The length of a window of the peak.
pub const WINDOW: Duration = Duration::from_secs(60);

/// The peak ids per time unit of one snowflake namespace's worker. See the module docs.
#[derive(Debug)]
pub struct SequenceUse {
    limit_per_unit: u64,
    unit_nanos: u64,
    units_per_window: u64,
    /// `(window << 32) | peak` of the newest window recorded (window 0 with peak 0: nothing).
    current: AtomicU64,
    /// The same for the window before `current`'s, as it stood when `current` moved on.
    previous: AtomicU64,
    /// Requests that found their unit's sequence used up and waited.
    exhausted: AtomicU64,
}

fn pack(window: u64, peak: u64) -> u64 {
    // Windows wrap after 2^32 (8,000 years of 60 s windows); peaks are at most 2^sequence_bits,
    // which is below 2^32 for every layout a worker can have (node and timestamp bits take the
    // rest of 63).
    ((window & 0xFFFF_FFFF) << 32) | peak.min(0xFFFF_FFFF)
}

fn unpack(packed: u64) -> (u64, u64) {
    (packed >> 32, packed & 0xFFFF_FFFF)
}

impl SequenceUse {
    /// Nothing observed yet, for a worker of `layout`.
    pub fn new(layout: &Layout) -> Self {
        let unit_nanos = layout.unit_nanos().max(1);
        let window_nanos = u64::try_from(WINDOW.as_nanos()).unwrap_or(u64::MAX);
        SequenceUse {
            limit_per_unit: layout.ids_per_unit(),
            unit_nanos,
            units_per_window: (window_nanos / unit_nanos).max(1),
            current: AtomicU64::new(0),
            previous: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
        }
    }

    fn window_of(&self, timestamp: u64) -> u64 {
        (timestamp / self.units_per_window) & 0xFFFF_FFFF
    }

    /// The worker has issued `count` ids in its time unit `timestamp` so far.
    pub fn record(&self, timestamp: u64, count: u64) {
        let window = self.window_of(timestamp);
        let mut seen = self.current.load(Ordering::Relaxed);
        loop {
            let (w, peak) = unpack(seen);
            let next = if w == window {
                if count <= peak {
                    return;
                }
                pack(window, count)
            } else if window > w || (w == 0xFFFF_FFFF && window == 0) {
                pack(window, count)
            } else {
                // An older window than the newest: only its successor's report can show it.
                let _ = self
                    .previous
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                        let (pw, pp) = unpack(p);
                        (pw == window && count > pp).then(|| pack(window, count))
                    });
                return;
            };
            match self.current.compare_exchange_weak(
                seen,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if w != window {
                        self.previous.store(seen, Ordering::Relaxed);
                    }
                    return;
                }
                Err(actual) => seen = actual,
            }
        }
    }

    /// A request found the unit `timestamp` used up and waits for the next one.
    pub fn record_exhausted(&self, timestamp: u64) {
        self.exhausted.fetch_add(1, Ordering::Relaxed);
        self.record(timestamp, self.limit_per_unit);
    }

    /// Requests that found their unit used up, so far.
    pub fn exhausted(&self) -> u64 {
        self.exhausted.load(Ordering::Relaxed)
    }

    /// The headroom as of the time unit `now` (the generator's current timestamp).
    pub fn report(&self, now: u64) -> api::SequenceHeadroom {
        let window = self.window_of(now);
        let recent = |packed: u64| {
            let (w, peak) = unpack(packed);
            if w == window || (w + 1) & 0xFFFF_FFFF == window {
                peak
            } else {
                0
            }
        };
        let peak = recent(self.current.load(Ordering::Relaxed))
            .max(recent(self.previous.load(Ordering::Relaxed)))
            .min(self.limit_per_unit);
        api::SequenceHeadroom::new(
            self.limit_per_unit,
            self.unit_nanos,
            peak,
            self.exhausted(),
            WINDOW.as_secs(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_the_largest_unit_count_of_the_last_two_windows() {
        let u = SequenceUse::new(&Layout::twitter()); // 4096 per 1 ms; windows of 60,000 units
        let r = u.report(0);
        assert_eq!((r.limit_per_unit, r.peak_per_unit), (4096, 0));
        assert_eq!(r.limit_per_second, 4_096_000.0);
        assert_eq!((r.headroom_per_unit, r.window_seconds), (4096, 60));

        u.record(10, 100);
        u.record(10, 40); // a smaller count of the same unit, seen late
        u.record(11, 1024);
        let r = u.report(11);
        assert_eq!((r.peak_per_unit, r.headroom_per_unit), (1024, 3072));
        assert_eq!(r.peak_fraction, 0.25);

        // The next window: the previous one still counts.
        u.record(60_000, 7);
        assert_eq!(u.report(60_001).peak_per_unit, 1024);
        // A late request of the previous window still raises its peak.
        u.record(59_999, 2000);
        assert_eq!(u.report(60_001).peak_per_unit, 2000);
        // Two windows on, the burst is forgotten; the last window's 7 remains.
        assert_eq!(u.report(120_000).peak_per_unit, 7);
        assert_eq!(u.report(180_000).peak_per_unit, 0);
    }

    #[test]
    fn an_exhausted_unit_counts_as_full() {
        let u = SequenceUse::new(&Layout::sonyflake()); // 256 per 10 ms
        u.record(5, 3);
        u.record_exhausted(5);
        u.record_exhausted(6);
        let r = u.report(6);
        assert_eq!((r.peak_per_unit, r.peak_fraction), (256, 1.0));
        assert_eq!((r.headroom_per_unit, r.units_exhausted), (0, 2));
        assert_eq!(r.limit_per_second, 25_600.0);
        assert_eq!(r.window_seconds, 60);
    }

    #[test]
    fn concurrent_records_keep_the_largest() {
        let u = std::sync::Arc::new(SequenceUse::new(&Layout::twitter()));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let u = u.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        u.record(i / 100, (i * 7 + t) % 4000);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().ok();
        }
        let want = (0..4u64)
            .flat_map(|t| (0..10_000u64).map(move |i| (i * 7 + t) % 4000))
            .max();
        assert_eq!(Some(u.report(99).peak_per_unit), want);
    }
}
