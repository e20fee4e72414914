//! The node's ledger: a small file in the data directory recording every sequence namespace the
//! node has set up and the highest watermark it saw of each, and [`LedgerAuthority`], which
//! wraps any authority and checks the store against it (docs/uniqueness.md, "Stores that moved
//! or lost data").
//!
//! Why: an authority that answers "no such namespace" cannot tell a namespace that never existed
//! from one whose record it lost (an empty backup restored, `authority.path`, `table` or `prefix`
//! changed, another database or data directory, a replaced server). Creating it again would
//! re-issue every id. The ledger is what the node remembers independently of the store.
//!
//! Invariants:
//! - a namespace recorded in the ledger is never created again: if the store has no record of
//!   it, [`Authority::ensure_namespace`] and [`Authority::reserve`] answer
//!   [`StoreError::Lost`], naming the ledger, the store and what to do;
//! - a store whose watermark is below the one recorded went back in time (a restored backup):
//!   also [`StoreError::Lost`];
//! - the ledger's watermark is never above the store's (it records what the store answered, and
//!   is lowered *before* a give-back lowers the store), so it never accuses a healthy store;
//! - a namespace is recorded durably (written, fsynced, renamed into place, directory fsynced)
//!   before `ensure_namespace` returns, so no id of it is handed out before the record exists;
//!   watermarks are written at most once per [`WRITE_INTERVAL`] per ledger (a crash loses at
//!   most that much of the record, which only weakens the check, never falsifies it).
//!
//! What it does not do: protect a store whose ledger is lost with it (a data directory moved or
//! deleted whole, which is why the default data directory is absolute and logged), or replace
//! the store's durability (the store is the source of truth; the ledger only detects its loss).

use crate::{Authority, GiveBack, MemberHealth, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The ledger's file name in the data directory.
pub const LEDGER_FILE: &str = "ledger.toml";

/// Watermark updates are written at most this often.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// One namespace as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    /// The authority it was set up on, as the configuration described it.
    authority: String,
    bits: u32,
    first: u64,
    step: u64,
    offset: u64,
    /// The highest watermark the store reported to this node.
    watermark: u64,
}

/// The file's contents.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct LedgerFile {
    version: u32,
    #[serde(default)]
    namespaces: BTreeMap<String, Entry>,
}

#[derive(Debug)]
struct LedgerState {
    file: LedgerFile,
    last_write: Option<Instant>,
    dirty: bool,
}

/// The ledger of one data directory. See the module docs.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    /// What the configuration says the authority is (no secrets: the config's display form).
    authority: String,
    existed: bool,
    state: Mutex<LedgerState>,
}

/// Why a ledger could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Reading, writing or syncing the file failed.
    #[error("ledger {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is not a ledger this version wrote.
    #[error("ledger {} is not readable: {message}; move it away only if this data directory starts a new deployment", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl Ledger {
    /// Opens (or starts) the ledger of `data_dir`, creating the directory if needed.
    /// `authority` describes the configured authority for messages.
    pub fn open(data_dir: &Path, authority: String) -> Result<Ledger, LedgerError> {
        let path = data_dir.join(LEDGER_FILE);
        let io = |source| LedgerError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(data_dir).map_err(io)?;
        let (file, existed) = match std::fs::read_to_string(&path) {
            Ok(text) => {
                let file: LedgerFile = toml::from_str(&text).map_err(|e| LedgerError::Corrupt {
                    path: path.clone(),
                    message: e.message().to_owned(),
                })?;
                if file.version != 1 {
                    return Err(LedgerError::Corrupt {
                        path,
                        message: format!("version {} (this idmint writes 1)", file.version),
                    });
                }
                (file, true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
                LedgerFile {
                    version: 1,
                    namespaces: BTreeMap::new(),
                },
                false,
            ),
            Err(e) => return Err(io(e)),
        };
        Ok(Ledger {
            path,
            authority,
            existed,
            state: Mutex::new(LedgerState {
                file,
                last_write: None,
                dirty: false,
            }),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file existed when opened (not a first start in this data directory).
    pub fn existed(&self) -> bool {
        self.existed
    }

    /// How many namespaces it records.
    pub fn len(&self) -> usize {
        self.lock().file.namespaces.len()
    }

    /// Whether it records no namespace.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recorded(&self, name: &NamespaceName) -> Option<Entry> {
        self.lock().file.namespaces.get(name.as_str()).cloned()
    }

    /// Records a namespace set up with `state` and writes at once.
    async fn record(&self, state: &NamespaceState) -> Result<(), StoreError> {
        let text = {
            let mut guard = self.lock();
            let entry = guard
                .file
                .namespaces
                .entry(state.name.as_str().to_owned())
                .or_insert_with(|| Entry {
                    authority: self.authority.clone(),
                    bits: state.spec.width().bits(),
                    first: state.spec.first(),
                    step: state.spec.step(),
                    offset: state.spec.offset(),
                    watermark: state.watermark,
                });
            entry.watermark = entry.watermark.max(state.watermark);
            guard.dirty = false;
            guard.last_write = Some(Instant::now());
            self.render(&guard.file)?
        };
        self.write(text).await
    }

    /// The watermark recorded for `name`, if the ledger knows it.
    pub fn watermark(&self, name: &NamespaceName) -> Option<u64> {
        self.recorded(name).map(|e| e.watermark)
    }

    /// The spec recorded for `name`, if the ledger knows it (and it is a valid spec).
    pub fn spec(&self, name: &NamespaceName) -> Option<SequenceSpec> {
        let e = self.recorded(name)?;
        let width = match e.bits {
            32 => idmint_core::Width::Bits32,
            64 => idmint_core::Width::Bits64,
            _ => return None,
        };
        SequenceSpec::new(width, e.first, e.step, e.offset).ok()
    }

    /// Records a namespace re-seeded by an operator on the configured authority: the entry now
    /// names that authority and the store's new watermark (`state.watermark`, which the caller
    /// checked is at least the recorded one). Written at once.
    pub async fn adopt(&self, state: &NamespaceState) -> Result<(), StoreError> {
        let text = {
            let mut guard = self.lock();
            guard.file.namespaces.insert(
                state.name.as_str().to_owned(),
                Entry {
                    authority: self.authority.clone(),
                    bits: state.spec.width().bits(),
                    first: state.spec.first(),
                    step: state.spec.step(),
                    offset: state.spec.offset(),
                    watermark: state.watermark,
                },
            );
            guard.dirty = false;
            guard.last_write = Some(Instant::now());
            self.render(&guard.file)?
        };
        self.write(text).await
    }

    /// Notes a watermark the store reported for a recorded namespace; writes if
    /// [`WRITE_INTERVAL`] has passed since the last write.
    async fn note(&self, name: &NamespaceName, watermark: u64) -> Result<(), StoreError> {
        let text = {
            let mut guard = self.lock();
            if let Some(entry) = guard.file.namespaces.get_mut(name.as_str()) {
                if watermark > entry.watermark {
                    entry.watermark = watermark;
                    guard.dirty = true;
                }
            }
            let due = guard
                .last_write
                .is_none_or(|t| t.elapsed() >= WRITE_INTERVAL);
            if !(guard.dirty && due) {
                return Ok(());
            }
            guard.dirty = false;
            guard.last_write = Some(Instant::now());
            self.render(&guard.file)?
        };
        self.write(text).await
    }

    /// Writes what is noted but not yet written (at shutdown).
    pub async fn flush(&self) -> Result<(), StoreError> {
        let text = {
            let mut guard = self.lock();
            if !guard.dirty {
                return Ok(());
            }
            guard.dirty = false;
            guard.last_write = Some(Instant::now());
            self.render(&guard.file)?
        };
        self.write(text).await
    }

    /// Lowers the recorded watermark of `name` to `to` (before a give-back) and writes.
    async fn lower(&self, name: &NamespaceName, to: u64) -> Result<(), StoreError> {
        let text = {
            let mut guard = self.lock();
            match guard.file.namespaces.get_mut(name.as_str()) {
                Some(entry) if entry.watermark > to => entry.watermark = to,
                _ => return Ok(()),
            }
            guard.last_write = Some(Instant::now());
            self.render(&guard.file)?
        };
        self.write(text).await
    }

    fn render(&self, file: &LedgerFile) -> Result<String, StoreError> {
        let body = toml::to_string(file).map_err(|e| StoreError::Corrupt {
            message: format!("ledger {}: {e}", self.path.display()),
        })?;
        Ok(format!(
            "# idmint's ledger of the namespaces this data directory's node set up, and the\n\
             # highest watermark it saw of each (docs/uniqueness.md). Written by idmint; a\n\
             # namespace listed here is never created again.\n{body}"
        ))
    }

    /// Writes `text` durably: a temporary file, fsync, rename, fsync of the directory.
    async fn write(&self, text: String) -> Result<(), StoreError> {
        let path = self.path.clone();
        let result = tokio::task::spawn_blocking(move || write_durably(&path, text.as_bytes()))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r);
        result.map_err(|e| StoreError::Unavailable {
            backend: "ledger",
            message: format!("writing {}: {e}", self.path.display()),
        })
    }

    fn lost(&self, name: &NamespaceName, entry: &Entry, found: &str) -> StoreError {
        StoreError::Lost {
            name: name.clone(),
            message: format!(
                "{found}, but this node's ledger {} records it (set up on {}, watermark {}): the \
                 store moved (another data directory, path, table, prefix, database or kind) or \
                 lost its data (a restored backup, a replaced server). Creating it again would \
                 re-issue its ids, so idmint will not. Point the configuration back at the store \
                 that has it; if it is truly gone, re-seed it above every id ever handed out \
                 (`idmint admin reseed`, docs/uniqueness.md)",
                self.path.display(),
                entry.authority,
                entry.watermark
            ),
        }
    }
}

fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("toml.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        #[cfg(unix)]
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// An authority checked against a [`Ledger`]. See the module docs.
#[derive(Debug)]
pub struct LedgerAuthority {
    inner: Arc<dyn Authority>,
    ledger: Arc<Ledger>,
}

impl LedgerAuthority {
    /// `inner`, checked against `ledger`.
    pub fn new(inner: Arc<dyn Authority>, ledger: Arc<Ledger>) -> Self {
        LedgerAuthority { inner, ledger }
    }

    /// The ledger.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }
}

#[async_trait]
impl Authority for LedgerAuthority {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn members(&self) -> Vec<MemberHealth> {
        self.inner.members()
    }

    fn residues(&self, spec: &SequenceSpec) -> Vec<u64> {
        self.inner.residues(spec)
    }

    fn worker_leases(&self) -> Option<&dyn crate::WorkerLeases> {
        self.inner.worker_leases()
    }

    fn audit_log(&self) -> Option<&dyn crate::AuditLog> {
        self.inner.audit_log()
    }

    fn audited_members(&self) -> Option<Vec<Arc<dyn Authority>>> {
        self.inner.audited_members()
    }

    /// Moves the store's watermark; the node's ledger learns the higher watermark as from a
    /// reservation.
    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: crate::Advance,
    ) -> Result<crate::Advanced, StoreError> {
        let advanced = self.inner.advance(name, to, why).await?;
        if let Err(e) = self.ledger.note(name, advanced.state.watermark).await {
            tracing::warn!(namespace = %name, error = %e, "the ledger could not record a watermark; it will try again at the next reservation");
        }
        Ok(advanced)
    }

    /// Refuses a namespace the ledger records but the store does not have, or has at a lower
    /// watermark; otherwise sets it up in the store and records it durably before answering.
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        if let Some(entry) = self.ledger.recorded(name) {
            match self.inner.state(name).await? {
                None => {
                    return Err(self.ledger.lost(
                        name,
                        &entry,
                        &format!("the {} authority has no record of it", self.inner.kind()),
                    ))
                }
                Some(s) if s.watermark < entry.watermark => {
                    return Err(self.ledger.lost(
                        name,
                        &entry,
                        &format!(
                            "the {} authority's watermark is {}, below what this node saw",
                            self.inner.kind(),
                            s.watermark
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        let state = self.inner.ensure_namespace(name, spec).await?;
        self.ledger.record(&state).await?;
        Ok(state)
    }

    /// Reserves from the store; a store that no longer knows the namespace has lost it.
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        match self.inner.reserve(name, count).await {
            Ok(r) => {
                // A failed watermark write only weakens the check; the block is good. Said
                // once per failure, not hidden.
                if let Err(e) = self.ledger.note(name, r.watermark).await {
                    tracing::warn!(namespace = %name, error = %e, "the ledger could not record a watermark; it will try again at the next reservation");
                }
                Ok(r)
            }
            Err(StoreError::UnknownNamespace { .. }) => match self.ledger.recorded(name) {
                Some(entry) => Err(self.ledger.lost(
                    name,
                    &entry,
                    &format!("the {} authority has no record of it", self.inner.kind()),
                )),
                None => Err(StoreError::UnknownNamespace { name: name.clone() }),
            },
            Err(e) => Err(e),
        }
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.inner.state(name).await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.inner.list().await
    }

    /// Lowers the ledger first (so it never records more than the store), then gives back.
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.ledger.lower(name, tail.start()).await?;
        self.inner.give_back(name, tail).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::MemoryAuthority;

    /// A store restored from an older backup (its watermark below what the node saw) is
    /// refused, and a give-back lowers the ledger first so a clean restart is not refused.
    #[tokio::test]
    async fn a_store_that_went_back_in_time_is_refused_and_a_give_back_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = || Arc::new(Ledger::open(dir.path(), "memory".into()).unwrap());
        let name = NamespaceName::new("orders").unwrap();
        let spec = SequenceSpec::default_64();
        let store = Arc::new(MemoryAuthority::new());
        let a = LedgerAuthority::new(store.clone(), ledger());
        a.ensure_namespace(&name, spec).await.unwrap();
        let r = a.reserve(&name, 100).await.unwrap();
        a.ledger().flush().await.unwrap();
        // A clean shutdown hands back the tail: the ledger is lowered with the store.
        let tail = Block::new(r.block.start() + 50, r.block.end(), 1).unwrap();
        assert_eq!(a.give_back(&name, tail).await.unwrap(), GiveBack::Returned);
        let again = LedgerAuthority::new(store.clone(), ledger());
        again.ensure_namespace(&name, spec).await.unwrap();
        again.reserve(&name, 10).await.unwrap();
        again.ledger().flush().await.unwrap();

        // An older backup: the namespace exists, at a lower watermark.
        let restored = Arc::new(MemoryAuthority::new());
        restored.ensure_namespace(&name, spec).await.unwrap();
        restored.reserve(&name, 20).await.unwrap();
        let err = LedgerAuthority::new(restored, ledger())
            .ensure_namespace(&name, spec)
            .await
            .unwrap_err();
        assert!(
            err.is_lost() && err.to_string().contains("below what this node saw"),
            "{err}"
        );
    }

    #[test]
    fn an_unreadable_ledger_is_an_error_not_a_fresh_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LEDGER_FILE), "not = [toml").unwrap();
        let err = Ledger::open(dir.path(), "memory".into()).unwrap_err();
        assert!(matches!(err, LedgerError::Corrupt { .. }), "{err}");
    }
}
