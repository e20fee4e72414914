//! The worker-lease properties of the conformance suite ([`crate::lease`]'s invariants), run
//! for every backend that stores leases (`conformance_tests!(name => Fixture, leases)`).
//!
//! Each property takes two authorities on one storage: two nodes for backends that can be
//! opened twice at once ([`Backend::CONCURRENT_OPENS`]), the same authority twice otherwise
//! (the file store: one process per data directory, whose leases are then shared by the
//! namespaces of that process). Groups are named uniquely per call, so properties can share
//! storage.
//!
//! [`reading_a_group_changes_nothing`] checks that the read-only listing of a group (a node's
//! worker pool usage) writes nothing: no layout lock, no token, no renewal.
//!
//! Expiry is the authority's: the takeover property asks for a short TTL and retries the
//! acquisition until the authority itself says the old lease ran out (bounded by a deadline
//! far above any backend's TTL rounding), instead of sleeping a guessed time.

use super::{unique_name, Backend};
use crate::lease::{LeaseError, LeaseRequest, WorkerChoice, WorkerLease, WorkerLeases, WorkerSlot};
use crate::Authority;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LAYOUT: &str = "timestamp_bits=41 node_bits=2 sequence_bits=12 unit=1ms epoch=0";

fn leases_of(a: &Arc<dyn Authority>) -> &dyn WorkerLeases {
    a.worker_leases()
        .unwrap_or_else(|| panic!("the {} authority stores no worker leases", a.kind()))
}

fn request(group: &idmint_core::NamespaceName, choice: WorkerChoice, holder: &str) -> LeaseRequest {
    LeaseRequest {
        group: group.clone(),
        workers: 4,
        choice,
        prefer_floor_at_most: None,
        holder: holder.to_string(),
        layout: LAYOUT.to_string(),
        ttl: Duration::from_secs(60),
    }
}

/// Two holders never overlap: concurrent acquisitions from two authorities get distinct worker
/// ids with distinct tokens until the pool is full; a full pool names every live lease; a held
/// worker id names its holder; another layout is refused.
pub async fn leases_never_overlap(a: Arc<dyn Authority>, b: Arc<dyn Authority>) {
    let kind = a.kind();
    let group = unique_name("leases_never_overlap");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let authority = if i % 2 == 0 { a.clone() } else { b.clone() };
        let req = request(&group, WorkerChoice::LowestFree, &format!("holder-{i}"));
        tasks.push(tokio::spawn(async move {
            leases_of(&authority).acquire(&req).await
        }));
    }
    let mut granted: Vec<WorkerLease> = Vec::new();
    let mut full = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(lease) => granted.push(lease),
            Err(LeaseError::PoolFull { live, workers, .. }) => {
                assert_eq!(workers, 4, "{kind}");
                assert!(
                    !live.is_empty(),
                    "{kind}: a full pool names its live leases"
                );
                full += 1;
            }
            Err(e) => panic!("{kind}: acquire failed: {e}"),
        }
    }
    assert_eq!(
        granted.len(),
        4,
        "{kind}: 4 worker ids, 8 acquirers: {granted:?}"
    );
    assert_eq!(full, 4, "{kind}");
    let workers: HashSet<u64> = granted.iter().map(|l| l.worker).collect();
    assert_eq!(
        workers,
        (0..4).collect(),
        "{kind}: two holders of one worker id"
    );
    let tokens: HashSet<u64> = granted.iter().map(|l| l.token).collect();
    assert_eq!(tokens.len(), 4, "{kind}: tokens must differ: {granted:?}");
    for l in &granted {
        assert_eq!(
            l.floor_unix_ms, 0,
            "{kind}: a worker id never held has floor 0"
        );
    }

    let err = leases_of(&b)
        .acquire(&request(&group, WorkerChoice::LowestFree, "late"))
        .await
        .unwrap_err();
    let text = err.to_string();
    for l in &granted {
        assert!(
            text.contains(&l.holder),
            "{kind}: {text} must name {}",
            l.holder
        );
    }

    let holder_of_2 = granted
        .iter()
        .find(|l| l.worker == 2)
        .unwrap()
        .holder
        .clone();
    match leases_of(&a)
        .acquire(&request(&group, WorkerChoice::Exactly(2), "second"))
        .await
    {
        Err(LeaseError::Held {
            worker: 2,
            holder,
            expires_in,
            ..
        }) => {
            assert_eq!(holder, holder_of_2, "{kind}");
            assert!(expires_in > Duration::ZERO, "{kind}");
        }
        other => panic!("{kind}: expected Held, got {other:?}"),
    }

    let mut other = request(&group, WorkerChoice::LowestFree, "other layout");
    other.layout = "timestamp_bits=41 node_bits=2 sequence_bits=12 unit=10ms epoch=0".into();
    // Release one so the pool is not full: the layout must still be refused.
    let first = granted.iter().find(|l| l.worker == 0).unwrap();
    leases_of(&a).release(first, 10).await.unwrap();
    match leases_of(&b).acquire(&other).await {
        Err(LeaseError::LayoutConflict {
            recorded,
            requested,
            ..
        }) => {
            assert_eq!(recorded, LAYOUT, "{kind}");
            assert_eq!(requested, other.layout, "{kind}");
        }
        other => panic!("{kind}: expected LayoutConflict, got {other:?}"),
    }

    let (record, slots) = leases_of(&a).group(&group).await.unwrap().unwrap();
    assert_eq!(record.layout, LAYOUT, "{kind}");
    assert!(record.last_token >= granted.iter().map(|l| l.token).max().unwrap());
    let live: Vec<u64> = slots
        .iter()
        .filter(|s| s.is_live())
        .map(|s| s.worker)
        .collect();
    assert_eq!(live, vec![1, 2, 3], "{kind}: sorted, worker 0 released");
}

/// An expired lease can be taken over, with a larger token and the floor its holder recorded;
/// the old holder's renewal and release are then refused and write nothing.
pub async fn an_expired_lease_is_taken_over(a: Arc<dyn Authority>, b: Arc<dyn Authority>) {
    let kind = a.kind();
    let group = unique_name("an_expired_lease_is_taken_over");
    let mut short = request(&group, WorkerChoice::Exactly(1), "old");
    short.ttl = Duration::from_secs(1);
    let old = leases_of(&a).acquire(&short).await.unwrap();
    assert_eq!(old.worker, 1, "{kind}");
    let old = leases_of(&a).renew(&old, 1_700_000_005_000).await.unwrap();
    assert_eq!(old.floor_unix_ms, 1_700_000_005_000, "{kind}");

    let deadline = Instant::now() + Duration::from_secs(60);
    let new = loop {
        match leases_of(&b)
            .acquire(&request(&group, WorkerChoice::Exactly(1), "new"))
            .await
        {
            Ok(lease) => break lease,
            Err(LeaseError::Held { holder, .. }) => {
                assert_eq!(holder, "old", "{kind}");
                assert!(
                    Instant::now() < deadline,
                    "{kind}: a 1 s lease still held after 60 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{kind}: takeover failed: {e}"),
        }
    };
    assert!(new.token > old.token, "{kind}: {new:?} after {old:?}");
    assert_eq!(
        new.floor_unix_ms, 1_700_000_005_000,
        "{kind}: the new holder starts at the old holder's floor"
    );
    for (what, result) in [
        (
            "renew",
            leases_of(&a).renew(&old, 1_800_000_000_000).await.map(drop),
        ),
        ("release", leases_of(&a).release(&old, 1).await),
    ] {
        match result {
            Err(LeaseError::Superseded { current, .. }) => {
                assert_eq!(current, new.token, "{kind}: {what}")
            }
            other => panic!("{kind}: the old holder's {what} must be refused: {other:?}"),
        }
    }
    let (_, slots) = leases_of(&b).group(&group).await.unwrap().unwrap();
    let slot = slots.iter().find(|s| s.worker == 1).unwrap();
    assert_eq!(slot.token, new.token, "{kind}");
    assert_eq!(slot.holder, "new", "{kind}");
    assert!(slot.is_live(), "{kind}");
    assert_eq!(
        slot.floor_unix_ms, 1_700_000_005_000,
        "{kind}: the superseded renewal wrote nothing"
    );
}

/// Renewals raise the floor and never lower it; a release frees the worker id at once and
/// keeps the higher of the stored floor and the one it names; the next holder gets that floor
/// and a larger token.
pub async fn a_released_lease_keeps_its_floor(a: Arc<dyn Authority>, b: Arc<dyn Authority>) {
    let kind = a.kind();
    let group = unique_name("a_released_lease_keeps_its_floor");
    let first = leases_of(&a)
        .acquire(&request(&group, WorkerChoice::LowestFree, "first"))
        .await
        .unwrap();
    assert_eq!(first.worker, 0, "{kind}");
    let renewed = leases_of(&a).renew(&first, 5_000).await.unwrap();
    assert_eq!(renewed.floor_unix_ms, 5_000, "{kind}");
    let renewed = leases_of(&a).renew(&renewed, 3_000).await.unwrap();
    assert_eq!(
        renewed.floor_unix_ms, 5_000,
        "{kind}: a renewal never lowers the floor"
    );
    leases_of(&a).release(&renewed, 7_000).await.unwrap();

    let (_, slots) = leases_of(&b).group(&group).await.unwrap().unwrap();
    let slot = slots.iter().find(|s| s.worker == 0).unwrap();
    assert!(!slot.is_live(), "{kind}: released");
    assert_eq!(slot.floor_unix_ms, 7_000, "{kind}");

    let second = leases_of(&b)
        .acquire(&request(&group, WorkerChoice::LowestFree, "second"))
        .await
        .unwrap();
    assert_eq!(second.worker, 0, "{kind}: the lowest free worker id again");
    assert_eq!(second.floor_unix_ms, 7_000, "{kind}");
    assert!(second.token > first.token, "{kind}");
    let again = leases_of(&b).renew(&second, 8_000).await.unwrap();
    assert_eq!(again.floor_unix_ms, 8_000, "{kind}");
    leases_of(&b).release(&again, 8_000).await.unwrap();
}

/// A lease group whose records were deleted while the store kept its incarnation and ledger
/// is never created again: the next acquisition, from a node that never held it, is refused as
/// lost and creates nothing, while a group of another name is created as usual. Otherwise it
/// starts again at token 1 and floor 0 under nodes that may still issue (issue 31: a Redis
/// group's hash and live keys deleted, then a new node started, gave 196 duplicate ids).
pub async fn a_deleted_group_is_never_created_again<B: Backend>(storage: &B) {
    let group = unique_name("a_deleted_group_is_never_created_again");
    let kind = {
        let a = storage.open().await;
        let first = leases_of(&a)
            .acquire(&request(&group, WorkerChoice::LowestFree, "first"))
            .await
            .unwrap();
        let renewed = leases_of(&a).renew(&first, 9_000).await.unwrap();
        leases_of(&a)
            .acquire(&request(&group, WorkerChoice::LowestFree, "second"))
            .await
            .unwrap();
        leases_of(&a).release(&renewed, 9_000).await.unwrap();
        a.kind()
    };
    storage.delete_lease_group(&group).await;

    let a = storage.open().await;
    assert_eq!(
        leases_of(&a).group(&group).await.unwrap(),
        None,
        "{kind}: the fixture deleted the group's records"
    );
    for choice in [WorkerChoice::LowestFree, WorkerChoice::Exactly(0)] {
        match leases_of(&a)
            .acquire(&request(&group, choice, "newcomer"))
            .await
        {
            Err(LeaseError::Store(e @ crate::StoreError::StoreLost { .. })) => assert!(
                e.to_string().contains("audit ledger") && e.to_string().contains(group.as_str()),
                "{kind}: {e}"
            ),
            other => panic!("{kind}: a deleted group must be refused as lost, got {other:?}"),
        }
    }
    assert_eq!(
        leases_of(&a).group(&group).await.unwrap(),
        None,
        "{kind}: a refused acquisition creates nothing"
    );
    let fresh = unique_name("a_deleted_group_is_never_created_again_fresh");
    let lease = leases_of(&a)
        .acquire(&request(&fresh, WorkerChoice::LowestFree, "newcomer"))
        .await
        .unwrap();
    assert_eq!(
        (lease.worker, lease.token, lease.floor_unix_ms),
        (0, 1, 0),
        "{kind}"
    );
}

/// A release never lowers a worker id's floor, whoever sends it and whatever it names: the
/// holder renews its floor to 9,000 after a second caller read the record (token, holder and
/// the floor 5,000 then), and that caller's release naming the floor it read, or 0, keeps
/// 9,000. Otherwise the next holder issues timestamps the first may have issued (issue 31: a
/// release with floor 0 gave two nodes worker 0, 153 duplicate ids; a release with the floor
/// read before a renewal, 12).
pub async fn a_release_never_lowers_the_floor(a: Arc<dyn Authority>, b: Arc<dyn Authority>) {
    let kind = a.kind();
    let group = unique_name("a_release_never_lowers_the_floor");
    let held = leases_of(&a)
        .acquire(&request(&group, WorkerChoice::LowestFree, "holder"))
        .await
        .unwrap();
    let held = leases_of(&a).renew(&held, 5_000).await.unwrap();
    let (_, slots) = leases_of(&b).group(&group).await.unwrap().unwrap();
    let read = slots
        .iter()
        .find(|s| s.worker == held.worker)
        .unwrap()
        .clone();
    let held = leases_of(&a).renew(&held, 9_000).await.unwrap();
    assert_eq!(held.floor_unix_ms, 9_000, "{kind}");
    let as_read = WorkerLease {
        group: group.clone(),
        worker: read.worker,
        token: read.token,
        floor_unix_ms: read.floor_unix_ms,
        ttl: held.ttl,
        holder: read.holder.clone(),
    };
    leases_of(&b)
        .release(&as_read, read.floor_unix_ms)
        .await
        .unwrap();
    let floor = |slots: Vec<WorkerSlot>| {
        slots
            .into_iter()
            .find(|s| s.worker == held.worker)
            .map(|s| (s.floor_unix_ms, s.is_live()))
    };
    let (_, slots) = leases_of(&a).group(&group).await.unwrap().unwrap();
    assert_eq!(
        floor(slots),
        Some((9_000, false)),
        "{kind}: a release naming the floor read before a renewal keeps the renewed floor"
    );
    let next = leases_of(&b)
        .acquire(&request(&group, WorkerChoice::Exactly(held.worker), "next"))
        .await
        .unwrap();
    assert_eq!(
        next.floor_unix_ms, 9_000,
        "{kind}: the next holder starts above it"
    );
    leases_of(&b).release(&next, 0).await.unwrap();
    let (_, slots) = leases_of(&a).group(&group).await.unwrap().unwrap();
    assert_eq!(
        floor(slots),
        Some((9_000, false)),
        "{kind}: a release naming floor 0 keeps the stored floor"
    );
    let last = leases_of(&a)
        .acquire(&request(&group, WorkerChoice::Exactly(held.worker), "last"))
        .await
        .unwrap();
    assert_eq!(last.floor_unix_ms, 9_000, "{kind}");
    let last = leases_of(&a).renew(&last, 1).await.unwrap();
    assert_eq!(last.floor_unix_ms, 9_000, "{kind}: nor does a renewal");
    leases_of(&a).release(&last, 9_001).await.unwrap();
}

/// A worker id's record without the time left: worker, token, holder, floor, live.
type SlotRecord = (u64, u64, String, u64, bool);

/// A group's records without the time left: layout, last token, slots.
type GroupRecords = (String, u64, Vec<SlotRecord>);

/// The records of a group as a read sees them, without the time left on live leases (which a
/// later read sees lower): layout, last token, and per worker id its token, holder, floor and
/// liveness.
fn records(
    read: Option<(crate::lease::GroupRecord, Vec<crate::lease::WorkerSlot>)>,
) -> Option<GroupRecords> {
    read.map(|(record, slots)| {
        let slots = slots
            .into_iter()
            .map(|s| {
                let live = s.is_live();
                (s.worker, s.token, s.holder, s.floor_unix_ms, live)
            })
            .collect();
        (record.layout, record.last_token, slots)
    })
}

/// Reading a group ([`WorkerLeases::group`], what a node's pool usage and status show) changes
/// nothing: a group never acquired stays unknown (no layout is locked by a read), repeated reads
/// of a group see the same records, reads never keep a lease alive (a 1 s lease read every
/// 100 ms still expires by the authority's clock), and the next acquisition's token is exactly
/// one above the last token the reads saw.
pub async fn reading_a_group_changes_nothing(a: Arc<dyn Authority>, b: Arc<dyn Authority>) {
    let kind = a.kind();
    let group = unique_name("reading_a_group_changes_nothing");
    for reader in [&a, &b, &a] {
        assert_eq!(
            leases_of(reader).group(&group).await.unwrap(),
            None,
            "{kind}: a group never acquired"
        );
    }
    // No layout was recorded by the reads: any layout may still be the first.
    let mut first = request(&group, WorkerChoice::LowestFree, "first");
    first.layout = "timestamp_bits=41 node_bits=2 sequence_bits=12 unit=10ms epoch=0".into();
    let held = leases_of(&a).acquire(&first).await.unwrap();
    let mut short = first.clone();
    short.holder = "short".into();
    short.ttl = Duration::from_secs(1);
    let brief = leases_of(&b).acquire(&short).await.unwrap();
    assert_eq!((held.worker, brief.worker), (0, 1), "{kind}");
    let brief = leases_of(&b)
        .renew(&brief, 1_700_000_000_000)
        .await
        .unwrap();

    let seen = records(leases_of(&a).group(&group).await.unwrap());
    let (layout, last_token, slots) = seen.clone().unwrap();
    assert_eq!(layout, first.layout, "{kind}");
    assert_eq!(last_token, brief.token, "{kind}: the latest grant's token");
    let live: Vec<u64> = slots.iter().filter(|s| s.4).map(|s| s.0).collect();
    assert_eq!(live, vec![0, 1], "{kind}");

    // Read until the authority says the 1 s lease ran out; every read before that sees the same
    // records, and none keeps the lease alive.
    let deadline = Instant::now() + Duration::from_secs(60);
    let after = loop {
        let now = records(leases_of(&b).group(&group).await.unwrap());
        if now.as_ref().is_some_and(|(_, _, slots)| !slots[1].4) {
            break now.unwrap();
        }
        assert_eq!(now, seen, "{kind}: a read changed the group");
        assert!(
            Instant::now() < deadline,
            "{kind}: a 1 s lease read every 100 ms is still live after 60 s: reads renew it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (_, last_after, slots_after) = after;
    assert_eq!(last_after, last_token, "{kind}: reads granted no token");
    assert_eq!(
        slots_after[1],
        (
            1,
            brief.token,
            "short".to_string(),
            1_700_000_000_000,
            false
        ),
        "{kind}: the expired lease keeps its token, holder and floor"
    );
    assert_eq!(slots_after[0], slots[0], "{kind}");

    let next = leases_of(&a)
        .acquire(&{
            let mut r = first.clone();
            r.choice = WorkerChoice::Exactly(1);
            r.holder = "next".into();
            r
        })
        .await
        .unwrap();
    assert_eq!(
        next.token,
        last_token + 1,
        "{kind}: reads moved the token on"
    );
    assert_eq!(next.floor_unix_ms, 1_700_000_000_000, "{kind}");
    leases_of(&a)
        .release(&next, 1_700_000_000_001)
        .await
        .unwrap();
    leases_of(&a).release(&held, 1).await.unwrap();
}

/// A store that lost its records grants token 1 again: a renewal or release with the same
/// token by the holder of the lost store never takes over (nor ends) the new holder's lease.
/// `old` holds the lease first; `emptied` is an independent, empty store (the emptied one).
pub async fn a_renewal_never_takes_over_another_holders_lease(
    old: Arc<dyn Authority>,
    emptied: Arc<dyn Authority>,
) {
    let kind = old.kind();
    let group = unique_name("takeover_by_token");
    let mine = leases_of(&old)
        .acquire(&request(&group, WorkerChoice::Exactly(0), "node-a lease 1"))
        .await
        .unwrap();
    let theirs = leases_of(&emptied)
        .acquire(&request(&group, WorkerChoice::Exactly(0), "node-c lease 2"))
        .await
        .unwrap();
    assert_eq!(
        (mine.worker, mine.token),
        (theirs.worker, theirs.token),
        "{kind}: both stores start their tokens at the same place"
    );
    let err = leases_of(&emptied)
        .renew(&mine, u64::MAX / 4)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LeaseError::Superseded { holder, .. } if holder == &theirs.holder),
        "{kind}: a renewal with another holder's token must be superseded: {err}"
    );
    let err = leases_of(&emptied).release(&mine, 0).await.unwrap_err();
    assert!(
        matches!(err, LeaseError::Superseded { .. }),
        "{kind}: a release with another holder's token must be superseded: {err}"
    );
    let (_, slots) = leases_of(&emptied).group(&group).await.unwrap().unwrap();
    let slot = slots.iter().find(|s| s.worker == 0).unwrap();
    assert_eq!(slot.holder, theirs.holder, "{kind}: {slot:?}");
    assert!(
        slot.is_live(),
        "{kind}: the new holder's lease was ended: {slot:?}"
    );
    assert_eq!(
        slot.floor_unix_ms, 0,
        "{kind}: the superseded renewal wrote a floor: {slot:?}"
    );
    let renewed = leases_of(&emptied).renew(&theirs, 5).await.unwrap();
    assert_eq!(renewed.floor_unix_ms, 5, "{kind}");
    leases_of(&emptied).release(&theirs, 6).await.unwrap();
    leases_of(&old).release(&mine, 1).await.unwrap();
}

/// A node's record holds the store's incarnation and the lease groups it leased from: an
/// emptied or swapped store (`other`, independent and empty) is refused at start, by
/// namespace creation and by lease acquisition, even through a wrapper made without the start
/// checks; a node that never ran refuses an empty store when its configuration names the
/// incarnation, or declares a group without `--init`. On the store itself the node goes on.
pub async fn a_node_record_refuses_an_emptied_or_swapped_lease_store(
    store: Arc<dyn Authority>,
    other: Arc<dyn Authority>,
) {
    use crate::node_record::{CheckedAuthority, NodeRecord, StoreExpectations};
    let kind = store.kind();
    let dir = tempfile::tempdir().unwrap();
    let node_record =
        || Arc::new(NodeRecord::open(dir.path(), format!("{kind} under test")).unwrap());
    let group = unique_name("lost_leases");
    let expect = StoreExpectations {
        init: true,
        declared_groups: vec![group.clone()],
        ..StoreExpectations::default()
    };
    let first = CheckedAuthority::open(store.clone(), node_record(), &expect)
        .await
        .unwrap();
    let incarnation = first.incarnation().cloned().unwrap();
    let held = leases_of_checked(&first)
        .acquire(&request(&group, WorkerChoice::LowestFree, "node-a lease 1"))
        .await
        .unwrap();
    drop(first);

    // The node record knows the store: another, empty one is refused, even with --init.
    let err = CheckedAuthority::open(other.clone(), node_record(), &expect)
        .await
        .unwrap_err();
    assert!(err.is_lost(), "[{kind}] an emptied store was opened: {err}");
    // Without the start checks, creation and acquisition are refused too.
    let unchecked = CheckedAuthority::new(other.clone(), node_record());
    let err = unchecked
        .ensure_namespace(
            &unique_name("lost_ns"),
            idmint_core::SequenceSpec::default_64(),
        )
        .await
        .unwrap_err();
    assert!(err.is_lost(), "[{kind}] a namespace was created: {err}");
    let err = leases_of_checked(&unchecked)
        .acquire(&request(&group, WorkerChoice::LowestFree, "node-a lease 2"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LeaseError::Store(e) if e.is_lost()),
        "[{kind}] a lease was acquired in an emptied store: {err}"
    );
    assert_eq!(
        leases_of(&other).group(&group).await.unwrap(),
        None,
        "[{kind}] the group was started on the emptied store"
    );

    // A node that never ran: refused when the configuration names the incarnation, and when
    // it declares the group without --init.
    let fresh = tempfile::tempdir().unwrap();
    let fresh_record =
        || Arc::new(NodeRecord::open(fresh.path(), format!("{kind} under test")).unwrap());
    let named = StoreExpectations {
        incarnation: Some(incarnation.clone()),
        ..expect.clone()
    };
    let err = CheckedAuthority::open(other.clone(), fresh_record(), &named)
        .await
        .unwrap_err();
    assert!(err.is_lost(), "[{kind}] {err}");
    let without_init = StoreExpectations {
        init: false,
        ..expect.clone()
    };
    let err = CheckedAuthority::open(other.clone(), fresh_record(), &without_init)
        .await
        .unwrap_err();
    assert!(
        err.is_lost() && err.to_string().contains("--init"),
        "[{kind}] {err}"
    );
    assert_eq!(
        other.incarnation().await.unwrap(),
        None,
        "[{kind}] a refused start wrote an incarnation"
    );

    // On its own store the node goes on, and its lease is still its own.
    let back = CheckedAuthority::open(store.clone(), node_record(), &without_init)
        .await
        .unwrap();
    let renewed = leases_of_checked(&back).renew(&held, 7).await.unwrap();
    assert_eq!(renewed.floor_unix_ms, 7, "[{kind}]");
    leases_of_checked(&back).release(&held, 8).await.unwrap();
    assert_eq!(
        node_record().group(&group).map(|g| g.last_token),
        Some(held.token)
    );
}

fn leases_of_checked(a: &crate::node_record::CheckedAuthority) -> &dyn WorkerLeases {
    a.worker_leases()
        .unwrap_or_else(|| panic!("the {} authority stores no worker leases", a.kind()))
}

/// The lease properties as functions of the backend alone, on fresh storage.
pub mod cases {
    use super::Backend;

    async fn pair<B: Backend>(
        storage: &B,
    ) -> (
        std::sync::Arc<dyn crate::Authority>,
        std::sync::Arc<dyn crate::Authority>,
    ) {
        let a = storage.open().await;
        let b = if B::CONCURRENT_OPENS {
            storage.open().await
        } else {
            a.clone()
        };
        (a, b)
    }

    /// [`super::leases_never_overlap`].
    pub async fn leases_never_overlap<B: Backend>() {
        let storage = B::create().await;
        let (a, b) = pair(&storage).await;
        super::leases_never_overlap(a, b).await;
    }

    /// [`super::an_expired_lease_is_taken_over`].
    pub async fn an_expired_lease_is_taken_over<B: Backend>() {
        let storage = B::create().await;
        let (a, b) = pair(&storage).await;
        super::an_expired_lease_is_taken_over(a, b).await;
    }

    /// [`super::reading_a_group_changes_nothing`].
    pub async fn reading_a_group_changes_nothing<B: Backend>() {
        let storage = B::create().await;
        let (a, b) = pair(&storage).await;
        super::reading_a_group_changes_nothing(a, b).await;
    }

    /// [`super::a_released_lease_keeps_its_floor`].
    pub async fn a_released_lease_keeps_its_floor<B: Backend>() {
        let storage = B::create().await;
        let (a, b) = pair(&storage).await;
        super::a_released_lease_keeps_its_floor(a, b).await;
    }

    /// [`super::a_release_never_lowers_the_floor`].
    pub async fn a_release_never_lowers_the_floor<B: Backend>() {
        let storage = B::create().await;
        let (a, b) = pair(&storage).await;
        super::a_release_never_lowers_the_floor(a, b).await;
    }

    /// [`super::a_renewal_never_takes_over_another_holders_lease`] on two independent stores.
    pub async fn a_renewal_never_takes_over_another_holders_lease<B: Backend>() {
        let old = B::create().await;
        let emptied = old.independent().await;
        super::a_renewal_never_takes_over_another_holders_lease(
            old.open().await,
            emptied.open().await,
        )
        .await;
    }

    /// [`super::a_deleted_group_is_never_created_again`].
    pub async fn a_deleted_group_is_never_created_again<B: Backend>() {
        let storage = B::create().await;
        super::a_deleted_group_is_never_created_again(&storage).await;
    }

    /// [`super::a_node_record_refuses_an_emptied_or_swapped_lease_store`] on two independent stores.
    pub async fn a_node_record_refuses_an_emptied_or_swapped_lease_store<B: Backend>() {
        let store = B::create().await;
        let other = store.independent().await;
        super::a_node_record_refuses_an_emptied_or_swapped_lease_store(
            store.open().await,
            other.open().await,
        )
        .await;
    }
}
