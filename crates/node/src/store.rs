//! The node's store, opened as every embedder must open it: the configured authority, checked
//! against the data directory's node record ([`idmint_store::node_record`]) before anything is
//! served.
//!
//! Invariants: a durable authority is never used without its node record, so a store that moved,
//! was emptied or swapped is refused whoever embeds the node ([`open_store`]); an empty store
//! is a new deployment only as the node record's rules say (`init`, what the configuration
//! declares, `[authority] incarnation`). A multi authority's member transitions are logged
//! once each way.
//!
//! A store that does not answer at start, on a node that ran on it before (its node record, or
//! the configuration, names the store's incarnation), does not stop the node:
//! [`open_store_or_later`] hands it a [`DeferredAuthority`] that answers "unavailable" until a
//! background task has connected and checked the store exactly as at a normal start. The node
//! starts unready and serves what needs no store (blocks kept at its last clean stop, UUIDv7,
//! ULID). A first start still needs its store (only it can say whether the deployment is new).
//!
//! What it does not do: choose the data directory (the binary resolves it), or serve anything.

use crate::config::{FileConfig, KindConfig};
use idmint_core::Backoff;
use idmint_store::{
    Authority, CheckedAuthority, ConnectError, DeferredAuthority, NodeRecord, NodeRecordError,
    StoreError, StoreExpectations,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The first pause between tries to open a store that did not answer at start.
pub const OPEN_RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest pause between those tries.
pub const OPEN_RETRY_CAP: Duration = Duration::from_secs(30);

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenStoreError {
    /// The authority could not be connected.
    #[error("setting up the authority: {0}")]
    Connect(#[from] ConnectError),
    /// The node record could not be opened.
    #[error("opening the node record: {0}")]
    NodeRecord(#[from] NodeRecordError),
    /// The store is not the one this node (or its configuration) knows, or needs `--init`.
    #[error("checking the store against this node's record (data directory {data_dir}): {source}")]
    Check {
        /// The data directory.
        data_dir: String,
        /// What the check found.
        source: StoreError,
    },
}

/// Connects `config`'s authority and, unless it is the memory authority, checks it against the
/// node record of `data_dir` ([`CheckedAuthority::open`]); `init` says an empty store is a new
/// deployment (`idmint serve --init`).
pub async fn open_store(
    config: &FileConfig,
    data_dir: &Path,
    init: bool,
) -> Result<Arc<dyn Authority>, OpenStoreError> {
    tracing::info!(authority = %config.authority, "connecting the authority");
    let authority =
        idmint_store::connect_observed(&config.authority, data_dir, Arc::new(LogMembers)).await?;
    if !config.authority.is_durable() {
        tracing::warn!("memory authority: nothing survives a restart, ids WILL repeat after one");
        return Ok(authority);
    }
    let record = Arc::new(NodeRecord::open(data_dir, config.authority.to_string())?);
    tracing::info!(
        node_record = %record.path().display(),
        namespaces = record.len(),
        "node record"
    );
    let checked = CheckedAuthority::open(authority, record, &expectations(config, init))
        .await
        .map_err(|source| OpenStoreError::Check {
            data_dir: data_dir.display().to_string(),
            source,
        })?;
    if let Some(incarnation) = checked.incarnation() {
        tracing::info!(%incarnation, "store incarnation");
    }
    Ok(Arc::new(checked))
}

impl OpenStoreError {
    /// Whether the store did not answer (as opposed to refusing, or a configuration mistake).
    pub fn is_unavailable(&self) -> bool {
        match self {
            OpenStoreError::Connect(ConnectError::Connect { source, .. }) => {
                source.is_unavailable()
            }
            OpenStoreError::Check { source, .. } => source.is_unavailable(),
            _ => false,
        }
    }
}

/// [`open_store`], or, when the store does not answer and the node ran on it before (its node
/// record or the configuration names the store's incarnation), a [`DeferredAuthority`] at once
/// and a task (on the current runtime) that retries [`open_store`] with a backoff until it
/// succeeds. Any other failure is returned, as from [`open_store`].
pub async fn open_store_or_later(
    config: &FileConfig,
    data_dir: &Path,
    init: bool,
) -> Result<Arc<dyn Authority>, OpenStoreError> {
    let error = match open_store(config, data_dir, init).await {
        Ok(authority) => return Ok(authority),
        Err(e) => e,
    };
    if !error.is_unavailable() || !knows_its_store(config, data_dir)? {
        return Err(error);
    }
    tracing::warn!(error = %error, "the authority does not answer: starting unready, retrying");
    let deferred = Arc::new(DeferredAuthority::new(
        config.authority.kind(),
        error.to_string(),
    ));
    let retry = {
        let (deferred, config, data_dir) = (deferred.clone(), config.clone(), data_dir.to_owned());
        async move {
            let mut backoff = Backoff::new(OPEN_RETRY_FIRST, OPEN_RETRY_CAP);
            loop {
                tokio::time::sleep(backoff.delay()).await;
                match open_store(&config, &data_dir, init).await {
                    Ok(authority) => {
                        deferred.connected(authority);
                        tracing::info!("the authority answers: connected and checked");
                        return;
                    }
                    Err(e) => {
                        if e.is_unavailable() {
                            tracing::debug!(error = %e, "the authority still does not answer");
                        } else {
                            tracing::error!(error = %e, "the authority answers, and cannot be used; retrying");
                        }
                        deferred.failed(e.to_string());
                    }
                }
            }
        }
    };
    tokio::spawn(retry);
    Ok(deferred)
}

/// Whether this node ran on its store before: the node record or the configuration names the
/// store's incarnation.
fn knows_its_store(config: &FileConfig, data_dir: &Path) -> Result<bool, NodeRecordError> {
    if config.incarnation.is_some() {
        return Ok(true);
    }
    let record = NodeRecord::open(data_dir, config.authority.to_string())?;
    Ok(record.incarnation()?.is_some())
}

/// What the configuration declares that lives in the store, and what `init` and
/// `[authority] incarnation` say.
fn expectations(config: &FileConfig, init: bool) -> StoreExpectations {
    let mut expect = StoreExpectations {
        init,
        incarnation: config.incarnation.clone(),
        ..StoreExpectations::default()
    };
    for (name, kind) in &config.node.namespaces {
        match kind {
            KindConfig::Sequence { .. } => expect.declared_namespaces.push(name.clone()),
            KindConfig::Snowflake { group, shards, .. } => {
                let group = match (group, shards) {
                    (_, Some(_)) => match crate::shards::shard_group(name) {
                        Ok(g) => g,
                        Err(_) => continue,
                    },
                    (Some(g), None) => g.clone(),
                    (None, None) => name.clone(),
                };
                if !expect.declared_groups.contains(&group) {
                    expect.declared_groups.push(group);
                }
            }
            KindConfig::Uuid7 | KindConfig::Ulid => {}
        }
    }
    expect
}

/// Logs each multi-authority member's transitions, once each way (never once per request).
#[derive(Debug)]
struct LogMembers;

impl idmint_store::MemberEvents for LogMembers {
    fn changed(&self, m: &idmint_store::MemberHealth) {
        if m.up {
            tracing::info!(
                member = m.number,
                kind = m.kind,
                offset = m.offset,
                "authority member is back; serving its residue class again"
            );
        } else {
            tracing::warn!(
                member = m.number,
                kind = m.kind,
                offset = m.offset,
                error = m.last_error.as_deref().unwrap_or("unknown"),
                "authority member is down; the others serve meanwhile, it is retried"
            );
        }
    }
}
