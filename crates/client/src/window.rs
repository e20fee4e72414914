//! The hot path of a sequence namespace: a window of ids carved from the namespace's core
//! [`Buffer`](idmint_core::Buffer), handed out lock-free, one `fetch_add` per id.
//!
//! The window is one contiguous sub-block `[start, start + len * step)` that the namespace
//! (holding its mutex, the only writer) [`Window::install`]s after taking it from its buffer and
//! [`Window::retire`]s before taking the next one or giving the rest back. Readers
//! ([`Window::take`]) claim a number from the window slot's counter and turn it into an id.
//!
//! Invariants (a reader never sees a torn window, and no claim number is ever valid twice):
//! - windows rotate through [`SLOTS`] slots, one per install; a slot's fields are written only
//!   between a store of `u64::MAX` and a store of the window's epoch into the slot's `epoch`,
//!   and the slot becomes the active one only after; a reader reads the fields after seeing the
//!   window active and accepts its claim only if the slot still holds that epoch after the
//!   claim (every access is a `SeqCst` atomic, so a reader that saw any rewritten field, or
//!   claimed after the rewrite began, sees the mark or a newer epoch);
//! - a slot's claim counter `next` never goes down. The window's claims are the numbers in
//!   `[base, base + len)`, `base` being the counter when the window was installed;
//!   [`Window::retire`] adds `len` to the counter, so every later claim lies above the range,
//!   and learns how many claims were made. A claim in the range is thus made exactly once,
//!   while its window was active or before its retirement counted it. A reader that read an
//!   older window of a recycled slot (delayed across [`SLOTS`] installs) turns its claim into
//!   no id (it lies above that window's range); if the claim fell in the new window's range,
//!   that one id is never handed out (burned, as a lost answer is: never a duplicate);
//! - windows are installed in the order the buffer hands out ids, so ids claimed later are
//!   larger: increasing per namespace per client (claims racing a window change are concurrent
//!   calls, and each claim is ordered by its `fetch_add`).

use idmint_core::Block;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// Windows in rotation: a reader delayed across this many installs makes a claim no window
/// accepts (it retries), never a wrong one.
pub(crate) const SLOTS: usize = 4;

/// One slot, on its own cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot {
    /// The window's epoch, `u64::MAX` while its fields are being written.
    epoch: AtomicU64,
    start: AtomicU64,
    step: AtomicU64,
    /// The window's claim numbers are `[base, base + len)`.
    base: AtomicU64,
    len: AtomicU64,
    /// The claim counter; never goes down.
    next: AtomicU64,
}

/// The active epoch, on its own cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Active(AtomicU64);

/// What [`Window::take`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// An id.
    Id(u64),
    /// The window is used up (or a claim raced a window change): take the slow path.
    Empty,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Window {
    active: Active,
    slots: [Slot; SLOTS],
}

impl Window {
    /// An empty window (epoch 0, no ids).
    pub(crate) fn new() -> Window {
        let slots: [Slot; SLOTS] = Default::default();
        for slot in &slots[1..] {
            slot.epoch.store(u64::MAX, SeqCst);
        }
        Window {
            active: Active::default(),
            slots,
        }
    }

    fn slot(&self, epoch: u64) -> &Slot {
        &self.slots[(epoch % SLOTS as u64) as usize]
    }

    /// The next id of the active window. Lock-free: five loads, one `fetch_add`, one load.
    ///
    /// The fields are read after seeing the window active (so they are its own or a later
    /// window's of the slot) and accepted only if the slot still holds the window after the
    /// claim: a recycling writer marks the slot (`u64::MAX`) before rewriting it, so a reader
    /// that saw any rewritten field, or claimed after the rewrite began, sees the mark or the
    /// new epoch and gives up its claim (that id is burned, never handed out).
    #[inline]
    pub(crate) fn take(&self) -> Take {
        let epoch = self.active.0.load(SeqCst);
        let slot = self.slot(epoch);
        let start = slot.start.load(SeqCst);
        let step = slot.step.load(SeqCst);
        let base = slot.base.load(SeqCst);
        let len = slot.len.load(SeqCst);
        let k = slot.next.fetch_add(1, SeqCst).wrapping_sub(base);
        if k < len && slot.epoch.load(SeqCst) == epoch {
            // k < len: inside the window's block, so no overflow.
            Take::Id(start + k * step)
        } else {
            Take::Empty
        }
    }

    /// Whether the active window has no id left. Writer side.
    pub(crate) fn is_used_up(&self) -> bool {
        let slot = self.slot(self.active.0.load(SeqCst));
        slot.next.load(SeqCst).wrapping_sub(slot.base.load(SeqCst)) >= slot.len.load(SeqCst)
    }

    /// Ids of the active window not claimed yet. Writer side; a snapshot for statistics.
    pub(crate) fn remaining(&self) -> u64 {
        let slot = self.slot(self.active.0.load(SeqCst));
        let len = slot.len.load(SeqCst);
        len - slot
            .next
            .load(SeqCst)
            .wrapping_sub(slot.base.load(SeqCst))
            .min(len)
    }

    /// Ends the active window: no claim made after this gets one of its ids. Returns the ids it
    /// did not hand out (as a block: a tail of the installed one), if any. Writer side (under the
    /// namespace's mutex).
    pub(crate) fn retire(&self) -> Option<Block> {
        let slot = self.slot(self.active.0.load(SeqCst));
        let base = slot.base.load(SeqCst);
        let len = slot.len.load(SeqCst);
        let claimed = slot.next.fetch_add(len, SeqCst).wrapping_sub(base).min(len);
        // Make the window empty for good, even if `len` was 0 (nothing to give back then).
        slot.len.store(0, SeqCst);
        if claimed == len {
            return None;
        }
        let start = slot.start.load(SeqCst);
        let step = slot.step.load(SeqCst);
        let end = start + len * step;
        Block::new(start + claimed * step, end, step)
    }

    /// Makes `block` the active window. The active window must have been retired. Writer side
    /// (under the namespace's mutex).
    pub(crate) fn install(&self, block: Block) {
        let epoch = self.active.0.load(SeqCst) + 1;
        let slot = self.slot(epoch);
        slot.epoch.store(u64::MAX, SeqCst);
        slot.start.store(block.start(), SeqCst);
        slot.step.store(block.step(), SeqCst);
        slot.len.store(block.len(), SeqCst);
        slot.base.store(slot.next.load(SeqCst), SeqCst);
        slot.epoch.store(epoch, SeqCst);
        self.active.0.store(epoch, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(start: u64, end: u64, step: u64) -> Block {
        Block::new(start, end, step).unwrap_or_else(|| unreachable!())
    }

    #[test]
    fn hands_out_the_window_in_order_then_is_empty() {
        let w = Window::new();
        assert_eq!(w.take(), Take::Empty);
        assert!(w.is_used_up());
        assert_eq!(w.retire(), None);
        w.install(block(10, 20, 3)); // 10, 13, 16, 19
        let ids: Vec<_> = std::iter::from_fn(|| match w.take() {
            Take::Id(id) => Some(id),
            Take::Empty => None,
        })
        .collect();
        assert_eq!(ids, [10, 13, 16, 19]);
        assert!(w.is_used_up());
        assert_eq!(w.retire(), None);
    }

    #[test]
    fn retire_returns_the_unclaimed_tail_and_stops_claims() {
        let w = Window::new();
        for round in 0..10u64 {
            let start = 1000 * round + 1;
            w.install(block(start, start + 100, 1));
            assert_eq!(w.take(), Take::Id(start));
            assert_eq!(w.take(), Take::Id(start + 1));
            let tail = w.retire().unwrap_or_else(|| unreachable!());
            assert_eq!((tail.start(), tail.end()), (start + 2, start + 100));
            assert_eq!(w.take(), Take::Empty);
            assert_eq!(w.retire(), None, "a retired window gives nothing twice");
        }
    }

    #[test]
    fn threads_racing_installs_and_retires_never_get_an_id_twice() {
        use std::collections::HashSet;
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let w = Arc::new(Window::new());
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (w, stop) = (w.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while !stop.load(SeqCst) {
                        if let Take::Id(id) = w.take() {
                            got.push(id);
                        }
                    }
                    got
                })
            })
            .collect();
        // The writer: windows of 50 ids, retired at random points; what a retire returns is
        // "given back" and must never have been handed out.
        let mut given_back = Vec::new();
        let mut next = 1u64;
        for i in 0..20_000u64 {
            w.install(block(next, next + 50, 1));
            next += 50;
            for _ in 0..(i % 7) {
                std::hint::spin_loop();
            }
            if let Some(tail) = w.retire() {
                given_back.extend(tail.ids());
            }
        }
        stop.store(true, SeqCst);
        let mut seen = HashSet::new();
        for r in readers {
            let ids = r.join().unwrap_or_else(|_| unreachable!());
            assert!(ids.windows(2).all(|p| p[0] < p[1]), "increasing per thread");
            for id in ids {
                assert!(seen.insert(id), "{id} twice");
            }
        }
        for id in given_back {
            assert!(!seen.contains(&id), "{id} handed out and given back");
        }
    }
}
