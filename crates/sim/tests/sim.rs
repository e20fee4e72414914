//! The simulation's own guarantees: a seed replays bit for bit, a clean batch finds nothing,
//! and every planted bug is caught.

use idmint_sim::{bugs, first_failure, run, Bugs, STEPS};

/// Seeds of the clean batch.
const CLEAN_SEEDS: u64 = 2_000;
/// The most seeds any planted bug may need here (`idmint-sim --bug all` measures each).
const BUG_SEEDS: u64 = 10_000;

#[test]
fn a_seed_replays_bit_for_bit_and_seeds_differ() {
    for seed in [0, 7, 12_345] {
        let a = run(seed, Bugs::default(), STEPS);
        let b = run(seed, Bugs::default(), STEPS);
        assert_eq!(a, b, "seed {seed} did not replay");
    }
    let x = run(1, Bugs::default(), STEPS);
    let y = run(2, Bugs::default(), STEPS);
    assert_ne!(x.trace, y.trace, "seeds 1 and 2 gave the same trace");
    // A planted bug's failing run replays too.
    let bug = Bugs(bugs::by_name("two-primaries").expect("planted").bit);
    let found = first_failure(0, BUG_SEEDS, bug).expect("caught");
    assert_eq!(run(found.seed, bug, STEPS), found);
}

#[test]
fn a_clean_batch_finds_no_violation() {
    if let Some(o) = first_failure(0, CLEAN_SEEDS, Bugs::default()) {
        panic!(
            "seed {} (replay: cargo run --release -p idmint-sim -- --first {} --seeds 1): {}",
            o.seed,
            o.seed,
            o.violation.unwrap_or_default()
        );
    }
}

/// Every bug this build can plant (all of them with `--features planted`; without it, those of
/// the simulation's own models) is caught within `BUG_SEEDS` seeds.
#[test]
fn every_planted_bug_is_caught() {
    let mut missed = Vec::new();
    for bug in bugs::ALL {
        let planted = Bugs(bug.bit);
        if !planted.available() {
            eprintln!("{}: needs --features planted", bug.name);
            continue;
        }
        match first_failure(0, BUG_SEEDS, planted) {
            Some(o) => eprintln!(
                "{}: seed {}: {}",
                bug.name,
                o.seed,
                o.violation.unwrap_or_default()
            ),
            None => missed.push(bug.name),
        }
    }
    assert!(
        missed.is_empty(),
        "not caught in {BUG_SEEDS} seeds: {missed:?}"
    );
}

/// The strict namespace's planted bugs are caught by its linearizability check (not by another
/// check along the way), and a clean run checks a history that is not empty.
#[test]
fn the_strict_namespace_is_checked_for_linearizability() {
    for name in [
        "strict-serves-after-expiry",
        "strict-new-leader-below-watermark",
    ] {
        let bug = Bugs(bugs::by_name(name).expect("planted").bit);
        let found = first_failure(0, BUG_SEEDS, bug).expect("caught");
        let why = found.violation.unwrap_or_default();
        assert!(
            why.contains("not linearizable"),
            "{name}: seed {}: {why}",
            found.seed
        );
    }
    for seed in 0..20 {
        let clean = run(seed, Bugs::default(), STEPS);
        assert_eq!(clean.violation, None);
        assert!(
            clean.strict_ids >= 100,
            "seed {seed}: {} strict ids",
            clean.strict_ids
        );
    }
}

/// The shard-owned namespace's planted bugs are caught by its own checks (one issuer per shard
/// at a time; a takeover above every earlier issuer's ids), and a clean run issues shard ids,
/// some of them answered through a forward to the range's holder.
#[test]
fn the_shard_namespace_is_checked_for_one_issuer_per_shard() {
    for (name, check) in [
        ("shard-takeover-below-floor", "of an earlier lease"),
        ("shard-serves-after-expiry", "two issuers at once"),
    ] {
        let bug = Bugs(bugs::by_name(name).expect("planted").bit);
        let found = first_failure(0, BUG_SEEDS, bug).expect("caught");
        let why = found.violation.unwrap_or_default();
        assert!(why.contains(check), "{name}: seed {}: {why}", found.seed);
    }
    for seed in 0..20 {
        let clean = run(seed, Bugs::default(), STEPS);
        assert_eq!(clean.violation, None);
        assert!(
            clean.shard_ids >= 50 && clean.shard_forwarded >= 5,
            "seed {seed}: {} shard ids, {} answers forwarded",
            clean.shard_ids,
            clean.shard_forwarded
        );
    }
}
