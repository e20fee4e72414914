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
//! - [`pruning_keeps_the_ledger_verifiable`]: retention removes old entries only, later
//!   entries continue the order, and the ledger still verifies.
//!
//! A property reads only its own namespaces' subjects, so properties can share storage.

use super::{ensure, reserve, unique_name, watermark, Backend};
use crate::audit::{self, Advance, AuditEntry, AuditEvent, AuditLog, SubjectVerifier};
use crate::lease::{LeaseRequest, WorkerChoice};
use crate::{Authority, GiveBack};
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
        a.reserve(&name, 1).await.unwrap_err().is_exhausted(),
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

/// Pruning removes entries older than the cut-off; later entries continue the order; the
/// ledger still verifies, counting a give-back whose grant was pruned as unmatched.
pub async fn pruning_keeps_the_ledger_verifiable(a: Arc<dyn Authority>) {
    let kind = a.kind();
    let name = unique_name("pruning_keeps_the_ledger_verifiable");
    ensure(&*a, &name, SequenceSpec::default_64()).await;
    reserve(&*a, &name, 10).await;
    let held = reserve(&*a, &name, 10).await.block;
    let before = entries(&a, &name).await;
    assert_eq!(before.len(), 2, "[{kind}]");
    // A cut-off in the future by the store's clock: every entry so far is older.
    let cutoff = before.iter().map(|e| e.at_unix_ms).max().unwrap() + 1;
    let removed = log_of(&a).prune(cutoff).await.unwrap();
    assert!(removed >= 2, "[{kind}] pruned {removed}");
    assert!(entries(&a, &name).await.is_empty(), "[{kind}]");
    // Wait (by the store's own stamps) until a new entry is stamped at or after the cut-off,
    // so it survives a second prune with the same cut-off.
    let tail = Block::new(held.start() + 5, held.end(), 1).unwrap();
    assert_eq!(a.give_back(&name, tail).await.unwrap(), GiveBack::Returned);
    let mut after = entries(&a, &name).await;
    while after.last().is_some_and(|e| e.at_unix_ms < cutoff) {
        tokio::time::sleep(Duration::from_millis(2)).await;
        reserve(&*a, &name, 1).await;
        after = entries(&a, &name).await;
    }
    let last_before = before.last().unwrap().seq;
    assert!(
        after.iter().all(|e| e.seq > last_before),
        "[{kind}] sequence numbers continue after pruning: {after:?}"
    );
    let report = verify_clean(&a, &name).await;
    assert_eq!(report.unmatched_give_backs, 1, "[{kind}]");
    log_of(&a).prune(cutoff).await.unwrap();
    assert_eq!(
        entries(&a, &name).await.last(),
        after.last(),
        "[{kind}] entries at or after the cut-off stay"
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
}
