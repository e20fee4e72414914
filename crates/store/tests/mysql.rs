//! The MySQL/MariaDB authority against real servers: the conformance suite and the block
//! arithmetic's edges in block mode, Flickr ticket mode on two private odd/even servers (one of
//! them killed), and faults from a proxy (cut, stall, lost reply) in both modes.
//!
//! Needs MariaDB (or MySQL) on 127.0.0.1:3306, user root without password, for the
//! per-test databases, and the `mariadbd` / `mariadb-install-db` binaries for the private
//! servers. Start the system server with
//! `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`.
//! Every test has its own database (or its own servers), so they run in parallel.

#![cfg(feature = "mysql")]
#![allow(clippy::unwrap_used)]

use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use idmint_store::mysql::{MysqlAuthority, MysqlConfig, MysqlTicketAuthority};
use idmint_store::{conformance, Authority, GiveBack, StoreError};
use idmint_testkit::mysql::{PrivateMariadb, TempDatabase};
use idmint_testkit::proxy::{Fault, FaultProxy};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Panics unless the blocks are pairwise disjoint.
fn assert_disjoint(what: &str, blocks: &[Block]) {
    let mut ids = HashSet::new();
    for b in blocks {
        for id in b.ids() {
            assert!(ids.insert(id), "{what}: id {id} handed out twice");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Block mode

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn block_mode_conforms() {
    let db = TempDatabase::new();
    let url = db.url();
    conformance::run_all(move || blocks(url.clone())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn block_mode_odd_and_even_databases_never_collide() {
    let (odd, even) = (TempDatabase::new(), TempDatabase::new());
    conformance::step_and_offset_are_respected(blocks(odd.url()).await, blocks(even.url()).await)
        .await;
}

/// Two nodes (two authorities, two pools) reserving from one namespace at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_authorities_reserving_concurrently_never_overlap() {
    let db = TempDatabase::new();
    let nodes = [blocks(db.url()).await, blocks(db.url()).await];
    let ns = name("shared");
    let spec = SequenceSpec::new(Width::Bits64, 1, 1, 0).unwrap();
    for node in &nodes {
        node.ensure_namespace(&ns, spec).await.unwrap();
    }
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let node = nodes[(t % 2) as usize].clone();
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for i in 0..100u64 {
                let count = 1 + (t * 13 + i * 7) % 40;
                let r = node.reserve(&ns, count).await.unwrap();
                assert_eq!(r.block.len(), count);
                got.push(r.block);
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert_disjoint("two authorities", &all);
    let handed_out: u64 = all.iter().map(|b| b.len()).sum();
    let state = nodes[0].state(&ns).await.unwrap().unwrap();
    assert_eq!(
        state.ids_used(),
        handed_out,
        "no id lost: the watermark is exactly past every block"
    );
}

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
// Faults, both modes

/// The authority under test behind a proxy, with one namespace ready and warm (its spec cached
/// and a connection open, so that the next reserve is a single statement).
struct Faulty {
    _db: TempDatabase,
    proxy: FaultProxy,
    authority: Arc<dyn Authority>,
    ns: NamespaceName,
    spec: SequenceSpec,
    /// Ids a reserve of `count` gets (ticket mode: always 1).
    ids_per_reserve: fn(u64) -> u64,
}

async fn faulty(ticket_mode: bool) -> Faulty {
    let db = TempDatabase::new();
    let proxy = FaultProxy::start(db.socket_addr()).await.unwrap();
    let url = db.url_via_addr(proxy.addr());
    // The system server issues every id (increment 1): step 1 in both modes.
    let spec = SequenceSpec::new(Width::Bits64, 1, 1, 0).unwrap();
    let authority: Arc<dyn Authority> = if ticket_mode {
        tickets(url).await
    } else {
        blocks(url).await
    };
    let ns = name("faulty");
    authority.ensure_namespace(&ns, spec).await.unwrap();
    authority.reserve(&ns, 3).await.unwrap();
    Faulty {
        _db: db,
        proxy,
        authority,
        ns,
        spec,
        ids_per_reserve: if ticket_mode { |_| 1 } else { |count| count },
    }
}

async fn cut_is_unavailable_quickly_and_recovers(ticket_mode: bool) {
    let f = faulty(ticket_mode).await;
    f.proxy.set_fault(Fault::Cut);
    for _ in 0..2 {
        let started = Instant::now();
        let err = f.authority.reserve(&f.ns, 5).await.unwrap_err();
        assert!(err.is_unavailable(), "{err:?}");
        assert!(
            started.elapsed() < OP_TIMEOUT / 2,
            "a cut connection must fail fast, not wait for the timeout: {:?}",
            started.elapsed()
        );
    }
    f.proxy.set_fault(Fault::None);
    // The authority reconnects by itself: the very next call works.
    let r = f.authority.reserve(&f.ns, 5).await.unwrap();
    assert_eq!(r.block.len(), (f.ids_per_reserve)(5));
}

async fn stall_is_unavailable_within_the_timeout(ticket_mode: bool) {
    let f = faulty(ticket_mode).await;
    f.proxy.set_fault(Fault::Stall);
    let started = Instant::now();
    let err = f.authority.reserve(&f.ns, 5).await.unwrap_err();
    let took = started.elapsed();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("no answer within"), "{err}");
    assert!(
        took >= OP_TIMEOUT && took < OP_TIMEOUT + Duration::from_secs(1),
        "a stalled server is Unavailable after the timeout, took {took:?}"
    );
    f.proxy.set_fault(Fault::None);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match f.authority.reserve(&f.ns, 5).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => assert!(e.is_unavailable(), "{e:?}"),
            Err(e) => panic!("no recovery after the stall ended: {e}"),
        }
    }
}

/// The reply to a reserve is lost after the server committed it: the call fails, and the next
/// reserve gets a new block above the one the lost call was granted (which is burned).
async fn lost_reply_burns_the_block(ticket_mode: bool) {
    let f = faulty(ticket_mode).await;
    let before = f.authority.state(&f.ns).await.unwrap().unwrap().watermark;
    const LOST: u64 = 10;
    f.proxy.set_fault(Fault::DropNextReply);
    let err = f.authority.reserve(&f.ns, LOST).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert_eq!(f.proxy.fault(), Fault::None, "the reply was dropped");
    let after_lost = f.authority.state(&f.ns).await.unwrap().unwrap().watermark;
    let lost_end = before + (f.ids_per_reserve)(LOST) * f.spec.step();
    assert!(
        after_lost >= lost_end,
        "the lost call committed: watermark {after_lost} must be past {lost_end}"
    );
    let retried = f.authority.reserve(&f.ns, 5).await.unwrap();
    assert!(
        retried.block.start() >= lost_end,
        "the retried block {:?} overlaps the lost one [{before}, {lost_end})",
        retried.block
    );
    let now = f.authority.state(&f.ns).await.unwrap().unwrap().watermark;
    assert!(now >= retried.block.end() && now > lost_end);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_mode_cut_is_unavailable_quickly_and_recovers() {
    cut_is_unavailable_quickly_and_recovers(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_mode_stall_is_unavailable_within_the_timeout() {
    stall_is_unavailable_within_the_timeout(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_mode_lost_reply_burns_the_block() {
    lost_reply_burns_the_block(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_mode_cut_is_unavailable_quickly_and_recovers() {
    cut_is_unavailable_quickly_and_recovers(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_mode_stall_is_unavailable_within_the_timeout() {
    stall_is_unavailable_within_the_timeout(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_mode_lost_reply_burns_the_id() {
    lost_reply_burns_the_block(true).await;
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

/// A namespace whose step/offset are not the server's auto-increment settings is refused.
#[tokio::test]
async fn ticket_mode_refuses_specs_the_server_does_not_issue() {
    let db = TempDatabase::new();
    let a = tickets(db.url()).await;
    let ns = name("odd");
    let spec = SequenceSpec::new(Width::Bits64, 1, 2, 1).unwrap();
    match a.ensure_namespace(&ns, spec).await {
        Err(StoreError::SpecConflict {
            existing,
            requested,
            ..
        }) => {
            assert_eq!((existing.step(), existing.offset()), (1, 0), "the server's");
            assert_eq!(requested, spec);
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
