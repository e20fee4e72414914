//! Reservations per second of the Redis authority next to a bare `INCRBY`, on the same private
//! `redis-server` (append-only file, `appendfsync always`), as `bench/redis/run.sh` runs it:
//!
//! ```text
//! cargo run --release -p idmint-store --features redis --example redis_bench -- \
//!     [--clients 1,8] [--duration 2] [--rounds 5] [--count 1000]
//! ```
//!
//! For each client count N: N tokio tasks share one connection (the authority's own multiplexed
//! connection; a second one of the same kind for `INCRBY`), each looping for `--duration`
//! seconds on its own key: `INCRBY bench:<task> <count>` against `reserve(<task's namespace>,
//! <count>)`. Both wait for the same fsync before their answer. A reservation is one Lua script
//! that compares and advances the watermark and appends its audit entry; `INCRBY` does neither.
//! Each row alternates the two `--rounds` times (`INCRBY` first, then the authority first, …),
//! so a machine whose load changes during the run moves both alike; the row gives the median
//! of each and the median of the per-round ratios. The ids each namespace holds are checked to
//! be exactly its reservations times `count`, so the run also proves what it measured.

#![allow(clippy::unwrap_used)]

use idmint_core::{NamespaceName, SequenceSpec};
use idmint_store::redis::{RedisAuthority, RedisConfig};
use idmint_store::Authority;
use idmint_testkit::redis::PrivateRedis;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    clients: Vec<usize>,
    duration: Duration,
    rounds: usize,
    count: u64,
}

fn args() -> Args {
    let mut parsed = Args {
        clients: vec![1, 8],
        duration: Duration::from_secs(2),
        rounds: 5,
        count: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--clients" => parsed.clients = value.split(',').map(|c| c.parse().unwrap()).collect(),
            "--duration" => parsed.duration = Duration::from_secs(value.parse().unwrap()),
            "--rounds" => parsed.rounds = value.parse().unwrap(),
            "--count" => parsed.count = value.parse().unwrap(),
            other => panic!(
                "unknown flag {other}; flags: --clients 1,8 --duration 2 --rounds 5 --count 1000"
            ),
        }
    }
    parsed
}

/// Runs `tasks` copies of `op(task)` in a loop for `duration`; the number of calls done.
async fn measure<F, Fut>(tasks: usize, duration: Duration, op: F) -> u64
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let deadline = Instant::now() + duration;
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    op(t).await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    total
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    let server = PrivateRedis::start().await;
    println!(
        "private redis-server at {} (appendonly yes, appendfsync always); count {}",
        server.url(),
        args.count
    );
    let authority = Arc::new(
        RedisAuthority::connect(RedisConfig::new(server.url()))
            .await
            .unwrap(),
    );
    let raw = redis::Client::open(server.url()).unwrap();
    let conn = raw.get_multiplexed_async_connection().await.unwrap();
    let count = args.count;
    println!(
        "{} alternating rounds of {} s each per row; medians",
        args.rounds,
        args.duration.as_secs()
    );
    println!("| clients | INCRBY/s | reservations/s | ratio (median of rounds) | rounds' ratios |");
    println!("|---:|---:|---:|---:|---|");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (row, &clients) in args.clients.iter().enumerate() {
        let names: Vec<NamespaceName> = (0..clients)
            .map(|t| NamespaceName::new(&format!("bench-{row}-{t}")).unwrap())
            .collect();
        for name in &names {
            authority
                .ensure_namespace(name, SequenceSpec::default_64())
                .await
                .unwrap();
        }
        let names = Arc::new(names);
        let secs = args.duration.as_secs_f64();
        let (mut incr_rates, mut reserve_rates, mut ratios) = (vec![], vec![], vec![]);
        let mut reserved_total = 0;
        for round in 0..args.rounds {
            let incr_phase = || {
                let conn = conn.clone();
                measure(clients, args.duration, move |t| {
                    let mut conn = conn.clone();
                    async move {
                        let _: u64 = redis::cmd("INCRBY")
                            .arg(format!("bench:{row}:{t}"))
                            .arg(count)
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                    }
                })
            };
            let reserve_phase = || {
                let (authority, names) = (authority.clone(), names.clone());
                measure(clients, args.duration, move |t| {
                    let (authority, names) = (authority.clone(), names.clone());
                    async move {
                        authority.reserve(&names[t], count).await.unwrap();
                    }
                })
            };
            let (incr, reserved) = if round % 2 == 0 {
                let incr = incr_phase().await;
                (incr, reserve_phase().await)
            } else {
                let reserved = reserve_phase().await;
                (incr_phase().await, reserved)
            };
            reserved_total += reserved;
            let (i, r) = (incr as f64 / secs, reserved as f64 / secs);
            incr_rates.push(i);
            reserve_rates.push(r);
            ratios.push(r / i);
        }
        // Every namespace's ids are exactly its reservations' blocks, end to end.
        let mut used = 0;
        for name in names.iter() {
            used += authority.state(name).await.unwrap().unwrap().ids_used();
        }
        assert_eq!(
            used,
            reserved_total * count,
            "ids used != reservations × count"
        );
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "| {clients} | {:.0} | {:.0} | {:.2} | {} |",
            median(incr_rates),
            median(reserve_rates),
            median(ratios),
            each.join(" ")
        );
    }
    println!(
        "compare-and-set conflicts retried: {}",
        authority.conflicts_retried()
    );
}
