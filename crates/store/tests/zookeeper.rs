//! The ZooKeeper authority against a real ZooKeeper server.
//!
//! The conformance suite runs from `idmint_store::conformance`, one test per property
//! (`zookeeper::…`, with its fault scenarios: cut, stall, lost reply, two nodes) and the worker
//! lease properties (`zookeeper_leases::…`). What is specific to ZooKeeper stays here: kill -9
//! of the server and restart on the same data (watermarks and lease floors survive), a lease
//! holder's session expiring while its connection is cut (the worker id is freed, the floor
//! stays, the old token is superseded), records idmint did not write (`Corrupt`), and no
//! server at all.
//!
//! The fixtures share one private ZooKeeper per test process; the tests here that kill the
//! server start their own (`idmint_testkit::zookeeper::PrivateZookeeper`, from the jars of the
//! `zookeeper` Debian package). Without the package they fail, saying how to install it.
#![cfg(feature = "zookeeper")]
#![allow(clippy::unwrap_used)]

use idmint_core::{NamespaceName, SequenceSpec};
use idmint_store::conformance::ZookeeperBackend;
use idmint_store::lease::{LeaseError, LeaseRequest, WorkerChoice};
use idmint_store::zookeeper::{ZookeeperAuthority, ZookeeperConfig};
use idmint_store::{Authority, StoreError};
use idmint_testkit::proxy::{Fault, FaultProxy};
use idmint_testkit::wait;
use idmint_testkit::zookeeper::PrivateZookeeper;
use std::sync::Arc;
use std::time::{Duration, Instant};

idmint_store::conformance_tests!(zookeeper => ZookeeperBackend, with faults);
idmint_store::conformance_tests!(zookeeper_leases => ZookeeperBackend, leases);
idmint_store::conformance_tests!(zookeeper_audit => ZookeeperBackend, audit);
idmint_store::conformance_tests!(zookeeper_parks => ZookeeperBackend, parks);

const LAYOUT: &str = "timestamp_bits=41 node_bits=2 sequence_bits=12 unit=1ms epoch=0";

fn name(s: &str) -> NamespaceName {
    NamespaceName::new(s).unwrap()
}

async fn connect(server: &str, root: &str) -> Arc<ZookeeperAuthority> {
    let config = ZookeeperConfig {
        root: root.to_owned(),
        op_timeout: Duration::from_secs(3),
        ..ZookeeperConfig::new([server])
    };
    Arc::new(
        ZookeeperAuthority::connect(config)
            .await
            .unwrap_or_else(|e| panic!("connecting to the private ZooKeeper failed: {e}")),
    )
}

fn request(
    group: &NamespaceName,
    choice: WorkerChoice,
    holder: &str,
    ttl: Duration,
) -> LeaseRequest {
    LeaseRequest {
        group: group.clone(),
        workers: 4,
        choice,
        prefer_floor_at_most: None,
        holder: holder.to_owned(),
        layout: LAYOUT.to_owned(),
        ttl,
    }
}

/// Retries `op` while it is `Unavailable` (the authority reconnects by itself), within 30 s.
async fn until_available<T, F, Fut>(what: &str, op: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    wait::until_some_async(what, Duration::from_secs(30), async || match op().await {
        Ok(v) => Some(v),
        Err(e) if e.is_unavailable() => None,
        Err(e) => panic!("{what}: {e}"),
    })
    .await
}

/// kill -9 of the server, then a restart on the same data: the watermark and a worker's
/// floor are exactly what was acknowledged; the authority reconnects by itself and the next
/// block follows the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermarks_and_floors_survive_kill_9_of_zookeeper() {
    let mut zk = PrivateZookeeper::start().await;
    let a = connect(&zk.connect_string(), "/idmint").await;
    let ns = name("kill9");
    a.ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    let mut last = None;
    for _ in 0..50 {
        last = Some(a.reserve(&ns, 7).await.unwrap());
    }
    let last = last.unwrap();
    let group = name("kill9-group");
    let leases = a.worker_leases().unwrap();
    let lease = leases
        .acquire(&request(
            &group,
            WorkerChoice::LowestFree,
            "before",
            Duration::from_secs(30),
        ))
        .await
        .unwrap();
    let lease = leases.renew(&lease, 1_700_000_123_000).await.unwrap();
    assert_eq!(lease.floor_unix_ms, 1_700_000_123_000);

    zk.kill9();
    assert!(a.reserve(&ns, 7).await.unwrap_err().is_unavailable());
    zk.restart().await;

    let next = until_available("reserve after the restart", || a.reserve(&ns, 7)).await;
    // The reservation that failed may have reached the server just before the kill: then its
    // block is burned, never reused.
    assert!(
        next.block.start() >= last.watermark,
        "{last:?} then {next:?}"
    );
    // A fresh authority (a restarted node) reads the same.
    let b = connect(&zk.connect_string(), "/idmint").await;
    assert_eq!(
        b.state(&ns).await.unwrap().unwrap().watermark,
        next.watermark
    );
    let (record, slots) = b
        .worker_leases()
        .unwrap()
        .group(&group)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.layout, LAYOUT);
    assert_eq!(record.last_token, lease.token);
    let slot = slots.iter().find(|s| s.worker == lease.worker).unwrap();
    assert_eq!(
        slot.floor_unix_ms, 1_700_000_123_000,
        "the floor is durable"
    );
    assert_eq!(slot.token, lease.token);
}

/// kill -9 of the server under load: two authorities (two nodes) with two tasks each reserve
/// blocks without pause while the server is killed and restarted on the same data. Every block
/// acknowledged before, during and after is disjoint from every other: zero duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_zookeeper_under_load_repeats_no_id() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;

    let mut zk = PrivateZookeeper::start().await;
    let ns = name("under-load");
    let nodes = [
        connect(&zk.connect_string(), "/idmint").await,
        connect(&zk.connect_string(), "/idmint").await,
    ];
    nodes[0]
        .ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    nodes[1]
        .ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    let blocks = Arc::new(Mutex::new(Vec::new()));
    let granted = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for node in nodes.iter().flat_map(|n| [n.clone(), n.clone()]) {
        let (ns, blocks, granted, refused, stop) = (
            ns.clone(),
            blocks.clone(),
            granted.clone(),
            refused.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match node.reserve(&ns, 10).await {
                    Ok(r) => {
                        blocks.lock().unwrap().push(r.block);
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if e.is_unavailable() => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("reserve: {e}"),
                }
            }
        }));
    }
    let within = Duration::from_secs(60);
    wait::until_async("200 blocks before the kill", within, async || {
        granted.load(Ordering::Relaxed) >= 200
    })
    .await;
    zk.kill9();
    let before = granted.load(Ordering::Relaxed);
    wait::until_async("refusals while the server is down", within, async || {
        refused.load(Ordering::Relaxed) >= 4
    })
    .await;
    zk.restart().await;
    wait::until_async("200 blocks after the restart", within, async || {
        granted.load(Ordering::Relaxed) >= before + 200
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let mut all = std::mem::take(&mut *blocks.lock().unwrap());
    all.sort_by_key(|b| b.start());
    for pair in all.windows(2) {
        assert!(
            pair[0].end() <= pair[1].start(),
            "overlapping blocks {:?} and {:?}",
            pair[0],
            pair[1]
        );
    }
    // Every acknowledged block is in the ledger (written in the same multi as the watermark;
    // a write whose reply the kill lost may add a grant nobody saw), and it verifies clean.
    let log = nodes[0].audit_log().unwrap();
    let mut recorded = std::collections::BTreeSet::new();
    let mut after = None;
    loop {
        let page = log.entries(&ns, after, 500).await.unwrap();
        after = page.last().map(|e| e.seq).or(after);
        for e in &page {
            if let idmint_store::AuditEvent::Granted { start, end } = e.event {
                recorded.insert((start, end));
            }
        }
        if page.len() < 500 {
            break;
        }
    }
    for b in &all {
        assert!(
            recorded.contains(&(b.start(), b.end())),
            "block {b:?} is not in the ledger"
        );
    }
    let report = idmint_store::audit::verify(log, &nodes[0].list().await.unwrap())
        .await
        .unwrap();
    assert!(report.is_clean(), "{:?}", report.violations);
    let ids: u64 = all.iter().map(|b| b.len()).sum();
    eprintln!(
        "kill -9 under load: {} blocks ({ids} ids) granted, {before} of them before the kill, \
         {} reservations refused while the server was down; no overlap",
        all.len(),
        refused.load(Ordering::Relaxed)
    );
}

/// A lease holder whose connection is cut for longer than its TTL loses the lease: ZooKeeper
/// expires its session and deletes its live znode, so another node acquires the worker id, with
/// a larger token and the floor the first holder recorded; the first holder's renewal is then
/// `Superseded`. While the first session is alive the worker id is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_past_its_ttl_loses_the_worker_id_but_not_the_floor() {
    let zk = PrivateZookeeper::start().await;
    let proxy = FaultProxy::start(zk.client_addr()).await.unwrap();
    let holder = connect(&proxy.addr().to_string(), "/idmint").await;
    let other = connect(&zk.connect_string(), "/idmint").await;
    let group = name("cut-holder");
    let ttl = Duration::from_secs(2);
    let lease = holder
        .worker_leases()
        .unwrap()
        .acquire(&request(&group, WorkerChoice::Exactly(2), "cut", ttl))
        .await
        .unwrap();
    assert_eq!(lease.ttl, ttl, "the session timeout granted is the TTL");
    let lease = holder
        .worker_leases()
        .unwrap()
        .renew(&lease, 1_700_000_777_000)
        .await
        .unwrap();

    // Renewed within its TTL, it stays held.
    for _ in 0..3 {
        tokio::time::sleep(ttl / 2).await;
        holder
            .worker_leases()
            .unwrap()
            .renew(&lease, 1_700_000_777_000)
            .await
            .unwrap();
    }
    match other
        .worker_leases()
        .unwrap()
        .acquire(&request(&group, WorkerChoice::Exactly(2), "taker", ttl))
        .await
    {
        Err(LeaseError::Held { holder, .. }) => assert_eq!(holder, "cut"),
        other => panic!("expected Held, got {other:?}"),
    }

    // Cut off: its renewals fail, and its session expires at the server.
    proxy.set_fault(Fault::Cut);
    let err = holder
        .worker_leases()
        .unwrap()
        .renew(&lease, 1_800_000_000_000)
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    let taken = wait::until_some_async(
        "the cut holder's lease to expire",
        Duration::from_secs(30),
        async || match other
            .worker_leases()
            .unwrap()
            .acquire(&request(&group, WorkerChoice::Exactly(2), "taker", ttl))
            .await
        {
            Ok(l) => Some(l),
            Err(LeaseError::Held { .. }) => None,
            Err(e) => panic!("acquiring the cut holder's worker id: {e}"),
        },
    )
    .await;
    assert!(taken.token > lease.token);
    assert_eq!(taken.floor_unix_ms, 1_700_000_777_000, "the floor stays");

    proxy.set_fault(Fault::None);
    let current = wait::until_some_async(
        "the old holder's renewal to reach the server",
        Duration::from_secs(30),
        async || match holder
            .worker_leases()
            .unwrap()
            .renew(&lease, 1_800_000_000_000)
            .await
        {
            Err(LeaseError::Superseded { current, .. }) => Some(current),
            Err(e) if e.is_unavailable() => None,
            other => panic!("the old holder's renewal must be Superseded: {other:?}"),
        },
    )
    .await;
    assert_eq!(current, taken.token);
    let (_, slots) = other
        .worker_leases()
        .unwrap()
        .group(&group)
        .await
        .unwrap()
        .unwrap();
    let slot = slots.iter().find(|s| s.worker == 2).unwrap();
    assert_eq!(
        (slot.token, slot.holder.as_str(), slot.floor_unix_ms),
        (taken.token, "taker", 1_700_000_777_000)
    );
    assert!(slot.is_live());
}

/// A lease whose session expired while nobody took its worker id is re-established by the
/// next renewal, with the same token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_nobody_took_is_renewed_with_its_token() {
    let zk = PrivateZookeeper::start().await;
    let a = connect(&zk.connect_string(), "/idmint").await;
    let group = name("lapsed");
    let leases = a.worker_leases().unwrap();
    let lease = leases
        .acquire(&request(
            &group,
            WorkerChoice::LowestFree,
            "me",
            Duration::from_secs(1),
        ))
        .await
        .unwrap();
    wait::until_async(
        "the 1 s lease to lapse",
        Duration::from_secs(30),
        async || {
            let (_, slots) = leases.group(&group).await.unwrap().unwrap();
            !slots[0].is_live()
        },
    )
    .await;
    let renewed = leases.renew(&lease, 42).await.unwrap();
    assert_eq!((renewed.token, renewed.floor_unix_ms), (lease.token, 42));
    let (_, slots) = leases.group(&group).await.unwrap().unwrap();
    assert!(slots[0].is_live(), "re-established");
    leases.release(&renewed, 43).await.unwrap();
    let (_, slots) = leases.group(&group).await.unwrap().unwrap();
    assert!(!slots[0].is_live());
    assert_eq!(slots[0].floor_unix_ms, 43);
}

/// Records idmint did not write are `Corrupt`, never a panic or a silent reset.
#[tokio::test]
async fn foreign_records_are_corrupt() {
    let zk = PrivateZookeeper::start().await;
    let a = connect(&zk.connect_string(), "/x").await;
    let raw = zookeeper_client_for_tests(&zk.connect_string()).await;
    raw.create(
        "/x/namespaces/hand",
        b"watermark=5",
        &zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await
    .unwrap();
    for result in [
        a.reserve(&name("hand"), 1).await.map(drop),
        a.state(&name("hand")).await.map(drop),
        a.list().await.map(drop),
    ] {
        assert!(
            matches!(result, Err(StoreError::Corrupt { .. })),
            "{result:?}"
        );
    }
}

/// A store without audit znodes (no `<root>/audit`) gains them in place: the next write makes
/// the directories. Entries and their names that idmint did not write are `Corrupt`.
#[tokio::test]
async fn the_ledger_upgrades_in_place_and_damage_is_corrupt() {
    let zk = PrivateZookeeper::start().await;
    let a = connect(&zk.connect_string(), "/old").await;
    let raw = zookeeper_client_for_tests(&zk.connect_string()).await;
    let ns = name("old");
    a.ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    // A store without audit znodes (connect made the directory, so remove it again).
    raw.delete("/old/audit", None).await.unwrap();
    let r = a.reserve(&ns, 10).await.unwrap();
    let log = a.audit_log().unwrap();
    let entries = log.entries(&ns, None, 10).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].event,
        idmint_store::AuditEvent::Granted {
            start: r.block.start(),
            end: r.block.end()
        }
    );
    // The server's clock: the znode's creation time.
    let (_, stat) = raw
        .get_data(&format!("/old/audit/old/{:010}", entries[0].seq))
        .await
        .unwrap();
    assert_eq!(entries[0].at_unix_ms, stat.ctime as u64);
    assert_eq!(log.subjects().await.unwrap(), vec![ns.clone()]);

    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let corrupt = |r: Result<(), StoreError>, what: &str| {
        assert!(
            matches!(r, Err(StoreError::Corrupt { .. })),
            "{what}: expected Corrupt, got {r:?}"
        )
    };
    raw.set_data(
        &format!("/old/audit/old/{:010}", entries[0].seq),
        b"v1 junk",
        None,
    )
    .await
    .unwrap();
    corrupt(
        log.entries(&ns, None, 10).await.map(drop),
        "a damaged entry",
    );
    raw.create("/old/audit/old/junk", b"", &persistent)
        .await
        .unwrap();
    corrupt(
        log.entries(&ns, None, 10).await.map(drop),
        "a name that is no seq",
    );
    corrupt(
        idmint_store::audit::prune(log, std::time::Duration::ZERO)
            .await
            .map(drop),
        "prune",
    );
    raw.create("/old/audit/not a name", b"", &persistent)
        .await
        .unwrap();
    corrupt(log.subjects().await.map(drop), "a subject that is no name");
}

async fn zookeeper_client_for_tests(server: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(server).await.unwrap()
}

/// Nothing listening: `connect` is `Unavailable`, quickly.
#[tokio::test]
async fn no_server_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let config = ZookeeperConfig {
        op_timeout: Duration::from_secs(2),
        ..ZookeeperConfig::new([format!("127.0.0.1:{port}")])
    };
    match ZookeeperAuthority::connect(config).await {
        Err(StoreError::Unavailable { backend, .. }) => assert_eq!(backend, "zookeeper"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3));
}
