//! Local snowflake ids per second on one thread: idmint-client's `LocalSnowflake` (a worker id
//! leased from a running node, renewed in the background) beside ferroid's
//! `AtomicSnowflakeGenerator` on the same bits, in alternating rounds; the best round of each.
//!
//! `cargo run --release --bin local_snowflake -- GRPC_URL [ROUNDS]` against a node serving
//! `tweets` (twitter layout: both capped at 4,096 ids per ms) and `wide` (41/1/21: 2 workers,
//! 2,097,152 ids per ms, so the generators' own cost shows). bench/local_snowflake/run.sh
//! starts the node and runs this with the Python and Node.js figures.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ferroid::generator::AtomicSnowflakeGenerator;
use ferroid::id::SnowflakeTwitterId;
use ferroid::time::{MonotonicClock, TWITTER_EPOCH};

ferroid::define_snowflake_id!(
    /// The `wide` namespace's bits: 41 of time, 1 of worker, 21 of sequence.
    Wide21Id, u64,
    reserved: 1,
    timestamp: 41,
    machine_id: 1,
    sequence: 21
);

const ROUND: Duration = Duration::from_millis(500);

/// Ids per second of `take` over one round, in batches of 10,000.
fn rate(mut take: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        for _ in 0..10_000 {
            take();
        }
        n += 10_000;
        let d = start.elapsed();
        if d >= ROUND {
            return n as f64 / d.as_secs_f64();
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: local_snowflake GRPC_URL [ROUNDS]")?;
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let client = rt.block_on(idmint_client::Client::connect([url]))?;
    println!("| Rust, 1 thread (best of {rounds} alternating {ROUND:?} rounds) | idmint `LocalSnowflake::next` | ferroid `AtomicSnowflakeGenerator` | ratio |");
    println!("|---|---|---|---|");
    for (ns, label) in [("tweets", "twitter 41/10/12"), ("wide", "wide 41/1/21")] {
        let local = rt.block_on(client.local_snowflake(ns))?;
        let worker = local.worker();
        let (mut best_local, mut best_ferroid) = (0f64, 0f64);
        let twitter: AtomicSnowflakeGenerator<SnowflakeTwitterId, _> =
            AtomicSnowflakeGenerator::new(worker, MonotonicClock::<1>::with_epoch(TWITTER_EPOCH));
        let wide: AtomicSnowflakeGenerator<Wide21Id, _> =
            AtomicSnowflakeGenerator::new(worker, MonotonicClock::<1>::with_epoch(TWITTER_EPOCH));
        for _ in 0..rounds {
            best_local = best_local.max(rate(|| {
                black_box(local.next().expect("the lease is renewed"));
            }));
            best_ferroid = best_ferroid.max(if ns == "tweets" {
                rate(|| {
                    black_box(twitter.next_id(|_| std::hint::spin_loop()));
                })
            } else {
                rate(|| {
                    black_box(wide.next_id(|_| std::hint::spin_loop()));
                })
            });
        }
        println!(
            "| {label} | {:.2}M ids/s | {:.2}M ids/s | {:.2}x |",
            best_local / 1e6,
            best_ferroid / 1e6,
            best_local / best_ferroid
        );
        rt.block_on(local.close());
    }
    rt.block_on(client.close());
    Ok(())
}
