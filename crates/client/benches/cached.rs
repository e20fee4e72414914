//! Client-side cached sequence ids on one thread, with the background refill running against a
//! real node in process (file store in a temporary directory, gRPC on 127.0.0.1:0), beside an
//! `AtomicU64::fetch_add` counter measured in the same run. Target: at least 100M
//! ids/s on one thread: `Namespace::try_next` (one `fetch_sub` on the shared window per id) and
//! `LocalIds::try_next` (one owner's chunk, no atomic per id) are both measured. After
//! criterion's groups, a plain timed run of each prints ids/s and the ratios.
//!
//! `cargo bench -p idmint-client --bench cached`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idmint_client::{Client, ClientConfig, LocalIds, Namespace, SystemClock};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

struct Bench {
    rt: Runtime,
    client: Client,
    ns: Namespace,
    _dir: tempfile::TempDir,
}

fn start() -> Bench {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (client, ns) = rt.block_on(async {
        let authority = Arc::new(idmint_store::FileAuthority::open(dir.path()).unwrap());
        let node = idmint_node::Node::start(idmint_node::NodeConfig::default(), authority)
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(idmint_node::Server::new(node).grpc(listener).serve());
        let config = ClientConfig::new([url]);
        let client = Client::connect_with(config, Arc::new(SystemClock::new()))
            .await
            .unwrap();
        let ns = client.namespace("bench").await.unwrap();
        (client, ns)
    });
    Bench {
        rt,
        client,
        ns,
        _dir: dir,
    }
}

/// One id from a `LocalIds`: the chunk, or the async wait when the buffer is empty.
#[inline]
fn take_local(b: &Bench, local: &mut LocalIds, waits: &mut u64) -> u64 {
    match local.try_next() {
        Some(id) => id.as_u64().unwrap_or(0),
        None => {
            *waits += 1;
            b.rt.block_on(local.next()).unwrap().as_u64().unwrap_or(0)
        }
    }
}

/// One id: the sync take, or the async wait when the buffer is empty. Counts the waits.
#[inline]
fn take(b: &Bench, waits: &mut u64) -> u64 {
    match b.ns.try_next() {
        Some(id) => id.as_u64().unwrap_or(0),
        None => {
            *waits += 1;
            b.rt.block_on(b.ns.next()).unwrap().as_u64().unwrap_or(0)
        }
    }
}

fn cached(c: &mut Criterion) {
    let b = start();
    // Warm up: let the demand average see the rate, so blocks grow to the largest size.
    let mut waits = 0;
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_secs(3) {
        for _ in 0..1_000_000 {
            black_box(take(&b, &mut waits));
        }
    }
    let counter = AtomicU64::new(0);
    let mut group = c.benchmark_group("cached");
    group.throughput(Throughput::Elements(1));
    group.bench_function("atomic_fetch_add", |bench| {
        bench.iter(|| black_box(counter.fetch_add(1, Ordering::Relaxed)))
    });
    group.bench_function("try_next", |bench| {
        bench.iter(|| black_box(take(&b, &mut waits)))
    });
    let mut local = b.ns.local();
    group.bench_function("local_try_next", |bench| {
        bench.iter(|| black_box(take_local(&b, &mut local, &mut waits)))
    });
    // `client.next(ns)` awaited inside async code: the name looked up, then the same take.
    group.bench_function("client_next_by_name", |bench| {
        bench.iter_custom(|iters| {
            b.rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    black_box(b.client.next("bench").await.unwrap());
                }
                t.elapsed()
            })
        })
    });
    group.finish();

    // The same run, timed plainly, alternating ROUNDS rounds of each (the machine is shared:
    // the best round of each is compared): ids/s of each and the ratio.
    const N: u64 = 20_000_000;
    const ROUNDS: u64 = 10;
    let (mut atomic, mut client, mut owned) = (0f64, 0f64, 0f64);
    let waits_before = waits;
    let mut last = 0;
    let mut last_local = 0;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..N {
            black_box(counter.fetch_add(1, Ordering::Relaxed));
        }
        atomic = atomic.max(N as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..N {
            let id = take(&b, &mut waits);
            assert!(id > last, "ids increase");
            last = id;
        }
        client = client.max(N as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..N {
            let id = take_local(&b, &mut local, &mut waits);
            assert!(id > last_local, "ids increase per handle");
            last_local = id;
        }
        owned = owned.max(N as f64 / t.elapsed().as_secs_f64());
    }
    let stats = b.ns.stats();
    println!(
        "cached: fetch_add {:.1}M ids/s, try_next {:.1}M ids/s (ratio {:.2}), LocalIds::try_next \
         {:.1}M ids/s (ratio {:.2}) (best of {ROUNDS} rounds of {}M each); {} waits; refills {}, \
         block size {}, demand {:.1}M/s",
        atomic / 1e6,
        client / 1e6,
        client / atomic,
        owned / 1e6,
        owned / atomic,
        N / 1_000_000,
        waits - waits_before,
        stats.refills,
        stats.next_fetch,
        stats.demand_per_sec / 1e6
    );
    drop(local);
    b.rt.block_on(b.client.close());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = cached
}
criterion_main!(benches);
