//! The conformance suite every [`Authority`] backend must pass, and the fixtures that run it
//! on every built-in backend, one `#[test]` per property per backend.
//!
//! Three layers:
//! - **properties**: async functions, each driving authorities through one property of the
//!   [`Authority`] contract and panicking with a message naming the backend on the first
//!   violation. The contract properties (this module) take an authority; the fault scenarios
//!   ([`faults`], cargo feature `conformance`) take a [`NetworkBackend`] and put a
//!   `FaultProxy` between it and its server. Namespaces are named uniquely per call
//!   (`conformance.<test>.<pid>.<nanos>.<n>`), so properties can share storage.
//! - **fixtures** ([`Backend`], [`NetworkBackend`]; feature `conformance`): storage of the
//!   test's own per backend (a database, a private etcd server, a directory) that opens
//!   authorities on it: again (a reopen), twice at once (two nodes), through a proxy with a
//!   short timeout, and independent storage (Flickr's second server).
//! - **the macro** [`conformance_tests!`](crate::conformance_tests): one line per backend
//!   expands to a module of `#[test]`s, one per property ([`cases`]), each on fresh storage, so
//!   a failure names its property and backend, hides no other, and tests run in parallel:
//!
//! ```text
//! idmint_store::conformance_tests!(memory => MemoryBackend);                // contract
//! idmint_store::conformance_tests!(postgres => PostgresBackend, with faults);  // + faults
//! idmint_store::conformance_tests!(mysql_tickets => MysqlTicketBackend, faults only);
//! idmint_store::conformance_tests!(postgres_leases => PostgresBackend, leases); // worker leases
//! idmint_store::conformance_tests!(postgres_audit => PostgresBackend, audit);   // audit ledger
//! ```
//!
//! Where it lives, and why here: the suite stays in idmint-store, behind the `conformance`
//! feature, with `idmint-testkit` (the proxy and the private servers) as an optional
//! dependency of that feature. The dependency then points one way, store → testkit, and the
//! test kit stays a leaf that knows nothing of idmint (a proxy and server processes). The other
//! direction (the suite in testkit, testkit depending on the store) would make a
//! dev-dependency cycle, store → testkit → store, whose feature unification switches every
//! backend on in any build that uses the test kit, and would put the backend fixtures in
//! another crate than the backends and their cargo features. Here a fixture is compiled exactly
//! when its backend is (`#[cfg(feature = "postgres")]`), next to the other backends' code.
//! (Publishing idmint-store with this feature would need idmint-testkit published too.)
//!
//! [`run_all`] runs the contract properties on one authority, for callers without fixtures
//! (the memory authority's unit test); it stays for them.
//!
//! Functions that spawn tasks need a tokio runtime; [`run`] gives the tests a multi-threaded
//! one, which exercises real concurrency.
//!
//! What it does not check: crashes of a server (each backend's tests kill private servers),
//! performance, or backend-specific SQL or records. Of the multi authority it checks only that a
//! member that lost its data is taken out, per backend; the rest is in `tests/multi.rs`.

#![allow(clippy::unwrap_used)] // test helpers: a failure is a panic with a message

use crate::{Authority, GiveBack, NamespaceState, Reservation, StoreError};
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[cfg(feature = "conformance")]
pub mod audit;
#[cfg(feature = "conformance")]
mod backend;
#[cfg(feature = "conformance")]
pub mod faults;
#[cfg(feature = "conformance")]
pub mod leases;
#[cfg(feature = "conformance")]
pub mod parks;
pub mod retired;
mod switched;
pub use switched::SwitchedAuthority;

#[cfg(all(feature = "conformance", feature = "etcd"))]
pub use backend::EtcdBackend;
#[cfg(all(feature = "conformance", feature = "file"))]
pub use backend::FileBackend;
#[cfg(all(feature = "conformance", feature = "postgres"))]
pub use backend::PostgresBackend;
#[cfg(all(feature = "conformance", feature = "redis"))]
pub use backend::RedisBackend;
#[cfg(all(feature = "conformance", feature = "zookeeper"))]
pub use backend::ZookeeperBackend;
#[cfg(feature = "conformance")]
pub use backend::{Backend, FaultProfile, Grants, MemoryBackend, NetworkBackend};
#[cfg(all(feature = "conformance", feature = "mysql"))]
pub use backend::{MysqlBackend, MysqlTicketBackend};

/// A namespace name no other call of this process (nor, by the pid and time, an earlier run
/// against the same database) has used.
fn unique_name(test: &str) -> NamespaceName {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let raw = format!("conformance.{test}.{}.{nanos}.{n}", std::process::id());
    NamespaceName::new(&raw).unwrap_or_else(|e| panic!("bad test namespace name {raw}: {e}"))
}

async fn ensure(a: &dyn Authority, name: &NamespaceName, spec: SequenceSpec) -> NamespaceState {
    a.ensure_namespace(name, spec)
        .await
        .unwrap_or_else(|e| panic!("[{}] ensure_namespace({name}) failed: {e}", a.kind()))
}

async fn reserve(a: &dyn Authority, name: &NamespaceName, count: u64) -> Reservation {
    let r = a
        .reserve(name, count)
        .await
        .unwrap_or_else(|e| panic!("[{}] reserve({name}, {count}) failed: {e}", a.kind()));
    assert_eq!(
        r.watermark,
        r.block.end(),
        "[{}] reserve({name}) returned watermark {} but block end {}",
        a.kind(),
        r.watermark,
        r.block.end()
    );
    r
}

async fn watermark(a: &dyn Authority, name: &NamespaceName) -> u64 {
    a.state(name)
        .await
        .unwrap_or_else(|e| panic!("[{}] state({name}) failed: {e}", a.kind()))
        .unwrap_or_else(|| {
            panic!(
                "[{}] state({name}) is None after ensure_namespace",
                a.kind()
            )
        })
        .watermark
}

/// Panics unless every block is of `spec`'s residue class and no two blocks share an id.
fn assert_disjoint_in_class(kind: &str, what: &str, spec: &SequenceSpec, blocks: &[Block]) {
    let mut sorted = blocks.to_vec();
    sorted.sort_by_key(|b| b.start());
    for b in &sorted {
        assert_eq!(
            b.step(),
            spec.step(),
            "[{kind}] {what}: block {b:?} has the wrong step"
        );
        assert!(
            b.start() >= spec.first() && b.start() % spec.step() == spec.offset(),
            "[{kind}] {what}: block {b:?} starts outside the residue class of {spec:?}"
        );
        assert!(
            b.last() <= spec.width().max_id(),
            "[{kind}] {what}: block {b:?} passes the maximum"
        );
    }
    for pair in sorted.windows(2) {
        assert!(
            pair[0].end() <= pair[1].start(),
            "[{kind}] {what}: blocks {:?} and {:?} overlap: ids handed out twice",
            pair[0],
            pair[1]
        );
    }
}

/// 16 tasks × 200 reservations of sizes 1..=50 on one namespace (step 3, offset 2): the blocks
/// are pairwise disjoint, of the residue class, exactly as long as asked, and together they are
/// every id below the final watermark (no id lost, none given twice).
pub async fn concurrent_reservations_never_overlap(a: Arc<dyn Authority>) {
    const TASKS: u64 = 16;
    const PER_TASK: u64 = 200;
    let name = unique_name("concurrent");
    let spec = SequenceSpec::new(Width::Bits64, 10, 3, 2).unwrap();
    ensure(&*a, &name, spec).await;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let a = a.clone();
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            let mut blocks = Vec::new();
            for i in 0..PER_TASK {
                let count = 1 + (t * 31 + i * 7) % 50;
                let r = reserve(&*a, &name, count).await;
                assert_eq!(
                    r.block.len(),
                    count,
                    "[{}] a 64-bit reservation of {count} ids returned {:?}",
                    a.kind(),
                    r.block
                );
                blocks.push(r.block);
            }
            blocks
        }));
    }
    let mut blocks = Vec::new();
    for task in tasks {
        blocks.extend(
            task.await
                .unwrap_or_else(|e| panic!("reservation task failed: {e}")),
        );
    }
    assert_disjoint_in_class(a.kind(), "concurrent reservations", &spec, &blocks);
    let handed_out: u64 = blocks.iter().map(|b| b.len()).sum();
    let top = blocks.iter().map(|b| b.end()).max().unwrap();
    let state = a.state(&name).await.unwrap().unwrap();
    assert_eq!(
        state.watermark,
        top,
        "[{}] final watermark is not the highest block end",
        a.kind()
    );
    assert_eq!(
        state.ids_used(),
        handed_out,
        "[{}] {handed_out} ids were reserved but {} lie below the watermark",
        a.kind(),
        state.ids_used()
    );
}

/// Reservations made before a close are never reissued after a reopen, and the spec survives.
///
/// `open` is called twice; the authority from the first call is dropped before the second, and
/// the second must open the same backing store (for a file store: the same directory).
pub async fn watermark_survives_reopen<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Authority>>,
{
    let name = unique_name("reopen");
    let spec = SequenceSpec::new(Width::Bits32, 100, 2, 0).unwrap();
    let (kind, before, last) = {
        let a = open().await;
        ensure(&*a, &name, spec).await;
        let mut blocks = Vec::new();
        for count in [5, 1, 40] {
            blocks.push(reserve(&*a, &name, count).await.block);
        }
        (a.kind(), blocks, watermark(&*a, &name).await)
    };
    let a = open().await;
    let state = a
        .state(&name)
        .await
        .unwrap_or_else(|e| panic!("[{kind}] state({name}) after reopen failed: {e}"))
        .unwrap_or_else(|| panic!("[{kind}] namespace {name} is gone after reopen"));
    assert_eq!(state.spec, spec, "[{kind}] the spec changed across reopen");
    assert_eq!(
        state.watermark, last,
        "[{kind}] the watermark changed across reopen"
    );
    assert_eq!(
        ensure(&*a, &name, spec).await.watermark,
        last,
        "[{kind}] ensure after reopen reset the watermark"
    );
    let after = reserve(&*a, &name, 10).await.block;
    let mut all = before;
    all.push(after);
    assert_disjoint_in_class(kind, "reservations across reopen", &spec, &all);
    assert_eq!(
        Some(after.start()),
        spec.align_up(last),
        "[{kind}] the first block after reopen skipped or reused ids"
    );
}

/// `give_back` lowers the watermark only while nothing was reserved after the tail's block; the
/// ids given back are then reserved again exactly once, and never overlap blocks still held.
pub async fn give_back_is_compare_and_swap(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("give-back");
    let spec = SequenceSpec::new(Width::Bits64, 1, 2, 1).unwrap();
    ensure(&*a, &name, spec).await;

    let b1 = reserve(&*a, &name, 100).await.block;
    let b2 = reserve(&*a, &name, 100).await.block;
    let (head, tail) = b2.split_first(30);
    let tail = tail.unwrap();

    // An older block's tail: something (b2) was reserved after it.
    let (_, stale) = b1.split_first(10);
    let stale = stale.unwrap();
    assert_eq!(
        a.give_back(&name, stale).await.unwrap(),
        GiveBack::Refused {
            watermark: b2.end()
        },
        "[{kind}] give_back of a tail that is not the newest must be refused"
    );
    assert_eq!(
        watermark(&*a, &name).await,
        b2.end(),
        "[{kind}] a refused give_back changed the watermark"
    );

    assert_eq!(
        a.give_back(&name, tail).await.unwrap(),
        GiveBack::Returned,
        "[{kind}] give_back of the newest tail"
    );
    assert_eq!(
        watermark(&*a, &name).await,
        tail.start(),
        "[{kind}] give_back did not lower the watermark to the tail's start"
    );
    assert_eq!(
        a.give_back(&name, tail).await.unwrap(),
        GiveBack::Refused {
            watermark: tail.start()
        },
        "[{kind}] the same tail given back twice must be refused the second time"
    );

    // The tail's ids are reserved again: once, and next to what is still held (b1, head).
    let b3 = reserve(&*a, &name, 50).await.block;
    assert_eq!(
        b3.start(),
        tail.start(),
        "[{kind}] the ids given back were not reissued first"
    );
    let b4 = reserve(&*a, &name, 50).await.block;
    let held = [b1, head, b3, b4];
    assert_disjoint_in_class(kind, "blocks around a give_back", &spec, &held);
    for id in tail.ids() {
        let times = held.iter().filter(|b| b.contains(id)).count();
        assert_eq!(
            times, 1,
            "[{kind}] id {id} given back was reissued {times} times"
        );
    }

    // After b4 was reserved, b3's tail is no longer the newest.
    let (_, b3_tail) = b3.split_first(10);
    assert_eq!(
        a.give_back(&name, b3_tail.unwrap()).await.unwrap(),
        GiveBack::Refused {
            watermark: b4.end()
        },
        "[{kind}] give_back after a later reservation must be refused"
    );

    // A tail that no reservation of this namespace could return is an error, not a CAS.
    let foreign = Block::new(b4.end() - 1, b4.end(), 1).unwrap();
    let err = a.give_back(&name, foreign).await.unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidTail { .. }),
        "[{kind}] give_back of a step-1 tail to a step-2 namespace: {err:?}"
    );
    assert_eq!(
        watermark(&*a, &name).await,
        b4.end(),
        "[{kind}] an invalid give_back changed the watermark"
    );
}

/// A 32-bit namespace never wraps: the last block is cut at 2^31 - 1, then reservations fail
/// with [`StoreError::Exhausted`] and leave the watermark alone.
pub async fn bits32_exhaustion_is_an_error(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let max = Width::Bits32.max_id();
    let name = unique_name("bits32");
    let spec = SequenceSpec::new(Width::Bits32, max - 999, 1, 0).unwrap();
    ensure(&*a, &name, spec).await;
    let first = reserve(&*a, &name, 600).await.block;
    assert_eq!(first.len(), 600, "[{kind}] the first 600 ids fit");
    let last = reserve(&*a, &name, 600).await;
    assert_eq!(
        last.block.len(),
        400,
        "[{kind}] the last block must be cut to the 400 ids left"
    );
    assert_eq!(
        last.block.last(),
        max,
        "[{kind}] the last block must end at 2^31 - 1"
    );
    assert_eq!(last.watermark, max + 1);
    for _ in 0..2 {
        match a.reserve(&name, 1).await {
            Err(StoreError::Exhausted {
                name: n,
                bits: 32,
                watermark,
            }) => {
                assert_eq!(
                    (n, watermark),
                    (name.clone(), max + 1),
                    "[{kind}] Exhausted names the namespace and its watermark"
                );
            }
            other => panic!("[{kind}] reserve past 2^31 - 1 must be Exhausted, got {other:?}"),
        }
    }
    let state = a.state(&name).await.unwrap().unwrap();
    assert_eq!(
        (state.watermark, state.ids_left()),
        (max + 1, 0),
        "[{kind}] exhaustion changed the watermark"
    );

    // With a step, the last id of the class below the maximum is the last one issued.
    let name = unique_name("bits32-step");
    let spec = SequenceSpec::new(Width::Bits32, max - 100, 7, 3).unwrap();
    ensure(&*a, &name, spec).await;
    let all = reserve(&*a, &name, 1000).await.block;
    assert_eq!(
        all.len(),
        spec.capacity(),
        "[{kind}] a stepped 32-bit namespace gave {all:?}"
    );
    assert!(
        all.last() <= max && all.last() + 7 > max,
        "[{kind}] the last stepped block ends at {}",
        all.last()
    );
    assert!(matches!(
        a.reserve(&name, 1).await,
        Err(StoreError::Exhausted { bits: 32, .. })
    ));
}

/// Flickr's odd/even ticket servers: two namespaces with step 2 and offsets 1 and 0, reserved
/// from concurrently, only ever return odd and even ids respectively, so they never collide.
///
/// `odd` and `even` may be the same authority or two authorities (two servers).
pub async fn step_and_offset_are_respected(odd: Arc<dyn Authority>, even: Arc<dyn Authority>) {
    let odd_name = unique_name("flickr-odd");
    let even_name = unique_name("flickr-even");
    let odd_spec = SequenceSpec::new(Width::Bits64, 1, 2, 1).unwrap();
    let even_spec = SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap();
    ensure(&*odd, &odd_name, odd_spec).await;
    ensure(&*even, &even_name, even_spec).await;
    let run = |a: Arc<dyn Authority>, name: NamespaceName| {
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..50u64 {
                ids.extend(reserve(&*a, &name, 1 + i % 9).await.block.ids());
            }
            ids
        })
    };
    let odd_task = run(odd.clone(), odd_name);
    let even_task = run(even.clone(), even_name);
    let odd_ids = odd_task.await.unwrap();
    let even_ids = even_task.await.unwrap();
    assert!(
        odd_ids.iter().all(|id| id % 2 == 1),
        "[{}] an offset-1 step-2 namespace issued an even id",
        odd.kind()
    );
    assert!(
        even_ids.iter().all(|id| id % 2 == 0 && *id >= 2),
        "[{}] an offset-0 step-2 namespace issued an odd id",
        even.kind()
    );
    let mut all: Vec<u64> = odd_ids.iter().chain(&even_ids).copied().collect();
    all.sort_unstable();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "odd and even servers issued the same id");
    // Dense within each class: ids 1, 3, 5, … and 2, 4, 6, … with no gaps.
    assert!(
        odd_ids.iter().zip(0u64..).all(|(id, i)| *id == 1 + 2 * i),
        "[{}] odd ids have gaps",
        odd.kind()
    );
    assert!(
        even_ids.iter().zip(0u64..).all(|(id, i)| *id == 2 + 2 * i),
        "[{}] even ids have gaps",
        even.kind()
    );
}

/// `ensure_namespace` creates once, returns the state unchanged when called again with the same
/// spec (also concurrently), and is [`StoreError::SpecConflict`] with another spec.
pub async fn ensure_namespace_is_idempotent(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("ensure");
    let spec = SequenceSpec::new(Width::Bits64, 1000, 10, 4).unwrap();
    assert!(
        a.state(&name).await.unwrap().is_none(),
        "[{kind}] a fresh namespace already exists"
    );
    let created = ensure(&*a, &name, spec).await;
    assert_eq!(
        created,
        NamespaceState::new(name.clone(), spec),
        "[{kind}] a new namespace starts at its initial watermark"
    );
    assert_eq!(created.watermark, 1000);
    let r = reserve(&*a, &name, 3).await;
    assert_eq!(
        r.block.ids().collect::<Vec<_>>(),
        vec![1004, 1014, 1024],
        "[{kind}] first block of first=1000 step=10 offset=4"
    );

    let again = ensure(&*a, &name, spec).await;
    assert_eq!(
        again.watermark, r.watermark,
        "[{kind}] ensure_namespace with the same spec reset the watermark"
    );

    let other = SequenceSpec::new(Width::Bits64, 1000, 10, 5).unwrap();
    match a.ensure_namespace(&name, other).await {
        Err(StoreError::SpecConflict {
            name: n,
            existing,
            requested,
            ..
        }) => {
            assert_eq!(
                (n, existing, requested),
                (name.clone(), spec, other),
                "[{kind}] SpecConflict fields"
            );
        }
        got => {
            panic!("[{kind}] ensure_namespace with another spec must be SpecConflict, got {got:?}")
        }
    }
    assert_eq!(
        watermark(&*a, &name).await,
        r.watermark,
        "[{kind}] a SpecConflict changed the namespace"
    );

    // Concurrent creation of one name: every caller gets the same, single namespace.
    let name = unique_name("ensure-race");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (a, name) = (a.clone(), name.clone());
            tokio::spawn(async move { ensure(&*a, &name, spec).await })
        })
        .collect();
    for t in tasks {
        assert_eq!(
            t.await.unwrap(),
            NamespaceState::new(name.clone(), spec),
            "[{kind}] concurrent ensure_namespace"
        );
    }
}

/// Operations on a namespace that does not exist are [`StoreError::UnknownNamespace`] (and do
/// not create it); zero-id reservations are [`StoreError::InvalidCount`].
pub async fn unknown_namespace_and_bad_count_are_errors(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("absent");
    match a.reserve(&name, 10).await {
        Err(StoreError::UnknownNamespace { name: n }) => assert_eq!(n, name),
        got => {
            panic!("[{kind}] reserve on an absent namespace must be UnknownNamespace, got {got:?}")
        }
    }
    let tail = Block::new(1, 10, 1).unwrap();
    assert!(
        matches!(
            a.give_back(&name, tail).await,
            Err(StoreError::UnknownNamespace { .. })
        ),
        "[{kind}] give_back on an absent namespace must be UnknownNamespace"
    );
    assert_eq!(
        a.state(&name).await.unwrap(),
        None,
        "[{kind}] a failed reserve created the namespace"
    );

    ensure(&*a, &name, SequenceSpec::default_64()).await;
    assert!(
        matches!(a.reserve(&name, 0).await, Err(StoreError::InvalidCount)),
        "[{kind}] reserve of 0 ids must be InvalidCount"
    );
    assert_eq!(
        watermark(&*a, &name).await,
        1,
        "[{kind}] an invalid reserve changed the watermark"
    );
}

/// `list` returns every namespace, sorted by name, with its current state.
pub async fn list_is_sorted(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let base = unique_name("list");
    // Created out of order; '-' < '.' < digits < letters in byte order.
    let names: Vec<NamespaceName> = ["b", "a", "a.b", "a-b", "C", "0"]
        .iter()
        .map(|s| NamespaceName::new(&format!("{base}.{s}")).unwrap())
        .collect();
    for (i, name) in names.iter().enumerate() {
        ensure(&*a, name, SequenceSpec::default_64()).await;
        reserve(&*a, name, i as u64 + 1).await;
    }
    let listed = a
        .list()
        .await
        .unwrap_or_else(|e| panic!("[{kind}] list failed: {e}"));
    let listed_names: Vec<&NamespaceName> = listed.iter().map(|s| &s.name).collect();
    let mut sorted = listed_names.clone();
    sorted.sort();
    assert_eq!(listed_names, sorted, "[{kind}] list is not sorted by name");
    for (i, name) in names.iter().enumerate() {
        let state = listed
            .iter()
            .find(|s| &s.name == name)
            .unwrap_or_else(|| panic!("[{kind}] list lacks {name}"));
        assert_eq!(
            state.watermark,
            i as u64 + 2,
            "[{kind}] list shows a stale watermark for {name}"
        );
    }
}

/// A node's record over `store` records a namespace; over `other` (a store that moved, an empty
/// backup, another database) the namespace is refused as lost, by `ensure_namespace` and by
/// `reserve`, and never created there; over `store` again it serves on.
pub async fn a_node_record_refuses_a_store_that_lost_a_namespace(
    store: Arc<dyn Authority>,
    other: Arc<dyn Authority>,
) {
    use crate::node_record::{CheckedAuthority, NodeRecord};
    let kind = store.kind();
    let dir = std::env::temp_dir().join(format!(
        "idmint-node-record-{}-{}",
        std::process::id(),
        unique_name("node_record").as_str()
    ));
    let node_record = || Arc::new(NodeRecord::open(&dir, format!("{kind} under test")).unwrap());
    let name = unique_name("node_record");
    let spec = SequenceSpec::default_64();
    {
        let a = CheckedAuthority::new(store.clone(), node_record());
        ensure(&a, &name, spec).await;
        reserve(&a, &name, 10).await;
    }
    let moved = CheckedAuthority::new(other.clone(), node_record());
    let err = moved.ensure_namespace(&name, spec).await.unwrap_err();
    assert!(
        err.is_lost(),
        "[{kind}] a moved store was not refused: {err}"
    );
    let err = moved.reserve(&name, 1).await.unwrap_err();
    assert!(err.is_lost(), "[{kind}] reserve on a moved store: {err}");
    assert_eq!(
        other.state(&name).await.unwrap(),
        None,
        "[{kind}] the lost namespace was created on the other store"
    );
    let back = CheckedAuthority::new(store, node_record());
    ensure(&back, &name, spec).await;
    let r = reserve(&back, &name, 5).await;
    assert!(r.block.start() >= 11, "[{kind}] {r:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two stores of the backend as the members of a multi authority (offsets 0 and 1, step 2);
/// then member 2 is replaced by `replaced`, an empty store (a restored empty backup, a new
/// server): the next multi authority takes it out of service, never creates the namespace on it,
/// and serves member 1's class only, without repeating an id.
pub async fn a_multi_member_that_lost_its_data_is_taken_out(
    first: Arc<dyn Authority>,
    second: Arc<dyn Authority>,
    replaced: Arc<dyn Authority>,
) {
    use crate::MultiAuthority;
    let kind = first.kind();
    let name = unique_name("lost_member");
    let spec = SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap();
    let mut seen = std::collections::HashSet::new();
    let before = MultiAuthority::new(vec![(first.clone(), 0), (second, 1)]).unwrap();
    ensure(&before, &name, spec).await;
    for _ in 0..6 {
        let r = reserve(&before, &name, 7).await;
        assert!(
            r.block.ids().all(|id| seen.insert(id)),
            "[{kind}] {r:?} repeated"
        );
    }
    let after = MultiAuthority::new(vec![(first, 0), (replaced.clone(), 1)]).unwrap();
    ensure(&after, &name, spec).await;
    for _ in 0..6 {
        let r = reserve(&after, &name, 7).await;
        assert_eq!(
            r.block.start() % 2,
            0,
            "[{kind}] the replaced member served {r:?}"
        );
        assert!(
            r.block.ids().all(|id| seen.insert(id)),
            "[{kind}] {r:?} repeated"
        );
    }
    let members = crate::Members::health(&after);
    assert!(
        members[1].out_of_service.is_some() && members[0].out_of_service.is_none(),
        "[{kind}] {members:?}"
    );
    assert_eq!(
        replaced.state(&name).await.unwrap(),
        None,
        "[{kind}] the namespace was created on the replaced member"
    );
}

/// A store has no incarnation until one is created; the first created stays (a second
/// candidate gets the first back), survives a reopen, and another store's is its own.
pub async fn incarnations_are_created_once<B: Backend>(storage: &B, other: Arc<dyn Authority>) {
    use crate::Incarnation;
    let kind = B::KIND;
    let (first, second) = (Incarnation::random(), Incarnation::random());
    {
        let a = storage.open().await;
        assert_eq!(a.incarnation().await.unwrap(), None, "[{kind}] a new store");
        let races: Vec<_> = [first.clone(), second.clone()]
            .into_iter()
            .map(|candidate| {
                let a = a.clone();
                tokio::spawn(async move { a.create_incarnation(&candidate).await.unwrap() })
            })
            .collect();
        let mut won = Vec::new();
        for race in races {
            won.push(race.await.unwrap());
        }
        assert_eq!(won[0], won[1], "[{kind}] two racing creators disagree");
        assert!(won[0] == first || won[0] == second, "[{kind}] {won:?}");
        assert_eq!(
            a.create_incarnation(&Incarnation::random()).await.unwrap(),
            won[0],
            "[{kind}] a second creation changed the incarnation"
        );
        assert_eq!(a.incarnation().await.unwrap().as_ref(), Some(&won[0]));
        let winner = won[0].clone();
        drop(a);
        let reopened = storage.open().await;
        assert_eq!(
            reopened.incarnation().await.unwrap(),
            Some(winner.clone()),
            "[{kind}] after a reopen"
        );
        assert_eq!(
            other.incarnation().await.unwrap(),
            None,
            "[{kind}] another store"
        );
        let own = other.create_incarnation(&first).await.unwrap();
        assert_eq!(own, first, "[{kind}]");
        assert_eq!(reopened.incarnation().await.unwrap(), Some(winner));
    }
}

/// Runs every check. `open` returns the authority under test; it is called several times, and
/// each call after the first must see what the previous ones wrote (for a file store: open the
/// same directory; for a memory store: return the same authority). Authorities it returned are
/// dropped before it is called again.
pub async fn run_all<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Authority>>,
{
    {
        let a = open().await;
        concurrent_reservations_never_overlap(a.clone()).await;
        give_back_is_compare_and_swap(a.clone()).await;
        bits32_exhaustion_is_an_error(a.clone()).await;
        step_and_offset_are_respected(a.clone(), a.clone()).await;
        ensure_namespace_is_idempotent(a.clone()).await;
        unknown_namespace_and_bad_count_are_errors(a.clone()).await;
        list_is_sorted(a).await;
    }
    retired::retirement_is_not_exhaustion(&open).await;
    watermark_survives_reopen(open).await;
}

/// Runs `test` to completion on a fresh multi-threaded runtime (4 workers, time and I/O on):
/// what every test [`conformance_tests!`](crate::conformance_tests) generates calls.
#[cfg(feature = "conformance")]
pub fn run<F: Future<Output = ()>>(test: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
        .block_on(test);
}

/// Every property as a function of the backend alone, on fresh storage: what the tests
/// [`conformance_tests!`](crate::conformance_tests) generates run, one per property.
#[cfg(feature = "conformance")]
pub mod cases {
    pub use super::audit::cases::{
        a_give_back_into_the_pruned_region_verifies, advance_is_forward_only_and_recorded,
        an_empty_ledger_does_not_verify, every_grant_is_in_the_ledger, leases_are_in_the_ledger,
        pruning_keeps_the_ledger_verifiable, pruning_measures_age_by_the_stores_clock,
    };
    pub use super::faults::{
        cut_is_unavailable_and_recovers, lost_advance_reply_is_unknown,
        lost_give_back_reply_is_unknown, lost_reply_never_reissues_the_block,
        stall_is_unavailable_within_the_timeout, two_authorities_never_overlap,
    };
    pub use super::leases::cases::{
        a_deleted_group_is_never_created_again,
        a_node_record_refuses_an_emptied_or_swapped_lease_store, a_release_never_lowers_the_floor,
        a_released_lease_keeps_its_floor, a_renewal_never_takes_over_another_holders_lease,
        an_expired_lease_is_taken_over, leases_never_overlap, reading_a_group_changes_nothing,
    };
    pub use super::parks::cases::{
        only_granted_ids_are_parked, parked_blocks_are_claimed_once,
        rebase_and_retirement_drop_parked_ids,
    };
    pub use super::retired::cases::retirement_is_not_exhaustion;
    use super::Backend;

    /// [`super::concurrent_reservations_never_overlap`] on one authority.
    pub async fn concurrent_reservations_never_overlap<B: Backend>() {
        let storage = B::create().await;
        super::concurrent_reservations_never_overlap(storage.open().await).await;
    }

    /// [`super::watermark_survives_reopen`]: a second authority on the storage after the
    /// first is dropped.
    pub async fn watermark_survives_reopen<B: Backend>() {
        let storage = B::create().await;
        super::watermark_survives_reopen(|| storage.open()).await;
    }

    /// [`super::give_back_is_compare_and_swap`].
    pub async fn give_back_is_compare_and_swap<B: Backend>() {
        let storage = B::create().await;
        super::give_back_is_compare_and_swap(storage.open().await).await;
    }

    /// [`super::bits32_exhaustion_is_an_error`].
    pub async fn bits32_exhaustion_is_an_error<B: Backend>() {
        let storage = B::create().await;
        super::bits32_exhaustion_is_an_error(storage.open().await).await;
    }

    /// [`super::step_and_offset_are_respected`] with both namespaces on one authority.
    pub async fn step_and_offset_are_respected<B: Backend>() {
        let storage = B::create().await;
        let a = storage.open().await;
        super::step_and_offset_are_respected(a.clone(), a).await;
    }

    /// [`super::step_and_offset_are_respected`] on two independent stores: Flickr's odd and
    /// even servers.
    pub async fn odd_and_even_stores_never_collide<B: Backend>() {
        let odd = B::create().await;
        let even = odd.independent().await;
        super::step_and_offset_are_respected(odd.open().await, even.open().await).await;
    }

    /// [`super::ensure_namespace_is_idempotent`].
    pub async fn ensure_namespace_is_idempotent<B: Backend>() {
        let storage = B::create().await;
        super::ensure_namespace_is_idempotent(storage.open().await).await;
    }

    /// [`super::unknown_namespace_and_bad_count_are_errors`].
    pub async fn unknown_namespace_and_bad_count_are_errors<B: Backend>() {
        let storage = B::create().await;
        super::unknown_namespace_and_bad_count_are_errors(storage.open().await).await;
    }

    /// [`super::a_node_record_refuses_a_store_that_lost_a_namespace`] on two independent stores.
    pub async fn a_node_record_refuses_a_store_that_lost_a_namespace<B: Backend>() {
        let store = B::create().await;
        let other = store.independent().await;
        super::a_node_record_refuses_a_store_that_lost_a_namespace(
            store.open().await,
            other.open().await,
        )
        .await;
    }

    /// [`super::a_multi_member_that_lost_its_data_is_taken_out`] on three independent stores.
    pub async fn a_multi_member_that_lost_its_data_is_taken_out<B: Backend>() {
        let first = B::create().await;
        let second = first.independent().await;
        let replaced = first.independent().await;
        super::a_multi_member_that_lost_its_data_is_taken_out(
            first.open().await,
            second.open().await,
            replaced.open().await,
        )
        .await;
    }

    /// [`super::incarnations_are_created_once`] on a store, its reopening and an independent
    /// one.
    pub async fn incarnations_are_created_once<B: Backend>() {
        let storage = B::create().await;
        let other = storage.independent().await;
        super::incarnations_are_created_once(&storage, other.open().await).await;
    }

    /// [`super::list_is_sorted`].
    pub async fn list_is_sorted<B: Backend>() {
        let storage = B::create().await;
        super::list_is_sorted(storage.open().await).await;
    }
}

/// One `#[test]` per conformance property for a backend: a module named `$module` whose tests
/// are named after the properties (`postgres::cut_is_unavailable_and_recovers` in `cargo test`
/// output), each on fresh storage from the fixture `$backend` (a [`Backend`]).
///
/// - `conformance_tests!(name => Fixture)`: the contract properties (every backend);
/// - `conformance_tests!(name => Fixture, with faults)`: those, the fault scenarios and two
///   authorities on one storage (a [`NetworkBackend`]);
/// - `conformance_tests!(name => Fixture, leases)`: the worker-lease properties ([`leases`]),
///   for a backend that stores leases;
/// - `conformance_tests!(name => Fixture, audit)`: the audit-ledger properties ([`audit`]),
///   for a backend that keeps a ledger;
/// - `conformance_tests!(name => Fixture, parks)`: the parking properties ([`parks`]), for a
///   backend that keeps parked blocks;
/// - `conformance_tests!(name => Fixture, faults only)`: cut, stall and lost reply alone (a
///   backend that grants single tickets rather than blocks, such as MySQL ticket mode).
///
/// The fixture's name is resolved where the macro is called. The tests run on [`run`]'s
/// runtime: the calling crate needs no tokio macros.
#[cfg(feature = "conformance")]
#[macro_export]
macro_rules! conformance_tests {
    ($module:ident => $backend:ty) => {
        $crate::conformance_tests!(@contract $module, $backend, []);
    };
    ($module:ident => $backend:ty, with faults) => {
        $crate::conformance_tests!(@contract $module, $backend, [
            cut_is_unavailable_and_recovers,
            stall_is_unavailable_within_the_timeout,
            lost_reply_never_reissues_the_block,
            lost_give_back_reply_is_unknown,
            lost_advance_reply_is_unknown,
            two_authorities_never_overlap,
        ]);
    };
    ($module:ident => $backend:ty, leases) => {
        $crate::conformance_tests!(@tests $module, $backend, [
            leases_never_overlap,
            an_expired_lease_is_taken_over,
            a_released_lease_keeps_its_floor,
            a_release_never_lowers_the_floor,
            reading_a_group_changes_nothing,
            a_renewal_never_takes_over_another_holders_lease,
            a_node_record_refuses_an_emptied_or_swapped_lease_store,
            a_deleted_group_is_never_created_again,
        ]);
    };
    ($module:ident => $backend:ty, audit) => {
        $crate::conformance_tests!(@tests $module, $backend, [
            every_grant_is_in_the_ledger,
            advance_is_forward_only_and_recorded,
            leases_are_in_the_ledger,
            pruning_keeps_the_ledger_verifiable,
            a_give_back_into_the_pruned_region_verifies,
            pruning_measures_age_by_the_stores_clock,
            an_empty_ledger_does_not_verify,
        ]);
    };
    ($module:ident => $backend:ty, parks) => {
        $crate::conformance_tests!(@tests $module, $backend, [
            parked_blocks_are_claimed_once,
            only_granted_ids_are_parked,
            rebase_and_retirement_drop_parked_ids,
        ]);
    };
    ($module:ident => $backend:ty, faults only) => {
        $crate::conformance_tests!(@tests $module, $backend, [
            cut_is_unavailable_and_recovers,
            stall_is_unavailable_within_the_timeout,
            lost_reply_never_reissues_the_block,
        ]);
    };
    (@contract $module:ident, $backend:ty, [$($more:ident,)*]) => {
        $crate::conformance_tests!(@tests $module, $backend, [
            concurrent_reservations_never_overlap,
            watermark_survives_reopen,
            give_back_is_compare_and_swap,
            bits32_exhaustion_is_an_error,
            retirement_is_not_exhaustion,
            step_and_offset_are_respected,
            odd_and_even_stores_never_collide,
            ensure_namespace_is_idempotent,
            unknown_namespace_and_bad_count_are_errors,
            list_is_sorted,
            a_node_record_refuses_a_store_that_lost_a_namespace,
            a_multi_member_that_lost_its_data_is_taken_out,
            incarnations_are_created_once,
            $($more,)*
        ]);
    };
    (@tests $module:ident, $backend:ty, [$($test:ident,)*]) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $test() {
                    $crate::conformance::run($crate::conformance::cases::$test::<$backend>());
                }
            )*
        }
    };
}
