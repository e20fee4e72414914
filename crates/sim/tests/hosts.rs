//! The production world (`idmint_sim::hosts`): real nodes under the seeded scheduler.
//!
//! A seed replays bit for bit; a clean batch finds nothing and exercises what it claims to
//! (restarts, clean stops, kept blocks claimed back, faults of every kind, a copied data
//! directory, a deferred store, snowflake ids under contended worker leases); every bug
//! planted in the code a node runs is caught within 10,000 seeds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_sim::hosts::{self, run, run_traced};

/// Seeds of the clean batch (kept within the CI budget: about half a minute in debug).
const CLEAN: u64 = 60;

#[test]
fn a_seed_replays_bit_for_bit_and_seeds_differ() {
    let mut hashes = Vec::new();
    for seed in 0..10 {
        let a = run(seed, 0, hosts::STEPS).unwrap();
        let b = run(seed, 0, hosts::STEPS).unwrap();
        assert_eq!(a.trace, b.trace, "seed {seed} did not replay");
        assert_eq!(a.ids, b.ids);
        hashes.push(a.trace);
    }
    hashes.sort_unstable();
    hashes.dedup();
    assert_eq!(hashes.len(), 10, "two seeds made the same run");
}

#[test]
fn a_clean_batch_finds_nothing_and_exercises_every_path() {
    let mut seen = [0u64; 11];
    let marks = [
        "starts",
        "crashes",
        "stops cleanly",
        "claim the kept blocks of orders: returns [",
        "the reply is lost",
        "fails before it reaches the store",
        "data directory copied",
        "Rebase (request",
        "the store answers: connected",
        "answered events",
        "worker lease for group events: all 4 worker ids of group events are leased",
    ];
    let mut ids = 0;
    for seed in 0..CLEAN {
        let report = run_traced(seed, 0, hosts::STEPS).unwrap();
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}\n{}",
            report.violation,
            report.interleaving[report.interleaving.len().saturating_sub(60)..].join("\n")
        );
        ids += report.ids;
        for line in &report.interleaving {
            for (i, m) in marks.iter().enumerate() {
                if line.contains(m) {
                    seen[i] += 1;
                }
            }
        }
    }
    for (m, n) in marks.iter().zip(seen) {
        assert!(n > 0, "no clean run did {m:?}");
    }
    assert!(
        ids > CLEAN * 1000,
        "only {ids} ids answered in {CLEAN} seeds"
    );
}

#[cfg(feature = "planted")]
#[test]
fn every_bug_planted_in_the_node_is_caught() {
    for bug in hosts::BUGS {
        let caught = (0..10_000).find_map(|seed| {
            let r = run(seed, bug.bit, hosts::STEPS).unwrap();
            r.violation.map(|v| (seed, v))
        });
        let (seed, why) =
            caught.unwrap_or_else(|| panic!("{} not caught in 10,000 seeds", bug.name));
        eprintln!("{}: caught at seed {seed}: {why}", bug.name);
    }
}
