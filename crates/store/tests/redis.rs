//! The Redis authority against real `redis-server` processes.
//!
//! The conformance suite runs from `idmint_store::conformance`, one test per property
//! (`redis::…`), with its fault scenarios (cut, stall, lost reply, two nodes, odd and even
//! prefixes on one server), its worker-lease properties (`redis_leases::…`) and its ledger
//! properties (`redis_audit::…`). What is specific to Redis stays here: a server that does not
//! fsync every write (or evicts keys) is refused unless `accept_unsafe_durability`; kill -9 of
//! the server under load, restarted on its append-only file, hands out no id twice; `WAIT`
//! succeeds once a real replica holds the write, and fails the write (burning its block) when
//! the replica is gone or never existed; keys of another type are
//! `Corrupt`; TLS (`rediss://`) with the server's CA, and refused without it.
//!
//! Every test starts its own private `redis-server` (`idmint_testkit::redis::PrivateRedis`, from
//! the `redis-server` Debian package) on a free port, never the shared one on 6379; without the
//! binary they fail, saying how to install it.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used)]

use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use idmint_store::conformance::RedisBackend;
use idmint_store::redis::{RedisAuthority, RedisConfig};
use idmint_store::tls::TlsMode;
use idmint_store::{Authority, StoreError};
use idmint_testkit::certs::TestCerts;
use idmint_testkit::redis::PrivateRedis;
use idmint_testkit::wait;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

idmint_store::conformance_tests!(redis => RedisBackend, with faults);
idmint_store::conformance_tests!(redis_leases => RedisBackend, leases);
idmint_store::conformance_tests!(redis_audit => RedisBackend, audit);
idmint_store::conformance_tests!(redis_parks => RedisBackend, parks);

fn name(s: &str) -> NamespaceName {
    NamespaceName::new(s).unwrap()
}

async fn connect(config: RedisConfig) -> Arc<RedisAuthority> {
    Arc::new(
        RedisAuthority::connect(config)
            .await
            .unwrap_or_else(|e| panic!("connecting to the private Redis failed: {e}")),
    )
}

/// Panics unless no two blocks share an id.
fn assert_disjoint(what: &str, blocks: &[Block]) {
    let mut sorted = blocks.to_vec();
    sorted.sort_by_key(|b| b.start());
    for pair in sorted.windows(2) {
        assert!(
            pair[0].end() <= pair[1].start(),
            "{what}: blocks {:?} and {:?} overlap: ids handed out twice",
            pair[0],
            pair[1]
        );
    }
}

/// A server that does not fsync every write, does not log writes, or evicts keys is refused,
/// naming the setting; `accept_unsafe_durability` serves from it anyway.
#[tokio::test]
async fn a_server_that_may_lose_writes_is_refused() {
    for (setting, value) in [
        ("appendfsync", "everysec"),
        ("appendonly", "no"),
        ("maxmemory-policy", "volatile-lru"),
    ] {
        let server = PrivateRedis::start_with(&[(setting, value)]).await;
        match RedisAuthority::connect(RedisConfig::new(server.url())).await {
            Err(StoreError::InvalidSetup { message }) => {
                assert!(
                    message.contains(setting) && message.contains(value),
                    "{setting} {value}: {message}"
                );
                assert!(message.contains("accept_unsafe_durability"), "{message}");
            }
            other => panic!("{setting} {value}: expected InvalidSetup, got {other:?}"),
        }
        let accepted = connect(RedisConfig {
            accept_unsafe_durability: true,
            ..RedisConfig::new(server.url())
        })
        .await;
        let ns = name("unsafe");
        accepted
            .ensure_namespace(&ns, SequenceSpec::default_64())
            .await
            .unwrap();
        assert_eq!(accepted.reserve(&ns, 5).await.unwrap().block.start(), 1);
    }
}

/// kill -9 of the server under load, three times, each time restarted on its append-only file
/// (`appendfsync always`): eight tasks on two authorities (two nodes) reserve all along; every
/// block granted (an `Ok`) is kept, and no two share an id; every one lies below the durable
/// watermark; the ledger verifies clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_under_load_hands_out_no_id_twice() {
    const KILLS: usize = 3;
    const GRANTS_BETWEEN_KILLS: usize = 300;
    let mut server = PrivateRedis::start().await;
    let config = RedisConfig {
        op_timeout: Duration::from_secs(2),
        ..RedisConfig::new(server.url())
    };
    let nodes = [connect(config.clone()).await, connect(config.clone()).await];
    let ns = name("kill-9");
    let spec = SequenceSpec::new(Width::Bits64, 1, 3, 2).unwrap();
    for node in &nodes {
        node.ensure_namespace(&ns, spec).await.unwrap();
    }
    let granted = Arc::new(Mutex::new(Vec::<Block>::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let node = nodes[(t % 2) as usize].clone();
            let (ns, granted, count, failures, stop) = (
                ns.clone(),
                granted.clone(),
                count.clone(),
                failures.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    match node.reserve(&ns, 1 + (t * 17 + i * 7) % 40).await {
                        Ok(r) => {
                            granted.lock().unwrap().push(r.block);
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.is_unavailable() => {
                            failures.fetch_add(1, Ordering::Relaxed);
                            tokio::task::yield_now().await;
                        }
                        Err(e) => panic!("task {t}: {e}"),
                    }
                }
            })
        })
        .collect();
    for kill in 0..=KILLS {
        let target = count.load(Ordering::Relaxed) + GRANTS_BETWEEN_KILLS;
        wait::until_async(
            format!("{GRANTS_BETWEEN_KILLS} grants before kill {kill}"),
            Duration::from_secs(120),
            async || count.load(Ordering::Relaxed) >= target,
        )
        .await;
        if kill < KILLS {
            server.restart().await; // SIGKILL, then a new process on the same AOF
        }
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let blocks = granted.lock().unwrap().clone();
    assert_disjoint("blocks granted across kill -9", &blocks);
    let durable = connect(RedisConfig::new(server.url())).await;
    let state = durable.state(&ns).await.unwrap().unwrap();
    let top = blocks.iter().map(|b| b.end()).max().unwrap();
    assert!(
        state.watermark >= top,
        "the durable watermark {} is below a granted block's end {top}: an acknowledged \
         reservation was lost",
        state.watermark
    );
    let report = idmint_store::audit::verify(durable.audit_log().unwrap(), &[state])
        .await
        .unwrap();
    assert!(report.is_clean(), "{:?}", report.violations);
    println!(
        "kill -9 under load: {} blocks granted, 0 overlaps, {} calls failed across {KILLS} kills",
        blocks.len(),
        failures.load(Ordering::Relaxed)
    );
    assert!(
        failures.load(Ordering::Relaxed) > 0,
        "no call failed: the kills did not happen under load"
    );
}

/// `WAIT` for a replica that does not exist: the write is `Unavailable` after the wait
/// timeout, saying so, and what it granted is never handed out: the next block is above it.
#[tokio::test]
async fn a_write_without_its_replicas_is_unavailable_and_burned() {
    let server = PrivateRedis::start().await;
    let waiting = connect(RedisConfig {
        wait_replicas: 1,
        wait_timeout: Duration::from_millis(200),
        ..RedisConfig::new(server.url())
    })
    .await;
    let plain = connect(RedisConfig::new(server.url())).await;
    let ns = name("waited");
    plain
        .ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    match waiting.reserve(&ns, 10).await {
        Err(StoreError::Unavailable { message, .. }) => {
            assert!(message.contains("0 of 1 replicas"), "{message}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let next = plain.reserve(&ns, 10).await.unwrap();
    assert_eq!(
        next.block.start(),
        11,
        "the unreplicated block [1, 11) was reused"
    );
}

/// `WAIT` with a real replica: a write the replica acknowledged succeeds and the replica holds
/// its watermark; once the replica is gone, the next write is `Unavailable` and its block is
/// burned.
#[tokio::test]
async fn a_write_waits_for_its_replica() {
    let primary = PrivateRedis::start().await;
    let mut replica = PrivateRedis::start().await;
    let replica_client = ::redis::Client::open(replica.url()).unwrap();
    let mut replica_conn = replica_client
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = ::redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.addr().port())
        .query_async(&mut replica_conn)
        .await
        .unwrap();
    let primary_client = ::redis::Client::open(primary.url()).unwrap();
    let mut primary_conn = primary_client
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    wait::until_async(
        "the replica to connect",
        Duration::from_secs(30),
        async || {
            let info: String = ::redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut primary_conn)
                .await
                .unwrap();
            info.contains("connected_slaves:1") && info.contains("state=online")
        },
    )
    .await;
    let waiting = connect(RedisConfig {
        wait_replicas: 1,
        wait_timeout: Duration::from_millis(500),
        ..RedisConfig::new(primary.url())
    })
    .await;
    let ns = name("replicated");
    waiting
        .ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    let r = waiting.reserve(&ns, 10).await.unwrap();
    assert_eq!(r.block.start(), 1);
    let on_replica: Option<String> = ::redis::cmd("HGET")
        .arg("{idmint}:ns:replicated")
        .arg("watermark")
        .query_async(&mut replica_conn)
        .await
        .unwrap();
    assert_eq!(
        on_replica.as_deref(),
        Some("11"),
        "WAIT returned before the replica had it"
    );

    replica.kill();
    match waiting.reserve(&ns, 10).await {
        Err(StoreError::Unavailable { message, .. }) => {
            assert!(message.contains("0 of 1 replicas"), "{message}")
        }
        other => panic!("without its replica: expected Unavailable, got {other:?}"),
    }
    let plain = connect(RedisConfig::new(primary.url())).await;
    assert_eq!(
        plain.reserve(&ns, 10).await.unwrap().block.start(),
        21,
        "the unreplicated block [11, 21) was reused"
    );
}

/// Keys of another type than idmint writes, or a hash with other fields, are `Corrupt` for
/// every operation, never a panic.
#[tokio::test]
async fn foreign_records_are_corrupt() {
    let server = PrivateRedis::start().await;
    let a = connect(RedisConfig::new(server.url())).await;
    let raw = ::redis::Client::open(server.url()).unwrap();
    let mut conn = raw.get_multiplexed_async_connection().await.unwrap();
    let _: () = ::redis::cmd("SET")
        .arg("{idmint}:ns:string")
        .arg("hello")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = ::redis::cmd("HSET")
        .arg("{idmint}:ns:hash")
        .arg("watermark")
        .arg("5")
        .query_async(&mut conn)
        .await
        .unwrap();
    for garbage in ["string", "hash"] {
        let ns = name(garbage);
        let corrupt = |r: Result<(), StoreError>, what: &str| match r {
            Err(StoreError::Corrupt { .. }) => {}
            other => panic!("{garbage}: {what}: expected Corrupt, got {other:?}"),
        };
        corrupt(a.state(&ns).await.map(drop), "state");
        corrupt(a.reserve(&ns, 1).await.map(drop), "reserve");
        corrupt(
            a.ensure_namespace(&ns, SequenceSpec::default_64())
                .await
                .map(drop),
            "ensure_namespace",
        );
    }
}

/// `rediss://` with `tls = "verify-full"`: the server's certificate checked against the CA of
/// `ca_file`; another CA is refused; a url that contradicts `tls` is refused before connecting.
#[tokio::test]
async fn tls_with_the_servers_ca_and_refused_without() {
    let certs = TestCerts::new();
    let server = PrivateRedis::start_tls(&certs).await;
    let config = |ca: Option<std::path::PathBuf>| RedisConfig {
        tls: TlsMode::VerifyFull,
        ca_file: ca,
        ..RedisConfig::new(server.url())
    };
    let a = connect(config(Some(certs.ca_file()))).await;
    let ns = name("tls");
    a.ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    assert_eq!(a.reserve(&ns, 3).await.unwrap().block.start(), 1);

    let other = TestCerts::new();
    match RedisAuthority::connect(config(Some(other.ca_file()))).await {
        Err(StoreError::Unavailable { .. }) => {}
        other => panic!("another CA: expected Unavailable, got {other:?}"),
    }
    let refused = [
        RedisConfig::new(server.url()),
        RedisConfig {
            tls: TlsMode::VerifyFull,
            ca_file: Some(certs.ca_file()),
            ..RedisConfig::new(server.url().replace("rediss://", "redis://"))
        },
        RedisConfig {
            tls: TlsMode::Require,
            ..RedisConfig::new(server.url())
        },
    ];
    for config in refused {
        match RedisAuthority::connect(config.clone()).await {
            Err(StoreError::InvalidSetup { .. }) => {}
            other => panic!("{config:?}: expected InvalidSetup, got {other:?}"),
        }
    }
}
