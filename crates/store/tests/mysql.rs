//! The MySQL/MariaDB authority against real servers.
//!
//! The conformance suite runs from `idmint_store::conformance`, one test per property: block
//! mode in full with its fault scenarios (`mysql::…`: cut, stall, lost reply, two nodes, odd
//! and even databases), ticket mode's fault scenarios (`mysql_tickets::…`: cut, stall,
//! lost reply; ticket mode grants one id per call and only the server's class, so the block
//! contract does not apply, and concurrent `REPLACE INTO`s on one table can fail with InnoDB's
//! deadlock error, so two busy nodes on one ticket table are not part of it). What is specific to MySQL stays here: the block statement's DECIMAL arithmetic at the
//! edges of u64, rows idmint did not write (`Corrupt`), an unreachable server and bad
//! configurations, and Flickr ticket mode itself: single increasing ids, specs the server does
//! not issue, 32-bit exhaustion, two private odd/even servers (one of them killed) and a
//! server crash (SIGKILL) and restart. Worker leases: the lease properties run for both modes
//! (`mysql_leases::…`, `mysql_ticket_leases::…`); here, expiry by the database's clock,
//! concurrent first acquisitions through InnoDB deadlocks, a renewal racing a takeover, and a
//! table name too long for the lease tables. The audit ledger: block mode runs the audit
//! properties (`mysql_audit::…`); ticket mode runs the one it can hold
//! (`mysql_tickets_audit::…`, see there why the others cannot) and its own ledger test here,
//! with ledger rows idmint did not write (`Corrupt`).
//!
//! Needs MariaDB (or MySQL) on 127.0.0.1:3306, user root without password, for the
//! per-test databases, and the `mariadbd` / `mariadb-install-db` binaries for the private
//! servers. Start the system server with
//! `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`.
//! Every test has its own database (or its own servers), so they run in parallel.

#![cfg(feature = "mysql")]
#![allow(clippy::unwrap_used)]

use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use idmint_store::audit::{self, SubjectVerifier};
use idmint_store::conformance::{MysqlBackend, MysqlTicketBackend};
use idmint_store::lease::{LeaseError, LeaseRequest, WorkerChoice};
use idmint_store::mysql::{MysqlAuthority, MysqlConfig, MysqlTicketAuthority};
use idmint_store::{Advance, AuditEntry, AuditEvent, AuditReport, Authority, GiveBack, StoreError};
use idmint_testkit::mysql::{PrivateMariadb, TempDatabase};
use idmint_testkit::wait;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

idmint_store::conformance_tests!(mysql => MysqlBackend, with faults);
idmint_store::conformance_tests!(mysql_tickets => MysqlTicketBackend, faults only);
idmint_store::conformance_tests!(mysql_leases => MysqlBackend, leases);
idmint_store::conformance_tests!(mysql_ticket_leases => MysqlTicketBackend, leases);
idmint_store::conformance_tests!(mysql_audit => MysqlBackend, audit);
idmint_store::conformance_tests!(mysql_parks => MysqlBackend, parks);

/// The audit properties ticket mode can hold. `conformance_tests!(… => MysqlTicketBackend,
/// audit)` runs four; three cannot hold for a ticket server, whatever its ledger: they grant
/// blocks (`every_grant_is_in_the_ledger` asks for step 3, offset 1, which the test server,
/// increment 1, does not issue, and for give-backs; `advance_is_forward_only_and_recorded`
/// reserves 100 ids and expects the watermark at 101, a ticket call grants one) or give a tail
/// back and see it returned (`pruning_keeps_the_ledger_verifiable`; a ticket counter cannot be
/// lowered, so `give_back` always refuses). Ticket mode's own ledger is tested below
/// (`ticket_mode_records_every_id_and_advances_forward_only`).
mod mysql_tickets_audit {
    use super::MysqlTicketBackend;
    use idmint_store::conformance::{cases, run};

    #[test]
    fn leases_are_in_the_ledger() {
        run(cases::leases_are_in_the_ledger::<MysqlTicketBackend>());
    }

    /// Ticket mode grants one id per call, which the property allows for.
    #[test]
    fn retirement_is_not_exhaustion() {
        run(cases::retirement_is_not_exhaustion::<MysqlTicketBackend>());
    }
}

/// Short enough for the stall test to be quick, long enough for a loaded 2-core machine.
const OP_TIMEOUT: Duration = Duration::from_secs(2);

fn name(s: &str) -> NamespaceName {
    NamespaceName::new(s).unwrap()
}

fn config(url: String) -> MysqlConfig {
    let mut config = MysqlConfig::new(url);
    config.op_timeout = OP_TIMEOUT;
    config
}

async fn blocks(url: String) -> Arc<dyn Authority> {
    Arc::new(
        MysqlAuthority::connect(config(url))
            .await
            .unwrap_or_else(|e| panic!("connecting the block-mode authority failed: {e}")),
    )
}

async fn tickets(url: String) -> Arc<MysqlTicketAuthority> {
    Arc::new(
        MysqlTicketAuthority::connect(config(url))
            .await
            .unwrap_or_else(|e| panic!("connecting the ticket-mode authority failed: {e}")),
    )
}

async fn start_server(increment: u32, offset: u32) -> PrivateMariadb {
    tokio::task::spawn_blocking(move || PrivateMariadb::start(increment, offset))
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Block mode

/// The statement's DECIMAL arithmetic near 2^63 and with steps near 2^64 agrees with
/// `SequenceSpec::reserve` and never overflows.
#[tokio::test]
async fn block_arithmetic_at_the_edges_of_u64() {
    let db = TempDatabase::new();
    let a = blocks(db.url()).await;
    let max = Width::Bits64.max_id();

    // The whole 64-bit space from 0 in one block: start 0 (LAST_INSERT_ID(0)), end 2^63.
    let ns = name("whole");
    let spec = SequenceSpec::new(Width::Bits64, 0, 1, 0).unwrap();
    a.ensure_namespace(&ns, spec).await.unwrap();
    let r = a.reserve(&ns, u64::MAX).await.unwrap();
    assert_eq!((r.block.start(), r.block.end()), (0, max + 1));
    assert_eq!(a.state(&ns).await.unwrap().unwrap().watermark, max + 1);
    assert!(matches!(
        a.reserve(&ns, 1).await,
        Err(StoreError::Exhausted { bits: 64, watermark, .. }) if watermark == max + 1
    ));

    // A step of 2^63 (offset + step + first near 2^64 in the statement): one id (5), then
    // nothing. (Steps whose sum with the offset passes u64::MAX overflow in idmint-core's
    // `SequenceSpec::align_up`, so no such spec can be built.)
    let ns = name("huge-step");
    let spec = SequenceSpec::new(Width::Bits64, 0, 1 << 63, 5).unwrap();
    a.ensure_namespace(&ns, spec).await.unwrap();
    let r = a.reserve(&ns, 10).await.unwrap();
    assert_eq!((r.block.start(), r.block.len()), (5, 1));
    assert!(a.reserve(&ns, 1).await.unwrap_err().is_exhausted());

    // Step 7 close to the top: the same blocks as the pure arithmetic, cut at the maximum.
    let ns = name("top");
    let spec = SequenceSpec::new(Width::Bits64, max - 40, 7, 3).unwrap();
    a.ensure_namespace(&ns, spec).await.unwrap();
    let mut watermark = spec.initial_watermark();
    for count in [2, 1, 100] {
        let r = a.reserve(&ns, count).await.unwrap();
        assert_eq!(r.block, spec.reserve(watermark, count).unwrap());
        watermark = r.watermark;
    }
    assert!(watermark <= max + 1);
    assert!(a.reserve(&ns, 1).await.unwrap_err().is_exhausted());
    assert_eq!(a.state(&ns).await.unwrap().unwrap().watermark, watermark);
}

/// Rows this version did not write are `Corrupt`, not a panic nor a wrong block.
#[tokio::test]
async fn foreign_rows_are_corrupt() {
    let db = TempDatabase::new();
    let a = blocks(db.url()).await;
    db.sql(
        "INSERT INTO idmint_namespaces (name, width, first, step, `offset`, hi) \
         VALUES ('bad-width', 16, 1, 1, 0, 1), ('bad-offset', 64, 1, 2, 5, 1)",
    )
    .unwrap();
    for n in ["bad-width", "bad-offset"] {
        let err = a.state(&name(n)).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{n}: {err:?}");
        let err = a.reserve(&name(n), 1).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{n}: {err:?}");
    }
    assert!(matches!(a.list().await, Err(StoreError::Corrupt { .. })));
}

/// A namespace table made before the retired mark gains the column at connect, its rows
/// live; a retirement then marks the row, and a second authority connecting finds the column.
#[tokio::test]
async fn a_table_without_the_retired_column_gains_it() {
    let db = TempDatabase::new();
    db.sql(
        "CREATE TABLE idmint_namespaces (name VARCHAR(128) CHARACTER SET ascii COLLATE \
         ascii_bin NOT NULL PRIMARY KEY, width TINYINT UNSIGNED NOT NULL, first BIGINT UNSIGNED \
         NOT NULL, step BIGINT UNSIGNED NOT NULL, `offset` BIGINT UNSIGNED NOT NULL, \
         hi BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
    )
    .unwrap();
    db.sql(
        "INSERT INTO idmint_namespaces (name, width, first, step, `offset`, hi) \
         VALUES ('old', 32, 1, 1, 0, 11)",
    )
    .unwrap();
    let a = blocks(db.url()).await;
    let old = name("old");
    let state = a.state(&old).await.unwrap().unwrap();
    assert_eq!((state.watermark, state.retired), (11, false));
    assert_eq!(a.reserve(&old, 1).await.unwrap().block.start(), 11);
    a.advance(&old, 1 << 31, Advance::Retire).await.unwrap();
    let again = blocks(db.url()).await;
    assert!(again.state(&old).await.unwrap().unwrap().retired);
    assert!(again.reserve(&old, 1).await.unwrap_err().is_retired());
}

/// An unreachable server is `Unavailable` (without the password in the message); a
/// configuration that cannot work is `InvalidSetup`.
#[tokio::test]
async fn unreachable_server_is_unavailable_and_bad_config_invalid() {
    // Nothing listens on a port we just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = MysqlAuthority::connect(config(format!("mysql://root:hunter2@127.0.0.1:{port}/x")))
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let err = MysqlAuthority::connect(config("mysql://root@127.0.0.1:3306".into()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidSetup { .. }), "{err:?}");
    assert!(err.to_string().contains("names no database"), "{err}");
    let mut bad_table = config("mysql://root@127.0.0.1:3306/x".into());
    bad_table.table = "x; DROP TABLE y".into();
    let err = MysqlAuthority::connect(bad_table).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidSetup { .. }), "{err:?}");
}

// ---------------------------------------------------------------------------------------------
// Ticket mode

/// On the system server (increment 1): one id per call, strictly increasing, surviving a new
/// authority; state, list, give_back and errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_mode_issues_increasing_single_ids() {
    let db = TempDatabase::new();
    let a = tickets(db.url()).await;
    assert_eq!(a.server_auto_increment().await.unwrap(), (1, 1));
    let ns = name("photos");
    let spec = SequenceSpec::new(Width::Bits64, 1000, 1, 0).unwrap();
    let created = a.ensure_namespace(&ns, spec).await.unwrap();
    assert_eq!(created.watermark, 1000);
    assert_eq!(a.ensure_namespace(&ns, spec).await.unwrap(), created);

    let mut last = 0;
    for count in [1, 1, 50, 1] {
        let r = a.reserve(&ns, count).await.unwrap();
        assert_eq!(r.block.len(), 1, "ticket mode hands one id per call");
        assert!(r.block.start() > last && r.block.start() >= 1000);
        assert_eq!(r.watermark, r.block.end());
        last = r.block.start();
    }
    assert_eq!(last, 1003);
    assert_eq!(a.state(&ns).await.unwrap().unwrap().watermark, 1004);
    assert_eq!(a.next_id(&ns).await.unwrap(), 1004);

    // A new authority (a restarted process) continues above.
    drop(a);
    let a = tickets(db.url()).await;
    assert_eq!(a.next_id(&ns).await.unwrap(), 1005);

    // Tails are validated, then refused: a ticket counter is never lowered.
    let tail = Block::new(1005, 1006, 1).unwrap();
    assert_eq!(
        a.give_back(&ns, tail).await.unwrap(),
        GiveBack::Refused { watermark: 1006 }
    );
    let foreign = Block::new(1005, 1006, 2).unwrap();
    assert!(matches!(
        a.give_back(&ns, foreign).await,
        Err(StoreError::InvalidTail { .. })
    ));

    // A second namespace whose name is not a plain identifier; list sees both, sorted.
    let other = name("Photos.x-1");
    a.ensure_namespace(&other, SequenceSpec::default_64())
        .await
        .unwrap();
    assert_eq!(a.next_id(&other).await.unwrap(), 1);
    let listed = a.list().await.unwrap();
    let summary: Vec<(String, u64)> = listed
        .iter()
        .map(|s| (s.name.to_string(), s.watermark))
        .collect();
    assert_eq!(
        summary,
        vec![("Photos.x-1".into(), 2), ("photos".into(), 1006)]
    );

    // Errors.
    let absent = name("absent");
    assert!(a
        .reserve(&absent, 1)
        .await
        .unwrap_err()
        .is_unknown_namespace());
    assert!(a
        .give_back(&absent, tail)
        .await
        .unwrap_err()
        .is_unknown_namespace());
    assert_eq!(a.state(&absent).await.unwrap(), None);
    assert!(matches!(
        a.reserve(&ns, 0).await,
        Err(StoreError::InvalidCount)
    ));
    let other_spec = SequenceSpec::new(Width::Bits64, 1, 1, 0).unwrap();
    match a.ensure_namespace(&ns, other_spec).await {
        Err(StoreError::SpecConflict { existing, .. }) => assert_eq!(existing, spec),
        got => panic!("another spec must be SpecConflict, got {got:?}"),
    }
}

/// A namespace whose step/offset are not the server's auto-increment settings is refused, and
/// the message names the server variables and the my.cnf lines to set (not "exists with step
/// 1, offset 0", as if the namespace had been created with them).
#[tokio::test]
async fn ticket_mode_refuses_specs_the_server_does_not_issue() {
    let db = TempDatabase::new();
    let a = tickets(db.url()).await;
    let ns = name("odd");
    let spec = SequenceSpec::new(Width::Bits64, 1, 2, 1).unwrap();
    match a.ensure_namespace(&ns, spec).await {
        Err(e @ StoreError::SpecConflict { .. }) => {
            let message = e.to_string();
            let StoreError::SpecConflict {
                existing,
                requested,
                ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!((existing.step(), existing.offset()), (1, 0), "the server's");
            assert_eq!(requested, spec);
            for part in [
                "auto_increment_increment = 1 and auto_increment_offset = 1",
                "`auto_increment_increment = 2` and `auto_increment_offset = 1`",
                "my.cnf",
            ] {
                assert!(message.contains(part), "{part:?} missing from: {message}");
            }
        }
        got => panic!("step 2 on an increment-1 server must be SpecConflict, got {got:?}"),
    }
    assert_eq!(a.state(&ns).await.unwrap(), None, "no table was created");
}

/// A 32-bit ticket namespace never hands out an id above 2^31 - 1.
#[tokio::test]
async fn ticket_mode_32_bit_exhaustion_is_an_error() {
    let db = TempDatabase::new();
    let a = tickets(db.url()).await;
    let max = Width::Bits32.max_id();
    let ns = name("small");
    let spec = SequenceSpec::new(Width::Bits32, max - 2, 1, 0).unwrap();
    a.ensure_namespace(&ns, spec).await.unwrap();
    for want in [max - 2, max - 1, max] {
        assert_eq!(a.next_id(&ns).await.unwrap(), want);
    }
    for _ in 0..2 {
        match a.reserve(&ns, 1).await {
            Err(StoreError::Exhausted {
                bits: 32,
                watermark,
                ..
            }) => assert_eq!(watermark, max + 1),
            got => panic!("past 2^31 - 1 must be Exhausted, got {got:?}"),
        }
    }
    assert_eq!(a.state(&ns).await.unwrap().unwrap().ids_left(), 0);
}

/// Flickr's setup: two real servers with `auto-increment-increment = 2` and offsets 1 and 2,
/// clients drawing from both round-robin. No id collides, each server stays in its class and
/// increases; then one server dies: its authority is Unavailable, the other keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_ticket_servers_odd_and_even_never_collide_and_survive_one_dying() {
    let (odd_server, even_server) = tokio::join!(start_server(2, 1), start_server(2, 2));
    let mut odd_server = odd_server;
    let (odd_db, even_db) = (
        TempDatabase::on(&odd_server),
        TempDatabase::on(&even_server),
    );
    let odd = tickets(odd_db.url()).await;
    let even = tickets(even_db.url()).await;
    assert_eq!(odd.server_auto_increment().await.unwrap(), (2, 1));
    assert_eq!(even.server_auto_increment().await.unwrap(), (2, 2));
    let ns = name("tickets64");
    let odd_spec = SequenceSpec::new(Width::Bits64, 1, 2, 1).unwrap();
    let even_spec = SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap();
    odd.ensure_namespace(&ns, odd_spec).await.unwrap();
    even.ensure_namespace(&ns, even_spec).await.unwrap();
    // Each server refuses the other's class.
    assert!(matches!(
        odd.ensure_namespace(&name("x"), even_spec).await,
        Err(StoreError::SpecConflict { .. })
    ));

    let servers = [odd.clone(), even.clone()];
    let mut clients = Vec::new();
    for c in 0..6usize {
        let servers = servers.clone();
        let ns = ns.clone();
        clients.push(tokio::spawn(async move {
            // (server index, id) in the order this client got them.
            let mut got = Vec::new();
            for i in 0..40 {
                let s = (c + i) % 2;
                got.push((s, servers[s].next_id(&ns).await.unwrap()));
            }
            got
        }));
    }
    let mut all = HashSet::new();
    let mut per_server = [Vec::new(), Vec::new()];
    for client in clients {
        let got = client.await.unwrap();
        for s in 0..2 {
            let ids: Vec<u64> = got
                .iter()
                .filter(|(x, _)| *x == s)
                .map(|(_, id)| *id)
                .collect();
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "ids of one server, seen by one client, increase: {ids:?}"
            );
        }
        for (s, id) in got {
            assert!(all.insert(id), "id {id} issued twice");
            assert_eq!(id % 2, if s == 0 { 1 } else { 0 }, "server {s} issued {id}");
            per_server[s].push(id);
        }
    }
    // Each server issued its class densely: 1, 3, 5, … and 2, 4, 6, …
    for (s, ids) in per_server.iter_mut().enumerate() {
        ids.sort_unstable();
        let first = if s == 0 { 1 } else { 2 };
        assert!(
            ids.iter().zip(0u64..).all(|(id, i)| *id == first + 2 * i),
            "server {s} skipped ids: {ids:?}"
        );
    }

    // The odd server dies.
    odd_server.kill();
    let started = Instant::now();
    let err = odd.reserve(&ns, 1).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(started.elapsed() < OP_TIMEOUT + Duration::from_secs(1));
    let err = odd.next_id(&ns).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    // The even one serves on, above everything it issued.
    let top = *per_server[1].last().unwrap();
    for i in 1..=5 {
        assert_eq!(even.next_id(&ns).await.unwrap(), top + 2 * i);
    }
    drop((odd_db, even_db));
}

/// A ticket table on a private server survives the server's crash (SIGKILL): after a restart
/// on the same data, ids continue above the last one issued, in the server's class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_ids_survive_a_server_crash() {
    let mut server = start_server(3, 2).await;
    let db = TempDatabase::on(&server);
    let a = tickets(db.url()).await;
    let ns = name("crash");
    let spec = SequenceSpec::new(Width::Bits64, 1, 3, 2).unwrap();
    a.ensure_namespace(&ns, spec).await.unwrap();
    let mut last = 0;
    for _ in 0..5 {
        let id = a.next_id(&ns).await.unwrap();
        assert!(id > last && id % 3 == 2, "{id}");
        last = id;
    }
    assert_eq!(last, 14);
    server.kill();
    assert!(a.next_id(&ns).await.unwrap_err().is_unavailable());
    let server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    // The same authority reconnects by itself.
    let id = a.next_id(&ns).await.unwrap();
    assert!(id > last && id % 3 == 2, "after the crash: {id}");
    assert!(a.state(&ns).await.unwrap().unwrap().watermark > id);
    drop(db);
    drop(server);
}

// ---------------------------------------------------------------------------------------------
// Durability settings

/// A server that does not flush every commit is refused, with the variable, its value and the
/// my.cnf line to fix it; `accept_unsafe_durability = true` serves from it all the same. Guards
/// against serving from such a server unchecked: with `innodb_flush_log_at_trx_commit = 2`
/// (or binary logging with `sync_binlog = 0`) a server crash can forget reservations already
/// handed out, and ids would repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_may_lose_commits_are_refused_unless_accepted() {
    for (options, variable) in [
        (
            &["--innodb-flush-log-at-trx-commit=2"][..],
            "innodb_flush_log_at_trx_commit = 2",
        ),
        (&["--log-bin", "--sync-binlog=0"][..], "sync_binlog = 0"),
    ] {
        let server = tokio::task::spawn_blocking(move || PrivateMariadb::start_with(1, 1, options))
            .await
            .unwrap();
        let db = TempDatabase::on(&server);
        for connect in [
            MysqlAuthority::connect(config(db.url()))
                .await
                .map(drop)
                .unwrap_err(),
            MysqlTicketAuthority::connect(config(db.url()))
                .await
                .map(drop)
                .unwrap_err(),
        ] {
            assert!(
                matches!(connect, StoreError::InvalidSetup { .. }),
                "{connect:?}"
            );
            let message = connect.to_string();
            for needed in [variable, "my.cnf", "accept_unsafe_durability = true"] {
                assert!(message.contains(needed), "{needed:?} not in: {message}");
            }
            assert!(!message.contains("mysql://"), "the URL leaked: {message}");
        }
        let mut accepting = config(db.url());
        accepting.accept_unsafe_durability = true;
        let a = MysqlAuthority::connect(accepting).await.unwrap();
        let ns = name("unsafe");
        a.ensure_namespace(&ns, SequenceSpec::default_64())
            .await
            .unwrap();
        assert_eq!(a.reserve(&ns, 10).await.unwrap().block.start(), 1);
        drop(db);
        drop(server);
    }
}

/// The private servers of these tests and the shared test server flush every commit, so every
/// other test connects without `accept_unsafe_durability` (the kit starts mariadbd with binary
/// logging off and InnoDB's default `innodb_flush_log_at_trx_commit = 1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_servers_pass_the_durability_check() {
    let db = tokio::task::spawn_blocking(TempDatabase::new)
        .await
        .unwrap();
    MysqlAuthority::connect(config(db.url())).await.unwrap();
}

/// Guards against two authorities on one ticket table answering 503 under load: concurrent
/// `REPLACE`s on the one ticket row deadlock in InnoDB (1213), which the server rolls back;
/// such a `REPLACE` is retried, so every reservation of 2 authorities x 8 tasks succeeds, and
/// every id is unique.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ticket_deadlocks_are_retried_and_never_repeat_an_id() {
    let db = TempDatabase::new();
    let (a, b) = (tickets(db.url()).await, tickets(db.url()).await);
    let ns = name("hot");
    a.ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for t in 0..16 {
        let authority = if t % 2 == 0 { a.clone() } else { b.clone() };
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for i in 0..100 {
                let r = authority
                    .reserve(&ns, 1)
                    .await
                    .unwrap_or_else(|e| panic!("task {t}, reservation {i}: {e}"));
                got.push(r.block.start());
            }
            got
        }));
    }
    let mut all = std::collections::HashSet::new();
    for task in tasks {
        for id in task.await.unwrap() {
            assert!(all.insert(id), "id {id} handed out twice");
        }
    }
    assert_eq!(all.len(), 1600);
}

// ---------------------------------------------------------------------------------------------
// The audit ledger (block mode's properties run as `mysql_audit::…`)

/// Every entry of `subject`, in pages of 5.
async fn ledger(a: &dyn Authority, subject: &NamespaceName) -> Vec<AuditEntry> {
    let log = a.audit_log().expect("a MySQL authority keeps a ledger");
    let mut all: Vec<AuditEntry> = Vec::new();
    loop {
        let page = log
            .entries(subject, all.last().map(|e| e.seq), 5)
            .await
            .unwrap();
        let done = page.len() < 5;
        all.extend(page);
        if done {
            return all;
        }
    }
}

/// Verifies `subject`'s ledger against its state; panics on a violation.
async fn verify_clean(a: &dyn Authority, subject: &NamespaceName) -> AuditReport {
    let mut v = SubjectVerifier::new(subject.clone());
    for e in ledger(a, subject).await {
        v.add(&e);
    }
    let report = v.finish(a.state(subject).await.unwrap().as_ref());
    assert!(report.is_clean(), "{:?}", report.violations);
    report
}

/// Ticket mode: every id handed out by two authorities at once is in the ledger exactly once,
/// as `[id, id + 1)`; a refused give-back records nothing; a rebase moves the counter up only
/// (the next id is above it), a rebase below the watermark changes and records nothing, and a
/// retirement leaves no id to hand out (the burned id past the end is not recorded).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ticket_mode_records_every_id_and_advances_forward_only() {
    let db = TempDatabase::new();
    let (a, b) = (tickets(db.url()).await, tickets(db.url()).await);
    let ns = name("ledger");
    let spec = SequenceSpec::new(Width::Bits32, 1, 1, 0).unwrap();
    a.ensure_namespace(&ns, spec).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..6 {
        let authority = if t % 2 == 0 { a.clone() } else { b.clone() };
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..20 {
                got.push(authority.next_id(&ns).await.unwrap());
            }
            got
        }));
    }
    let mut ids = HashSet::new();
    for task in tasks {
        ids.extend(task.await.unwrap());
    }
    assert_eq!(ids.len(), 120);
    let recorded = ledger(&*a, &ns).await;
    let granted: HashSet<u64> = recorded
        .iter()
        .map(|e| match e.event {
            AuditEvent::Granted { start, end } if end == start + 1 => start,
            other => panic!("unexpected entry {other:?}"),
        })
        .collect();
    assert_eq!(recorded.len(), 120, "each id once");
    assert_eq!(granted, ids);
    for e in &recorded {
        assert_eq!(e.holder, audit::holder());
        assert!(e.at_unix_ms > 1_600_000_000_000, "{e:?}");
    }
    assert!(a
        .audit_log()
        .unwrap()
        .subjects()
        .await
        .unwrap()
        .contains(&ns));
    assert_eq!(ledger(&*b, &ns).await, recorded, "one ledger for both");

    // A refused give-back records nothing.
    let w = a.state(&ns).await.unwrap().unwrap().watermark;
    let tail = Block::new(w - 1, w, 1).unwrap();
    assert!(matches!(
        a.give_back(&ns, tail).await.unwrap(),
        GiveBack::Refused { .. }
    ));

    // Rebase: forward only, recorded; the next id is above it, on either authority.
    let up = a.advance(&ns, w + 1000, Advance::Rebase).await.unwrap();
    assert_eq!((up.from, up.state.watermark), (w, w + 1000));
    assert_eq!(b.next_id(&ns).await.unwrap(), w + 1000);
    assert_eq!(a.next_id(&ns).await.unwrap(), w + 1001);
    let down = a.advance(&ns, 10, Advance::Rebase).await.unwrap();
    assert_eq!((down.from, down.state.watermark), (w + 1002, w + 1002));
    assert_eq!(a.state(&ns).await.unwrap().unwrap().watermark, w + 1002);
    assert!(a
        .advance(&ns, (1 << 31) + 1, Advance::Retire)
        .await
        .unwrap_err()
        .is_exhausted());
    assert!(a
        .advance(&name("absent"), 10, Advance::Rebase)
        .await
        .unwrap_err()
        .is_unknown_namespace());

    // Retire: nothing more is handed out, by either authority; retiring again changes nothing.
    let ceiling = 1u64 << 31;
    let retired = a.advance(&ns, ceiling, Advance::Retire).await.unwrap();
    assert_eq!((retired.from, retired.state.watermark), (w + 1002, ceiling));
    assert!(retired.state.retired);
    assert!(a.reserve(&ns, 1).await.unwrap_err().is_retired());
    assert!(b.reserve(&ns, 1).await.unwrap_err().is_retired());
    assert_eq!(
        a.advance(&ns, ceiling, Advance::Retire).await.unwrap().from,
        ceiling
    );

    let tail: Vec<AuditEvent> = ledger(&*a, &ns).await[120..]
        .iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(
        tail,
        vec![
            AuditEvent::Rebased {
                from: w,
                to: w + 1000
            },
            AuditEvent::Granted {
                start: w + 1000,
                end: w + 1001
            },
            AuditEvent::Granted {
                start: w + 1001,
                end: w + 1002
            },
            AuditEvent::Retired {
                from: w + 1002,
                to: ceiling
            },
        ]
    );
    let report = verify_clean(&*a, &ns).await;
    assert_eq!(report.grants, 124, "120 ids, a rebase, 2 ids, a retirement");

    // Pruning by the server's clock folds every older entry into one checkpoint at the
    // newest one's place (this subject is the database's only one); it still verifies.
    let all = ledger(&*a, &ns).await;
    let last = all.last().cloned().unwrap();
    let log = a.audit_log().unwrap();
    while log.now_unix_ms().await.unwrap() <= last.at_unix_ms {
        tokio::task::yield_now().await;
    }
    let pruned = idmint_store::audit::prune(log, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(pruned.removed, all.len() as u64 - 1);
    let kept = ledger(&*a, &ns).await;
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].seq, kept[0].event),
        (
            last.seq,
            AuditEvent::Checkpoint {
                below: ceiling,
                token: 0
            }
        )
    );
    verify_clean(&*a, &ns).await;
}

/// Ledger rows this version did not write are `Corrupt` when read, not a panic.
#[tokio::test]
async fn foreign_ledger_rows_are_corrupt() {
    let db = TempDatabase::new();
    let a = blocks(db.url()).await;
    let ns = name("n");
    a.ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    a.reserve(&ns, 3).await.unwrap();
    db.sql(
        "INSERT INTO idmint_namespaces_audit (subject, at_unix_ms, event, a, b, holder) \
         VALUES ('n', 1, 'stolen', 1, 2, 'x')",
    )
    .unwrap();
    let log = a.audit_log().unwrap();
    let err = log.entries(&ns, None, 10).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { message } if message.contains("stolen")),
        "{err:?}"
    );
    // The good entry before it still reads.
    assert_eq!(log.entries(&ns, None, 1).await.unwrap().len(), 1);
    db.sql(
        "INSERT INTO idmint_namespaces_audit (subject, at_unix_ms, event, a, b, holder) \
         VALUES ('-bad name', 1, 'granted', 1, 2, 'x')",
    )
    .unwrap();
    assert!(matches!(
        log.subjects().await,
        Err(StoreError::Corrupt { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Worker leases (the properties run as `mysql_leases::…` and `mysql_ticket_leases::…`)

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

/// The remaining whole seconds of `(group, worker)`'s lease by the server's clock, read with
/// SQL.
fn seconds_left(db: &TempDatabase, group: &str, worker: u64) -> i64 {
    db.sql(&format!(
        "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), expires_at) \
         FROM idmint_namespaces_leases WHERE grp = '{group}' AND worker = {worker}"
    ))
    .unwrap()
    .trim()
    .parse()
    .unwrap()
}

/// Expiry is judged by the database's clock, never the node's: the stored expiry is the
/// server's UTC clock plus the TTL; when the database says it passed (moved with SQL, nothing
/// changed on the node) the worker id is taken over at once and the old holder is refused; and
/// an expiry the database puts a day ahead holds the worker id for that day, whatever TTL the
/// node asked for. Both modes store leases the same way.
#[tokio::test]
async fn lease_expiry_is_the_database_clock() {
    let db = TempDatabase::new();
    let block_mode: Arc<dyn Authority> = blocks(db.url()).await;
    let ticket_mode: Arc<dyn Authority> = tickets(db.url()).await;
    let hour = Duration::from_secs(3600);
    for (authority, group) in [(block_mode, "clock_blocks"), (ticket_mode, "clock_tickets")] {
        let leases = authority.worker_leases().unwrap();
        let g = name(group);
        let old = leases
            .acquire(&lease_request(&g, 0, "old", hour))
            .await
            .unwrap();
        let left = seconds_left(&db, group, 0);
        assert!((3500..=3600).contains(&left), "{group}: {left} s left");
        let (_, slots) = leases.group(&g).await.unwrap().unwrap();
        let expires_in = slots[0].expires_in.unwrap();
        assert!(expires_in <= hour && expires_in > hour - Duration::from_secs(100));
        assert!(matches!(
            leases.acquire(&lease_request(&g, 0, "new", hour)).await,
            Err(LeaseError::Held { .. })
        ));

        db.sql(&format!(
            "UPDATE idmint_namespaces_leases SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND \
             WHERE grp = '{group}'"
        ))
        .unwrap();
        let (_, slots) = leases.group(&g).await.unwrap().unwrap();
        assert!(!slots[0].is_live(), "{group}: {slots:?}");
        let new = leases
            .acquire(&lease_request(&g, 0, "new", hour))
            .await
            .unwrap();
        assert!(new.token > old.token);
        assert!(matches!(
            leases.renew(&old, 1).await,
            Err(LeaseError::Superseded { current, .. }) if current == new.token
        ));

        db.sql(&format!(
            "UPDATE idmint_namespaces_leases SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 DAY \
             WHERE grp = '{group}'"
        ))
        .unwrap();
        let (_, slots) = leases.group(&g).await.unwrap().unwrap();
        assert!(slots[0].expires_in.unwrap() > hour * 23, "{slots:?}");

        // A release clears the expiry: NULL in the table, free at once.
        leases.release(&new, 42).await.unwrap();
        let row = db
            .sql(&format!(
                "SELECT expires_at IS NULL, floor_unix_ms FROM idmint_namespaces_leases \
                 WHERE grp = '{group}' AND worker = 0"
            ))
            .unwrap();
        assert_eq!(row.trim(), "1\t42");
    }
}

/// Guards against InnoDB deadlocks (1213) between concurrent first acquisitions of one
/// group and of neighbouring groups (gap locks): every one of 2 authorities x 8 tasks x 5
/// groups gets its lease, and no worker id is granted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_acquisitions_survive_deadlocks() {
    let db = TempDatabase::new();
    let (a, b) = (blocks(db.url()).await, blocks(db.url()).await);
    let mut tasks = Vec::new();
    for t in 0..16u64 {
        let authority = if t % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let leases = authority.worker_leases().unwrap();
            let mut got = Vec::new();
            for round in 0..5 {
                let mut request = lease_request(
                    &name(&format!("g{round}")),
                    0,
                    &format!("t{t}"),
                    Duration::from_secs(60),
                );
                request.workers = 16;
                request.choice = WorkerChoice::LowestFree;
                let lease = leases
                    .acquire(&request)
                    .await
                    .unwrap_or_else(|e| panic!("task {t}, group g{round}: {e}"));
                got.push((round, lease.worker, lease.token));
            }
            got
        }));
    }
    let mut workers = HashSet::new();
    let mut tokens = HashSet::new();
    for task in tasks {
        for (round, worker, token) in task.await.unwrap() {
            assert!(
                workers.insert((round, worker)),
                "g{round} worker {worker} granted twice"
            );
            assert!(
                tokens.insert((round, token)),
                "g{round} token {token} granted twice"
            );
        }
    }
    assert_eq!(workers.len(), 80);
}

/// A table name without room for the lease tables' suffixes still serves sequences; its
/// lease operations are `InvalidSetup`, saying why.
#[tokio::test]
async fn a_table_name_too_long_for_leases_serves_sequences_only() {
    let db = TempDatabase::new();
    let mut c = config(db.url());
    c.table = "t".repeat(60);
    let a = MysqlAuthority::connect(c).await.unwrap();
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
}

/// A renewal racing a takeover of its expired lease ends with one holder: either the renewal
/// comes first (the takeover then finds the lease live: `Held`) or the takeover does (the
/// renewal then finds another token: `Superseded`), never both `Ok`. Guards the locking read an
/// acquisition makes of the group's slots: a plain read let a renewal committed between the
/// takeover's read and its write be overwritten while its holder was told `Ok`. The test holds
/// the slot's row lock until both wait for it, then lets them race, 8 times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_racing_a_takeover_never_leaves_two_holders() {
    use mysql_async::prelude::Queryable;
    let db = TempDatabase::new();
    // The operations wait for the test's lock: give them time on a loaded machine.
    let mut slow = config(db.url());
    slow.op_timeout = Duration::from_secs(120);
    let a: Arc<dyn Authority> = Arc::new(MysqlAuthority::connect(slow).await.unwrap());
    let mut conn = mysql_async::Conn::from_url(db.url()).await.unwrap();
    let hour = Duration::from_secs(3600);
    for round in 0..8 {
        let g = name(&format!("race{round}"));
        let old = a
            .worker_leases()
            .unwrap()
            .acquire(&lease_request(&g, 0, "old", hour))
            .await
            .unwrap();
        conn.exec_drop(
            "UPDATE idmint_namespaces_leases \
             SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE grp = ?",
            (g.as_str(),),
        )
        .await
        .unwrap();
        conn.query_drop("START TRANSACTION").await.unwrap();
        let _: Vec<u64> = conn
            .exec(
                "SELECT worker FROM idmint_namespaces_leases WHERE grp = ? AND worker = 0 \
                 FOR UPDATE",
                (g.as_str(),),
            )
            .await
            .unwrap();
        let (a1, a2, g1) = (a.clone(), a.clone(), g.clone());
        let takeover = tokio::spawn(async move {
            let request = lease_request(&g1, 0, "new", hour);
            a1.worker_leases().unwrap().acquire(&request).await
        });
        let renewal = tokio::spawn(async move { a2.worker_leases().unwrap().renew(&old, 5).await });
        // Both wait once two statements of this database stay in flight (for five polls in a
        // row, 50 ms: the takeover's first statements do not wait).
        let mut seen = 0;
        let what = format!("round {round}: both statements waiting");
        wait::until_async(what, Duration::from_secs(100), async || {
            let in_flight: Option<u64> = conn
                .query_first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                     WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND INFO IS NOT NULL",
                )
                .await
                .unwrap();
            seen = if in_flight == Some(2) { seen + 1 } else { 0 };
            assert!(
                !takeover.is_finished() && !renewal.is_finished(),
                "round {round}: {in_flight:?} in flight, one of them ended"
            );
            seen >= 5
        })
        .await;
        conn.query_drop("COMMIT").await.unwrap();
        let (takeover, renewal) = (takeover.await.unwrap(), renewal.await.unwrap());
        match (&takeover, &renewal) {
            (Ok(new), Err(LeaseError::Superseded { current, .. })) if *current == new.token => {}
            (Err(LeaseError::Held { holder, .. }), Ok(_)) if holder == "old" => {}
            other => panic!("round {round}: two holders or an unexpected outcome: {other:?}"),
        }
    }
}
