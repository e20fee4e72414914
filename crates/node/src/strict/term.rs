//! A leader's term: the time during which its answers may be served.
//!
//! Invariant: an answer is served only if the node's monotonic clock, read *after* its ids were
//! taken, is before the term's deadline, and the deadline is at most the time the latest
//! successful acquisition or renewal of the leader lease was *sent*, plus the TTL the authority
//! granted, minus the safety margin. The authority counts the TTL from when it *received* that
//! request, so every served answer was taken before the authority could let another node lead
//! (provided the two clocks' rates differ by less than the margin over one TTL). A new leader
//! reserves above every block reserved before it leads, so its ids are above every answer an
//! earlier term served.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// One term of this node as a namespace's leader.
#[derive(Debug)]
pub struct Term {
    token: u64,
    /// Monotonic nanoseconds; answers taken at or after it are not served.
    deadline: AtomicU64,
    ended: AtomicBool,
}

/// The deadline a lease request sent at `sent` (monotonic nanoseconds) buys: `ttl` minus
/// `margin` later (`sent` itself when the margin eats the TTL).
pub fn deadline_after(sent: u64, ttl: Duration, margin: Duration) -> u64 {
    let live = ttl.saturating_sub(margin);
    sent.saturating_add(u64::try_from(live.as_nanos()).unwrap_or(u64::MAX))
}

impl Term {
    /// A term under the lease of fencing token `token`, valid until `deadline`.
    pub fn new(token: u64, deadline: u64) -> Term {
        Term {
            token,
            deadline: AtomicU64::new(deadline),
            ended: AtomicBool::new(false),
        }
    }

    /// The lease's fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// A renewal succeeded: valid until `deadline` if that is later (a renewal answered late
    /// never shortens it: the authority extended the lease from when it received it).
    pub fn extend(&self, deadline: u64) {
        self.deadline.fetch_max(deadline, Ordering::AcqRel);
    }

    /// The term is over for good (lease lost, released, node stopping).
    pub fn end(&self) {
        self.ended.store(true, Ordering::Release);
    }

    /// Whether an answer taken at `now` (monotonic nanoseconds) may be served.
    pub fn valid_at(&self, now: u64) -> bool {
        !self.ended.load(Ordering::Acquire) && now < self.deadline.load(Ordering::Acquire)
    }

    /// Nanoseconds left at `now` (0 once invalid).
    pub fn left_at(&self, now: u64) -> u64 {
        if self.ended.load(Ordering::Acquire) {
            return 0;
        }
        self.deadline.load(Ordering::Acquire).saturating_sub(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_ends_at_its_deadline_and_for_good() {
        let d = deadline_after(1_000, Duration::from_nanos(500), Duration::from_nanos(100));
        assert_eq!(d, 1_400);
        let t = Term::new(7, d);
        assert!(t.valid_at(1_399));
        assert!(!t.valid_at(1_400));
        t.extend(1_300); // a late answer never shortens the term
        assert!(t.valid_at(1_399));
        t.extend(2_000);
        assert!(t.valid_at(1_999));
        assert_eq!(t.left_at(1_500), 500);
        t.end();
        assert!(!t.valid_at(1_500));
        assert_eq!(t.left_at(1_500), 0);
    }

    #[test]
    fn a_margin_larger_than_the_ttl_leaves_no_time() {
        assert_eq!(
            deadline_after(10, Duration::from_nanos(5), Duration::from_nanos(9)),
            10
        );
    }
}
