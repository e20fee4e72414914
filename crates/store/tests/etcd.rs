//! The etcd authority against a real etcd server.
//!
//! The conformance suite runs from `idmint_store::conformance`, one test per property
//! (`etcd::…`), with its fault scenarios: cut, stall, lost reply, two nodes, odd and even key
//! prefixes on one server; and its worker-lease properties (`etcd_leases::…`). What is specific
//! to etcd stays here: the lost reply checked against etcd's own history of the key (exactly
//! which rounds committed), compare-and-swap contention retried and counted, kill -9 of the
//! server and restart on the same data (watermarks, worker leases and their floors), a worker
//! lease freed by revoking its etcd lease directly (expiry is etcd's), records idmint did not
//! write (`Corrupt`), no server at all, and calls going to whichever of several endpoints
//! answers.
//!
//! Every test starts its own private `etcd` process (`idmint_testkit::etcd::PrivateEtcd`, from
//! the `etcd-server` Debian package), so the tests run in parallel; without the binary they
//! fail, saying how to install it.
#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used)]

use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use idmint_proto::etcd::etcdserverpb::kv_client::KvClient;
use idmint_proto::etcd::etcdserverpb::lease_client::LeaseClient;
use idmint_proto::etcd::etcdserverpb::{
    DeleteRangeRequest, LeaseRevokeRequest, PutRequest, RangeRequest, RangeResponse,
};
use idmint_proto::etcd::mvccpb::KeyValue;
use idmint_store::conformance::EtcdBackend;
use idmint_store::etcd::{EtcdAuthority, EtcdConfig};
use idmint_store::lease::{LeaseError, LeaseRequest, WorkerChoice, WorkerLease, WorkerLeases};
use idmint_store::{AuditEvent, Authority, StoreError};
use idmint_testkit::etcd::PrivateEtcd;
use idmint_testkit::proxy::{Fault, FaultProxy};
use idmint_testkit::wait;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

idmint_store::conformance_tests!(etcd => EtcdBackend, with faults);
idmint_store::conformance_tests!(etcd_leases => EtcdBackend, leases);
idmint_store::conformance_tests!(etcd_audit => EtcdBackend, audit);

/// Short enough to keep fault tests quick, long enough for a loaded 2-core CI machine.
const FAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// etcd's own API on a channel of the test's own (not the authority's client): writes and
/// reads behind the authority's back.
struct Raw {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
}

impl Raw {
    async fn connect(url: String) -> Raw {
        let channel = Endpoint::from_shared(url).unwrap().connect().await.unwrap();
        Raw {
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel),
        }
    }

    /// `key` as it was at `revision` (0: now).
    async fn get(&mut self, key: &str, revision: i64) -> RangeResponse {
        let request = RangeRequest {
            key: key.into(),
            revision,
            ..RangeRequest::default()
        };
        self.kv.range(request).await.unwrap().into_inner()
    }

    async fn put(&mut self, key: impl Into<Vec<u8>>, value: &str) {
        let request = PutRequest {
            key: key.into(),
            value: value.into(),
            lease: 0,
        };
        self.kv.put(request).await.unwrap();
    }

    async fn delete(&mut self, key: &str) {
        let request = DeleteRangeRequest {
            key: key.into(),
            range_end: Vec::new(),
        };
        self.kv.delete_range(request).await.unwrap();
    }

    async fn revoke(&mut self, lease: i64) {
        let request = LeaseRevokeRequest { id: lease };
        self.lease.lease_revoke(request).await.unwrap();
    }
}

fn name(s: &str) -> NamespaceName {
    NamespaceName::new(s).unwrap()
}

fn config(url: &str, op_timeout: Duration) -> EtcdConfig {
    let mut config = EtcdConfig::new([url]);
    config.op_timeout = op_timeout;
    config
}

async fn connect(config: EtcdConfig) -> Arc<EtcdAuthority> {
    Arc::new(
        EtcdAuthority::connect(config)
            .await
            .unwrap_or_else(|e| panic!("connecting to the private etcd failed: {e}")),
    )
}

/// An authority on the private etcd, through `proxy` if given.
async fn authority_via(proxy: &FaultProxy) -> Arc<EtcdAuthority> {
    connect(config(&format!("http://{}", proxy.addr()), FAULT_TIMEOUT)).await
}

fn assert_unavailable(result: Result<impl std::fmt::Debug, StoreError>, what: &str) {
    match result {
        Err(StoreError::Unavailable { backend, message }) => {
            assert_eq!(backend, "etcd");
            assert!(!message.is_empty());
        }
        other => panic!("{what}: expected Unavailable, got {other:?}"),
    }
}

/// Polls `reserve` until it succeeds (the authority reconnects by itself), within `deadline`;
/// the reservation and how many tries failed before it.
async fn reserve_until_ok(
    a: &EtcdAuthority,
    ns: &NamespaceName,
    count: u64,
    deadline: Duration,
) -> (idmint_store::Reservation, u32) {
    let mut failures = 0;
    let r = wait::until_some_async("the authority to recover", deadline, async || {
        match a.reserve(ns, count).await {
            Ok(r) => Some(r),
            Err(e) if e.is_unavailable() => {
                failures += 1;
                None
            }
            Err(e) => panic!("reserving while the authority recovers: {e}"),
        }
    })
    .await;
    (r, failures)
}

/// Polls `renew` until it succeeds (the authority reconnects by itself), within 10 s.
async fn renew_until_ok(a: &EtcdAuthority, held: &WorkerLease, floor_unix_ms: u64) -> WorkerLease {
    wait::until_some_async(
        "a renewal",
        Duration::from_secs(10),
        async || match leases_of(a).renew(held, floor_unix_ms).await {
            Ok(renewed) => Some(renewed),
            Err(e) if e.is_unavailable() => None,
            Err(e) => panic!("renewing: {e}"),
        },
    )
    .await
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

/// The reply to a reservation is lost (the proxy drops the first chunk etcd sends back and
/// closes the connection). The call errors; the next one succeeds; its block is above the block
/// the lost call was granted if that committed (which is then burned), as etcd's own history
/// of the key shows. (The suite's `etcd::lost_reply_never_reissues_the_block` checks the same
/// through a second authority; this one knows from the history exactly which rounds committed,
/// so a round that did not commit must continue right at the old watermark.)
///
/// Whether the lost transaction commits is up to the race between etcd and the closed
/// connection (the dropped chunk may be an HTTP/2 frame sent before the reply, and etcd
/// abandons a request whose connection is gone before it is proposed), so the scenario runs
/// several rounds and at least one must have committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_reply_history_shows_the_burned_block() {
    const ROUNDS: usize = 10;
    const LOST: u64 = 100;
    let etcd = PrivateEtcd::start().await;
    let proxy = FaultProxy::start(etcd.client_addr()).await.unwrap();
    let a = authority_via(&proxy).await;
    let mut raw = Raw::connect(etcd.client_url()).await;
    let ns = name("lost-reply");
    let key = "/idmint/ns/lost-reply";
    let spec = SequenceSpec::new(Width::Bits64, 1, 3, 1).unwrap();
    a.ensure_namespace(&ns, spec).await.unwrap();
    let mut committed = 0;
    for round in 0..ROUNDS {
        // Warm up: the authority now knows the record's revision, so the next reserve is a
        // single transaction, and the reply dropped below is the transaction's.
        let warm = a.reserve(&ns, 5).await.unwrap();
        let record = raw.get(key, 0).await;
        let (rev0, w0) = (record.kvs[0].mod_revision, watermark_of(&record.kvs[0]));
        assert_eq!(w0, warm.watermark);

        proxy.set_fault(Fault::DropNextReply);
        assert_unavailable(a.reserve(&ns, LOST).await, "reserve whose reply was lost");
        assert_eq!(proxy.fault(), Fault::None, "the proxy did not drop a reply");

        let next = a
            .reserve(&ns, 10)
            .await
            .unwrap_or_else(|e| panic!("round {round}: the reserve after a lost reply: {e}"));
        // What the lost call was granted if it committed: [w0, lost_end).
        let lost_end = spec.reserve(w0, LOST).unwrap().end();
        let history = watermarks_since(&mut raw, key, rev0).await;
        let durable = *history.last().unwrap();
        if history.len() == 2 {
            committed += 1;
            assert_eq!(history[0], lost_end, "round {round}: history {history:?}");
            assert!(
                next.block.ids().all(|id| id >= lost_end),
                "round {round}: the block after a lost reply {:?} reuses ids the lost call \
                 was granted [{w0}, {lost_end})",
                next.block
            );
        } else {
            assert_eq!(history.len(), 1, "round {round}: history {history:?}");
            assert_eq!(Some(next.block.start()), spec.align_up(w0), "round {round}");
        }
        assert_eq!(durable, next.watermark, "round {round}");
        assert!(durable >= next.block.end(), "round {round}");
    }
    println!("lost replies: the lost transaction committed in {committed} of {ROUNDS} rounds");
    assert!(
        committed > 0,
        "in {ROUNDS} rounds no lost transaction committed: the ambiguous case was not tested"
    );
    // The ledger is written in the same transaction as the watermark: it holds the lost
    // grants that committed and no other, and verifies clean against the watermark.
    let log = a.audit_log().unwrap();
    let entries = log.entries(&ns, None, 1000).await.unwrap();
    let lost: Vec<_> = entries
        .iter()
        .filter(|e| matches!(e.event, AuditEvent::Granted { start, end } if spec.ids_between(start, end) == LOST))
        .collect();
    assert_eq!(lost.len(), committed, "lost grants in the ledger: {lost:?}");
    assert_eq!(entries.len(), 2 * ROUNDS + committed);
    let report = idmint_store::audit::verify(log, &a.list().await.unwrap())
        .await
        .unwrap();
    assert!(report.is_clean(), "{:?}", report.violations);
}

fn watermark_of(record: &KeyValue) -> u64 {
    let text = std::str::from_utf8(&record.value).unwrap();
    text.rsplit("watermark=").next().unwrap().parse().unwrap()
}

/// Every watermark `key` held after revision `since`, oldest first, from etcd's history.
async fn watermarks_since(raw: &mut Raw, key: &str, since: i64) -> Vec<u64> {
    let now = raw.get(key, 0).await.header.unwrap().revision;
    let mut history = Vec::new();
    for rev in since + 1..=now {
        let at = raw.get(key, rev).await;
        if let Some(record) = at.kvs.first().filter(|r| r.mod_revision == rev) {
            history.push(watermark_of(record));
        }
    }
    history
}

/// Contention: 8 tasks through two authorities on one namespace. Conflicting compare-and-swaps
/// are retried (and counted) rather than failing or overlapping.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_is_retried_and_counted() {
    let etcd = PrivateEtcd::start().await;
    let a = connect(EtcdConfig::new([etcd.client_url()])).await;
    let b = connect(EtcdConfig::new([etcd.client_url()])).await;
    let ns = name("contended");
    a.ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    let started = Instant::now();
    let (blocks, count) = reserve_concurrently(&[a.clone(), b.clone()], &ns, 8, 100).await;
    let took = started.elapsed();
    assert_disjoint("contended reservations", &blocks);
    let conflicts = a.conflicts_retried() + b.conflicts_retried();
    println!(
        "contention: {count} reservations by 8 tasks on 2 authorities in {took:?}; \
         {conflicts} conflicts retried ({} + {})",
        a.conflicts_retried(),
        b.conflicts_retried()
    );
    assert!(
        conflicts > 0,
        "two authorities alternating on one namespace never conflicted: the CAS retry path was \
         not exercised"
    );
    let state = a.state(&ns).await.unwrap().unwrap();
    assert_eq!(
        state.ids_used(),
        blocks.iter().map(|b| b.len()).sum::<u64>()
    );
}

/// `tasks` tasks, spread over `authorities`, each making `per_task` reservations of 1..=50 ids.
async fn reserve_concurrently(
    authorities: &[Arc<EtcdAuthority>],
    ns: &NamespaceName,
    tasks: usize,
    per_task: u64,
) -> (Vec<Block>, usize) {
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let a = authorities[t % authorities.len()].clone();
            let ns = ns.clone();
            tokio::spawn(async move {
                let mut blocks = Vec::new();
                for i in 0..per_task {
                    let count = 1 + (t as u64 * 31 + i * 7) % 50;
                    let r = a.reserve(&ns, count).await.unwrap_or_else(|e| {
                        panic!("task {t}: reserve {i} failed under contention: {e}")
                    });
                    assert_eq!(r.block.len(), count);
                    blocks.push(r.block);
                }
                blocks
            })
        })
        .collect();
    let mut blocks = Vec::new();
    for handle in handles {
        blocks.extend(handle.await.unwrap());
    }
    let count = blocks.len();
    (blocks, count)
}

/// etcd killed with SIGKILL (no shutdown) and started again on the same data directory: every
/// block granted before is below the durable watermark, both for the authority that was
/// connected across the crash (it reconnects by itself) and for a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermark_survives_kill_9_of_etcd() {
    let mut etcd = PrivateEtcd::start().await;
    let a = connect(config(&etcd.client_url(), FAULT_TIMEOUT)).await;
    let ns = name("crash");
    let spec = SequenceSpec::new(Width::Bits32, 1, 2, 1).unwrap();
    a.ensure_namespace(&ns, spec).await.unwrap();
    let mut granted = Vec::new();
    for count in [1, 50, 7, 1000] {
        granted.push(a.reserve(&ns, count).await.unwrap().block);
    }
    let top = granted.last().unwrap().end();

    etcd.kill();
    assert_unavailable(a.reserve(&ns, 1).await, "reserve while etcd is down");
    etcd.restart().await;

    let reopened = connect(EtcdConfig::new([etcd.client_url()])).await;
    let state = reopened.state(&ns).await.unwrap().unwrap();
    assert_eq!(state.spec, spec);
    assert_eq!(state.watermark, top, "the watermark changed across kill -9");
    let (next_old, failures) = reserve_until_ok(&a, &ns, 10, Duration::from_secs(10)).await;
    println!("the connected authority recovered after {failures} failed attempts");
    let next_new = reopened.reserve(&ns, 10).await.unwrap();
    granted.push(next_old.block);
    granted.push(next_new.block);
    assert_disjoint("blocks across kill -9", &granted);
    assert_eq!(
        Some(next_old.block.start()),
        spec.align_up(top),
        "ids skipped or reused after the crash"
    );
}

/// Records this version did not write are `Corrupt`, for every operation, and never a panic.
#[tokio::test]
async fn foreign_records_are_corrupt() {
    let etcd = PrivateEtcd::start().await;
    let a = connect(EtcdConfig::new([etcd.client_url()])).await;
    let mut raw = Raw::connect(etcd.client_url()).await;
    raw.put("/idmint/ns/garbage", "hello").await;
    let ns = name("garbage");
    let corrupt = |r: Result<_, StoreError>, what: &str| match r {
        Err(StoreError::Corrupt { message }) => assert!(message.contains("garbage"), "{message}"),
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    };
    corrupt(a.state(&ns).await.map(|_| ()), "state");
    corrupt(a.reserve(&ns, 1).await.map(|_| ()), "reserve");
    corrupt(
        a.ensure_namespace(&ns, SequenceSpec::default_64())
            .await
            .map(|_| ()),
        "ensure_namespace",
    );
    corrupt(a.list().await.map(|_| ()), "list");

    // A key under the prefix that is no namespace name.
    raw.delete("/idmint/ns/garbage").await;
    raw.put("/idmint/ns/not a name", "x").await;
    assert!(matches!(a.list().await, Err(StoreError::Corrupt { .. })));
}

/// The ledger's keys: `entries` pages exactly from any `after` (an entry's seq or not), a
/// damaged entry or a key that is no entry is `Corrupt` for every reader, never a panic.
#[tokio::test]
async fn the_ledger_pages_from_any_seq_and_damage_is_corrupt() {
    let etcd = PrivateEtcd::start().await;
    let a = connect(EtcdConfig::new([etcd.client_url()])).await;
    let mut raw = Raw::connect(etcd.client_url()).await;
    let ns = name("paged");
    a.ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    // Writes to another key in between, so that seqs (revisions) have gaps.
    for i in 0..6 {
        a.reserve(&ns, 10).await.unwrap();
        raw.put(format!("/elsewhere/{i}"), "x").await;
    }
    let log = a.audit_log().unwrap();
    let all = log.entries(&ns, None, 100).await.unwrap();
    assert_eq!(all.len(), 6);
    for after in all[0].seq - 1..=all[5].seq + 1 {
        let expected: Vec<_> = all.iter().filter(|e| e.seq > after).cloned().collect();
        assert_eq!(
            log.entries(&ns, Some(after), 100).await.unwrap(),
            expected,
            "after {after}"
        );
        let two: Vec<_> = expected.iter().take(2).cloned().collect();
        assert_eq!(log.entries(&ns, Some(after), 2).await.unwrap(), two);
    }
    assert_eq!(log.subjects().await.unwrap(), vec![ns.clone()]);

    let corrupt = |r: Result<(), StoreError>, what: &str| match r {
        Err(StoreError::Corrupt { message }) => assert!(message.contains("audit"), "{message}"),
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    };
    // A damaged value.
    let key = format!("/idmint/audit/paged/{:020}", all[5].seq);
    raw.put(key.as_str(), "v1 junk").await;
    corrupt(log.entries(&ns, None, 100).await.map(drop), "entries");
    corrupt(
        idmint_store::audit::prune(log, std::time::Duration::ZERO)
            .await
            .map(drop),
        "prune",
    );
    raw.delete(key.as_str()).await;
    // A key that is no entry's, and one under a subject that is no name.
    raw.put("/idmint/audit/paged/x", "x").await;
    corrupt(log.entries(&ns, None, 100).await.map(drop), "entries");
    raw.delete("/idmint/audit/paged/x").await;
    raw.put("/idmint/audit/not a name/1", "x").await;
    corrupt(log.subjects().await.map(drop), "subjects");
}

/// No server: `connect` is `Unavailable`, quickly, and the message does not leak credentials
/// written into the URL.
#[tokio::test]
async fn no_server_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let err = EtcdAuthority::connect(config(
        &format!("http://user:secret@127.0.0.1:{port}"),
        FAULT_TIMEOUT,
    ))
    .await
    .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(!err.to_string().contains("secret"), "{err}");
    assert!(started.elapsed() < FAULT_TIMEOUT + Duration::from_millis(500));
    // A setup error, not an outage: no endpoint at all.
    let err = EtcdAuthority::connect(EtcdConfig::new(Vec::<String>::new()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidSetup { .. }), "{err:?}");
}

fn lease_request(group: &str, choice: WorkerChoice, holder: &str) -> LeaseRequest {
    LeaseRequest {
        group: name(group),
        workers: 4,
        choice,
        prefer_floor_at_most: None,
        holder: holder.to_owned(),
        layout: "timestamp_bits=41 node_bits=2 sequence_bits=12 unit=1ms epoch=0".to_owned(),
        ttl: Duration::from_secs(60),
    }
}

fn leases_of(a: &EtcdAuthority) -> &dyn WorkerLeases {
    a.worker_leases().unwrap()
}

/// etcd killed with SIGKILL and started again on the same data: a live worker lease is still
/// live (etcd keeps its leases), with its token and floor; its holder renews it through the
/// reconnected authority; a released worker id keeps its floor across the crash too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_leases_survive_kill_9_of_etcd() {
    let mut etcd = PrivateEtcd::start().await;
    let a = connect(config(&etcd.client_url(), FAULT_TIMEOUT)).await;
    let held = leases_of(&a)
        .acquire(&lease_request(
            "crash-leases",
            WorkerChoice::Exactly(1),
            "held",
        ))
        .await
        .unwrap();
    let held = leases_of(&a).renew(&held, 1_700_000_001_000).await.unwrap();
    let freed = leases_of(&a)
        .acquire(&lease_request(
            "crash-leases",
            WorkerChoice::Exactly(2),
            "freed",
        ))
        .await
        .unwrap();
    leases_of(&a)
        .release(&freed, 1_700_000_002_000)
        .await
        .unwrap();

    etcd.kill();
    match leases_of(&a).renew(&held, 1_700_000_003_000).await {
        Err(e) if e.is_unavailable() => {}
        other => panic!("renew while etcd is down: expected Unavailable, got {other:?}"),
    }
    etcd.restart().await;

    let b = connect(EtcdConfig::new([etcd.client_url()])).await;
    let (record, slots) = leases_of(&b)
        .group(&name("crash-leases"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.last_token, freed.token);
    let slot1 = slots.iter().find(|s| s.worker == 1).unwrap();
    assert!(
        slot1.is_live(),
        "a live lease was freed by the crash: {slot1:?}"
    );
    assert_eq!(
        (slot1.token, slot1.floor_unix_ms),
        (held.token, 1_700_000_001_000)
    );
    let slot2 = slots.iter().find(|s| s.worker == 2).unwrap();
    assert!(!slot2.is_live());
    assert_eq!(slot2.floor_unix_ms, 1_700_000_002_000);
    match leases_of(&b)
        .acquire(&lease_request(
            "crash-leases",
            WorkerChoice::Exactly(1),
            "thief",
        ))
        .await
    {
        Err(LeaseError::Held { holder, .. }) => assert_eq!(holder, "held"),
        other => panic!("expected Held after the crash, got {other:?}"),
    }
    let again = leases_of(&b)
        .acquire(&lease_request(
            "crash-leases",
            WorkerChoice::Exactly(2),
            "next",
        ))
        .await
        .unwrap();
    assert_eq!(again.floor_unix_ms, 1_700_000_002_000);
    assert!(again.token > freed.token);

    // The holder's authority reconnects by itself and renews.
    let renewed = renew_until_ok(&a, &held, 1_700_000_004_000).await;
    assert_eq!(renewed.floor_unix_ms, 1_700_000_004_000);
}

/// Expiry is etcd's: revoking the live key's etcd lease directly (as its expiry would) frees
/// the worker id at once, with the floor its holder recorded; the old holder is superseded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_etcd_lease_frees_the_worker_at_once() {
    let etcd = PrivateEtcd::start().await;
    let a = connect(EtcdConfig::new([etcd.client_url()])).await;
    let b = connect(EtcdConfig::new([etcd.client_url()])).await;
    let old = leases_of(&a)
        .acquire(&lease_request("revoked", WorkerChoice::LowestFree, "old"))
        .await
        .unwrap();
    assert_eq!(old.worker, 0);
    assert!(old.ttl >= Duration::from_secs(60));
    let old = leases_of(&a).renew(&old, 1_700_000_009_000).await.unwrap();
    match leases_of(&b)
        .acquire(&lease_request("revoked", WorkerChoice::Exactly(0), "new"))
        .await
    {
        Err(LeaseError::Held { expires_in, .. }) => {
            assert!(expires_in > Duration::from_secs(50), "{expires_in:?}")
        }
        other => panic!("expected Held, got {other:?}"),
    }

    let mut raw = Raw::connect(etcd.client_url()).await;
    let live = raw.get("/idmint/leases/revoked/live/0", 0).await;
    let etcd_lease = live.kvs[0].lease;
    assert_ne!(etcd_lease, 0, "the live key is attached to an etcd lease");
    raw.revoke(etcd_lease).await;

    let new = leases_of(&b)
        .acquire(&lease_request("revoked", WorkerChoice::Exactly(0), "new"))
        .await
        .unwrap();
    assert!(new.token > old.token);
    assert_eq!(new.floor_unix_ms, 1_700_000_009_000);
    match leases_of(&a).renew(&old, 1_800_000_000_000).await {
        Err(LeaseError::Superseded { current, .. }) => assert_eq!(current, new.token),
        other => panic!("expected Superseded, got {other:?}"),
    }
    let (_, slots) = leases_of(&a)
        .group(&name("revoked"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(slots[0].floor_unix_ms, 1_700_000_009_000);
    assert_eq!(slots[0].holder, "new");
}

/// A renewal after the live key's etcd lease ran out (nobody acquired since) restarts the
/// lease on a new etcd lease; lease records idmint did not write are `Corrupt`.
#[tokio::test]
async fn a_lapsed_lease_renews_and_foreign_lease_records_are_corrupt() {
    let etcd = PrivateEtcd::start().await;
    let a = connect(EtcdConfig::new([etcd.client_url()])).await;
    let mut raw = Raw::connect(etcd.client_url()).await;
    let lease = leases_of(&a)
        .acquire(&lease_request("lapsed", WorkerChoice::Exactly(3), "me"))
        .await
        .unwrap();
    let live = raw.get("/idmint/leases/lapsed/live/3", 0).await;
    raw.revoke(live.kvs[0].lease).await;
    let renewed = leases_of(&a).renew(&lease, 42).await.unwrap();
    assert_eq!(renewed.floor_unix_ms, 42);
    let (_, slots) = leases_of(&a).group(&name("lapsed")).await.unwrap().unwrap();
    assert!(slots[0].is_live(), "{slots:?}");
    leases_of(&a).release(&renewed, 43).await.unwrap();
    let (_, slots) = leases_of(&a).group(&name("lapsed")).await.unwrap().unwrap();
    assert!(!slots[0].is_live());
    assert_eq!(slots[0].floor_unix_ms, 43);

    raw.put(
        "/idmint/leases/lapsed/worker/3",
        "idmint.worker/v1 token=x floor=1 holder=me",
    )
    .await;
    let corrupt = |r: Result<(), LeaseError>, what: &str| match r {
        Err(LeaseError::Store(StoreError::Corrupt { message })) => {
            assert!(message.contains("lapsed"), "{message}")
        }
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    };
    corrupt(
        leases_of(&a).group(&name("lapsed")).await.map(drop),
        "group",
    );
    corrupt(
        leases_of(&a)
            .acquire(&lease_request("lapsed", WorkerChoice::LowestFree, "me"))
            .await
            .map(drop),
        "acquire",
    );
    corrupt(leases_of(&a).renew(&renewed, 50).await.map(drop), "renew");
}

/// Worker-lease operations on a stalled or cut connection are `Unavailable` within the
/// operation timeout, never a hang, and work again once the connection does: the lease held
/// across the outage is still the holder's (etcd's TTL, not the outage, decides).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_operations_fail_fast_and_recover() {
    let etcd = PrivateEtcd::start().await;
    let proxy = FaultProxy::start(etcd.client_addr()).await.unwrap();
    let a = authority_via(&proxy).await;
    let held = leases_of(&a)
        .acquire(&lease_request("outage", WorkerChoice::LowestFree, "held"))
        .await
        .unwrap();
    for fault in [Fault::Stall, Fault::Cut] {
        proxy.set_fault(fault);
        let started = Instant::now();
        let results = [
            leases_of(&a)
                .acquire(&lease_request("outage", WorkerChoice::LowestFree, "other"))
                .await
                .map(drop),
            leases_of(&a).renew(&held, 10).await.map(drop),
            leases_of(&a).group(&name("outage")).await.map(drop),
        ];
        for result in results {
            match result {
                Err(e) if e.is_unavailable() => {}
                other => panic!("{fault:?}: expected Unavailable, got {other:?}"),
            }
        }
        assert!(
            started.elapsed() < 3 * (FAULT_TIMEOUT + Duration::from_millis(500)),
            "{fault:?}: {:?}",
            started.elapsed()
        );
        proxy.set_fault(Fault::None);
    }
    let renewed = renew_until_ok(&a, &held, 20).await;
    assert_eq!(renewed.floor_unix_ms, 20);
    leases_of(&a).release(&renewed, 30).await.unwrap();
    let next = leases_of(&a)
        .acquire(&lease_request("outage", WorkerChoice::LowestFree, "next"))
        .await
        .unwrap();
    assert_eq!((next.worker, next.floor_unix_ms), (held.worker, 30));
}

/// Contention: 12 tasks on 3 authorities acquire and release the 4 worker ids of one group
/// over and over. Seen from the holders, the spans during which each worker id was held
/// (from acquire's answer to the call of release) never overlap, and every token differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contended_leases_never_overlap() {
    const ROUNDS: usize = 8;
    let etcd = PrivateEtcd::start().await;
    let mut authorities = Vec::new();
    for _ in 0..3 {
        authorities.push(connect(EtcdConfig::new([etcd.client_url()])).await);
    }
    let origin = Instant::now();
    let tasks: Vec<_> = (0..12)
        .map(|t| {
            let a = authorities[t % 3].clone();
            tokio::spawn(async move {
                let mut spans = Vec::new();
                let mut rounds = 0;
                while rounds < ROUNDS {
                    let request =
                        lease_request("contended", WorkerChoice::LowestFree, &format!("t{t}"));
                    match leases_of(&a).acquire(&request).await {
                        Ok(lease) => {
                            let from = origin.elapsed();
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            let to = origin.elapsed();
                            leases_of(&a)
                                .release(&lease, u64::try_from(to.as_millis()).unwrap())
                                .await
                                .unwrap();
                            spans.push((lease.worker, lease.token, from, to));
                            rounds += 1;
                        }
                        Err(LeaseError::PoolFull { .. }) => {
                            tokio::time::sleep(Duration::from_millis(3)).await;
                        }
                        Err(e) => panic!("task {t}: {e}"),
                    }
                }
                spans
            })
        })
        .collect();
    let mut spans = Vec::new();
    for task in tasks {
        spans.extend(task.await.unwrap());
    }
    let tokens: std::collections::HashSet<u64> = spans.iter().map(|s| s.1).collect();
    assert_eq!(tokens.len(), spans.len(), "a token was granted twice");
    for worker in 0..4 {
        let mut held: Vec<_> = spans.iter().filter(|s| s.0 == worker).collect();
        held.sort_by_key(|s| s.2);
        for pair in held.windows(2) {
            assert!(
                pair[0].3 <= pair[1].2,
                "worker {worker} held twice at once: {:?} and {:?}",
                pair[0],
                pair[1]
            );
            assert!(pair[0].1 < pair[1].1, "tokens must grow: {pair:?}");
        }
    }
    let conflicts: u64 = authorities.iter().map(|a| a.conflicts_retried()).sum();
    println!(
        "{} acquisitions by 12 tasks on 3 authorities; {conflicts} conflicts retried",
        spans.len()
    );
}

/// Several endpoints share one channel: with one member's endpoint cut, the authority goes on
/// through the other, and once that one is cut and the first restored, through the first; the
/// blocks stay disjoint and ascending throughout (a reply lost to a cut burns its block). With
/// both cut nothing works, so each phase's reservations went through the endpoint left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_to_the_endpoints_that_answer() {
    let etcd = PrivateEtcd::start().await;
    let first = FaultProxy::start(etcd.client_addr()).await.unwrap();
    let second = FaultProxy::start(etcd.client_addr()).await.unwrap();
    let mut both = config(&format!("http://{}", first.addr()), FAULT_TIMEOUT);
    both.endpoints.push(format!("http://{}", second.addr()));
    let a = connect(both).await;
    let ns = name("failover");
    a.ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap();
    let mut granted = Vec::new();
    let mut failures = Vec::new();
    for (cut, kept) in [(&first, &second), (&second, &first)] {
        cut.set_fault(Fault::Cut);
        kept.set_fault(Fault::None);
        let mut failed = 0;
        for _ in 0..10 {
            let (r, f) = reserve_until_ok(&a, &ns, 7, Duration::from_secs(10)).await;
            granted.push(r.block);
            failed += f;
        }
        failures.push(failed);
    }
    println!("failover: failed attempts per phase {failures:?}");
    assert_disjoint("blocks across failovers", &granted);
    for pair in granted.windows(2) {
        assert!(pair[0].end() <= pair[1].start(), "not ascending: {pair:?}");
    }
    first.set_fault(Fault::Cut);
    assert_unavailable(a.reserve(&ns, 1).await, "reserve with every endpoint cut");
}
