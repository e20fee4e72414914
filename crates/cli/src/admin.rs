//! `idmint admin`: operator actions on the authority itself, run with the node's configuration
//! while the node is stopped (docs/uniqueness.md, "Lost and stale members").
//!
//! `reseed` is the one way back for a namespace idmint refuses as lost (a store that moved or
//! lost data, a multi member taken out of service): it sets the namespace up in the store, or on
//! one member, with its watermark above an id the operator names (the highest id of the
//! namespace in their tables, or of the member's class), so no id at or below it is ever handed
//! out again. Invariants:
//! - the watermark only moves up: a store already above `--above` is left as it is;
//! - `--above` below what the node record saw is refused (that would re-issue ids the node
//!   handed out);
//! - the spec is the node record's entry of the namespace, else the configuration's (declared,
//!   else `[defaults]`); a member gets its own offset;
//! - the node record is updated only after the store holds the new watermark durably, and then
//!   records the store's incarnation (created for an emptied store): the re-seeded store is
//!   the one the node uses from now on.

use anyhow::{bail, Context, Result};
use idmint_core::{NamespaceName, SequenceSpec};
use idmint_node::{FileConfig, KindConfig};
use idmint_store::config::AuthorityConfig;
use idmint_store::{Authority, NodeRecord};
use std::path::PathBuf;

/// What `idmint admin reseed` was asked.
#[derive(Debug)]
pub struct Reseed {
    /// The namespace.
    pub namespace: String,
    /// The highest id that must never be handed out again.
    pub above: u64,
    /// The configuration file.
    pub config: Option<PathBuf>,
    /// The data directory (the node record, and the file authority).
    pub data_dir: Option<PathBuf>,
    /// With a multi authority: the member (from 1) to re-seed.
    pub member: Option<usize>,
}

/// Runs `reseed`; returns the line to print.
pub fn reseed(args: Reseed) -> Result<String> {
    let name = NamespaceName::new(&args.namespace)?;
    let file = crate::serve::load_config(args.config.as_deref())?;
    let data_dir = crate::serve::resolve_data_dir(args.data_dir.clone(), &file)?;
    if !file.authority.is_durable() {
        bail!("the memory authority keeps nothing: there is nothing to re-seed");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let node_record = NodeRecord::open(&data_dir, file.authority.to_string())
            .context("opening the node record")?;
        let spec = namespace_spec(&file, &node_record, &name)?;
        if let Some(seen) = node_record.watermark(&name) {
            if args.above.saturating_add(1) < seen {
                bail!(
                    "--above {} is below what this node handed out: its record {} holds \
                     watermark {seen} for namespace {name}; use --above {} or more",
                    args.above,
                    node_record.path().display(),
                    seen - 1
                );
            }
        }
        let (config, spec, what) = match (args.member, &file.authority) {
            (Some(n), AuthorityConfig::Multi(multi)) => {
                let Some(member) = n.checked_sub(1).and_then(|i| multi.members().get(i)) else {
                    bail!(
                        "--member {n}: the multi authority has members 1 to {}",
                        multi.members().len()
                    );
                };
                let spec =
                    SequenceSpec::new(spec.width(), spec.first(), spec.step(), member.offset)
                        .with_context(|| format!("member {n}'s offset {}", member.offset))?;
                (
                    member.authority.clone(),
                    spec,
                    format!("member {n} ({})", member.authority),
                )
            }
            (Some(_), _) => bail!("--member applies to a multi authority only"),
            (None, AuthorityConfig::Multi(_)) => bail!(
                "the authority is a multi authority: name the member to re-seed with --member N \
                 (from 1, in the order of [authority] members)"
            ),
            (None, config) => (config.clone(), spec, config.to_string()),
        };
        let authority = idmint_store::connect(&config, &data_dir)
            .await
            .with_context(|| format!("connecting {what}"))?;
        let state = lift(&*authority, &name, spec, args.above).await?;
        if args.member.is_none() {
            node_record
                .adopt(&state)
                .await
                .context("recording the re-seed in the node record")?;
            // The re-seeded store is the one this node uses from now on: its incarnation (a
            // new one for an emptied store) replaces the recorded one.
            let incarnation = match authority.incarnation().await {
                Ok(Some(known)) => Some(known),
                Ok(None) => Some(
                    authority
                        .create_incarnation(&idmint_store::Incarnation::random())
                        .await?,
                ),
                Err(idmint_store::StoreError::NotSupported { .. }) => None,
                Err(e) => return Err(e.into()),
            };
            if let Some(incarnation) = incarnation {
                node_record
                    .record_incarnation(&incarnation)
                    .await
                    .context("recording the store's incarnation in the node record")?;
            }
        }
        Ok(format!(
            "namespace {name} on {what}: watermark {}; no id at or below {} will be handed out \
             again. Restart the node.",
            state.watermark, args.above
        ))
    })
}

/// The namespace's spec: the node record's, else the declared one, else `[defaults]`.
fn namespace_spec(
    file: &FileConfig,
    node_record: &NodeRecord,
    name: &NamespaceName,
) -> Result<SequenceSpec> {
    if let Some(spec) = node_record.spec(name) {
        return Ok(spec);
    }
    match file.node.namespaces.get(name) {
        Some(KindConfig::Sequence { spec, .. }) => Ok(*spec),
        Some(_) => bail!("namespace {name} is not a sequence namespace: nothing to re-seed"),
        None if file.node.auto_create => Ok(file.node.default_sequence.0),
        None => {
            bail!("namespace {name} is neither declared nor in the node record, and auto_create is off")
        }
    }
}

/// Sets `name` up on `authority` (if absent) and moves its watermark above `above`.
async fn lift(
    authority: &dyn Authority,
    name: &NamespaceName,
    spec: SequenceSpec,
    above: u64,
) -> Result<idmint_store::NamespaceState> {
    let mut state = match authority.state(name).await? {
        Some(state) => state,
        None => authority.ensure_namespace(name, spec).await?,
    };
    if state.spec != spec {
        bail!(
            "namespace {name} exists with another spec ({:?}) than the configuration's ({spec:?})",
            state.spec
        );
    }
    if state.watermark <= above {
        let Some(to) = above
            .checked_add(1)
            .filter(|&to| to <= spec.width().max_id() + 1)
        else {
            bail!(
                "--above {above} is past the largest id of the {}-bit namespace {name} ({})",
                spec.width().bits(),
                spec.width().max_id()
            );
        };
        // Forward-only, atomic, and recorded in the authority's audit ledger as a rebase.
        state = authority
            .advance(name, to, idmint_store::Advance::Rebase)
            .await?
            .state;
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_store::MemoryAuthority;
    use std::sync::Arc;

    #[tokio::test]
    async fn lift_moves_the_watermark_above_and_never_down() {
        let a: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
        let name = NamespaceName::new("orders").unwrap();
        let spec = SequenceSpec::new(idmint_core::Width::Bits64, 1, 2, 1).unwrap();
        let state = lift(&*a, &name, spec, 1000).await.unwrap();
        // No id of the class at or below 1000 is left above the watermark.
        assert_eq!(spec.ids_between(state.watermark, 1001), 0, "{state:?}");
        let next = a.reserve(&name, 1).await.unwrap().block.start();
        assert!(next > 1000 && next % 2 == 1, "{next}");
        let again = lift(&*a, &name, spec, 10).await.unwrap();
        assert!(again.watermark > next, "moved down: {again:?}");
    }
}
