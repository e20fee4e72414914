//! [`MultiAuthority`] over real backends: Flickr's odd/even servers generalised, with every
//! member a real PostgreSQL database or a real private MariaDB server.
//!
//! What is checked (docs/design.md invariants 1, 2 and 5):
//! - concurrent reservations through one multi authority get disjoint blocks, each of one
//!   member's residue class, and round-robin uses every member;
//! - each member's durable watermark is exactly past the blocks it granted (nothing lost,
//!   nothing granted twice);
//! - a member that is cut off (proxy) or killed (SIGKILL) is skipped: reservations keep
//!   succeeding from the other member, and the cut member is used again, by itself, once it is
//!   back;
//! - a namespace is created only while every member answers, and a member that lost its record
//!   under load (PostgreSQL row deleted, ticket table dropped) is taken out of service and its
//!   record never re-created;
//! - a member that cannot be reached when `connect` starts the multi authority does not stop
//!   it: the other member serves, and the first is connected and used once it answers;
//! - a tail is handed back to the member owning its class, and only there;
//! - set-ups whose members could collide are refused.
//!
//! Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust) and MariaDB's `mariadbd` and
//! `mariadb-install-db` binaries (private servers; the system MariaDB is not used). Every
//! test has its own databases or servers. No test sleeps to order events: waits poll a
//! condition against a deadline.

#![cfg(all(feature = "postgres", feature = "mysql"))]
#![allow(clippy::unwrap_used)]

use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use idmint_store::mysql::{MysqlAuthority, MysqlConfig, MysqlTicketAuthority};
use idmint_store::postgres::{PostgresAuthority, PostgresConfig};
use idmint_store::{Authority, GiveBack, Members, MemoryAuthority, MultiAuthority, StoreError};
use idmint_testkit::mysql::{self as my, PrivateMariadb};
use idmint_testkit::postgres::TempDatabase;
use idmint_testkit::proxy::{Fault, FaultProxy};
use idmint_testkit::wait;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bound on every backend operation: short enough for cut members to be skipped quickly, long
/// enough for a loaded 2-core machine.
const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a polled condition may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

fn name(s: &str) -> NamespaceName {
    NamespaceName::new(s).unwrap()
}

/// 64-bit ids from 1, step 2: the namespace-level spec (the members get offsets 1 and 0).
fn odd_even_spec() -> SequenceSpec {
    SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap()
}

async fn postgres(url: String) -> Arc<dyn Authority> {
    let mut config = PostgresConfig::new(url);
    config.op_timeout = OP_TIMEOUT;
    Arc::new(
        PostgresAuthority::connect(config)
            .await
            .unwrap_or_else(|e| panic!("connecting to PostgreSQL failed: {e}")),
    )
}

fn mysql_config(url: String) -> MysqlConfig {
    let mut config = MysqlConfig::new(url);
    config.op_timeout = OP_TIMEOUT;
    config
}

async fn mysql_blocks(url: String) -> Arc<dyn Authority> {
    Arc::new(
        MysqlAuthority::connect(mysql_config(url))
            .await
            .unwrap_or_else(|e| panic!("connecting the block-mode authority failed: {e}")),
    )
}

async fn mysql_tickets(url: String) -> Arc<dyn Authority> {
    Arc::new(
        MysqlTicketAuthority::connect(mysql_config(url))
            .await
            .unwrap_or_else(|e| panic!("connecting the ticket-mode authority failed: {e}")),
    )
}

async fn start_mariadb(increment: u32, offset: u32) -> PrivateMariadb {
    tokio::task::spawn_blocking(move || PrivateMariadb::start(increment, offset))
        .await
        .unwrap()
}

async fn mariadb_database(server: &PrivateMariadb) -> my::TempDatabase {
    // The test kit runs the command-line client (blocking): keep the runtime's other work going.
    tokio::task::block_in_place(|| my::TempDatabase::on(server))
}

fn multi(members: Vec<(Arc<dyn Authority>, u64)>) -> Arc<MultiAuthority> {
    Arc::new(MultiAuthority::new(members).unwrap())
}

/// `tasks` concurrent tasks each making `per_task` reservations of 1..=`max_count` ids; every
/// reservation must succeed. Returns, per task, the blocks in the order it got them.
async fn hammer(
    authority: Arc<dyn Authority>,
    ns: &NamespaceName,
    tasks: u64,
    per_task: u64,
    max_count: u64,
) -> Vec<Vec<(u64, Block)>> {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let authority = authority.clone();
        let ns = ns.clone();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for i in 0..per_task {
                let count = 1 + (t * 13 + i * 7) % max_count;
                match authority.reserve(&ns, count).await {
                    Ok(r) => {
                        assert_eq!(r.watermark, r.block.end(), "{r:?}");
                        got.push((count, r.block));
                    }
                    Err(e) => panic!("task {t}, reservation {i} of {count} ids failed: {e}"),
                }
            }
            got
        }));
    }
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// Checks blocks from a multi authority whose members own `offsets` (of step `step`):
/// pairwise disjoint, each of one member's class, each member's stream increasing as every task
/// saw it. Returns the blocks grouped by class.
fn check_blocks(
    what: &str,
    per_task: &[Vec<(u64, Block)>],
    step: u64,
    offsets: &[u64],
) -> BTreeMap<u64, Vec<Block>> {
    let mut ids = HashSet::new();
    let mut by_class: BTreeMap<u64, Vec<Block>> = offsets.iter().map(|o| (*o, vec![])).collect();
    for (t, got) in per_task.iter().enumerate() {
        let mut last_in_class: BTreeMap<u64, u64> = BTreeMap::new();
        for (_, block) in got {
            assert_eq!(block.step(), step, "{what}: {block:?} has another step");
            let class = block.start() % step;
            let Some(blocks) = by_class.get_mut(&class) else {
                panic!("{what}: {block:?} is of class {class}, which no member owns");
            };
            blocks.push(*block);
            for id in block.ids() {
                assert_eq!(id % step, class, "{what}: {id} of {block:?} left its class");
                assert!(ids.insert(id), "{what}: id {id} handed out twice");
            }
            if let Some(prev) = last_in_class.insert(class, block.last()) {
                assert!(
                    block.start() > prev,
                    "{what}: task {t} got {block:?} after id {prev} from the same member"
                );
            }
        }
    }
    by_class
}

/// Asserts that `member`'s durable state records exactly the ids of `blocks` as used: every
/// block it granted is below its watermark, and nothing else was reserved.
async fn assert_member_used_exactly(
    what: &str,
    member: &dyn Authority,
    ns: &NamespaceName,
    blocks: &[Block],
) {
    let state = member.state(ns).await.unwrap().unwrap();
    let granted: u64 = blocks.iter().map(|b| b.len()).sum();
    assert_eq!(
        state.ids_used(),
        granted,
        "{what}: the member's watermark {} does not match the {granted} ids it granted",
        state.watermark
    );
    if let Some(top) = blocks.iter().map(|b| b.end()).max() {
        assert_eq!(
            state.watermark, top,
            "{what}: watermark past the newest block"
        );
    }
}

/// Reserves until a block of `class` appears (or the deadline passes); returns every block got
/// on the way, the one of `class` last.
async fn reserve_until_class(
    authority: &dyn Authority,
    ns: &NamespaceName,
    step: u64,
    class: u64,
) -> Vec<Block> {
    let mut got = Vec::new();
    wait::until_async(format!("a block of class {class}"), DEADLINE, async || {
        let r = authority.reserve(ns, 3).await.unwrap_or_else(|e| {
            panic!("a reservation failed while waiting for class {class}: {e}")
        });
        got.push(r.block);
        r.block.start() % step == class
    })
    .await;
    got
}

// ---------------------------------------------------------------------------------------------
// Round-robin over real members

/// Two PostgreSQL databases, offsets 1 and 0 of step 2: 8 tasks x 200 concurrent reservations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_members_share_a_namespace_without_collisions() {
    let (odd_db, even_db) = tokio::join!(TempDatabase::create(), TempDatabase::create());
    let (odd, even) = (postgres(odd_db.url()).await, postgres(even_db.url()).await);
    let multi = multi(vec![(odd.clone(), 1), (even.clone(), 0)]);
    let ns = name("photos");
    let state = multi.ensure_namespace(&ns, odd_even_spec()).await.unwrap();
    assert_eq!(state.spec, odd_even_spec(), "the namespace-level spec");
    // Each member has it with its own offset.
    let odd_state = odd.state(&ns).await.unwrap().unwrap();
    let even_state = even.state(&ns).await.unwrap().unwrap();
    assert_eq!((odd_state.spec.step(), odd_state.spec.offset()), (2, 1));
    assert_eq!((even_state.spec.step(), even_state.spec.offset()), (2, 0));
    // Ensuring again is a no-op.
    assert_eq!(
        multi.ensure_namespace(&ns, odd_even_spec()).await.unwrap(),
        state
    );

    let per_task = hammer(multi.clone(), &ns, 8, 200, 50).await;
    for got in &per_task {
        for (count, block) in got {
            assert_eq!(block.len(), *count, "block mode grants the whole count");
        }
    }
    let by_class = check_blocks("two postgres members", &per_task, 2, &[1, 0]);
    let (n_odd, n_even) = (by_class[&1].len(), by_class[&0].len());
    println!("postgres members: {n_odd} reservations from the odd one, {n_even} from the even one");
    // Round-robin: without failures each member gets every other reservation; allow slack.
    assert!(
        n_odd >= 400 && n_even >= 400,
        "round-robin must use both members: {n_odd} odd, {n_even} even"
    );
    assert_member_used_exactly("odd member", &*odd, &ns, &by_class[&1]).await;
    assert_member_used_exactly("even member", &*even, &ns, &by_class[&0]).await;
    // The combined state reports the higher member watermark.
    let combined = multi.state(&ns).await.unwrap().unwrap();
    let top = by_class.values().flatten().map(|b| b.end()).max().unwrap();
    assert_eq!(combined.watermark, top);
    assert_eq!(combined.spec, odd_even_spec());
    let listed = multi.list().await.unwrap();
    assert_eq!(listed, vec![combined]);
}

/// Two real MariaDB servers (Flickr's `auto-increment-increment = 2`, offsets 1 and 2), each a
/// member in block mode and in ticket mode; then one server is killed and both multi
/// authorities keep serving from the other without a single failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_servers_share_a_namespace_and_survive_one_dying() {
    let (odd_server, even_server) = tokio::join!(start_mariadb(2, 1), start_mariadb(2, 2));
    let mut odd_server = odd_server;
    let (odd_blocks_db, even_blocks_db) = (
        mariadb_database(&odd_server).await,
        mariadb_database(&even_server).await,
    );
    let (odd_tickets_db, even_tickets_db) = (
        mariadb_database(&odd_server).await,
        mariadb_database(&even_server).await,
    );
    let ns = name("tickets64");

    // Block mode: the servers' auto-increment settings play no part, the offsets do.
    let odd_blocks = mysql_blocks(odd_blocks_db.url()).await;
    let even_blocks = mysql_blocks(even_blocks_db.url()).await;
    let blocks = multi(vec![(odd_blocks.clone(), 1), (even_blocks.clone(), 0)]);
    blocks.ensure_namespace(&ns, odd_even_spec()).await.unwrap();
    let per_task_blocks = hammer(blocks.clone(), &ns, 8, 200, 50).await;
    let by_class = check_blocks(
        "two mariadb servers, block mode",
        &per_task_blocks,
        2,
        &[1, 0],
    );
    let (n_odd, n_even) = (by_class[&1].len(), by_class[&0].len());
    println!(
        "mariadb block mode: {n_odd} reservations from the odd server, {n_even} from the even one"
    );
    assert!(
        n_odd >= 400 && n_even >= 400,
        "round-robin must use both members: {n_odd} odd, {n_even} even"
    );
    assert_member_used_exactly("odd server", &*odd_blocks, &ns, &by_class[&1]).await;
    assert_member_used_exactly("even server", &*even_blocks, &ns, &by_class[&0]).await;

    // Ticket mode: one id per reservation, from REPLACE INTO on the server's own class.
    let odd_tickets = mysql_tickets(odd_tickets_db.url()).await;
    let even_tickets = mysql_tickets(even_tickets_db.url()).await;
    let tickets = multi(vec![(odd_tickets.clone(), 1), (even_tickets.clone(), 0)]);
    tickets
        .ensure_namespace(&ns, odd_even_spec())
        .await
        .unwrap();
    let per_task = hammer(tickets.clone(), &ns, 4, 50, 5).await;
    for got in &per_task {
        for (_, block) in got {
            assert_eq!(block.len(), 1, "ticket mode grants one id per call");
        }
    }
    let by_class = check_blocks("two mariadb servers, ticket mode", &per_task, 2, &[1, 0]);
    for (class, first) in [(1u64, 1u64), (0, 2)] {
        // Each server issued its class densely (1, 3, 5, … and 2, 4, 6, …).
        let mut ids: Vec<u64> = by_class[&class].iter().map(|b| b.start()).collect();
        ids.sort_unstable();
        assert!(ids.len() >= 50, "class {class} barely used: {}", ids.len());
        assert!(
            ids.iter().zip(0u64..).all(|(id, i)| *id == first + 2 * i),
            "server of class {class} skipped ids: {ids:?}"
        );
    }

    // The odd server dies (SIGKILL). Both multi authorities keep serving, all from the even
    // server, with zero failures; the dead member is retried every 500 ms and skipped.
    odd_server.kill();
    assert!(!odd_server.is_running());
    let (mut blocks_after, mut tickets_after) = (Vec::new(), Vec::new());
    for i in 0..60u64 {
        let count = 1 + i % 7;
        let r = blocks
            .reserve(&ns, count)
            .await
            .unwrap_or_else(|e| panic!("block-mode reservation {i} after the kill failed: {e}"));
        assert_eq!(r.block.start() % 2, 0, "{:?} from the dead server", r.block);
        blocks_after.push((count, r.block));
        let r = tickets
            .reserve(&ns, 1)
            .await
            .unwrap_or_else(|e| panic!("ticket-mode reservation {i} after the kill failed: {e}"));
        assert_eq!(r.block.start() % 2, 0, "{:?} from the dead server", r.block);
        tickets_after.push((1, r.block));
    }
    // Still disjoint from everything granted before the kill, each mode its own namespace.
    let mut blocks_all = per_task_blocks;
    blocks_all.push(blocks_after);
    let by_class = check_blocks("block mode, after the kill", &blocks_all, 2, &[1, 0]);
    assert_member_used_exactly("even server", &*even_blocks, &ns, &by_class[&0]).await;
    let mut tickets_all = per_task;
    tickets_all.push(tickets_after);
    check_blocks("ticket mode, after the kill", &tickets_all, 2, &[1, 0]);
    // The combined state answers from the reachable member.
    let combined = blocks.state(&ns).await.unwrap().unwrap();
    assert_eq!(
        combined.watermark,
        even_blocks.state(&ns).await.unwrap().unwrap().watermark
    );
    drop((odd_blocks_db, odd_tickets_db));
    drop((even_blocks_db, even_tickets_db));
}

// ---------------------------------------------------------------------------------------------
// Members going down and coming back

/// Two PostgreSQL members behind proxies. While the odd member is cut off, every reservation
/// succeeds from the even member (zero failures), for long enough that the odd one is retried
/// several times; once the cut is lifted the odd member is used again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_member_is_skipped_then_used_again() {
    let (odd_db, even_db) = tokio::join!(TempDatabase::create(), TempDatabase::create());
    let odd_proxy = FaultProxy::start(odd_db.server_addr()).await.unwrap();
    let even_proxy = FaultProxy::start(even_db.server_addr()).await.unwrap();
    let odd = postgres(odd_db.url_via(odd_proxy.addr())).await;
    let even = postgres(even_db.url_via(even_proxy.addr())).await;
    let multi = multi(vec![(odd.clone(), 1), (even.clone(), 0)]);
    let ns = name("orders");
    // An earlier run set the namespace up on both members (a namespace is created only while
    // every member answers).
    for (url, offset) in [(odd_db.url(), 1), (even_db.url(), 0)] {
        let spec = SequenceSpec::new(Width::Bits64, 1, 2, offset).unwrap();
        postgres(url)
            .await
            .ensure_namespace(&ns, spec)
            .await
            .unwrap();
    }
    multi.ensure_namespace(&ns, odd_even_spec()).await.unwrap();
    let mut all = Vec::new();
    for _ in 0..10 {
        all.push(multi.reserve(&ns, 10).await.unwrap().block);
    }
    assert!(all.iter().any(|b| b.start() % 2 == 1) && all.iter().any(|b| b.start() % 2 == 0));
    let odd_before = odd.state(&ns).await.unwrap().unwrap().watermark;

    odd_proxy.set_fault(Fault::Cut);
    // At least 1.5 s of reservations (the odd member is retried every 500 ms meanwhile).
    let started = Instant::now();
    let mut during_cut = 0u64;
    while started.elapsed() < Duration::from_millis(1500) || during_cut < 100 {
        let r = multi
            .reserve(&ns, 10)
            .await
            .unwrap_or_else(|e| panic!("reservation {during_cut} during the cut failed: {e}"));
        assert_eq!(r.block.start() % 2, 0, "{:?} from the cut member", r.block);
        all.push(r.block);
        during_cut += 1;
        assert!(started.elapsed() < DEADLINE, "reservations too slow");
    }
    println!(
        "{during_cut} reservations in {:?} while the odd member was cut off",
        started.elapsed()
    );

    odd_proxy.set_fault(Fault::None);
    let came_back = Instant::now();
    let got = reserve_until_class(&*multi, &ns, 2, 1).await;
    println!(
        "the odd member served again after {:?}",
        came_back.elapsed()
    );
    let back = *got.last().unwrap();
    assert!(
        back.start() >= odd_before,
        "the odd member's new block {back:?} is below its watermark {odd_before}"
    );
    all.extend(got);
    // And round-robin resumes: both classes again.
    let mut classes = HashSet::new();
    for _ in 0..10 {
        let b = multi.reserve(&ns, 10).await.unwrap().block;
        classes.insert(b.start() % 2);
        all.push(b);
    }
    assert_eq!(classes.len(), 2, "round-robin after recovery");
    check_blocks(
        "cut and back",
        &[all.iter().map(|b| (0, *b)).collect()],
        2,
        &[1, 0],
    );
    let (odd_blocks, even_blocks): (Vec<Block>, Vec<Block>) =
        all.iter().partition(|b| b.start() % 2 == 1);
    assert_member_used_exactly("odd member", &*odd, &ns, &odd_blocks).await;
    assert_member_used_exactly("even member", &*even, &ns, &even_blocks).await;
}

/// A new namespace is created on every member at once or not at all: with one member cut off
/// the set-up fails naming it and leaves nothing behind; once it answers, both members get it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_is_created_only_while_every_member_answers() {
    let (odd_db, even_db) = tokio::join!(TempDatabase::create(), TempDatabase::create());
    let odd_proxy = FaultProxy::start(odd_db.server_addr()).await.unwrap();
    let odd = postgres(odd_db.url_via(odd_proxy.addr())).await;
    let even = postgres(even_db.url()).await;
    let multi = multi(vec![(odd.clone(), 1), (even.clone(), 0)]);
    let ns = name("late");

    odd_proxy.set_fault(Fault::Cut);
    let err = multi
        .ensure_namespace(&ns, odd_even_spec())
        .await
        .unwrap_err();
    assert!(
        err.is_unavailable() && err.to_string().contains("member 1 (postgres)"),
        "{err}"
    );
    assert_eq!(
        even.state(&ns).await.unwrap(),
        None,
        "created on one member"
    );

    odd_proxy.set_fault(Fault::None);
    wait::until_async(
        "the namespace set up once both answer",
        DEADLINE,
        async || multi.ensure_namespace(&ns, odd_even_spec()).await.is_ok(),
    )
    .await;
    let (odd_state, even_state) = (
        odd.state(&ns).await.unwrap().unwrap(),
        even.state(&ns).await.unwrap().unwrap(),
    );
    assert_eq!((odd_state.spec.step(), odd_state.spec.offset()), (2, 1));
    assert_eq!((even_state.spec.step(), even_state.spec.offset()), (2, 0));
}

/// Guards against a member that lost its row being re-created at its first id (re-issuing
/// 1, 3, 5, ...), with two PostgreSQL members: the odd member's row is deleted while
/// reservations run (a restored empty backup, a wrong database). The member is taken out of
/// service with a reason, its row is never re-created, the even member keeps serving, and no
/// id repeats; a restarted multi authority finds it missing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_member_whose_row_is_deleted_under_load_is_taken_out() {
    let (odd_db, even_db) = tokio::join!(TempDatabase::create(), TempDatabase::create());
    let odd = postgres(odd_db.url()).await;
    let even = postgres(even_db.url()).await;
    let ns = name("orders");
    let first = multi(vec![(odd.clone(), 1), (even.clone(), 0)]);
    first.ensure_namespace(&ns, odd_even_spec()).await.unwrap();
    let before = hammer(first.clone(), &ns, 4, 25, 5).await;

    let load = {
        let first = first.clone();
        let ns = ns.clone();
        tokio::spawn(async move { hammer(first, &ns, 4, 50, 5).await })
    };
    odd_db
        .client()
        .await
        .execute(
            "DELETE FROM idmint_namespaces WHERE name = $1",
            &[&"orders"],
        )
        .await
        .unwrap();
    let during = load.await.unwrap();
    let after = hammer(first.clone(), &ns, 2, 50, 5).await;
    let why = first.health()[0].out_of_service.clone();
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("no record of namespace orders")),
        "the odd member was not taken out: {why:?}"
    );

    // A restart: the odd member is found missing again and never used.
    let second = multi(vec![(odd.clone(), 1), (even.clone(), 0)]);
    second.ensure_namespace(&ns, odd_even_spec()).await.unwrap();
    let restarted = hammer(second.clone(), &ns, 2, 20, 5).await;
    assert!(second.health()[0].out_of_service.is_some());
    assert_eq!(
        odd.state(&ns).await.unwrap(),
        None,
        "the lost row was re-created"
    );

    let mut all: Vec<Vec<(u64, Block)>> = Vec::new();
    all.extend(before);
    all.extend(during);
    all.extend(after);
    all.extend(restarted);
    // Each task's stream is checked per class; uniqueness across every task.
    check_blocks("row deleted under load", &all, 2, &[1, 0]);
}

/// The same in Flickr's ticket mode (two private MariaDB ticket servers): the odd server's
/// ticket table is dropped under load. The member is taken out, the table is never
/// re-created, and no id repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_ticket_member_whose_table_is_dropped_under_load_is_taken_out() {
    let (odd_server, even_server) = tokio::join!(start_mariadb(2, 1), start_mariadb(2, 2));
    let (odd_db, even_db) = (
        mariadb_database(&odd_server).await,
        mariadb_database(&even_server).await,
    );
    let odd = mysql_tickets(odd_db.url()).await;
    let even = mysql_tickets(even_db.url()).await;
    let ns = name("orders");
    let tickets = multi(vec![(odd.clone(), 1), (even.clone(), 0)]);
    tickets
        .ensure_namespace(&ns, odd_even_spec())
        .await
        .unwrap();
    let before = hammer(tickets.clone(), &ns, 4, 25, 1).await;
    let load = {
        let tickets = tickets.clone();
        let ns = ns.clone();
        tokio::spawn(async move { hammer(tickets, &ns, 4, 50, 1).await })
    };
    let table = idmint_store::mysql::ticket_table_name(&ns);
    tokio::task::block_in_place(|| odd_db.sql(&format!("DROP TABLE `{table}`")))
        .unwrap_or_else(|e| panic!("dropping {table}: {e}"));
    let during = load.await.unwrap();
    let after = hammer(tickets.clone(), &ns, 2, 50, 1).await;
    let why = tickets.health()[0].out_of_service.clone();
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("no record of namespace orders")),
        "the odd member was not taken out: {why:?}"
    );
    assert_eq!(
        odd.state(&ns).await.unwrap(),
        None,
        "the table was re-created"
    );
    let mut all = Vec::new();
    all.extend(before);
    all.extend(during);
    all.extend(after);
    check_blocks("ticket table dropped under load", &all, 2, &[1, 0]);
}

// ---------------------------------------------------------------------------------------------
// Give-back and set-up

/// Guards against a member down at start-up stopping the node ("authority member 1 …
/// Connection refused"): `connect` starts a multi authority with one member unreachable (its proxy cut), shows it down with its error,
/// serves from the other, and uses the first again, by itself, once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_down_at_start_is_connected_once_it_answers() {
    use idmint_store::config::{AuthorityConfig, MemberConfig, MultiConfig};
    let (odd_db, even_db) = tokio::join!(TempDatabase::create(), TempDatabase::create());
    let odd_proxy = FaultProxy::start(odd_db.server_addr()).await.unwrap();
    odd_proxy.set_fault(Fault::Cut);
    let member = |url: String, offset| {
        let mut config = PostgresConfig::new(url);
        config.op_timeout = OP_TIMEOUT;
        MemberConfig {
            offset,
            authority: AuthorityConfig::Postgres(config),
        }
    };
    let config = AuthorityConfig::Multi(
        MultiConfig::new(vec![
            member(odd_db.url_via(odd_proxy.addr()), 1),
            member(even_db.url(), 0),
        ])
        .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let multi = idmint_store::connect(&config, dir.path())
        .await
        .unwrap_or_else(|e| panic!("a multi authority with one member down did not start: {e}"));
    let members = multi.members().expect("a multi authority").health();
    assert_eq!(
        (members[0].number, members[0].kind, members[0].up),
        (1, "postgres", false),
        "{members:?}"
    );
    assert!(
        members[0].last_error.is_some() && members[1].up,
        "{members:?}"
    );

    let ns = name("orders");
    // An earlier run set the namespace up on both members (a namespace is created only while
    // every member answers).
    for (url, offset) in [(odd_db.url(), 1), (even_db.url(), 0)] {
        let spec = SequenceSpec::new(Width::Bits64, 1, 2, offset).unwrap();
        postgres(url)
            .await
            .ensure_namespace(&ns, spec)
            .await
            .unwrap();
    }
    multi.ensure_namespace(&ns, odd_even_spec()).await.unwrap();
    let mut all = Vec::new();
    for _ in 0..10 {
        let r = multi.reserve(&ns, 10).await.unwrap();
        assert_eq!(r.block.start() % 2, 0, "{:?} from the cut member", r.block);
        all.push(r.block);
    }

    odd_proxy.set_fault(Fault::None);
    let came_back = Instant::now();
    all.extend(reserve_until_class(&*multi, &ns, 2, 1).await);
    println!("the odd member served after {:?}", came_back.elapsed());
    let members = multi.members().expect("a multi authority").health();
    assert!(members.iter().all(|m| m.up), "{members:?}");
    check_blocks(
        "down at start, then back",
        &[all.iter().map(|b| (0, *b)).collect()],
        2,
        &[1, 0],
    );
    let odd = postgres(odd_db.url()).await;
    let odd_blocks: Vec<Block> = all.iter().filter(|b| b.start() % 2 == 1).copied().collect();
    assert_member_used_exactly("odd member", &*odd, &ns, &odd_blocks).await;
}

/// A tail goes back to the member owning its class (verified on that member's own state), the
/// other member is untouched, and a tail no member owns is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn give_back_goes_to_the_member_owning_the_class() {
    let (odd_db, even_db) = tokio::join!(TempDatabase::create(), TempDatabase::create());
    let (odd, even) = (postgres(odd_db.url()).await, postgres(even_db.url()).await);
    let multi = multi(vec![(odd.clone(), 1), (even.clone(), 0)]);
    let ns = name("returns");
    multi.ensure_namespace(&ns, odd_even_spec()).await.unwrap();

    for (class, owner, other) in [(1u64, &odd, &even), (0, &even, &odd)] {
        // The newest block of this class (reserved last on its member).
        let got = reserve_until_class(&*multi, &ns, 2, class).await;
        let block = *got.last().unwrap();
        let owner_before = owner.state(&ns).await.unwrap().unwrap().watermark;
        let other_before = other.state(&ns).await.unwrap().unwrap().watermark;
        assert_eq!(owner_before, block.end());
        assert!(block.len() >= 2, "{block:?}");
        let tail = Block::new(block.start() + 2, block.end(), 2).unwrap();

        assert_eq!(
            multi.give_back(&ns, tail).await.unwrap(),
            GiveBack::Returned
        );
        assert_eq!(
            owner.state(&ns).await.unwrap().unwrap().watermark,
            tail.start(),
            "class {class}: the owning member's watermark went back to the tail's start"
        );
        assert_eq!(
            other.state(&ns).await.unwrap().unwrap().watermark,
            other_before,
            "class {class}: the other member is untouched"
        );
        // Handing it back again is refused (compare-and-swap), nothing changes.
        assert_eq!(
            multi.give_back(&ns, tail).await.unwrap(),
            GiveBack::Refused {
                watermark: tail.start()
            }
        );
        // The owner's next block starts at the returned tail.
        let again = reserve_until_class(&*multi, &ns, 2, class).await;
        assert_eq!(again.last().unwrap().start(), tail.start());
    }

    // A tail of another step: routed by `start % step`, refused either by the member (wrong
    // step) or because no member owns class 2 of step 3.
    for start in [30u64, 31, 32] {
        let foreign = Block::new(start, start + 9, 3).unwrap();
        match multi.give_back(&ns, foreign).await {
            Err(StoreError::InvalidTail { .. }) => {}
            other => panic!("{foreign:?} must be InvalidTail, got {other:?}"),
        }
    }
    // A tail that is not the newest block's is refused, nothing changes.
    let odd_now = odd.state(&ns).await.unwrap().unwrap().watermark;
    let stale = Block::new(1, 5, 2).unwrap();
    assert_eq!(
        multi.give_back(&ns, stale).await.unwrap(),
        GiveBack::Refused { watermark: odd_now }
    );
}

/// Set-ups that could hand out an id twice are refused: one member, equal offsets, an offset
/// that is not below the namespace's step (it would share a class with another member).
#[tokio::test]
async fn setups_that_could_collide_are_refused() {
    // These checks happen before any member is used: in-memory members stand in.
    let member = || -> Arc<dyn Authority> { Arc::new(MemoryAuthority::new()) };
    let invalid = |r: Result<MultiAuthority, StoreError>, what: &str| match r {
        Err(StoreError::InvalidSetup { message }) => assert!(!message.is_empty()),
        other => panic!("{what}: expected InvalidSetup, got {other:?}"),
    };
    invalid(MultiAuthority::new(vec![]), "no member");
    invalid(MultiAuthority::new(vec![(member(), 0)]), "a single member");
    invalid(
        MultiAuthority::new(vec![(member(), 1), (member(), 1)]),
        "duplicate offsets",
    );
    invalid(
        MultiAuthority::new(vec![(member(), 0), (member(), 1), (member(), 0)]),
        "duplicate offsets among three",
    );

    // Offsets 0 and 2 with step 2 would both be class 0: the namespace is refused.
    let m = MultiAuthority::new(vec![(member(), 0), (member(), 2)]).unwrap();
    match m.ensure_namespace(&name("x"), odd_even_spec()).await {
        Err(StoreError::InvalidSetup { .. }) => {}
        other => panic!("offset 2 of step 2 must be InvalidSetup, got {other:?}"),
    }
    // With step 3 the same members are fine.
    let step3 = SequenceSpec::new(Width::Bits64, 1, 3, 0).unwrap();
    m.ensure_namespace(&name("y"), step3).await.unwrap();
}
