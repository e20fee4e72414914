//! The rules that tie a snowflake generator to a worker lease, shared by every holder of one (a
//! node's worker, a client's local generator): where a generator starts from the lease's time
//! floor, up to which timestamp a renewal lets it issue, the floor its release records, and the
//! layout text the lease group's layout lock compares (docs/design.md invariant 4).
//!
//! Invariants:
//! - a generator started with [`resume_after`] of a floor issues only timestamps whose unit
//!   starts at or after the floor (every earlier holder issued below it);
//! - [`limit_after_renewal`] is at most the unit holding `floor - 1 ns` plus one (nothing at or
//!   above the recorded floor) and at most the unit of `sent_at + ttl - margin` (nothing after
//!   the lease could have expired, the TTL counted from before the renewal was sent);
//! - [`issued_below_ms`] of a generator's last timestamp is above every timestamp it issued, so
//!   a release recording it leaves the next holder above them;
//! - [`lock_text`] names every field that changes which id a time, node and sequence make: two
//!   holders with one text issue the same ids from the same parts, two texts never share a pool.

use crate::{FieldOrder, Layout};
use std::time::Duration;

/// The `resume_after` for a generator that must issue only timestamps whose unit starts at or
/// after `floor_unix_ms`: the unit before the first such unit counts as used. `None` when the
/// floor is at or before the epoch's first unit (nothing to resume after).
pub fn resume_after(layout: &Layout, floor_unix_ms: u64) -> Option<u64> {
    let floor_nanos = floor_unix_ms.saturating_mul(1_000_000);
    layout.timestamp_at(floor_nanos).and_then(|ts| {
        let first = if layout.unix_nanos_of(ts) < floor_nanos {
            ts + 1
        } else {
            ts
        };
        first.checked_sub(1)
    })
}

/// The generator limit (layout units: no timestamp at or above it) a renewal allows: the
/// renewal was sent at `sent_at_unix_nanos` on the holder's generator clock, recorded the floor
/// `floor_unix_ms`, and was granted `ttl`; `margin` is kept before the authority may let the
/// lease go.
pub fn limit_after_renewal(
    layout: &Layout,
    sent_at_unix_nanos: u64,
    floor_unix_ms: u64,
    ttl: Duration,
    margin: Duration,
) -> u64 {
    let floor_nanos = floor_unix_ms.saturating_mul(1_000_000);
    // Units starting before the floor may be issued.
    let floor_limit = units_at(layout, floor_nanos.saturating_sub(1)).saturating_add(1);
    let expiry = sent_at_unix_nanos
        .saturating_add(nanos(ttl))
        .saturating_sub(nanos(margin));
    floor_limit.min(units_at(layout, expiry))
}

/// A time (ms since the Unix epoch) above every id of timestamp `last_timestamp` or earlier:
/// the start of the next unit, rounded up to a millisecond.
pub fn issued_below_ms(layout: &Layout, last_timestamp: u64) -> u64 {
    layout
        .unix_nanos_of(last_timestamp.saturating_add(1))
        .div_ceil(1_000_000)
}

/// The layout as a lease group records it (the layout lock).
pub fn lock_text(layout: &Layout) -> String {
    let s = layout.spec();
    format!(
        "timestamp_bits={} node_bits={} sequence_bits={} time_unit_ns={} epoch_unix_ms={} order={} max_bits={}",
        s.timestamp_bits,
        s.node_bits,
        s.sequence_bits,
        layout.unit_nanos(),
        s.epoch_unix_ms,
        match s.order {
            FieldOrder::NodeThenSequence => "node_then_sequence",
            FieldOrder::SequenceThenNode => "sequence_then_node",
        },
        s.max_bits,
    )
}

/// Layout units since the epoch at `unix_nanos`, 0 before the epoch.
fn units_at(layout: &Layout, unix_nanos: u64) -> u64 {
    unix_nanos.saturating_sub(layout.epoch_nanos()) / layout.unit_nanos()
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{ManualClock, SnowflakeGenerator};

    const MS: u64 = 1_000_000;

    #[test]
    fn a_generator_resumed_at_a_floor_issues_nothing_below_it() {
        let layout = Layout::sonyflake(); // 10 ms units: floors inside a unit
        let floor = layout.spec().epoch_unix_ms + 12_345;
        let clock = ManualClock::at_unix_millis(floor - 5_000); // clock behind the floor
        let g = SnowflakeGenerator::new(layout, 1, clock, resume_after(&layout, floor)).unwrap();
        g.set_limit(u64::MAX);
        // The clock reads 5 s behind the floor: the generator's time starts at the floor
        // (its anchor), so the first id's unit starts at or after it, never below.
        let id = g.next_id().unwrap();
        let ts = layout.decode(id).unwrap().parts.timestamp;
        assert!(layout.unix_nanos_of(ts) >= floor * MS);
        assert_eq!(Some(ts), resume_after(&layout, floor).map(|t| t + 1));
    }

    #[test]
    fn the_limit_stops_below_the_floor_and_before_expiry() {
        let layout = Layout::twitter();
        let sent = (layout.spec().epoch_unix_ms + 1_000_000) * MS;
        let ttl = Duration::from_secs(10);
        let margin = Duration::from_secs(2);
        // Floor far ahead: the expiry decides (sent + 8 s).
        let far = limit_after_renewal(&layout, sent, u64::MAX / MS, ttl, margin);
        assert_eq!(layout.unix_nanos_of(far), sent + 8_000 * MS);
        // Floor 3 s ahead: nothing at or above it.
        let floor_ms = sent / MS + 3_000;
        let near = limit_after_renewal(&layout, sent, floor_ms, ttl, margin);
        assert_eq!(layout.unix_nanos_of(near), floor_ms * MS);
        // A margin above the TTL allows nothing at or after the send.
        let none = limit_after_renewal(&layout, sent, floor_ms, ttl, ttl * 2);
        assert!(layout.unix_nanos_of(none) <= sent - 10_000 * MS);
    }

    #[test]
    fn issued_below_is_above_the_last_unit() {
        let layout = Layout::sonyflake();
        let below = issued_below_ms(&layout, 7);
        assert!(below * MS >= layout.unix_nanos_of(8));
        assert!(below * MS > layout.unix_nanos_of(7));
    }

    #[test]
    fn lock_text_differs_for_every_field() {
        let base = lock_text(&Layout::twitter());
        for other in [
            Layout::instagram(),
            Layout::sonyflake(),
            Layout::discord(),
            Layout::js53(),
        ] {
            assert_ne!(lock_text(&other), base);
        }
        assert_eq!(
            base,
            "timestamp_bits=41 node_bits=10 sequence_bits=12 time_unit_ns=1000000 \
             epoch_unix_ms=1288834974657 order=node_then_sequence max_bits=63"
        );
    }
}
