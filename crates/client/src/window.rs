//! The hot path of a sequence namespace: a window of ids carved from the namespace's core
//! [`Buffer`](idmint_core::Buffer), handed out lock-free, one `fetch_sub` per id.
//!
//! The window is one contiguous sub-block `[start, start + len * step)` that the namespace
//! (holding its mutex, the only writer) [`Window::install`]s after taking it from its buffer and
//! [`Window::retire`]s before taking the next one or giving the rest back. Readers
//! ([`Window::take`]) claim an id from the window slot's claim word.
//!
//! The claim word of a slot packs the window's generation (the low [`GEN_BITS`] bits of its
//! epoch) above a count of ids left (`REST_BITS` bits). [`Window::install`] writes the fields,
//! then stores `(generation, len)`; a claim is one `fetch_sub(1)` returning `(generation, r)`,
//! the id being `start + (len - r) * step`; [`Window::retire`] swaps the word to 0 (closed) and
//! learns how many ids were left. A claim therefore carries the window it was made in.
//!
//! Invariants (a reader never hands out an id twice, and the counts are exact):
//! - a claim `(g, r)` with `1 <= r <= MAX_LEN` was made while window `g` was open (install
//!   stored it, retire had not swapped it out), so it is one of that window's ids, made once,
//!   and retire counts it as claimed (not in the tail it returns). Any other claim value (the
//!   closed word, or a word decremented past 0, which borrows from the generation and leaves a
//!   count far above `MAX_LEN`) is no id and counted nowhere. Readers load the word first and
//!   claim only if it shows their window with ids left, so decrements past 0 are bounded by the
//!   number of readers in flight and never reach a valid-looking count;
//! - fields are rewritten only while the slot's word is closed (after the previous window's
//!   retire) and before the new generation is stored; a reader reads them after seeing the
//!   window active and before its claim, so a claim of its own generation `g` proves the fields
//!   it read are window `g`'s, and it hands out that id;
//! - a claim of another generation with a valid count (the reader was delayed across
//!   [`SLOTS`] installs, so its slot was recycled, between its load and its claim) is an id
//!   of a newer window that retire counts as claimed but that nobody hands out: the reader adds
//!   it to [`Window::lost`]. Hence, exactly, once no take is in flight: ids installed = ids
//!   handed out + ids in the retired tails + ids left in the active window + `lost`;
//! - windows are installed in the order the buffer hands out ids, so ids claimed later are
//!   larger: increasing per namespace per client (claims racing a window change are concurrent
//!   calls, and each claim is ordered by its `fetch_sub`);
//! - generations compare modulo `2^GEN_BITS`: a reader would have to stay between two of its
//!   instructions across `2^GEN_BITS / SLOTS` recycles of its slot for a wrong match.

use idmint_core::Block;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// Windows in rotation.
pub(crate) const SLOTS: usize = 4;

/// Bits of the claim word holding the count of ids left.
const REST_BITS: u32 = 24;
/// Bits of the claim word holding the generation.
const GEN_BITS: u32 = 64 - REST_BITS;
const REST_MASK: u64 = (1 << REST_BITS) - 1;
/// The longest window; [`Window::install`] takes at most this many ids of a block (the caller
/// asks for at most 65,536). Counts above it are decrements past 0, never a claim.
pub(crate) const MAX_LEN: u64 = 1 << 17;

fn generation(epoch: u64) -> u64 {
    epoch & ((1 << GEN_BITS) - 1)
}

fn unpack(word: u64) -> (u64, u64) {
    (word >> REST_BITS, word & REST_MASK)
}

/// One slot, on its own cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot {
    start: AtomicU64,
    step: AtomicU64,
    len: AtomicU64,
    /// `(generation << REST_BITS) | ids left`, 0 while closed.
    word: AtomicU64,
}

/// The active epoch, on its own cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Active(AtomicU64);

/// Claims a reader made but could not hand out, on its own cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Lost(AtomicU64);

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
    lost: Lost,
}

impl Window {
    /// An empty window (epoch 0, closed, no ids).
    pub(crate) fn new() -> Window {
        Window {
            active: Active::default(),
            slots: Default::default(),
            lost: Lost::default(),
        }
    }

    fn slot(&self, epoch: u64) -> &Slot {
        &self.slots[(epoch % SLOTS as u64) as usize]
    }

    /// The next id of the active window. Lock-free: five loads, one `fetch_sub`.
    #[inline]
    pub(crate) fn take(&self) -> Take {
        let epoch = self.active.0.load(SeqCst);
        let slot = self.slot(epoch);
        let start = slot.start.load(SeqCst);
        let step = slot.step.load(SeqCst);
        let len = slot.len.load(SeqCst);
        let gen = generation(epoch);
        let (seen, left) = unpack(slot.word.load(SeqCst));
        if seen != gen || left == 0 || left > MAX_LEN {
            return Take::Empty;
        }
        let (g, r) = unpack(slot.word.fetch_sub(1, SeqCst));
        if r == 0 || r > MAX_LEN {
            return Take::Empty; // no id: the window was used up or closed
        }
        if g == gen && r <= len {
            // r in 1..=len: inside the window's block, so no overflow.
            return Take::Id(start + (len - r) * step);
        }
        // An id of a newer window of this slot, counted claimed by its retire: never handed out.
        self.lost.0.fetch_add(1, SeqCst);
        Take::Empty
    }

    /// Ids left in the active window (0 if closed). Writer side.
    fn left(&self) -> u64 {
        let epoch = self.active.0.load(SeqCst);
        let (g, r) = unpack(self.slot(epoch).word.load(SeqCst));
        if g == generation(epoch) && r <= MAX_LEN {
            r
        } else {
            0
        }
    }

    /// Whether the active window has no id left. Writer side.
    pub(crate) fn is_used_up(&self) -> bool {
        self.left() == 0
    }

    /// Ids of the active window not claimed yet. Writer side; a snapshot for statistics.
    pub(crate) fn remaining(&self) -> u64 {
        self.left()
    }

    /// Claims made that became no id (see the module docs): burned, never handed out, and
    /// counted as taken by the windows. Exact once no take is in flight.
    pub(crate) fn lost(&self) -> u64 {
        self.lost.0.load(SeqCst)
    }

    /// Ends the active window: no claim made after this gets one of its ids. Returns the ids it
    /// did not hand out (as a block: a tail of the installed one), if any. Writer side (under the
    /// namespace's mutex).
    pub(crate) fn retire(&self) -> Option<Block> {
        let epoch = self.active.0.load(SeqCst);
        let slot = self.slot(epoch);
        let (g, r) = unpack(slot.word.swap(0, SeqCst));
        if g != generation(epoch) || r == 0 || r > MAX_LEN {
            return None;
        }
        let start = slot.start.load(SeqCst);
        let step = slot.step.load(SeqCst);
        let len = slot.len.load(SeqCst);
        let end = start + len * step;
        Block::new(end - r * step, end, step)
    }

    /// Makes `block` the active window. The active window must have been retired, and `block`
    /// hold at most [`MAX_LEN`] ids (the namespace takes windows of at most 65,536). Writer
    /// side (under the namespace's mutex).
    pub(crate) fn install(&self, block: Block) {
        debug_assert!(block.len() <= MAX_LEN);
        let epoch = self.active.0.load(SeqCst) + 1;
        let slot = self.slot(epoch);
        // Closed since its window's retire (stale readers may have decremented it: no claim).
        slot.word.store(0, SeqCst);
        slot.start.store(block.start(), SeqCst);
        slot.step.store(block.step(), SeqCst);
        slot.len.store(block.len(), SeqCst);
        slot.word
            .store((generation(epoch) << REST_BITS) | block.len(), SeqCst);
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

    /// Counts are exact: every id of every installed window is handed out to a reader, given
    /// back by a retire, or counted lost. Windows of 1 to 3 ids make window changes (and slot
    /// recycling under a descheduled reader) frequent. The previous window (claim counter plus
    /// epoch check) failed a run of 2M plain windows in about a second: 4 of 4M ids counted claimed, never handed
    /// out, and not counted anywhere else.
    #[test]
    fn counts_are_exact_under_racing_window_changes() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let w = Arc::new(Window::new());
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (w, stop) = (w.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(SeqCst) {
                        if let Take::Id(_) = w.take() {
                            n += 1;
                        }
                    }
                    n
                })
            })
            .collect();
        let (mut installed, mut given_back) = (0u64, 0u64);
        let mut next = 1u64;
        for i in 0..500_000u64 {
            let len = 1 + i % 3;
            w.install(block(next, next + len, 1));
            installed += len;
            next += len;
            for _ in 0..(i % 5) * 20 {
                std::hint::spin_loop();
            }
            if let Some(tail) = w.retire() {
                given_back += tail.len();
            }
        }
        stop.store(true, SeqCst);
        let handed: u64 = readers
            .into_iter()
            .map(|r| r.join().unwrap_or_else(|_| unreachable!()))
            .sum();
        let lost = w.lost();
        println!("handed {handed}, given back {given_back}, lost {lost} of {installed}");
        assert_eq!(
            handed + given_back + lost,
            installed,
            "handed {handed} given back {given_back} lost {lost}"
        );
    }
}
