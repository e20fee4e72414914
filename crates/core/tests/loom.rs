//! Model checks of the lock-free hot paths with loom, which runs every interleaving of the
//! threads' atomic operations. Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p idmint-core --test loom --release`.
//! Without `--cfg loom` this file compiles to nothing.
#![cfg(loom)]
#![allow(clippy::unwrap_used)]

use idmint_core::snowflake::NextIdError;
use idmint_core::{
    Block, FieldOrder, Layout, LayoutSpec, ManualClock, SharedBlock, SnowflakeGenerator,
    UlidGenerator,
};
use loom::sync::Arc;
use std::time::Duration;

/// Two threads race for the two sequence values of one time unit (one sequence bit), two calls
/// each: exactly two ids are issued, distinct, each thread's increasing, and the losers are told
/// to wait, never handed a duplicate.
#[test]
fn snowflake_claims_are_unique_under_every_interleaving() {
    loom::model(|| {
        let layout = Layout::new(LayoutSpec {
            timestamp_bits: 41,
            node_bits: 1,
            sequence_bits: 1,
            time_unit: Duration::from_millis(1),
            epoch_unix_ms: 1_700_000_000_000,
            order: FieldOrder::NodeThenSequence,
            max_bits: 63,
        })
        .unwrap();
        let clock = ManualClock::at_unix_millis(1_780_000_000_000);
        let g = Arc::new(SnowflakeGenerator::new(layout, 1, clock, None).unwrap());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let g = g.clone();
                loom::thread::spawn(move || {
                    let mut ids = vec![];
                    for _ in 0..2 {
                        match g.next_id() {
                            Ok(id) => ids.push(id),
                            Err(NextIdError::SequenceExhausted { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    ids
                })
            })
            .collect();
        let mut all = vec![];
        for h in handles {
            let ids = h.join().unwrap();
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
            all.extend(ids);
        }
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 2, "both sequence values issued exactly once");
    });
}

/// Two threads carve one shared block: the chunks are disjoint and cover it.
#[test]
fn shared_block_chunks_are_disjoint_under_every_interleaving() {
    loom::model(|| {
        let block = Block::new(10, 16, 1).unwrap();
        let shared = Arc::new(SharedBlock::new(block));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let s = shared.clone();
                loom::thread::spawn(move || {
                    let mut ids = vec![];
                    for _ in 0..2 {
                        if let Some(c) = s.take(2) {
                            ids.extend(c.ids());
                        }
                    }
                    ids
                })
            })
            .collect();
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, vec![10, 11, 12, 13, 14, 15]);
    });
}

/// Two threads share a ULID generator; one moves the clock into a new millisecond between its
/// two calls, so the compare-and-swap that re-seeds the counter races the other thread's
/// `fetch_add`: all four ids are distinct and each thread's increase.
#[test]
fn ulid_fetch_add_and_reseed_keep_order_under_every_interleaving() {
    loom::model(|| {
        let clock = ManualClock::at_unix_millis(1_780_000_000_000);
        let g = Arc::new(UlidGenerator::new(clock.clone()));
        let handles: Vec<_> = (0..2)
            .map(|i| {
                let (g, clock) = (g.clone(), clock.clone());
                loom::thread::spawn(move || {
                    let a = g.next_ulid();
                    if i == 0 {
                        clock.advance_millis(1);
                    }
                    let b = g.next_ulid();
                    assert!(a < b);
                    vec![a, b]
                })
            })
            .collect();
        let mut all: Vec<_> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4);
    });
}
