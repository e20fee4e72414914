//! The retirement property every backend must pass: a retired namespace says so, durably, and
//! an exhausted one is not mistaken for it ([`retirement_is_not_exhaustion`]).

use super::{ensure, unique_name};
use crate::{Advance, Authority, GiveBack, StoreError};
use idmint_core::{Block, SequenceSpec, Width};
use std::future::Future;
use std::sync::Arc;

/// A namespace whose ids ran out answers [`StoreError::Exhausted`] and is not retired; once
/// retired (an exhausted one, or one with ids left) it answers [`StoreError::Retired`] to every
/// reservation, and `state` and `list` report `retired`, with the watermark past the largest id
/// (every id used, none left), also after a reopen. The tail of an exhausted namespace's last
/// block does not come back once it is retired; a rebase or a second retirement changes
/// nothing.
///
/// Reservations go one call at a time until the ids run out, so a ticket server (one id per
/// call) passes too. `open` is called twice; the first authority is dropped before the second.
pub async fn retirement_is_not_exhaustion<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Authority>>,
{
    let max = Width::Bits32.max_id();
    let ceiling = max + 1;
    let spec = SequenceSpec::new(Width::Bits32, max - 2, 1, 0).unwrap();
    let exhausted = unique_name("retired_exhausted");
    let live = unique_name("retired_live");
    let kind = {
        let a = open().await;
        let kind = a.kind();
        ensure(&*a, &exhausted, spec).await;
        let mut last: Option<Block> = None;
        let mut got = 0;
        let refusal = loop {
            match a.reserve(&exhausted, 2).await {
                Ok(r) => {
                    got += r.block.len();
                    last = Some(r.block);
                    assert!(got <= 3, "[{kind}] more ids than the namespace has");
                }
                Err(e) => break e,
            }
        };
        assert!(
            matches!(refusal, StoreError::Exhausted { .. }),
            "[{kind}] a namespace whose ids ran out answers Exhausted, got {refusal:?}"
        );
        assert_eq!(got, 3, "[{kind}] every id was granted before Exhausted");
        let state = a.state(&exhausted).await.unwrap().unwrap();
        assert!(
            !state.retired,
            "[{kind}] an exhausted namespace is not retired: {state:?}"
        );

        ensure(&*a, &live, spec).await;
        a.reserve(&live, 1).await.unwrap();
        for name in [&exhausted, &live] {
            let advanced = a.advance(name, ceiling, Advance::Retire).await.unwrap();
            assert!(
                advanced.state.retired && advanced.state.watermark == ceiling,
                "[{kind}] a retirement answers the retired state: {advanced:?}"
            );
            let refusal = a.reserve(name, 1).await.unwrap_err();
            assert!(
                refusal.is_retired() && !refusal.is_exhausted(),
                "[{kind}] a retired namespace answers Retired, got {refusal:?}"
            );
        }
        // The newest block of the exhausted namespace ended at the ceiling, where the
        // retirement left the watermark: its tail must not lower a retired namespace.
        let tail = last.unwrap();
        assert!(
            matches!(
                a.give_back(&exhausted, tail).await,
                Ok(GiveBack::Refused { .. })
            ),
            "[{kind}] a retired namespace took a tail back"
        );
        kind
    };

    let a = open().await;
    let listed = a.list().await.unwrap();
    for name in [&exhausted, &live] {
        let state = a.state(name).await.unwrap().unwrap();
        assert!(
            state.retired,
            "[{kind}] the retired mark did not survive a reopen: {state:?}"
        );
        assert_eq!(
            (state.watermark, state.ids_used(), state.ids_left()),
            (ceiling, spec.capacity(), 0),
            "[{kind}] a retired namespace has every id used: {state:?}"
        );
        assert!(
            listed.iter().any(|s| &s.name == name && s.retired),
            "[{kind}] list does not show {name} retired"
        );
        assert!(
            a.reserve(name, 1).await.unwrap_err().is_retired(),
            "[{kind}] a retired namespace answers Retired after a reopen"
        );
        let rebased = a.advance(name, max - 1, Advance::Rebase).await.unwrap();
        let again = a.advance(name, ceiling, Advance::Retire).await.unwrap();
        for moved in [rebased, again] {
            assert!(
                moved.from == ceiling && moved.state.retired && moved.state.watermark == ceiling,
                "[{kind}] a rebase or a second retirement changed a retired namespace: {moved:?}"
            );
        }
    }
}

/// [`retirement_is_not_exhaustion`] on one storage, reopened.
#[cfg(feature = "conformance")]
pub mod cases {
    use super::super::Backend;

    /// [`super::retirement_is_not_exhaustion`].
    pub async fn retirement_is_not_exhaustion<B: Backend>() {
        let storage = B::create().await;
        super::retirement_is_not_exhaustion(|| storage.open()).await;
    }
}
