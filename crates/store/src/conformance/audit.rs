//! The audit-ledger properties of the conformance suite ([`crate::audit`]'s invariants), run
//! for every durable backend (`conformance_tests!(name => Fixture, audit)`).
//!
//! - [`every_grant_is_in_the_ledger`]: concurrent reservations from two authorities on one
//!   storage (two nodes), a give-back and a re-grant of the tail; the ledger holds exactly the
//!   blocks granted, each once, the give-back, this process as the holder, and it verifies
//!   clean against the watermark;
//! - [`advance_is_forward_only_and_recorded`]: a rebase moves the watermark up and is
//!   recorded, a rebase below it changes nothing and records nothing, a retirement moves it to
//!   the end of the id space so that nothing more is granted;
//! - [`leases_are_in_the_ledger`]: every worker-lease acquisition is recorded with its token;
//! - [`pruning_keeps_the_ledger_verifiable`]: retention folds old entries into one
//!   checkpoint at the newest one's seq, later entries continue the order, and the ledger
//!   still verifies (it is never emptied);
//! - [`a_give_back_into_the_pruned_region_verifies`]: a give-back of a tail that starts in a
//!   pruned grant, and its re-grant, are no false overlap after a checkpoint;
//! - [`pruning_measures_age_by_the_stores_clock`]: fresh entries survive a day's retention;
//! - [`an_empty_ledger_does_not_verify`]: a namespace above its first id with no entry is a
//!   violation.
//!
//! A property reads only its own namespaces' subjects, so properties can share storage, except
//! the pruning properties: they prune the whole store, so each runs on storage of its own (as
//! [`cases`] do).

use super::{ensure, reserve, unique_name, watermark, Backend};
use crate::audit::{self, Advance, AuditEntry, AuditEvent, AuditLog, SubjectVerifier};
use crate::lease::{LeaseRequest, WorkerChoice};
use crate::{Authority, GiveBack, NamespaceState};
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn log_of(a: &Arc<dyn Authority>) -> &dyn AuditLog {
    a.audit_log()
        .unwrap_or_else(|| panic!("the {} authority keeps no audit ledger", a.kind()))
}

/// Every entry of `subject`, read in pages of 7 (so paging is exercised).
async fn entries(a: &Arc<dyn Authority>, subject: &NamespaceName) -> Vec<AuditEntry> {
    let mut all: Vec<AuditEntry> = Vec::new();
    loop {
        let page = log_of(a)
            .entries(subject, all.last().map(|e| e.seq), 7)
            .await
            .unwrap_or_else(|e| panic!("[{}] reading the ledger of {subject}: {e}", a.kind()));
        let done = page.len() < 7;
        all.extend(page);
        if done {
            return all;
        }
    }
}

/// Verifies `subject`'s entries against its current state; panics on a violation.
async fn verify_clean(a: &Arc<dyn Authority>, subject: &NamespaceName) -> audit::AuditReport {
    let mut v = SubjectVerifier::new(subject.clone());
    for e in entries(a, subject).await {
        v.add(&e);
    }
    let state = a.state(subject).await.unwrap();
    let report = v.finish(state.as_ref());
    assert!(
        report.is_clean(),
        "[{}] the ledger of {subject} does not verify: {:?}",
        a.kind(),
        report.violations
    );
    report
}

/// Concurrent grants from two authorities, a give-back and a re-grant are recorded exactly.
pub async fn every_grant_is_in_the_ledger(a: Arc<dyn Authority>, b: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("every_grant_is_in_the_ledger");
    let spec = SequenceSpec::new(Width::Bits64, 1, 3, 1).unwrap();
    ensure(&*a, &name, spec).await;
    ensure(&*b, &name, spec).await;
    let mut tasks = Vec::new();
    for i in 0..6u64 {
        let authority = if i % 2 == 0 { a.clone() } else { b.clone() };
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            let mut blocks = Vec::new();
            for j in 0..5u64 {
                blocks.push(reserve(&*authority, &name, 1 + (i * 5 + j) % 9).await.block);
            }
            blocks
        }));
    }
    let mut granted: Vec<Block> = Vec::new();
    for t in tasks {
        granted.extend(t.await.unwrap());
    }
    // The newest block's tail goes back and is granted again.
    let last = reserve(&*a, &name, 10).await.block;
    let tail = Block::new(last.start() + 4 * 3, last.end(), 3).unwrap();
    assert_eq!(
        a.give_back(&name, tail).await.unwrap(),
        GiveBack::Returned,
        "[{kind}]"
    );
    let again = reserve(&*b, &name, 2).await.block;
    assert_eq!(
        again.start(),
        tail.start(),
        "[{kind}] the tail is granted again"
    );

    let recorded = entries(&a, &name).await;
    let grants: BTreeSet<(u64, u64)> = recorded
        .iter()
        .filter_map(|e| match e.event {
            AuditEvent::Granted { start, end } => Some((start, end)),
            _ => None,
        })
        .collect();
    let mut expected: BTreeSet<(u64, u64)> = granted.iter().map(|b| (b.start(), b.end())).collect();
    expected.insert((last.start(), last.end()));
    expected.insert((again.start(), again.end()));
    assert_eq!(
        grants, expected,
        "[{kind}] the ledger holds exactly the blocks granted"
    );
    assert_eq!(
        recorded
            .iter()
            .filter(|e| matches!(e.event, AuditEvent::Granted { .. }))
            .count(),
        32,
        "[{kind}] each grant once"
    );
    let back: Vec<AuditEvent> = recorded
        .iter()
        .map(|e| e.event)
        .filter(|e| matches!(e, AuditEvent::GivenBack { .. }))
        .collect();
    assert_eq!(
        back,
        vec![AuditEvent::GivenBack {
            start: tail.start(),
            end: tail.end()
        }],
        "[{kind}]"
    );
    for e in &recorded {
        assert_eq!(e.subject, name, "[{kind}]");
        assert_eq!(
            e.holder,
            audit::holder(),
            "[{kind}] the holder is this process"
        );
        assert!(
            e.at_unix_ms > 1_600_000_000_000,
            "[{kind}] a plausible time: {e:?}"
        );
    }
    let report = verify_clean(&a, &name).await;
    assert_eq!((report.grants, report.give_backs), (32, 1), "[{kind}]");
    assert_eq!(report.unmatched_give_backs, 0, "[{kind}]");
    // The same ledger seen from the other node.
    assert_eq!(entries(&b, &name).await, recorded, "[{kind}]");
    // The subject is listed.
    let subjects = log_of(&a).subjects().await.unwrap();
    assert!(subjects.contains(&name), "[{kind}] {name} is a subject");
}

/// Rebase moves the watermark up only, retire to the end of the id space; both are recorded.
pub async fn advance_is_forward_only_and_recorded(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("advance_is_forward_only_and_recorded");
    let spec = SequenceSpec::new(Width::Bits32, 1, 1, 0).unwrap();
    ensure(&*a, &name, spec).await;
    reserve(&*a, &name, 100).await;
    let up = a.advance(&name, 5_001, Advance::Rebase).await.unwrap();
    assert_eq!((up.from, up.state.watermark), (101, 5_001), "[{kind}]");
    let next = reserve(&*a, &name, 1).await.block;
    assert_eq!(
        next.start(),
        5_001,
        "[{kind}] the next id is above the rebase"
    );
    let down = a.advance(&name, 10, Advance::Rebase).await.unwrap();
    assert_eq!(
        (down.from, down.state.watermark),
        (5_002, 5_002),
        "[{kind}] a rebase below the watermark changes nothing"
    );
    assert_eq!(watermark(&*a, &name).await, 5_002, "[{kind}]");
    let ceiling = 1u64 << 31; // one past the largest 32-bit id, 2^31 - 1
    assert!(
        a.advance(&name, ceiling + 1, Advance::Rebase)
            .await
            .unwrap_err()
            .is_exhausted(),
        "[{kind}] past the end of the id space"
    );
    let retired = a.advance(&name, ceiling, Advance::Retire).await.unwrap();
    assert_eq!(retired.state.watermark, ceiling, "[{kind}]");
    assert!(
        a.reserve(&name, 1).await.unwrap_err().is_retired(),
        "[{kind}] a retired namespace grants nothing"
    );
    let again = a.advance(&name, ceiling, Advance::Retire).await.unwrap();
    assert_eq!(
        again.from, ceiling,
        "[{kind}] retiring twice changes nothing"
    );

    let events: Vec<AuditEvent> = entries(&a, &name).await.iter().map(|e| e.event).collect();
    assert_eq!(
        events,
        vec![
            AuditEvent::Granted { start: 1, end: 101 },
            AuditEvent::Rebased {
                from: 101,
                to: 5_001
            },
            AuditEvent::Granted {
                start: 5_001,
                end: 5_002
            },
            AuditEvent::Retired {
                from: 5_002,
                to: ceiling
            },
        ],
        "[{kind}] what the ledger recorded"
    );
    verify_clean(&a, &name).await;
    // Unknown namespace.
    let missing = unique_name("advance_missing");
    assert!(
        a.advance(&missing, 10, Advance::Rebase)
            .await
            .unwrap_err()
            .is_unknown_namespace(),
        "[{kind}]"
    );
}

/// Every worker-lease acquisition is recorded with its worker id and fencing token.
pub async fn leases_are_in_the_ledger(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let Some(leases) = a.worker_leases() else {
        return;
    };
    let group = unique_name("leases_are_in_the_ledger");
    let request = |worker| LeaseRequest {
        group: group.clone(),
        workers: 4,
        choice: WorkerChoice::Exactly(worker),
        prefer_floor_at_most: None,
        holder: "conformance".to_string(),
        layout: "timestamp_bits=41 node_bits=2 sequence_bits=12 unit=1ms epoch=0".to_string(),
        ttl: Duration::from_secs(60),
    };
    let mut granted = Vec::new();
    for worker in [2, 0, 3] {
        let lease = leases
            .acquire(&request(worker))
            .await
            .unwrap_or_else(|e| panic!("[{kind}] acquire: {e}"));
        granted.push(AuditEvent::Leased {
            worker: lease.worker,
            token: lease.token,
        });
        leases.release(&lease, 0).await.unwrap();
    }
    let lease = leases.acquire(&request(2)).await.unwrap();
    granted.push(AuditEvent::Leased {
        worker: 2,
        token: lease.token,
    });
    let recorded: Vec<AuditEvent> = entries(&a, &group).await.iter().map(|e| e.event).collect();
    assert_eq!(
        recorded, granted,
        "[{kind}] one entry per acquisition, in order"
    );
    let report = verify_clean(&a, &group).await;
    assert_eq!(report.leases, 4, "[{kind}]");
}

/// Waits (polling the store's clock, no sleep) until it reads past every entry of
/// `subject`, so that a prune with retention zero takes all of them.
async fn store_clock_passes(a: &Arc<dyn Authority>, subject: &NamespaceName) {
    let newest = entries(a, subject)
        .await
        .iter()
        .map(|e| e.at_unix_ms)
        .max()
        .unwrap_or(0);
    while log_of(a).now_unix_ms().await.unwrap() <= newest {
        tokio::task::yield_now().await;
    }
}

/// Pruning folds old entries into one checkpoint (at the newest pruned entry's seq), later
/// entries continue the order, pruning again changes nothing, and the ledger still verifies
/// (never empty: a checkpoint stays).
pub async fn pruning_keeps_the_ledger_verifiable(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("pruning_keeps_the_ledger_verifiable");
    ensure(&*a, &name, SequenceSpec::default_64()).await;
    reserve(&*a, &name, 10).await;
    reserve(&*a, &name, 10).await;
    let before = entries(&a, &name).await;
    assert_eq!(before.len(), 2, "[{kind}]");
    store_clock_passes(&a, &name).await;
    let pruned = audit::prune(log_of(&a), Duration::ZERO).await.unwrap();
    assert!(pruned.removed >= 1, "[{kind}] pruned {pruned:?}");
    assert!(pruned.kept.is_empty(), "[{kind}] {pruned:?}");
    let folded = entries(&a, &name).await;
    assert_eq!(folded.len(), 1, "[{kind}] one checkpoint stays: {folded:?}");
    assert_eq!(
        (folded[0].seq, folded[0].event),
        (
            before[1].seq,
            AuditEvent::Checkpoint {
                below: 21,
                token: 0
            }
        ),
        "[{kind}] the checkpoint takes the newest pruned entry's place"
    );
    let report = verify_clean(&a, &name).await;
    assert_eq!(report.checkpoints, 1, "[{kind}]");
    // A second prune with nothing new leaves the checkpoint as it is, and so does a fold of
    // an entry another pruner removed.
    audit::prune(log_of(&a), Duration::ZERO).await.unwrap();
    assert_eq!(entries(&a, &name).await, folded, "[{kind}]");
    let gone = log_of(&a)
        .fold(
            &name,
            before[0].seq,
            AuditEvent::Checkpoint {
                below: 11,
                token: 0,
            },
        )
        .await
        .unwrap();
    assert_eq!(gone, 0, "[{kind}]");
    assert_eq!(
        entries(&a, &name).await,
        folded,
        "[{kind}] nothing re-created"
    );
    // Later entries continue the order, and a tail of ids granted before the checkpoint
    // goes back and is granted again.
    let tail = Block::new(15, 21, 1).unwrap();
    assert_eq!(a.give_back(&name, tail).await.unwrap(), GiveBack::Returned);
    assert_eq!(reserve(&*a, &name, 3).await.block.start(), 15, "[{kind}]");
    let after = entries(&a, &name).await;
    assert!(
        after.iter().skip(1).all(|e| e.seq > before[1].seq),
        "[{kind}] sequence numbers continue after pruning: {after:?}"
    );
    let report = verify_clean(&a, &name).await;
    assert_eq!(report.unmatched_give_backs, 0, "[{kind}]");
}

/// Pruning the first of two contiguous grants (merged in one buffer) leaves a checkpoint, so
/// a later give-back of the merged tail, which starts in the pruned grant, and the re-grant
/// of those ids are no false overlap.
pub async fn a_give_back_into_the_pruned_region_verifies(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("a_give_back_into_the_pruned_region");
    ensure(&*a, &name, SequenceSpec::default_64()).await;
    reserve(&*a, &name, 1000).await; // [1, 1001)
    reserve(&*a, &name, 1000).await; // [1001, 2001)
    let first = entries(&a, &name).await[0].clone();
    // What pruning does with a prefix of one entry: fold it into its checkpoint.
    let mut prefix = SubjectVerifier::new(name.clone());
    prefix.add(&first);
    let removed = log_of(&a)
        .fold(&name, first.seq, prefix.checkpoint_event())
        .await
        .unwrap();
    assert_eq!(removed, 0, "[{kind}] nothing is below the first entry");
    assert_eq!(
        entries(&a, &name).await[0].event,
        AuditEvent::Checkpoint {
            below: 1001,
            token: 0
        },
        "[{kind}]"
    );
    let tail = Block::new(601, 2001, 1).unwrap();
    assert_eq!(a.give_back(&name, tail).await.unwrap(), GiveBack::Returned);
    assert_eq!(reserve(&*a, &name, 1000).await.block.start(), 601);
    verify_clean(&a, &name).await;
}

/// Retention is measured by the store's clock: entries written just now are kept by a
/// retention of a day, and the store's clock reads at or after their stamps.
pub async fn pruning_measures_age_by_the_stores_clock(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("pruning_measures_age_by_the_stores_clock");
    ensure(&*a, &name, SequenceSpec::default_64()).await;
    reserve(&*a, &name, 5).await;
    let before = entries(&a, &name).await;
    let now = log_of(&a).now_unix_ms().await.unwrap();
    assert!(
        now >= before[0].at_unix_ms,
        "[{kind}] the store's clock {now} is behind its own stamp {:?}",
        before[0]
    );
    let pruned = audit::prune(log_of(&a), Duration::from_secs(86_400))
        .await
        .unwrap();
    assert_eq!(entries(&a, &name).await, before, "[{kind}] {pruned:?}");
}

/// A namespace above its first id whose ledger holds nothing is a violation: the verifier
/// never passes on an empty ledger.
pub async fn an_empty_ledger_does_not_verify(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("an_empty_ledger_does_not_verify");
    ensure(&*a, &name, SequenceSpec::default_64()).await;
    reserve(&*a, &name, 5).await;
    let state = a.state(&name).await.unwrap().unwrap();
    // The same state under a name the ledger has no entry of.
    let unrecorded = NamespaceState {
        name: unique_name("an_empty_ledger_unrecorded"),
        ..state
    };
    let report = audit::verify(log_of(&a), &[state, unrecorded.clone()])
        .await
        .unwrap();
    let flagged: Vec<_> = report
        .violations
        .iter()
        .filter(|v| v.subject == name || v.subject == unrecorded.name)
        .collect();
    assert_eq!(flagged.len(), 1, "[{kind}] {:?}", report.violations);
    assert_eq!(flagged[0].subject, unrecorded.name, "[{kind}]");
    assert!(
        flagged[0].message.contains("[1, 6)"),
        "[{kind}] {flagged:?}"
    );
}

/// Each audit property as a function of the backend alone, on fresh storage.
pub mod cases {
    use super::Backend;

    /// [`super::every_grant_is_in_the_ledger`] on two authorities on one storage.
    pub async fn every_grant_is_in_the_ledger<B: Backend>() {
        let storage = B::create().await;
        let a = storage.open().await;
        let b = if B::CONCURRENT_OPENS {
            storage.open().await
        } else {
            a.clone()
        };
        super::every_grant_is_in_the_ledger(a, b).await;
    }

    /// [`super::advance_is_forward_only_and_recorded`].
    pub async fn advance_is_forward_only_and_recorded<B: Backend>() {
        let storage = B::create().await;
        super::advance_is_forward_only_and_recorded(storage.open().await).await;
    }

    /// [`super::leases_are_in_the_ledger`].
    pub async fn leases_are_in_the_ledger<B: Backend>() {
        let storage = B::create().await;
        super::leases_are_in_the_ledger(storage.open().await).await;
    }

    /// [`super::pruning_keeps_the_ledger_verifiable`].
    pub async fn pruning_keeps_the_ledger_verifiable<B: Backend>() {
        let storage = B::create().await;
        super::pruning_keeps_the_ledger_verifiable(storage.open().await).await;
    }

    /// [`super::a_give_back_into_the_pruned_region_verifies`].
    pub async fn a_give_back_into_the_pruned_region_verifies<B: Backend>() {
        let storage = B::create().await;
        super::a_give_back_into_the_pruned_region_verifies(storage.open().await).await;
    }

    /// [`super::pruning_measures_age_by_the_stores_clock`].
    pub async fn pruning_measures_age_by_the_stores_clock<B: Backend>() {
        let storage = B::create().await;
        super::pruning_measures_age_by_the_stores_clock(storage.open().await).await;
    }

    /// [`super::an_empty_ledger_does_not_verify`].
    pub async fn an_empty_ledger_does_not_verify<B: Backend>() {
        let storage = B::create().await;
        super::an_empty_ledger_does_not_verify(storage.open().await).await;
    }
}
