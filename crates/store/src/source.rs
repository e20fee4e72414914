//! Block sources: "something that grants blocks and takes tails back", the one thing a tier's
//! buffer needs from the tier above it.
//!
//! A node's sequence buffers, a regional node's buffers (whose source is an upstream node), and
//! the client library's buffers all refill from a [`BlockSource`]. Every [`Authority`] is one
//! (the blanket implementation forwards to [`Authority::reserve`] and
//! [`Authority::give_back`]), and so is an `Arc<dyn Authority>`, which is how a node passes its
//! authority to its buffers.
//!
//! The contract is the authority's, restated for any source: a block returned by `reserve` is
//! the caller's alone and recorded durably at its source before `Ok` (invariant 1 of
//! docs/design.md, transitively: a source that is itself a buffer hands out only blocks its own
//! source granted); `give_back` is a compare-and-swap that succeeds only while nothing was
//! granted after the tail's block (invariant 2), and answers an [`Outcome`]: a give-back whose
//! outcome is unknown may have happened, so the caller burns its tail (invariant 3).
//!
//! What it does not do: create namespaces, report state, or retry. Those stay with
//! [`Authority`] and with the caller.

use crate::{Authority, GiveBack, Outcome, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName};
use std::sync::Arc;

/// Grants blocks of a namespace's ids and takes unused tails back. See the module docs.
#[async_trait]
pub trait BlockSource: Send + Sync + std::fmt::Debug + 'static {
    /// Short name for logs, metrics and error messages: the authority's kind, or `upstream`.
    fn kind(&self) -> &'static str;

    /// Up to `count` ids of `name`, the caller's alone once this returns `Ok`; as
    /// [`Authority::reserve`].
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError>;

    /// Hands back the unused tail of the newest block; as [`Authority::give_back`], read as
    /// an [`Outcome`].
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Outcome<GiveBack>;
}

#[async_trait]
impl<A: Authority + ?Sized> BlockSource for A {
    fn kind(&self) -> &'static str {
        Authority::kind(self)
    }
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        Authority::reserve(self, name, count).await
    }
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Outcome<GiveBack> {
        Outcome::of(Authority::give_back(self, name, tail).await)
    }
}

#[async_trait]
impl BlockSource for Arc<dyn Authority> {
    fn kind(&self) -> &'static str {
        Authority::kind(&**self)
    }
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        Authority::reserve(&**self, name, count).await
    }
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Outcome<GiveBack> {
        Outcome::of(Authority::give_back(&**self, name, tail).await)
    }
}
