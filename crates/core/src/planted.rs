//! Bugs planted for the deterministic simulation (`crates/sim`): the perturbations exist only
//! with the `planted` feature, and are off unless the simulation switches one on for its thread.
//!
//! Each constant names one perturbation of real code (here, in `idmint-store`, or in the
//! simulation's model of the node); the names are always defined, so the simulation lists them
//! whatever its features. With the feature, `set` selects the active set for the calling
//! thread and `on` is what the perturbed code asks. A build without the feature contains no
//! switch and no perturbed path.

#[cfg(feature = "planted")]
use std::cell::Cell;

/// A give-back tail below the rebase floor is restored ([`crate::Buffer::take_back_tail`]).
pub const TAIL_BELOW_FLOOR: u64 = 1 << 0;
/// A failed request's put-back ignores the floor ([`crate::Buffer::put_back`]).
pub const PUTBACK_BELOW_FLOOR: u64 = 1 << 1;
/// A give-back tail is restored although ids were taken after its lease.
pub const TAIL_AFTER_TAKE: u64 = 1 << 2;
/// A refused put-back is not counted as burned (the accounting loses ids).
pub const BURN_UNCOUNTED: u64 = 1 << 3;
/// A new snowflake generator is anchored to the wall clock, ignoring `resume_after`.
pub const WALL_ANCHOR: u64 = 1 << 4;
/// The lease fencing check compares the token without the holder.
pub const TOKEN_WITHOUT_HOLDER: u64 = 1 << 5;
/// The authority's give-back is a blind write of the tail's start (TiDB#46444).
pub const GIVEBACK_NO_CAS: u64 = 1 << 6;
/// The node's hand-back at a clean stop reads a give-back with no known outcome as refused:
/// the tail is kept (parked, claimed, served again) instead of burned
/// (`idmint_node::supply::Supply::give_back`).
pub const GIVEBACK_UNKNOWN_KEPT: u64 = 1 << 7;
/// The node adopts the blocks its data directory kept at the last clean stop without claiming
/// them through the store (`idmint-node`'s `node/kept.rs`).
pub const KEPT_WITHOUT_CLAIM: u64 = 1 << 8;

#[cfg(feature = "planted")]
thread_local! {
    static ACTIVE: Cell<u64> = const { Cell::new(0) };
}

/// Switches on exactly the bugs in `mask` for this thread.
#[cfg(feature = "planted")]
pub fn set(mask: u64) {
    ACTIVE.with(|a| a.set(mask));
}

/// Whether `bug` is switched on for this thread.
#[cfg(feature = "planted")]
#[inline]
pub fn on(bug: u64) -> bool {
    ACTIVE.with(|a| a.get() & bug != 0)
}
