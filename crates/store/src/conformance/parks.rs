//! The parking properties every backend that keeps parks must pass
//! (`conformance_tests!(name => Fixture, parks)`): parked blocks come back once, to the key
//! they were parked under, as the store recorded them, and never across an operator's move
//! ([`crate::parks`]).

use super::{ensure, reserve, unique_name, Backend};
use crate::{Advance, Authority, ClaimKey, StoreError};
use idmint_core::{Block, SequenceSpec, Width};
use std::sync::Arc;

fn spec() -> SequenceSpec {
    SequenceSpec::new(Width::Bits64, 1, 1, 0).unwrap_or_else(|e| panic!("spec: {e}"))
}

/// Blocks parked under a key are claimed once, by that key, with the blocks the store
/// recorded; after a reopen too; a second claim (a copied data directory) and any other key
/// (an edited file) are [`StoreError::NotParked`]. The ledger records both and verifies.
pub async fn parked_blocks_are_claimed_once<B: Backend>() {
    let storage = B::create().await;
    let a = storage.open().await;
    let kind = a.kind();
    let name = unique_name("parks_once");
    ensure(&*a, &name, spec()).await;
    let first = reserve(&*a, &name, 100).await.block;
    let second = reserve(&*a, &name, 100).await.block;
    let (_, older) = first.split_first(40);
    let older = older.unwrap_or_else(|| panic!("[{kind}] a block of 100 ids has a tail"));
    let key = ClaimKey::random();
    a.park(&name, &key, &[older, second])
        .await
        .unwrap_or_else(|e| panic!("[{kind}] park: {e}"));
    // Another park under the same key, or of the same ids, is refused.
    assert!(a.park(&name, &key, &[first]).await.is_err(), "[{kind}]");
    assert!(
        a.park(&name, &ClaimKey::random(), &[second]).await.is_err(),
        "[{kind}] the same ids parked twice"
    );
    let a = if B::CONCURRENT_OPENS {
        storage.open().await
    } else {
        drop(a);
        storage.open().await
    };
    assert!(
        matches!(
            a.claim(&name, &ClaimKey::random()).await,
            Err(StoreError::NotParked { .. })
        ),
        "[{kind}] a key never parked claims nothing"
    );
    let claimed = a
        .claim(&name, &key)
        .await
        .unwrap_or_else(|e| panic!("[{kind}] claim: {e}"));
    assert_eq!(claimed, vec![older, second], "[{kind}]");
    assert!(
        matches!(
            a.claim(&name, &key).await,
            Err(StoreError::NotParked { .. })
        ),
        "[{kind}] a second claim of the same park"
    );
    // Reservations go on above everything parked and claimed.
    let next = reserve(&*a, &name, 10).await.block;
    assert!(next.start() >= second.end(), "[{kind}] {next:?}");
    if let Some(log) = a.audit_log() {
        let states = a
            .list()
            .await
            .unwrap_or_else(|e| panic!("[{kind}] list: {e}"));
        let report = crate::audit::verify(log, &states)
            .await
            .unwrap_or_else(|e| panic!("[{kind}] verify: {e}"));
        assert!(report.is_clean(), "[{kind}] {:?}", report.violations);
    }
}

/// Only ids the store granted are parked: a block above the watermark, of another residue
/// class, or of an unknown namespace is refused and parks nothing.
pub async fn only_granted_ids_are_parked<B: Backend>() {
    let storage = B::create().await;
    let a: Arc<dyn Authority> = storage.open().await;
    let kind = a.kind();
    let name = unique_name("parks_granted");
    ensure(&*a, &name, spec()).await;
    let granted = reserve(&*a, &name, 50).await.block;
    let above = Block::new(granted.end(), granted.end() + 10, 1).unwrap_or_else(|| panic!("block"));
    let key = ClaimKey::random();
    assert!(a.park(&name, &key, &[above]).await.is_err(), "[{kind}]");
    assert!(
        matches!(
            a.park(&unique_name("parks_unknown"), &key, &[granted])
                .await,
            Err(StoreError::UnknownNamespace { .. })
        ),
        "[{kind}]"
    );
    assert!(
        matches!(
            a.claim(&name, &key).await,
            Err(StoreError::NotParked { .. })
        ),
        "[{kind}] a refused park left something to claim"
    );
}

/// A rebase drops the parked ids below its target and a retirement every park, in the same
/// write: a claim afterwards returns only ids above the rebase, and nothing of a retired
/// namespace ([`StoreError::Retired`]).
pub async fn rebase_and_retirement_drop_parked_ids<B: Backend>() {
    let storage = B::create().await;
    let a: Arc<dyn Authority> = storage.open().await;
    let kind = a.kind();
    let name = unique_name("parks_rebase");
    ensure(&*a, &name, spec()).await;
    let block = reserve(&*a, &name, 100).await.block;
    let key = ClaimKey::random();
    a.park(&name, &key, &[block])
        .await
        .unwrap_or_else(|e| panic!("[{kind}] park: {e}"));
    let floor = block.start() + 60;
    a.advance(&name, floor, Advance::Rebase)
        .await
        .unwrap_or_else(|e| panic!("[{kind}] rebase: {e}"));
    let claimed = a
        .claim(&name, &key)
        .await
        .unwrap_or_else(|e| panic!("[{kind}] claim: {e}"));
    let above = Block::new(floor, block.end(), 1).unwrap_or_else(|| panic!("block"));
    assert_eq!(
        claimed,
        vec![above],
        "[{kind}] only ids at or above the rebase"
    );

    let retired = unique_name("parks_retire");
    ensure(&*a, &retired, spec()).await;
    let block = reserve(&*a, &retired, 100).await.block;
    a.park(&retired, &key, &[block])
        .await
        .unwrap_or_else(|e| panic!("[{kind}] park: {e}"));
    a.advance(&retired, 0, Advance::Retire)
        .await
        .unwrap_or_else(|e| panic!("[{kind}] retire: {e}"));
    assert!(
        matches!(
            a.claim(&retired, &key).await,
            Err(StoreError::Retired { .. })
        ),
        "[{kind}] parked ids of a retired namespace"
    );
}

/// The cases, as the macro calls them.
pub mod cases {
    pub use super::{
        only_granted_ids_are_parked, parked_blocks_are_claimed_once,
        rebase_and_retirement_drop_parked_ids,
    };
}
