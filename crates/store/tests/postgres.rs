//! The PostgreSQL authority against a real server (127.0.0.1:5432, see
//! `idmint_testkit::postgres`).
//!
//! The conformance suite, with its fault scenarios (cut, stall, lost reply, two nodes, odd and
//! even databases), runs as `postgres::…`, one test per property, from
//! `idmint_store::conformance`. What is specific to PostgreSQL stays here: backends killed by
//! the server (`pg_terminate_backend`), the edges of the 64-bit range past `bigint`, an
//! unreachable server and a bad URL (no password leaked), `schema_sql` and concurrent first
//! connects, rows idmint did not write (`Corrupt`), Instagram's PL/pgSQL id function
//! against idmint's Instagram layout, and worker leases: the lease properties run as
//! `postgres_leases::…`; here, expiry by the database's clock, a renewal racing a takeover,
//! and a table name too long for the lease tables. The audit properties run as
//! `postgres_audit::…`; here, ledger numbers up to 2^63 (past `bigint`), ledger rows idmint did
//! not write, and the ledger of a table name too long for `<table>_audit`.
//!
//! Each test runs in a database of its own (`TempDatabase`), so they run in parallel. They fail,
//! saying how to start the server, when it is not running.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

use idmint_core::instagram::{instagram_id, shard_of, ShardCounterGenerator};
use idmint_core::{Layout, NamespaceName, SequenceSpec, SystemClock, Width};
use idmint_store::conformance::faults::until_ok;
use idmint_store::conformance::PostgresBackend;
use idmint_store::lease::{LeaseError, LeaseRequest, WorkerChoice};
use idmint_store::postgres::{instagram_sql, schema_sql, PostgresAuthority, PostgresConfig};
use idmint_store::{Advance, AuditEvent, Authority, GiveBack, StoreError};
use idmint_testkit::postgres::TempDatabase;
use idmint_testkit::wait;
use std::collections::HashSet;
use std::time::{Duration, Instant};

idmint_store::conformance_tests!(postgres => PostgresBackend, with faults);
idmint_store::conformance_tests!(postgres_leases => PostgresBackend, leases);
idmint_store::conformance_tests!(postgres_audit => PostgresBackend, audit);
idmint_store::conformance_tests!(postgres_parks => PostgresBackend, parks);

fn config(url: String, op_timeout: Duration, pool_size: usize) -> PostgresConfig {
    PostgresConfig {
        op_timeout,
        pool_size,
        ..PostgresConfig::new(url)
    }
}

async fn connect(config: PostgresConfig) -> PostgresAuthority {
    PostgresAuthority::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connecting the postgres authority failed: {e}"))
}

async fn connect_default(db: &TempDatabase) -> PostgresAuthority {
    connect(PostgresConfig::new(db.url())).await
}

fn name(s: &str) -> NamespaceName {
    NamespaceName::new(s).unwrap()
}

async fn watermark(a: &dyn Authority, n: &NamespaceName) -> u64 {
    a.state(n).await.unwrap().unwrap().watermark
}

/// The server kills the authority's backend processes (`pg_terminate_backend`, as a restart or
/// an administrator would): the authority replaces the connections by itself and continues
/// exactly where the durable watermark is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_backends_are_replaced() {
    let db = TempDatabase::create().await;
    let a = connect(config(db.url(), Duration::from_secs(3), 2)).await;
    let n = name("killed");
    a.ensure_namespace(&n, SequenceSpec::default_64())
        .await
        .unwrap();
    let before = a.reserve(&n, 10).await.unwrap();

    let admin = db.client().await;
    let killed = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(!killed.is_empty(), "the authority had no backend to kill");

    let (after, _) = until_ok("reserve after the kill", || a.reserve(&n, 10)).await;
    // The killed backends were idle: nothing was reserved in between.
    assert_eq!(after.block.start(), before.watermark);
    assert_eq!(watermark(&a, &n).await, after.watermark);
}

/// The top of the 64-bit range: the watermark reaches 2^63 (past `bigint`) exactly, the last
/// block is cut at 2^63 - 1, and give-back's compare-and-swap works there.
#[tokio::test]
async fn bits64_range_ends_at_2_pow_63() {
    let db = TempDatabase::create().await;
    let a = connect_default(&db).await;
    let max = Width::Bits64.max_id();
    let n = name("top");
    let spec = SequenceSpec::new(Width::Bits64, max - 99, 7, 3).unwrap();
    a.ensure_namespace(&n, spec).await.unwrap();
    let first = a.reserve(&n, 5).await.unwrap();
    assert_eq!(Ok(first.block), spec.reserve(max - 99, 5));
    let last = a.reserve(&n, u64::MAX).await.unwrap();
    assert_eq!(Ok(last.block), spec.reserve(first.watermark, u64::MAX));
    assert!(last.block.last() <= max && last.block.last() + 7 > max);
    assert!(matches!(
        a.reserve(&n, 1).await,
        Err(StoreError::Exhausted { bits: 64, .. })
    ));

    // A block ending at 2^63 exactly (the last id is 2^63 - 1).
    let n = name("top-exact");
    let spec = SequenceSpec::new(Width::Bits64, max - 9, 1, 0).unwrap();
    a.ensure_namespace(&n, spec).await.unwrap();
    let all = a.reserve(&n, 100).await.unwrap();
    assert_eq!((all.block.start(), all.block.last()), (max - 9, max));
    assert_eq!(all.watermark, max + 1);
    assert_eq!(watermark(&a, &n).await, 1u64 << 63);
    let (_, tail) = all.block.split_first(4);
    let tail = tail.unwrap();
    assert_eq!(a.give_back(&n, tail).await.unwrap(), GiveBack::Returned);
    assert_eq!(watermark(&a, &n).await, tail.start());
    let again = a.reserve(&n, 100).await.unwrap();
    assert_eq!(again.block, tail);
    match a.reserve(&n, 1).await {
        Err(StoreError::Exhausted { watermark, .. }) => assert_eq!(watermark, 1u64 << 63),
        other => panic!("expected Exhausted, got {other:?}"),
    }
}

/// An unreachable server is `Unavailable` within the timeout, and no message carries the
/// password of the URL.
#[tokio::test]
async fn unreachable_server_is_unavailable_without_leaking_the_password() {
    // A port nothing listens on: bind one and let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres:hunter2@127.0.0.1:{port}/idmint");
    let started = Instant::now();
    let err = PostgresAuthority::connect(config(url, Duration::from_secs(2), 1))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(err.is_unavailable(), "{err:?}");
    let text = format!("{err} {err:?}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");

    let err = PostgresAuthority::connect(PostgresConfig::new("postgres://x:hunter2@[nonsense"))
        .await
        .unwrap_err();
    // A URL that does not parse is a setup error, not an outage.
    assert!(
        matches!(err, idmint_store::StoreError::InvalidSetup { .. })
            && !err.to_string().contains("hunter2"),
        "{err}"
    );
}

/// A namespace table made before the retired mark gains the column at connect, its rows
/// live; a retirement then marks the row, durably.
#[tokio::test]
async fn a_table_without_the_retired_column_gains_it() {
    let db = TempDatabase::create().await;
    let client = db.client().await;
    let ddl = schema_sql("idmint_namespaces");
    let (without, _) = ddl
        .split_once("ALTER TABLE")
        .expect("the DDL adds the retired column after the CREATE TABLE");
    client.batch_execute(without).await.unwrap();
    client
        .batch_execute(
            "INSERT INTO idmint_namespaces (name, width, first_id, step, id_offset, watermark) \
             VALUES ('old', 32, 1, 1, 0, 11)",
        )
        .await
        .unwrap();
    let a = connect_default(&db).await;
    let old = name("old");
    let state = a.state(&old).await.unwrap().unwrap();
    assert_eq!((state.watermark, state.retired), (11, false));
    assert_eq!(a.reserve(&old, 1).await.unwrap().block.start(), 11);
    a.advance(&old, 1 << 31, Advance::Retire).await.unwrap();
    let again = connect_default(&db).await;
    assert!(again.state(&old).await.unwrap().unwrap().retired);
    assert!(again.reserve(&old, 1).await.unwrap_err().is_retired());
}

/// `schema_sql` is the DDL `connect` runs: a table created from it is used as is, under a
/// custom (quoted) name; concurrent first connects to an empty database all succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_sql_is_the_schema_connect_uses() {
    let db = TempDatabase::create().await;
    let client = db.client().await;
    client
        .batch_execute(&schema_sql("Id Tickets"))
        .await
        .unwrap();
    let a = connect(PostgresConfig {
        table: "Id Tickets".to_owned(),
        ..PostgresConfig::new(db.url())
    })
    .await;
    let n = name("custom");
    a.ensure_namespace(&n, SequenceSpec::default_64())
        .await
        .unwrap();
    a.reserve(&n, 5).await.unwrap();
    let row = client
        .query_one(
            "SELECT watermark::text, block_start::text FROM \"Id Tickets\" WHERE name = $1",
            &[&"custom"],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("6".to_owned(), "1".to_owned())
    );

    // Four nodes starting at once on a database without the table.
    let url = db.url();
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { PostgresAuthority::connect(PostgresConfig::new(url)).await })
        })
        .collect();
    for s in starts {
        let a = s.await.unwrap().unwrap();
        a.ensure_namespace(&n, SequenceSpec::default_64())
            .await
            .unwrap();
    }
}

/// A row idmint did not write is reported as `Corrupt`, never trusted or a panic.
#[tokio::test]
async fn foreign_rows_are_corrupt() {
    let db = TempDatabase::create().await;
    let a = connect_default(&db).await;
    let client = db.client().await;
    client
        .batch_execute(
            "INSERT INTO idmint_namespaces (name, width, first_id, step, id_offset, watermark) \
             VALUES ('-not a namespace', 64, 1, 1, 0, 1)",
        )
        .await
        .unwrap();
    match a.list().await {
        Err(StoreError::Corrupt { message }) => assert!(message.contains("-not a namespace")),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The table's constraints refuse what the arithmetic could misread.
    let refused = client
        .batch_execute(
            "INSERT INTO idmint_namespaces (name, width, first_id, step, id_offset, watermark) \
             VALUES ('b', 32, 1, 1, 0, 2147483649)",
        )
        .await;
    assert!(refused.is_err());
}

/// The ledger stores numbers up to 2^63 (a retirement of a 64-bit namespace) like the
/// watermark, past `bigint`; rows idmint did not write are `Corrupt` when read; a table name
/// too long for `<table>_audit` gets a ledger of its own all the same.
#[tokio::test]
async fn the_ledger_holds_2_pow_63_and_refuses_foreign_rows() {
    let db = TempDatabase::create().await;
    let a = connect_default(&db).await;
    let n = name("edge");
    a.ensure_namespace(&n, SequenceSpec::default_64())
        .await
        .unwrap();
    a.reserve(&n, 3).await.unwrap();
    let ceiling = 1u64 << 63;
    let retired = a.advance(&n, ceiling, Advance::Retire).await.unwrap();
    assert_eq!((retired.from, retired.state.watermark), (4, ceiling));
    assert!(a.reserve(&n, 1).await.unwrap_err().is_retired());
    let log = a.audit_log().unwrap();
    let events: Vec<AuditEvent> = log
        .entries(&n, None, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(
        events,
        vec![
            AuditEvent::Granted { start: 1, end: 4 },
            AuditEvent::Retired {
                from: 4,
                to: ceiling
            }
        ]
    );

    let client = db.client().await;
    client
        .batch_execute(
            "INSERT INTO idmint_namespaces_audit (subject, at_unix_ms, event, a, b, holder) \
             VALUES ('edge', 1, 'stolen', 1, 2, 'x')",
        )
        .await
        .unwrap();
    let err = log.entries(&n, None, 10).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { message } if message.contains("stolen")),
        "{err:?}"
    );
    assert_eq!(log.entries(&n, None, 2).await.unwrap().len(), 2);
    client
        .batch_execute(
            "INSERT INTO idmint_namespaces_audit (subject, at_unix_ms, event, a, b, holder) \
             VALUES ('-bad name', 1, 'granted', 1, 2, 'x')",
        )
        .await
        .unwrap();
    assert!(matches!(
        log.subjects().await,
        Err(StoreError::Corrupt { .. })
    ));

    let long = connect(PostgresConfig {
        table: "t".repeat(60),
        ..PostgresConfig::new(db.url())
    })
    .await;
    long.ensure_namespace(&n, SequenceSpec::default_64())
        .await
        .unwrap();
    long.reserve(&n, 2).await.unwrap();
    let entries = long
        .audit_log()
        .unwrap()
        .entries(&n, None, 10)
        .await
        .unwrap();
    assert_eq!(entries.len(), 1, "a ledger of its own: {entries:?}");
}

const INSTAGRAM_EPOCH_MS: u64 = 1_314_220_021_721;
const SHARDS: [u64; 4] = [0, 1, 1341, 8191];

async fn install_instagram(client: &tokio_postgres::Client) {
    for (i, shard) in SHARDS.iter().enumerate() {
        let sql = instagram_sql(&format!("shard_{i}"), *shard, INSTAGRAM_EPOCH_MS).unwrap();
        client.batch_execute(&sql).await.unwrap();
        // Idempotent: installing twice is harmless.
        client.batch_execute(&sql).await.unwrap();
    }
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `next_id()` in PL/pgSQL computes exactly idmint's Instagram layout: same shard, same
/// sequence (`nextval() % 1024`), timestamps within a second of idmint's own generator.
#[tokio::test]
async fn instagram_function_matches_idmint_layout() {
    let db = TempDatabase::create().await;
    let client = db.client().await;
    install_instagram(&client).await;
    let layout = Layout::instagram();
    for (i, shard) in SHARDS.iter().enumerate() {
        // The sequence starts at 1, as nextval() does.
        let local = ShardCounterGenerator::new(layout, *shard, SystemClock::new(), 1).unwrap();
        for k in 1..=1030u64 {
            let before = unix_ms_now();
            let row = client
                .query_one(&format!("SELECT \"shard_{i}\".next_id()"), &[])
                .await
                .unwrap();
            let after = unix_ms_now();
            let pg = u64::try_from(row.get::<_, i64>(0)).unwrap();
            let mine = local.next_id().unwrap();
            let (p, m) = (layout.decode(pg).unwrap(), layout.decode(mine).unwrap());
            assert_eq!(shard_of(&layout, pg).unwrap(), *shard);
            assert_eq!(p.parts.node, m.parts.node);
            assert_eq!(p.parts.sequence, k % 1024, "nextval() % 1024");
            assert_eq!(p.parts.sequence, m.parts.sequence);
            assert!(
                p.unix_nanos.abs_diff(m.unix_nanos) < 1_000_000_000,
                "PostgreSQL and idmint timestamps differ by more than a second"
            );
            // The same formula, exactly, and the server's clock is this machine's.
            let pg_ms = p.unix_nanos / 1_000_000;
            assert_eq!(instagram_id(&layout, pg_ms, *shard, k).unwrap(), pg);
            assert!(pg_ms + 1000 >= before && pg_ms <= after + 1000);
        }
    }
}

/// A table per shard whose primary key defaults to that shard's `next_id()` fills concurrently
/// without a collision, and every id names its shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instagram_shards_fill_without_collision() {
    const ROWS_PER_SHARD: i32 = 5_000;
    const WRITERS_PER_SHARD: i32 = 2;
    const BATCH: i32 = 250;
    let db = TempDatabase::create().await;
    let admin = db.client().await;
    install_instagram(&admin).await;
    for i in 0..SHARDS.len() {
        admin
            .batch_execute(&format!(
                "CREATE TABLE \"shard_{i}\".photos (
                     id bigint PRIMARY KEY DEFAULT \"shard_{i}\".next_id(),
                     n integer NOT NULL
                 )"
            ))
            .await
            .unwrap();
    }
    let started_ms = unix_ms_now();
    let mut writers = Vec::new();
    for i in 0..SHARDS.len() {
        for w in 0..WRITERS_PER_SHARD {
            let client = db.client().await;
            writers.push(tokio::spawn(async move {
                let per_writer = ROWS_PER_SHARD / WRITERS_PER_SHARD;
                let sql = format!(
                    "INSERT INTO \"shard_{i}\".photos (n) SELECT g FROM generate_series($1::int, $2::int) g"
                );
                let mut from = w * per_writer;
                while from < (w + 1) * per_writer {
                    let to = from + BATCH - 1;
                    client.execute(&sql, &[&from, &to]).await.unwrap();
                    from += BATCH;
                }
            }));
        }
    }
    for w in writers {
        w.await.unwrap();
    }
    let finished_ms = unix_ms_now();
    let layout = Layout::instagram();
    let mut all = HashSet::new();
    for (i, shard) in SHARDS.iter().enumerate() {
        let rows = admin
            .query(&format!("SELECT id FROM \"shard_{i}\".photos"), &[])
            .await
            .unwrap();
        assert_eq!(rows.len(), ROWS_PER_SHARD as usize);
        for row in rows {
            let id = u64::try_from(row.get::<_, i64>(0)).unwrap();
            let d = layout.decode(id).unwrap();
            assert_eq!(
                d.parts.node, *shard,
                "id {id} in shard_{i} names another shard"
            );
            let ms = d.unix_nanos / 1_000_000;
            assert!(ms + 1000 >= started_ms && ms <= finished_ms + 1000);
            assert!(all.insert(id), "id {id} issued twice");
        }
    }
    assert_eq!(all.len(), SHARDS.len() * ROWS_PER_SHARD as usize);
}

// ---------------------------------------------------------------------------------------------
// Worker leases (the properties run as `postgres_leases::…`)

fn lease_request(group: &NamespaceName, worker: u64, holder: &str, ttl: Duration) -> LeaseRequest {
    LeaseRequest {
        group: group.clone(),
        workers: 2,
        choice: WorkerChoice::Exactly(worker),
        prefer_floor_at_most: None,
        holder: holder.to_owned(),
        layout: "twitter".to_owned(),
        ttl,
    }
}

/// Expiry is judged by the database's clock, never the node's: the stored expiry is the
/// server's `clock_timestamp()` plus the TTL (read in a session whose time zone is far from
/// the node's: `timestamptz` is absolute); when the database says it passed (moved with SQL,
/// nothing changed on the node) the worker id is taken over at once and the old holder is
/// refused; and an expiry the database puts a day ahead holds the worker id for that day,
/// whatever TTL the node asked for. A release clears the expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_is_the_database_clock() {
    let db = TempDatabase::create().await;
    let client = db.client().await;
    client
        .batch_execute("SET TIME ZONE 'Pacific/Kiritimati'")
        .await
        .unwrap();
    let a = connect_default(&db).await;
    let leases = a.worker_leases().unwrap();
    let g = name("clock");
    let hour = Duration::from_secs(3600);
    let old = leases
        .acquire(&lease_request(&g, 0, "old", hour))
        .await
        .unwrap();
    let left: f64 = client
        .query_one(
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 \
             FROM idmint_namespaces_leases WHERE grp = 'clock' AND worker = 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!((3500.0..=3600.0).contains(&left), "{left} s left");
    let (_, slots) = leases.group(&g).await.unwrap().unwrap();
    let expires_in = slots[0].expires_in.unwrap();
    assert!(expires_in <= hour && expires_in > hour - Duration::from_secs(100));
    assert!(matches!(
        leases.acquire(&lease_request(&g, 0, "new", hour)).await,
        Err(LeaseError::Held { .. })
    ));

    client
        .batch_execute(
            "UPDATE idmint_namespaces_leases SET expires_at = clock_timestamp() - interval '1 second' \
             WHERE grp = 'clock'",
        )
        .await
        .unwrap();
    let (_, slots) = leases.group(&g).await.unwrap().unwrap();
    assert!(!slots[0].is_live(), "{slots:?}");
    let new = leases
        .acquire(&lease_request(&g, 0, "new", hour))
        .await
        .unwrap();
    assert!(new.token > old.token);
    assert!(matches!(
        leases.renew(&old, 1).await,
        Err(LeaseError::Superseded { current, .. }) if current == new.token
    ));

    client
        .batch_execute(
            "UPDATE idmint_namespaces_leases SET expires_at = clock_timestamp() + interval '1 day' \
             WHERE grp = 'clock'",
        )
        .await
        .unwrap();
    let (_, slots) = leases.group(&g).await.unwrap().unwrap();
    assert!(slots[0].expires_in.unwrap() > hour * 23, "{slots:?}");

    leases.release(&new, 42).await.unwrap();
    let row = client
        .query_one(
            "SELECT expires_at IS NULL, floor_unix_ms FROM idmint_namespaces_leases \
             WHERE grp = 'clock' AND worker = 0",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (true, 42));
}

/// A table name without room for the lease tables' suffixes still serves sequences; its
/// lease operations are `InvalidSetup`, saying why.
#[tokio::test]
async fn a_table_name_too_long_for_leases_serves_sequences_only() {
    let db = TempDatabase::create().await;
    let a = connect(PostgresConfig {
        table: "t".repeat(60),
        ..PostgresConfig::new(db.url())
    })
    .await;
    let n = name("long");
    a.ensure_namespace(&n, SequenceSpec::default_64())
        .await
        .unwrap();
    a.reserve(&n, 3).await.unwrap();
    let err = a
        .worker_leases()
        .unwrap()
        .acquire(&lease_request(&n, 0, "me", Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LeaseError::Store(StoreError::InvalidSetup { message }) if message.contains("_lease_groups")),
        "{err:?}"
    );
    assert!(schema_sql(&"t".repeat(60)).contains("-- no worker-lease tables"));
}

/// A renewal racing a takeover of its expired lease ends with one holder: either the renewal
/// comes first (the takeover then finds the lease live: `Held`) or the takeover does (the
/// renewal then finds another token: `Superseded`), never both `Ok`. Guards the row locks an
/// acquisition takes on the group's slots: without them, a renewal committed between the
/// takeover's read and its write was overwritten while its holder was told `Ok`. The test
/// holds the slot's row lock until both wait for it, then lets them race, 8 times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_racing_a_takeover_never_leaves_two_holders() {
    let db = TempDatabase::create().await;
    let mut client = db.client().await;
    let watcher = db.client().await;
    // The operations wait for the test's lock: give them time on a loaded machine.
    let a = std::sync::Arc::new(connect(config(db.url(), Duration::from_secs(120), 4)).await);
    let hour = Duration::from_secs(3600);
    for round in 0..8 {
        let g = name(&format!("race{round}"));
        let old = a
            .worker_leases()
            .unwrap()
            .acquire(&lease_request(&g, 0, "old", hour))
            .await
            .unwrap();
        client
            .execute(
                "UPDATE idmint_namespaces_leases \
                 SET expires_at = clock_timestamp() - interval '1 second' WHERE grp = $1",
                &[&g.as_str()],
            )
            .await
            .unwrap();
        let tx = client.transaction().await.unwrap();
        tx.execute(
            "SELECT 1 FROM idmint_namespaces_leases WHERE grp = $1 FOR UPDATE",
            &[&g.as_str()],
        )
        .await
        .unwrap();
        let (a1, a2, g1) = (a.clone(), a.clone(), g.clone());
        let takeover = tokio::spawn(async move {
            let request = lease_request(&g1, 0, "new", hour);
            a1.worker_leases().unwrap().acquire(&request).await
        });
        let renewal = tokio::spawn(async move { a2.worker_leases().unwrap().renew(&old, 5).await });
        let what = format!("round {round}: both waiting for the lock");
        wait::until_async(what, Duration::from_secs(100), async || {
            // From another session: pg_stat_activity is a snapshot taken once per transaction.
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            assert!(
                waiting == 2 || (!takeover.is_finished() && !renewal.is_finished()),
                "round {round}: {waiting} waiting, one of them ended"
            );
            waiting == 2
        })
        .await;
        tx.commit().await.unwrap();
        let (takeover, renewal) = (takeover.await.unwrap(), renewal.await.unwrap());
        match (&takeover, &renewal) {
            (Ok(new), Err(LeaseError::Superseded { current, .. })) if *current == new.token => {}
            (Err(LeaseError::Held { holder, .. }), Ok(_)) if holder == "old" => {}
            other => panic!("round {round}: two holders or an unexpected outcome: {other:?}"),
        }
    }
}
