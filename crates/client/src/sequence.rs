//! A sequence namespace's ids on the client: the core [`Buffer`] (the same buffer, refill
//! policy and demand sizing as a node's) fed with blocks leased from a node over gRPC `Block`,
//! and a lock-free [`Window`] carved from it for the hot path.
//!
//! Invariants (docs/design.md):
//! - (1, transitively) only ids of blocks a node returned are handed out, and only blocks that
//!   are blocks of the namespace: its step, one of the residue classes the node's authority
//!   grants (`SequenceSettings.residues`), within its width ([`SpecCheck`]);
//! - ids leave in increasing order per residue class: the buffer refuses a block not above
//!   every id it held of its class, and a block from another node that starts below them
//!   (two nodes on one store, after a failover) is cut to the part above, the rest burned,
//!   never served; every take from the buffer (a window, a batch, the close) first retires the
//!   window, so the window's unclaimed tail goes back in front ([`Buffer::take_back_tail`]) and
//!   nothing is handed out of order;
//! - (2, 3) `close` stops using the buffer, then hands the unused tail of the newest block back
//!   to the node that leased it, with the lease (`GiveBack`), once; older unused blocks, and a
//!   tail the node refuses, are burned, never used again;
//! - the mutex is a `std::sync::Mutex` held for buffer bookkeeping only, never across `.await`;
//!   the hot path ([`SequenceIds::try_next`]) takes no lock while the window has ids.

use crate::error::ClientError;
use crate::nodes::{IntoClientError, Nodes};
use crate::window::{Take, Window};
use idmint_core::buffer::{PutBack, Taken};
use idmint_core::{Block, Buffer, BufferError, BufferPolicy, Width};
use idmint_proto::v1 as proto;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// What a block must be to belong to the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpecCheck {
    pub(crate) step: u64,
    pub(crate) residues: Vec<u64>,
    /// Ids are at most this.
    pub(crate) max_id: u64,
}

impl SpecCheck {
    /// From a node's description of a sequence namespace.
    pub(crate) fn from_settings(settings: &proto::SequenceSettings) -> Result<Self, ClientError> {
        let width = Width::from_bits(settings.width)
            .ok_or_else(|| ClientError::node("the node described an unknown width"))?;
        if settings.step == 0 {
            return Err(ClientError::node("the node described a step of 0"));
        }
        let mut residues = settings.residues.clone();
        if residues.is_empty() {
            residues.push(settings.offset);
        }
        Ok(SpecCheck {
            step: settings.step,
            residues,
            max_id: width.max_id(),
        })
    }

    /// `leased` as a block of the namespace.
    pub(crate) fn block(&self, leased: &proto::LeasedBlock) -> Result<Block, ClientError> {
        let block = Block::new(leased.start, leased.end, leased.step)
            .filter(|b| {
                b.step() == self.step
                    && self.residues.contains(&(b.start() % b.step()))
                    && b.last() <= self.max_id
            })
            .ok_or_else(|| {
                ClientError::node(format!(
                    "the node granted [{}, {}) step {}: not a block of the namespace; not used",
                    leased.start, leased.end, leased.step
                ))
            })?;
        Ok(block)
    }
}

/// The newest block leased, while its tail may still go back.
#[derive(Debug, Clone, Copy)]
struct Lease {
    block: Block,
    lease: u64,
    node: usize,
}

#[derive(Debug)]
struct Inner {
    buffer: Buffer,
    /// The take through which the active window left the buffer.
    window_lease: Option<Taken>,
    newest: Option<Lease>,
    check: SpecCheck,
    closed: bool,
    /// Ids of granted blocks never used because they lay below ids already held.
    discarded: u64,
    /// A taker found the buffer empty: refill even if the level check would not.
    shortfall: bool,
    /// Ids of [`Chunk`] tails that could not go back (their handle dropped after the close):
    /// counted served when the chunk was taken, burned now.
    chunk_tails_burned: u64,
}

/// A sequence namespace's ids. See the module docs.
#[derive(Debug)]
pub(crate) struct SequenceIds {
    window: Window,
    inner: Mutex<Inner>,
}

/// A run of ids owned by one [`LocalIds`](crate::LocalIds): taken from the buffer as one block
/// (like a window), with the take that records it, so its unused tail can go back.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) block: Block,
    pub(crate) lease: Taken,
}

/// What one refill round did.
#[derive(Debug)]
pub(crate) enum Refilled {
    /// Nothing was wanted.
    Idle,
    /// A block arrived.
    Filled,
    /// The node failed.
    Failed(ClientError),
}

/// What `close` has to give back: the tail, the node and the lease; and the ids burned already.
#[derive(Debug)]
pub(crate) struct Tail {
    block: Block,
    lease: u64,
    node: usize,
}

impl SequenceIds {
    pub(crate) fn new(policy: BufferPolicy, check: SpecCheck) -> SequenceIds {
        SequenceIds {
            window: Window::new(),
            inner: Mutex::new(Inner {
                buffer: Buffer::new(policy),
                window_lease: None,
                newest: None,
                check,
                closed: false,
                discarded: 0,
                shortfall: false,
                chunk_tails_burned: 0,
            }),
        }
    }

    /// The lock, taken over if a holder panicked (every critical section leaves the buffer
    /// consistent: its methods do not panic halfway).
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next id, without waiting; `None` when the buffer is empty (or closed). `wake` is
    /// called when the refill task should look.
    #[inline]
    pub(crate) fn try_next(&self, wake: impl Fn()) -> Option<u64> {
        loop {
            if let Take::Id(id) = self.window.take() {
                return Some(id);
            }
            let mut inner = self.lock();
            if inner.closed {
                return None;
            }
            if !self.window.is_used_up() {
                continue; // another thread installed a window meanwhile
            }
            let chunk = self.carve(&mut inner, &wake)?;
            self.window.install(chunk.block);
            inner.window_lease = Some(chunk.lease);
        }
    }

    /// The window retired, then one block of a window's length taken from the buffer, with the
    /// take that records it: the next window, or a [`Chunk`]. `None` when the buffer is empty
    /// (a refill is then due whatever the level says). `wake` is called when the refill task
    /// should look.
    fn carve(&self, inner: &mut Inner, wake: &impl Fn()) -> Option<Chunk> {
        retire_window(&self.window, inner);
        let len = window_len(&inner.buffer);
        let mut lease = Taken::new();
        let got = inner.buffer.take_block_for(&mut lease, len);
        if inner.buffer.wants_refill() {
            wake();
        }
        match got {
            Some(block) => Some(Chunk { block, lease }),
            None => {
                inner.shortfall = true;
                wake();
                None
            }
        }
    }

    /// A chunk for one owner (a [`LocalIds`](crate::LocalIds)): the window retired first, then
    /// one block of a window's length taken from the buffer, so its ids follow every id handed
    /// out before. `None` when the buffer is empty or closed (`wake` is called, as
    /// [`SequenceIds::try_next`] does). The chunk's ids count as served from here on.
    pub(crate) fn take_chunk(&self, wake: impl Fn()) -> Option<Chunk> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        self.carve(&mut inner, &wake)
    }

    /// The unused `tail` of a chunk taken through `lease`: back in front of the buffer if
    /// nothing was taken from it since (the window retired first, as for every take), else
    /// burned ([`Buffer::take_back_tail`]); burned too once the namespace is closed (its tail
    /// went to the node already; nothing may enter the buffer again).
    pub(crate) fn return_chunk(&self, lease: &Taken, tail: Block) {
        let mut inner = self.lock();
        if inner.closed {
            inner.chunk_tails_burned += tail.len();
            return;
        }
        retire_window(&self.window, &mut inner);
        if inner.buffer.take_back_tail(lease, tail).is_none() {
            // Not a tail of the chunk: a caller's bug. Never restored, so counted burned.
            debug_assert!(false, "a chunk's tail that is not its tail");
            inner.chunk_tails_burned += tail.len();
        }
    }

    /// Takes up to `max` ids into `taken` (the window retired first, so they follow every id
    /// handed out before). Returns whether the namespace is closed.
    pub(crate) fn take_into(&self, taken: &mut Taken, max: u64, wake: impl Fn()) -> bool {
        let mut inner = self.lock();
        if inner.closed {
            return true;
        }
        retire_window(&self.window, &mut inner);
        inner.buffer.take_for(taken, max);
        if taken.len() < max {
            inner.shortfall = true;
            wake();
        } else if inner.buffer.wants_refill() {
            wake();
        }
        false
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Gives a failed batch's ids back in front (or burns them if others took since); burns
    /// them once the namespace is closed (nothing enters a closed buffer, so its stats never
    /// show ids buffered after `close`).
    pub(crate) fn put_back(&self, taken: Taken) -> PutBack {
        let mut inner = self.lock();
        if inner.closed {
            return PutBack::Burned(inner.buffer.burn_taken(taken));
        }
        inner.buffer.put_back(taken)
    }

    /// One refill round: if the buffer wants a block (below its low-water mark, or a taker
    /// found it empty), one `Block` call across the nodes.
    pub(crate) async fn refill(&self, name: &str, nodes: &Nodes, now_nanos: u64) -> Refilled {
        let count = {
            let mut inner = self.lock();
            if inner.closed {
                return Refilled::Idle;
            }
            let count = match inner.buffer.start_refill(now_nanos) {
                Some(count) => Some(count),
                None if inner.shortfall => inner.buffer.force_refill(now_nanos),
                None => None,
            };
            match count {
                Some(count) => count,
                None => return Refilled::Idle,
            }
        };
        let request = proto::BlockRequest {
            namespace: name.to_owned(),
            count: Some(count),
            min_start: None,
            extends: None,
        };
        let answer = nodes
            .call(|mut c| {
                let request = request.clone();
                async move { c.block(request).await }
            })
            .await;
        let mut inner = self.lock();
        let (node, leased) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                inner.buffer.refill_failed();
                return Refilled::Failed(e.into_client_error(name));
            }
        };
        let block = match inner.check.block(&leased) {
            Ok(block) => block,
            Err(e) => {
                inner.buffer.refill_failed();
                return Refilled::Failed(e);
            }
        };
        inner.shortfall = false;
        accept(&mut inner, block, leased.lease, node);
        Refilled::Filled
    }

    /// A block got while setting the namespace up (the `Block` that created it on the node).
    pub(crate) fn first_block(&self, block: Block, lease: u64, node: usize) {
        accept(&mut self.lock(), block, lease, node);
    }

    /// Stops handing out ids and takes the newest block's unused tail out of the buffer, for
    /// `close` to give back (outside the lock). Older unused ids are burned.
    pub(crate) fn begin_close(&self) -> Option<Tail> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        inner.closed = true;
        retire_window(&self.window, &mut inner);
        let tail = inner.buffer.take_unused_tail()?;
        let newest = inner.newest.take();
        let Some(newest) = newest.filter(|n| {
            n.lease != 0 && n.block.end() == tail.end() && n.block.step() == tail.step()
        }) else {
            inner.buffer.record_burned(tail.len());
            return None;
        };
        // A tail that began in an older block (contiguous blocks merge) goes back from the
        // newest block's start only; the rest is burned.
        let part = if tail.start() >= newest.block.start() {
            tail
        } else {
            newest.block
        };
        inner.buffer.record_burned(tail.len() - part.len());
        Some(Tail {
            block: part,
            lease: newest.lease,
            node: newest.node,
        })
    }

    /// `GiveBack` of `tail` to the node that leased it (that node only: the lease is its).
    /// Returns how many ids went back; the rest are burned.
    pub(crate) async fn give_back(&self, name: &str, nodes: &Nodes, tail: Tail) -> u64 {
        let request = proto::GiveBackRequest {
            namespace: name.to_owned(),
            start: tail.block.start(),
            end: tail.block.end(),
            step: tail.block.step(),
            lease: tail.lease,
        };
        let answer = nodes
            .call_one(
                tail.node,
                &|mut c: idmint_proto::v1::idmint_client::IdmintClient<_>| {
                    let request = request.clone();
                    async move { c.give_back(request).await }
                },
            )
            .await;
        // Refused, or the answer was lost: either way never used again (burned).
        let given = matches!(answer, Ok(ref a) if a.given_back);
        let mut inner = self.lock();
        if given {
            inner.buffer.record_given_back(tail.block.len());
            tail.block.len()
        } else {
            inner.buffer.record_burned(tail.block.len());
            0
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self) -> SequenceStats {
        let inner = self.lock();
        let in_window = self.window.remaining();
        // Claims that raced a window change and became no id (window.rs): the buffer counts
        // them served; they were burned.
        let lost = self.window.lost();
        let s = inner.buffer.stats();
        let tails = inner.chunk_tails_burned;
        SequenceStats {
            buffered: inner.buffer.buffered() + in_window,
            served: s.served.saturating_sub(in_window + lost + tails),
            burned: s.burned + inner.discarded + lost + tails,
            given_back: s.given_back,
            refills: s.refills,
            demand_per_sec: inner.buffer.demand_per_sec(),
            block_size: inner.buffer.target_block(),
        }
    }
}

/// Counters of a sequence namespace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SequenceStats {
    pub(crate) buffered: u64,
    pub(crate) served: u64,
    pub(crate) burned: u64,
    pub(crate) given_back: u64,
    pub(crate) refills: u64,
    pub(crate) demand_per_sec: f64,
    pub(crate) block_size: u64,
}

/// Puts `block` in the buffer; a block starting at or below ids already held of its class (from
/// another node) is cut to the part above them, the rest counted as discarded.
fn accept(inner: &mut Inner, block: Block, lease: u64, node: usize) {
    let kept = match inner.buffer.refill_done(block) {
        Ok(()) => Some(block),
        Err(BufferError::OutOfOrder { start, highest }) => {
            let below = (highest - start) / block.step() + 1;
            match block.split_first(below) {
                (dropped, Some(rest)) => {
                    inner.discarded += dropped.len();
                    inner.buffer.push(rest).ok().map(|()| rest)
                }
                (dropped, None) => {
                    inner.discarded += dropped.len();
                    None
                }
            }
        }
        Err(_) => {
            inner.discarded += block.len();
            None
        }
    };
    // The node's newest lease is this block now: an older one can no longer go back.
    inner.newest = kept.map(|block| Lease { block, lease, node });
}

/// Retires the active window and puts its unclaimed tail back in front of the buffer.
fn retire_window(window: &Window, inner: &mut Inner) {
    let tail = window.retire();
    let lease = inner.window_lease.take();
    if let (Some(tail), Some(lease)) = (tail, lease) {
        // Nothing was taken from the buffer since the window (every take retires it first), so
        // the tail goes back in front; were it not so, the buffer would burn it.
        let _ = inner.buffer.take_back_tail(&lease, tail);
    }
}

/// How many ids one window takes from the buffer: an eighth of a block, 1 to 65,536, so the
/// lock is taken rarely at any rate and a window holds little of the buffer.
fn window_len(buffer: &Buffer) -> u64 {
    (buffer.target_block() / 8).clamp(1, 65_536)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leased(start: u64, end: u64, step: u64) -> proto::LeasedBlock {
        proto::LeasedBlock {
            start,
            end,
            step,
            lease: 7,
            lease_start: start,
        }
    }

    #[test]
    fn only_blocks_of_the_namespace_are_used() {
        let check = SpecCheck {
            step: 4,
            residues: vec![1, 3],
            max_id: (1 << 31) - 1,
        };
        assert!(check.block(&leased(1, 41, 4)).is_ok());
        assert!(check.block(&leased(3, 43, 4)).is_ok());
        for bad in [
            leased(2, 42, 4),                  // another residue class
            leased(1, 41, 2),                  // another step
            leased(5, 5, 4),                   // empty
            leased((1 << 31) - 3, 1 << 32, 4), // beyond the width
        ] {
            assert!(check.block(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_block_below_the_ids_held_is_cut_to_the_part_above() {
        let policy = BufferPolicy::new(idmint_core::BufferConfig {
            sizing: idmint_core::Sizing::Fixed(100),
            ..Default::default()
        })
        .unwrap_or_else(|_| unreachable!());
        let ids = SequenceIds::new(
            policy,
            SpecCheck {
                step: 1,
                residues: vec![0],
                max_id: u64::MAX >> 1,
            },
        );
        let block = |s, e| Block::new(s, e, 1).unwrap_or_else(|| unreachable!());
        ids.first_block(block(100, 200), 1, 0);
        // Another node's block reaching into what is held: only 200..250 is used.
        ids.first_block(block(150, 250), 2, 1);
        // Entirely below: burned whole, and no lease can go back.
        ids.first_block(block(10, 20), 3, 1);
        let mut got = vec![];
        while let Some(id) = ids.try_next(|| {}) {
            got.push(id);
        }
        assert_eq!(got, (100..250).collect::<Vec<_>>());
        let s = ids.stats();
        assert_eq!((s.served, s.burned, s.buffered), (150, 50 + 10, 0));
        assert!(ids.begin_close().is_none());
    }

    #[test]
    fn close_gives_back_the_newest_blocks_tail_and_burns_older_ids() {
        let ids = SequenceIds::new(
            BufferPolicy::default(),
            SpecCheck {
                step: 1,
                residues: vec![0],
                max_id: u64::MAX >> 1,
            },
        );
        let block = |s, e| Block::new(s, e, 1).unwrap_or_else(|| unreachable!());
        ids.first_block(block(1, 1001), 11, 0);
        ids.first_block(block(1001, 2001), 12, 1); // contiguous: merged in the buffer
        for _ in 0..10 {
            assert!(ids.try_next(|| {}).is_some());
        }
        let tail = ids.begin_close().unwrap_or_else(|| unreachable!());
        assert_eq!(
            (tail.block.start(), tail.block.end(), tail.lease, tail.node),
            (1001, 2001, 12, 1)
        );
        // 11..=1000 began in the older block: burned, never used again.
        assert_eq!(ids.stats().burned, 990);
        assert_eq!(ids.try_next(|| {}), None);
        assert!(ids.begin_close().is_none(), "once");
    }

    /// A batch that fails after `close` (its put-back races the close) burns its ids: the
    /// closed buffer holds nothing, and every id is counted once.
    #[test]
    fn a_batch_put_back_after_close_is_burned_not_buffered() {
        let ids = SequenceIds::new(
            BufferPolicy::default(),
            SpecCheck {
                step: 1,
                residues: vec![0],
                max_id: u64::MAX >> 1,
            },
        );
        let block = |s, e| Block::new(s, e, 1).unwrap_or_else(|| unreachable!());
        ids.first_block(block(1, 1001), 0, 0);
        // The batch takes everything: the buffer is empty when `close` runs.
        let mut taken = Taken::new();
        assert!(!ids.take_into(&mut taken, 1000, || {}));
        assert!(ids.begin_close().is_none(), "nothing to give back");
        assert!(matches!(ids.put_back(taken), PutBack::Burned(1000)));
        let s = ids.stats();
        assert_eq!((s.buffered, s.burned + s.served), (0, 1000), "{s:?}");
    }
}
