//! Unused blocks across a clean restart: parked in the authority at the stop, claimed back
//! from it after the restart ([`idmint_store::parks`], [`idmint_store::kept`],
//! `server.kept_blocks`).
//!
//! Invariants (docs/design.md, invariant 3):
//! - **nothing read from the data directory yields ids by itself.** With `"claimed"` (the
//!   default) a namespace's kept blocks are served only as the authority returns them to a
//!   claim, made when the namespace is set up in the store (after the node record's checks:
//!   this store's incarnation, nothing lost or rolled back) and before its refill task starts;
//!   a refused claim (claimed before by a copy of the data directory, dropped by a rebase or a
//!   retirement, a store that lost data) burns them; a claim without an answer leaves the
//!   namespace unset (it is tried again, and the store answers the second claim of an applied
//!   one with a refusal);
//! - **a block whose give-back outcome is unknown is burned** ([`crate::supply::Supply::give_back`]);
//!   the others that do not go back are parked under a fresh claim key, and written to the
//!   data directory only once the park is applied; a park refused or unanswered burns them,
//!   unless `"unconfirmed"`;
//! - **`"unconfirmed"` is the one exception, and says so**: kept blocks (parked or not) are
//!   served at start before the authority answers; a parked one's claim then runs in the
//!   background, and a refusal is logged as an error, since those ids may have been served
//!   twice;
//! - claims not made by the stop (a namespace never set up in this run) are written back with
//!   their keys, still parked.

use super::{Node, ShutdownReport};
use crate::config::{KeepBlocks, KeptBlocks, KindConfig, Order};
use crate::error::{IdError, NodeError};
use crate::namespace::SequenceNamespace;
use idmint_core::{NamespaceName, SequenceSpec};
use idmint_store::kept::{self, KeptNamespace};
use idmint_store::{ClaimKey, Outcome};
use std::sync::atomic::Ordering;

impl Node {
    /// At start, before any namespace is set up: reads (and durably removes) the blocks kept
    /// at the previous clean stop. With `"claimed"` they wait for their namespace's set-up
    /// ([`Node::claim_kept`]); with `"unconfirmed"` they are served now. An unreadable data
    /// directory is an error: the node would otherwise write over the claim keys at its next
    /// stop.
    pub(super) async fn take_kept(&self, keep: KeepBlocks) -> Result<(), NodeError> {
        // Inline, not on the blocking pool: one small file, read and removed once before
        // anything is served. A blocking-pool hop would also let a paused clock (tests, the
        // deterministic simulation) run on while the file is read, so a seed would not replay.
        let taken = match kept::take(&keep.dir, &keep.authority) {
            Ok(t) => t,
            Err(e) => return Err(NodeError::Kept(format!("{}: {e}", keep.dir.display()))),
        };
        if let Some((aside, reason)) = taken.set_aside {
            tracing::warn!(file = %aside.display(), reason, "kept blocks not served (set aside)");
        }
        let mut unconfirmed = Vec::new();
        for k in taken.namespaces {
            let ids = k.ids();
            match (self.config.kept_blocks, &k.claim) {
                (KeptBlocks::Claimed, Some(_)) => {
                    tracing::info!(namespace = %k.name, ids, "blocks kept at the last clean stop are served once the authority confirms them");
                    self.lock_pending_claims().push(k);
                }
                (KeptBlocks::Unconfirmed, _) => unconfirmed.push(k),
                (KeptBlocks::Claimed, None) => {
                    tracing::warn!(namespace = %k.name, ids, "kept blocks that were never parked in the authority cannot be confirmed; burned (server.kept_blocks = \"unconfirmed\" serves them)");
                }
                (KeptBlocks::Off, _) => {
                    tracing::info!(namespace = %k.name, ids, "kept blocks not served (server.kept_blocks = \"off\"); burned");
                }
            }
        }
        if !unconfirmed.is_empty() {
            let (adopted, burned) = self.adopt_unconfirmed(unconfirmed);
            tracing::warn!(ids = adopted, burned, "serving blocks kept at the last clean stop before the authority confirms them (server.kept_blocks = \"unconfirmed\")");
        }
        Ok(())
    }

    /// At the set-up of a sequence namespace in the store (its `ensure_namespace` answered,
    /// its refill task not started): claims the blocks kept for it and puts what the
    /// authority returns into its buffer first. A strict namespace, or one whose spec changed,
    /// takes none. A claim with no known outcome is [`IdError::Unavailable`]: the set-up is
    /// tried again.
    pub(super) async fn claim_kept(
        &self,
        name: &NamespaceName,
        order: Order,
        seq: &SequenceNamespace,
    ) -> Result<(), IdError> {
        let taken = {
            let mut pending = self.lock_pending_claims();
            let at = pending.iter().position(|k| &k.name == name);
            at.map(|i| pending.swap_remove(i))
        };
        let Some(k) = taken else {
            return Ok(());
        };
        let ids = k.ids();
        let key = match &k.claim {
            Some(key) if order == Order::Writer && k.spec == seq.spec() => key.clone(),
            _ => {
                tracing::warn!(namespace = %name, ids, "kept blocks of a namespace this node no longer serves with the same settings; burned");
                return Ok(());
            }
        };
        #[cfg(feature = "planted")]
        if idmint_core::planted::on(idmint_core::planted::KEPT_WITHOUT_CLAIM) {
            let took = seq.supply().adopt(&k.blocks);
            tracing::info!(namespace = %name, ids = took, kept = ids, "serving the kept blocks first");
            return Ok(());
        }
        match Outcome::of(self.authority.claim(name, &key).await) {
            Outcome::Applied(blocks) => {
                let took = seq.supply().adopt(&blocks);
                tracing::info!(namespace = %name, ids = took, kept = ids, "serving the blocks the authority confirmed first");
                Ok(())
            }
            Outcome::Refused(e) => {
                tracing::warn!(namespace = %name, ids, error = %e, "the authority does not confirm the kept blocks; burned");
                Ok(())
            }
            Outcome::Unknown(e) => {
                self.lock_pending_claims().push(k);
                Err(IdError::Unavailable {
                    name: name.to_string(),
                    reason: format!("claiming the blocks kept at the last clean stop: {e}"),
                })
            }
        }
    }

    /// `"unconfirmed"`: serves kept blocks at start, without asking the authority (which may
    /// not answer now); each namespace is then set up in the store, and its parked blocks
    /// claimed, in the background. A namespace whose configuration changed (another kind or
    /// spec, strict order, or no longer served) does not take them: they are burned. Returns
    /// the ids taken in and the ids burned.
    fn adopt_unconfirmed(&self, kept: Vec<KeptNamespace>) -> (u64, u64) {
        let (mut adopted, mut burned) = (0, 0);
        for k in kept {
            let ids = k.ids();
            let cache = match self.config.namespaces.get(&k.name) {
                Some(KindConfig::Sequence {
                    spec,
                    cache,
                    order: Order::Writer,
                }) if *spec == k.spec => Some(*cache),
                Some(_) => None,
                None => match self.config.family_of(&k.name) {
                    Some(family) => (family.spec == k.spec
                        && self.members_of(family) < family.max_members)
                        .then_some(family.cache),
                    None => self.auto_create_cache(&k.spec),
                },
            };
            let Some(cache) = cache else {
                tracing::warn!(namespace = %k.name, ids, "kept blocks of a namespace this node no longer serves with the same settings; burned");
                burned += ids;
                continue;
            };
            let auto_created = !self.config.namespaces.contains_key(&k.name)
                && self.config.family_of(&k.name).is_none();
            let watermark = k.blocks.last().map_or(0, |b| b.end());
            let seq = self
                .sequence_on(&k.name, k.spec, cache, watermark)
                .auto_created(auto_created);
            let took = seq.supply().adopt(&k.blocks);
            adopted += took;
            burned += ids - took;
            if auto_created {
                self.auto_created.fetch_add(1, Ordering::Relaxed);
            }
            // What this node held: the authority grants above it (a tier above with a stale
            // buffer would otherwise hand out a block below the kept ones, which the buffer
            // refuses), as a set-up would tell it.
            self.authority.note_floor(&k.name, watermark);
            self.serve_sequence(&k.name, seq, auto_created);
            let task = tokio::spawn(self.set_up_unconfirmed(k.name, k.spec, k.claim));
            self.lock_tasks().push(task);
        }
        (adopted, burned)
    }

    /// The set-up a namespace served unconfirmed skipped, done once the authority answers
    /// (retried with a backoff while it does not): the store checked against the node record,
    /// the namespace's settings, and the claim of its parked blocks. A refusal is logged; the
    /// namespace's refills then answer it.
    fn set_up_unconfirmed(
        &self,
        name: NamespaceName,
        spec: SequenceSpec,
        claim: Option<ClaimKey>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let authority = self.authority.clone();
        let mut stop = self.stop.subscribe();
        async move {
            let mut backoff = idmint_core::Backoff::new(
                std::time::Duration::from_millis(200),
                std::time::Duration::from_secs(5),
            );
            let mut set_up = false;
            loop {
                if !set_up {
                    match authority.ensure_namespace(&name, spec).await {
                        Ok(_) => set_up = true,
                        Err(e) if e.is_unavailable() => {}
                        Err(e) => {
                            tracing::error!(namespace = %name, error = %e, "the authority refuses a namespace served from kept blocks");
                            return;
                        }
                    }
                }
                if set_up {
                    let Some(key) = &claim else { return };
                    match Outcome::of(authority.claim(&name, key).await) {
                        Outcome::Applied(_) => return,
                        Outcome::Refused(e) => {
                            tracing::error!(namespace = %name, error = %e, "the authority does not confirm the kept blocks this node served unconfirmed: their ids may have been served twice (a copied or restored data directory?)");
                            return;
                        }
                        Outcome::Unknown(_) => {}
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff.delay()) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }

    /// At a clean stop, after the hand-back: parks `kept` (what did not go back) in the
    /// authority under fresh claim keys and writes the keys, with the claims not made in this
    /// run, to the data directory. What cannot be parked is burned (kept unparked with
    /// `"unconfirmed"`). Adds to `report`.
    pub(super) async fn keep_unused(&self, kept: Vec<KeptNamespace>, report: &mut ShutdownReport) {
        let Some(keep) = self.config.keep_blocks.clone() else {
            report.burned += kept.iter().map(KeptNamespace::ids).sum::<u64>();
            return;
        };
        let mut entries: Vec<KeptNamespace> = std::mem::take(&mut *self.lock_pending_claims());
        for mut k in kept {
            let ids = k.ids();
            let key = ClaimKey::random();
            let parked = Outcome::of(self.authority.park(&k.name, &key, &k.blocks).await);
            match parked {
                Outcome::Applied(()) => {
                    k.claim = Some(key);
                    entries.push(k);
                }
                Outcome::Refused(e) | Outcome::Unknown(e)
                    if self.config.kept_blocks == KeptBlocks::Unconfirmed =>
                {
                    tracing::warn!(namespace = %k.name, ids, error = %e, "the authority did not park the unused blocks; kept unconfirmed (server.kept_blocks = \"unconfirmed\")");
                    k.claim = None;
                    entries.push(k);
                }
                Outcome::Refused(e) | Outcome::Unknown(e) => {
                    tracing::warn!(namespace = %k.name, ids, error = %e, "the authority did not park the unused blocks; burned");
                    report.burned += ids;
                }
            }
        }
        if entries.is_empty() {
            return;
        }
        let ids: u64 = entries.iter().map(KeptNamespace::ids).sum();
        // Inline, as at start: one small file, written once at the stop, after serving ended.
        match kept::write(&keep.dir, &keep.authority, &entries) {
            Ok(()) => report.kept += ids,
            Err(e) => {
                tracing::error!(error = %e, ids, "could not keep the unused blocks; burned");
                report.burned += ids;
            }
        }
    }

    /// Whether this node keeps unused blocks at a clean stop.
    pub(super) fn keeps_blocks(&self) -> bool {
        self.config.keep_blocks.is_some() && self.config.kept_blocks != KeptBlocks::Off
    }

    fn lock_pending_claims(&self) -> std::sync::MutexGuard<'_, Vec<KeptNamespace>> {
        // Every change is one push or removal: consistent even after a panic.
        self.pending_claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}
