//! One worker lease and the generator it drives, without IO: what a client's local snowflake
//! generator issues under a lease, and when it must stop (docs/design.md invariant 4, with the
//! rules of [`idmint_core::lease_window`] the nodes' workers use).
//!
//! Invariants:
//! - the generator starts above the lease's floor and above every timestamp an earlier
//!   generation of this handle issued, whatever the wall clock reads (a clock stepped back, a
//!   lease lost and taken anew);
//! - it issues nothing until a renewal recorded a floor ahead ([`Generation::renewed`]), and
//!   then only below that floor and before the lease's send time + TTL − margin, on the
//!   generator's own clock (monotonic, anchored to wall time at start);
//! - [`Generation::stop`] ends issuing for good; [`Generation::issued_below_ms`] is above
//!   every id issued, the floor a release records.

use idmint_core::lease_window::{issued_below_ms, limit_after_renewal, resume_after};
use idmint_core::{Clock, Layout, NextIdError, SnowflakeGenerator};
use std::sync::Arc;
use std::time::Duration;

/// A worker lease as the nodes granted it (its holder carries the secret the node added).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) group: String,
    pub(crate) worker: u64,
    pub(crate) token: u64,
    pub(crate) floor_unix_ms: u64,
    pub(crate) ttl: Duration,
    pub(crate) holder: String,
}

/// The clock a local generator reads: the process-wide coarse clock unless a test injects one.
#[derive(Clone)]
pub(crate) struct LocalClock(pub(crate) Arc<dyn Clock>);

impl std::fmt::Debug for LocalClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalClock")
    }
}

impl Clock for LocalClock {
    #[inline]
    fn wall_nanos(&self) -> u64 {
        self.0.wall_nanos()
    }
    #[inline]
    fn monotonic_nanos(&self) -> u64 {
        self.0.monotonic_nanos()
    }
    #[inline]
    fn coarse_monotonic_nanos(&self) -> u64 {
        self.0.coarse_monotonic_nanos()
    }
    #[inline]
    fn coarse_wall_nanos(&self) -> u64 {
        self.0.coarse_wall_nanos()
    }
}

/// A lease and its generator.
#[derive(Debug)]
pub(crate) struct Generation {
    pub(crate) lease: Lease,
    generator: SnowflakeGenerator<LocalClock>,
}

impl Generation {
    /// A generation for `lease`, issuing nothing until renewed. `own_floor_ms`: every id an
    /// earlier generation of this handle issued lies below it (0 for the first).
    pub(crate) fn new(
        layout: Layout,
        lease: Lease,
        clock: LocalClock,
        own_floor_ms: u64,
    ) -> Result<Generation, String> {
        let floor = lease.floor_unix_ms.max(own_floor_ms);
        let generator =
            SnowflakeGenerator::new(layout, lease.worker, clock, resume_after(&layout, floor))
                .map_err(|e| e.to_string())?;
        generator.set_limit(0);
        Ok(Generation { lease, generator })
    }

    /// The next id, spinning through a used-up time unit; `BeyondLimit` once the lease no
    /// longer covers the time, `TimeExhausted` at the end of the layout's time.
    #[inline]
    pub(crate) fn next_id(&self) -> Result<u64, NextIdError> {
        loop {
            match self.generator.next_id() {
                Err(NextIdError::SequenceExhausted { .. }) => std::hint::spin_loop(),
                other => return other,
            }
        }
    }

    /// The generator's time now (ns since the Unix epoch): a renewal's send time.
    pub(crate) fn now_unix_nanos(&self) -> u64 {
        self.generator.now_unix_nanos()
    }

    /// A renewal sent at `sent_at` recorded `floor_unix_ms` and was granted `ttl`: issue up to
    /// what it covers, keeping `margin` before the lease could expire.
    pub(crate) fn renewed(
        &self,
        sent_at: u64,
        floor_unix_ms: u64,
        ttl: Duration,
        margin: Duration,
    ) {
        let layout = *self.generator.layout();
        self.generator.set_limit(limit_after_renewal(
            &layout,
            sent_at,
            floor_unix_ms,
            ttl,
            margin,
        ));
    }

    /// Stops issuing for good.
    pub(crate) fn stop(&self) {
        self.generator.set_limit(0);
    }

    /// Above every id issued (or the floor it started above), ms since the Unix epoch.
    pub(crate) fn issued_below_ms(&self) -> u64 {
        let layout = self.generator.layout();
        self.generator
            .last_timestamp()
            .map_or(0, |ts| issued_below_ms(layout, ts))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_core::ManualClock;

    const START_MS: u64 = 1_800_000_000_000;
    const TTL: Duration = Duration::from_secs(10);
    const MARGIN: Duration = Duration::from_secs(2);

    fn lease(worker: u64, floor: u64) -> Lease {
        Lease {
            group: "events".into(),
            worker,
            token: 1,
            floor_unix_ms: floor,
            ttl: TTL,
            holder: "test lease 0".into(),
        }
    }

    fn setup(floor: u64, own: u64) -> (Arc<ManualClock>, Generation) {
        let clock = Arc::new(ManualClock::at_unix_millis(START_MS));
        let g = Generation::new(
            Layout::twitter(),
            lease(3, floor),
            LocalClock(clock.clone()),
            own,
        )
        .unwrap();
        (clock, g)
    }

    fn timestamp_ms(id: u64) -> u64 {
        Layout::twitter().decode(id).unwrap().unix_millis()
    }

    #[test]
    fn nothing_is_issued_before_the_first_renewal() {
        let (_, g) = setup(0, 0);
        assert!(matches!(g.next_id(), Err(NextIdError::BeyondLimit { .. })));
    }

    #[test]
    fn issuing_stops_a_margin_before_the_lease_could_expire() {
        let (clock, g) = setup(0, 0);
        let sent = g.now_unix_nanos();
        g.renewed(sent, START_MS + 60_000, TTL, MARGIN);
        let first = g.next_id().unwrap();
        assert_eq!(Layout::twitter().decode(first).unwrap().parts.node, 3);
        clock.advance_millis(7_999);
        let last = g.next_id().unwrap();
        assert!(last > first && timestamp_ms(last) < START_MS + 8_000);
        clock.advance_millis(1);
        assert!(matches!(g.next_id(), Err(NextIdError::BeyondLimit { .. })));
        // A renewal sent now covers the next TTL − margin again.
        g.renewed(g.now_unix_nanos(), START_MS + 60_000, TTL, MARGIN);
        assert!(g.next_id().unwrap() > last);
    }

    #[test]
    fn issuing_stops_below_the_recorded_floor() {
        let (clock, g) = setup(0, 0);
        g.renewed(g.now_unix_nanos(), START_MS + 3_000, TTL, MARGIN);
        clock.advance_millis(2_999);
        assert!(timestamp_ms(g.next_id().unwrap()) < START_MS + 3_000);
        clock.advance_millis(1);
        assert!(matches!(g.next_id(), Err(NextIdError::BeyondLimit { .. })));
    }

    #[test]
    fn a_clock_stepped_back_never_issues_below_the_floor_or_earlier_ids() {
        let (clock, g) = setup(START_MS - 100, 0);
        g.renewed(g.now_unix_nanos(), START_MS + 5_000, TTL, MARGIN);
        let before = g.next_id().unwrap();
        clock.step_wall_millis(-30_000);
        let after = g.next_id().unwrap();
        assert!(
            after > before,
            "the wall clock stepped back 30 s moved ids back"
        );
        // A new generation (a lease lost and taken anew, another worker, a lower floor) with
        // the wall clock 30 s behind: still above everything the first issued.
        let own = g.issued_below_ms();
        assert!(own > timestamp_ms(after));
        let next = Generation::new(
            Layout::twitter(),
            lease(4, 0),
            LocalClock(clock.clone()),
            own,
        )
        .unwrap();
        clock.advance_millis(40_000); // past the floor the first generation issued up to
        next.renewed(next.now_unix_nanos(), u64::MAX / 1_000_000, TTL, MARGIN);
        assert!(timestamp_ms(next.next_id().unwrap()) >= own);
    }

    #[test]
    fn stop_is_for_good() {
        let (_, g) = setup(0, 0);
        g.renewed(g.now_unix_nanos(), START_MS + 5_000, TTL, MARGIN);
        g.next_id().unwrap();
        g.stop();
        assert!(matches!(g.next_id(), Err(NextIdError::BeyondLimit { .. })));
    }
}
