//! The node record: a small file in the data directory, `node-record.toml`, recording which
//! store the node used (its [incarnation](crate::incarnation)), every sequence namespace it set
//! up with the highest watermark it saw of each, and every worker-lease group it leased from
//! with the last token and floor it held; and [`CheckedAuthority`], which wraps any authority
//! and checks the store against it (docs/uniqueness.md, "Stores that moved or lost data").
//!
//! Why: an authority that answers "no such namespace" cannot tell a namespace that never existed
//! from one whose record it lost (an empty backup restored, `authority.path`, `table` or
//! `prefix` changed, another database or data directory, a replaced server). Creating it again
//! would re-issue every id. The node record is what the node remembers independently of the
//! store. (Not the store's audit ledger, [`crate::audit`], which records what the store
//! granted.)
//!
//! Invariants:
//! - a store is used only while it is the incarnation the node record (or the configuration)
//!   names: [`CheckedAuthority::open`] refuses another or none ([`StoreError::StoreLost`]), and
//!   so do every namespace creation and every lease acquisition while the node runs, so a
//!   store emptied or swapped under running nodes is never started fresh by any of them;
//! - an empty store without an incarnation is taken as new only when nothing says otherwise:
//!   the node record holds nothing, the configuration names no incarnation, and either `--init`
//!   said so or the configuration declares nothing that lives in the store (the embedded file
//!   store, which lives beside the node record, is taken as new on a first start);
//! - a namespace in the node record is never created again: if the store has no record of it,
//!   [`Authority::ensure_namespace`](crate::Authority::ensure_namespace) and
//!   [`Authority::reserve`](crate::Authority::reserve) answer [`StoreError::Lost`],
//!   naming the node record, the store and what to do;
//! - a lease group in the node record is never started fresh: an acquisition in a store that
//!   has no record of the group, or has it with a lower last token, is refused;
//! - a store whose watermark is below the one recorded went back in time (a restored backup):
//!   also [`StoreError::Lost`];
//! - the recorded watermark is never above the store's (it records what the store answered,
//!   and is lowered *before* a give-back lowers the store), so it never accuses a healthy store;
//! - a namespace is recorded durably (written, fsynced, renamed into place, directory fsynced)
//!   before `ensure_namespace` returns, so no id of it is handed out before the record exists;
//!   watermarks are written at most once per [`WRITE_INTERVAL`] per node record (a crash loses
//!   at most that much of the record, which only weakens the check, never falsifies it);
//! - writes never overlap, and a write never replaces the file with an older state than one
//!   already written (each render has a generation; one writer at a time, skipping any render a
//!   later one already covers): concurrent lease acquisitions (a node taking many shard ranges
//!   at once) all land;
//! - a data directory that holds the record under its previous name, [`OLD_FILE_NAME`]
//!   (`ledger.toml`), and not under [`NODE_RECORD_FILE`] is migrated by [`NodeRecord::open`]:
//!   the old file is read and validated, written to the new name durably (as above), then
//!   removed, its removal made durable too. A crash in between leaves both with the same
//!   record, which the next open finishes; both with different records are refused
//!   ([`NodeRecordError::Corrupt`]), never one of them silently dropped.
//!
//! What it does not do: protect a store whose node record is lost with it (a data directory
//! moved or deleted whole, which is why the default data directory is absolute and logged), or
//! replace the store's durability (the store is the source of truth; the node record only
//! detects its loss).

mod checked;

pub use checked::{CheckedAuthority, StoreExpectations};

use crate::lease::WorkerLease;
use crate::{Incarnation, NamespaceState, StoreError};
use idmint_core::{NamespaceName, SequenceSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The node record's file name in the data directory.
pub const NODE_RECORD_FILE: &str = "node-record.toml";

/// The file's previous name: a data directory that has only it is migrated on open.
pub const OLD_FILE_NAME: &str = "ledger.toml";

/// Watermark updates are written at most this often.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// One namespace as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Entry {
    /// The authority it was set up on, as the configuration described it.
    authority: String,
    bits: u32,
    first: u64,
    step: u64,
    offset: u64,
    /// The highest watermark the store reported to this node.
    watermark: u64,
}

/// One worker-lease group as recorded: what this node last held of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEntry {
    /// The authority it was leased from, as the configuration described it.
    pub authority: String,
    /// The largest fencing token this node was granted in the group (the group's last token
    /// was at least this then).
    pub last_token: u64,
    /// The worker id it held last.
    pub worker: u64,
    /// The highest time floor it recorded for that worker id (ms since the Unix epoch).
    pub floor_unix_ms: u64,
}

/// The file's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct RecordFile {
    version: u32,
    /// The store's incarnation, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    incarnation: Option<String>,
    #[serde(default)]
    namespaces: BTreeMap<String, Entry>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    groups: BTreeMap<String, GroupEntry>,
}

#[derive(Debug)]
struct RecordState {
    file: RecordFile,
    last_write: Option<Instant>,
    dirty: bool,
    /// Renders of `file` taken for writing so far: each write is of one generation.
    rendered: u64,
}

/// The node record of one data directory. See the module docs.
#[derive(Debug)]
pub struct NodeRecord {
    path: PathBuf,
    /// What the configuration says the authority is (no secrets: the config's display form).
    authority: String,
    existed: bool,
    state: Mutex<RecordState>,
    /// The generation last written to the file. A writer holds it while it writes, so writes
    /// never overlap (they share one temporary file) and a render never replaces a later one.
    written: Arc<Mutex<u64>>,
}

/// Why a node record could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum NodeRecordError {
    /// Reading, writing or syncing the file failed.
    #[error("node record {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is not a node record this version wrote.
    #[error("node record {} is not readable: {message}; move it away only if this data directory starts a new deployment", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl NodeRecord {
    /// Opens (or starts) the node record of `data_dir`, creating the directory if needed.
    /// `authority` describes the configured authority for messages.
    pub fn open(data_dir: &Path, authority: String) -> Result<NodeRecord, NodeRecordError> {
        let path = data_dir.join(NODE_RECORD_FILE);
        std::fs::create_dir_all(data_dir).map_err(|e| io_error(&path, e))?;
        migrate(data_dir, &path)?;
        let (file, existed) = match read(&path)? {
            Some(file) => (file, true),
            None => (
                RecordFile {
                    version: 1,
                    ..RecordFile::default()
                },
                false,
            ),
        };
        Ok(NodeRecord {
            path,
            authority,
            existed,
            state: Mutex::new(RecordState {
                file,
                last_write: None,
                dirty: false,
                rendered: 0,
            }),
            written: Arc::new(Mutex::new(0)),
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

    /// Whether it records anything the store keeps: a namespace or a lease group.
    pub fn records_anything(&self) -> bool {
        let guard = self.lock();
        !guard.file.namespaces.is_empty() || !guard.file.groups.is_empty()
    }

    /// The store's incarnation as recorded.
    pub fn incarnation(&self) -> Result<Option<Incarnation>, NodeRecordError> {
        let text = self.lock().file.incarnation.clone();
        text.map(|t| {
            Incarnation::parse(&t).map_err(|e| NodeRecordError::Corrupt {
                path: self.path.clone(),
                message: e.to_string(),
            })
        })
        .transpose()
    }

    /// Applies `change` to the file's contents and writes them at once, unless `change` says
    /// it changed nothing.
    async fn write_now(
        &self,
        change: impl FnOnce(&mut RecordFile) -> bool,
    ) -> Result<(), StoreError> {
        let text = {
            let mut guard = self.lock();
            if !change(&mut guard.file) {
                return Ok(());
            }
            guard.dirty = false;
            guard.last_write = Some(Instant::now());
            self.render(&mut guard)?
        };
        self.write(text).await
    }

    /// Applies `change` (which says whether it changed anything) and writes what is not yet
    /// written if [`WRITE_INTERVAL`] has passed since the last write.
    async fn write_when_due(
        &self,
        change: impl FnOnce(&mut RecordFile) -> bool,
    ) -> Result<(), StoreError> {
        let text = {
            let mut guard = self.lock();
            if change(&mut guard.file) {
                guard.dirty = true;
            }
            let due = guard
                .last_write
                .is_none_or(|t| t.elapsed() >= WRITE_INTERVAL);
            if !(guard.dirty && due) {
                return Ok(());
            }
            guard.dirty = false;
            guard.last_write = Some(Instant::now());
            self.render(&mut guard)?
        };
        self.write(text).await
    }

    /// Records `incarnation` as the store's (replacing what was recorded: the caller checked)
    /// and writes at once.
    pub async fn record_incarnation(&self, incarnation: &Incarnation) -> Result<(), StoreError> {
        self.write_now(|file| {
            file.incarnation = Some(incarnation.as_str().to_owned());
            true
        })
        .await
    }

    /// What it records of lease group `group`.
    pub fn group(&self, group: &NamespaceName) -> Option<GroupEntry> {
        self.lock().file.groups.get(group.as_str()).cloned()
    }

    /// Records a lease just acquired (token, worker id, its floor) and writes at once.
    async fn record_lease(&self, lease: &WorkerLease) -> Result<(), StoreError> {
        self.write_now(|file| {
            let entry = file
                .groups
                .entry(lease.group.as_str().to_owned())
                .or_insert_with(|| GroupEntry {
                    authority: self.authority.clone(),
                    last_token: 0,
                    worker: lease.worker,
                    floor_unix_ms: 0,
                });
            entry.last_token = entry.last_token.max(lease.token);
            if entry.worker != lease.worker {
                entry.worker = lease.worker;
                entry.floor_unix_ms = 0;
            }
            entry.floor_unix_ms = entry.floor_unix_ms.max(lease.floor_unix_ms);
            true
        })
        .await
    }

    /// Sets the floor recorded for `lease`'s worker id to `floor_unix_ms` if that is lower, and
    /// writes at once: before a release, which may lower the store's floor to just above the
    /// last timestamp issued (the node record must never record more than the store).
    async fn lower_floor(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), StoreError> {
        self.write_now(|file| match file.groups.get_mut(lease.group.as_str()) {
            Some(entry) if entry.worker == lease.worker => {
                entry.floor_unix_ms = entry.floor_unix_ms.min(floor_unix_ms);
                true
            }
            _ => false,
        })
        .await
    }

    /// Notes a floor recorded for a lease of a recorded group; written when due.
    async fn note_floor(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), StoreError> {
        self.write_when_due(|file| match file.groups.get_mut(lease.group.as_str()) {
            Some(entry) if entry.worker == lease.worker && floor_unix_ms > entry.floor_unix_ms => {
                entry.floor_unix_ms = floor_unix_ms;
                true
            }
            _ => false,
        })
        .await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecordState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recorded(&self, name: &NamespaceName) -> Option<Entry> {
        self.lock().file.namespaces.get(name.as_str()).cloned()
    }

    fn entry_of(&self, state: &NamespaceState) -> Entry {
        Entry {
            authority: self.authority.clone(),
            bits: state.spec.width().bits(),
            first: state.spec.first(),
            step: state.spec.step(),
            offset: state.spec.offset(),
            watermark: state.watermark,
        }
    }

    /// Records a namespace set up with `state` and writes at once.
    async fn record(&self, state: &NamespaceState) -> Result<(), StoreError> {
        self.write_now(|file| {
            let entry = file
                .namespaces
                .entry(state.name.as_str().to_owned())
                .or_insert_with(|| self.entry_of(state));
            entry.watermark = entry.watermark.max(state.watermark);
            true
        })
        .await
    }

    /// The watermark recorded for `name`, if the node record knows it.
    pub fn watermark(&self, name: &NamespaceName) -> Option<u64> {
        self.recorded(name).map(|e| e.watermark)
    }

    /// The spec recorded for `name`, if the node record knows it (and it is a valid spec).
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
        self.write_now(|file| {
            file.namespaces
                .insert(state.name.as_str().to_owned(), self.entry_of(state));
            true
        })
        .await
    }

    /// Notes a watermark the store reported for a recorded namespace; written when due.
    async fn note(&self, name: &NamespaceName, watermark: u64) -> Result<(), StoreError> {
        self.write_when_due(|file| match file.namespaces.get_mut(name.as_str()) {
            Some(entry) if watermark > entry.watermark => {
                entry.watermark = watermark;
                true
            }
            _ => false,
        })
        .await
    }

    /// Raises the recorded watermark of `name` to `watermark` and writes at once.
    async fn note_now(&self, name: &NamespaceName, watermark: u64) -> Result<(), StoreError> {
        self.write_now(|file| match file.namespaces.get_mut(name.as_str()) {
            Some(entry) if watermark > entry.watermark => {
                entry.watermark = watermark;
                true
            }
            _ => false,
        })
        .await
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
            self.render(&mut guard)?
        };
        self.write(text).await
    }

    /// Lowers the recorded watermark of `name` to `to` (before a give-back) and writes.
    async fn lower(&self, name: &NamespaceName, to: u64) -> Result<(), StoreError> {
        self.write_now(|file| match file.namespaces.get_mut(name.as_str()) {
            Some(entry) if entry.watermark > to => {
                entry.watermark = to;
                true
            }
            _ => false,
        })
        .await
    }

    /// The file's contents as of now, and their generation.
    fn render(&self, state: &mut RecordState) -> Result<(String, u64), StoreError> {
        let text = render(&state.file).map_err(|e| StoreError::Corrupt {
            message: format!("node record {}: {e}", self.path.display()),
        })?;
        state.rendered += 1;
        Ok((text, state.rendered))
    }

    /// Writes `text` (of generation `generation`) durably: a temporary file, fsync, rename,
    /// fsync of the directory; nothing if a later generation is written already (it holds all
    /// this one does).
    async fn write(&self, (text, generation): (String, u64)) -> Result<(), StoreError> {
        let path = self.path.clone();
        let written = self.written.clone();
        let result = tokio::task::spawn_blocking(move || {
            let mut last = written.lock().unwrap_or_else(|p| p.into_inner());
            if *last < generation {
                write_durably(&path, text.as_bytes())?;
                *last = generation;
            }
            Ok(())
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
        result.map_err(|e| StoreError::Unavailable {
            backend: "node record",
            message: format!("writing {}: {e}", self.path.display()),
        })
    }

    fn lost(&self, name: &NamespaceName, entry: &Entry, found: &str) -> StoreError {
        StoreError::Lost {
            name: name.clone(),
            message: format!(
                "{found}, but this node's record {} records it (set up on {}, watermark {}): the \
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

/// Writes `bytes` to `path` durably: a temporary file beside it (`path` + `.tmp`), fsync,
/// rename, fsync of the directory. A crash leaves the old file or the new one, never a part.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    match path.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

/// Makes the directory's entries (a file renamed into it or removed from it) durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn io_error(path: &Path, source: std::io::Error) -> NodeRecordError {
    NodeRecordError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The node record at `path`, validated; `None` if there is no file.
fn read(path: &Path) -> Result<Option<RecordFile>, NodeRecordError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    let corrupt = |message: String| NodeRecordError::Corrupt {
        path: path.to_owned(),
        message,
    };
    let file: RecordFile = toml::from_str(&text).map_err(|e| corrupt(e.message().to_owned()))?;
    if file.version != 1 {
        return Err(corrupt(format!(
            "version {} (this idmint writes 1)",
            file.version
        )));
    }
    Ok(Some(file))
}

/// Moves a record kept under [`OLD_FILE_NAME`] in `data_dir` to `path` (module docs): reads and
/// validates it, writes it to `path` durably unless `path` holds the same record already (a
/// migration that stopped before its last step), then removes it durably. Both files with
/// different records is [`NodeRecordError::Corrupt`]: which one is this node's is not for
/// idmint to guess.
fn migrate(data_dir: &Path, path: &Path) -> Result<(), NodeRecordError> {
    let old = data_dir.join(OLD_FILE_NAME);
    let Some(recorded) = read(&old)? else {
        return Ok(());
    };
    match read(path)? {
        Some(current) if current == recorded => {}
        Some(_) => {
            return Err(NodeRecordError::Corrupt {
                path: old,
                message: format!(
                    "{} beside it records something else; keep the one of this node's \
                     deployment and move the other away",
                    path.display()
                ),
            })
        }
        None => {
            let text = render(&recorded).map_err(|e| NodeRecordError::Corrupt {
                path: old.clone(),
                message: e.to_string(),
            })?;
            write_durably(path, text.as_bytes()).map_err(|e| io_error(path, e))?;
        }
    }
    std::fs::remove_file(&old).map_err(|e| io_error(&old, e))?;
    sync_dir(data_dir).map_err(|e| io_error(data_dir, e))
}

/// The file's text: a header saying what it is, then `file` as TOML.
fn render(file: &RecordFile) -> Result<String, toml::ser::Error> {
    let body = toml::to_string(file)?;
    Ok(format!(
        "# idmint's node record: the namespaces this data directory's node set up, and the\n\
         # highest watermark it saw of each, the lease groups it leased from, and the store's\n\
         # incarnation (docs/uniqueness.md). Written by idmint; a namespace or lease group\n\
         # listed here is never started fresh.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Authority, MemoryAuthority};
    use std::sync::Arc;

    #[test]
    fn an_unreadable_node_record_is_an_error_not_a_fresh_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(NODE_RECORD_FILE), "not = [toml").unwrap();
        let err = NodeRecord::open(dir.path(), "memory".into()).unwrap_err();
        assert!(matches!(err, NodeRecordError::Corrupt { .. }), "{err}");
    }

    /// A record under the previous name, as idmint wrote it there.
    const OLD_RECORD: &str = r#"# idmint's ledger of the namespaces this data directory's node set up, and the
# highest watermark it saw of each, the lease groups it leased from, and the store's
# incarnation (docs/uniqueness.md). Written by idmint; a namespace or lease group
# listed here is never started fresh.
version = 1
incarnation = "0123456789abcdef0123456789abcdef"

[namespaces.orders]
authority = "memory"
bits = 64
first = 1
step = 1
offset = 0
watermark = 5001

[groups.events]
authority = "memory"
last_token = 7
worker = 3
floor_unix_ms = 1700000005000
"#;

    /// A data directory with only `ledger.toml` is migrated on open: the record under the new
    /// name holds all it held (and the node refuses a store that lost what it records), the old
    /// file is gone, and the next open reads the new one.
    #[tokio::test]
    async fn a_record_under_the_old_name_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (
            dir.path().join(OLD_FILE_NAME),
            dir.path().join(NODE_RECORD_FILE),
        );
        std::fs::write(&old, OLD_RECORD).unwrap();
        let record = NodeRecord::open(dir.path(), "memory".into()).unwrap();
        assert!(!old.exists(), "the old file is left behind");
        assert_eq!(record.path(), new);
        assert!(record.existed());
        let orders = NamespaceName::new("orders").unwrap();
        let events = NamespaceName::new("events").unwrap();
        assert_eq!(record.watermark(&orders), Some(5001));
        assert_eq!(record.spec(&orders), Some(SequenceSpec::default_64()));
        assert_eq!(
            record.incarnation().unwrap().map(|i| i.as_str().to_owned()),
            Some("0123456789abcdef0123456789abcdef".to_owned())
        );
        let group = record.group(&events).unwrap();
        assert_eq!(
            (group.last_token, group.worker, group.floor_unix_ms),
            (7, 3, 1_700_000_005_000)
        );
        // What it records still protects the namespace: a store without it is refused.
        let err = CheckedAuthority::new(Arc::new(MemoryAuthority::new()), Arc::new(record))
            .ensure_namespace(&orders, SequenceSpec::default_64())
            .await
            .unwrap_err();
        assert!(err.is_lost(), "{err}");
        // The next open reads the new file, as written.
        let text = std::fs::read_to_string(&new).unwrap();
        assert!(text.starts_with("# idmint's node record"), "{text}");
        let again = NodeRecord::open(dir.path(), "memory".into()).unwrap();
        assert_eq!(again.watermark(&orders), Some(5001));
        assert!(!old.exists());
    }

    /// A migration that stopped after writing the new file (both files, the same record) is
    /// finished on open; two files with different records are refused, and both are kept.
    #[test]
    fn both_files_are_finished_when_equal_and_refused_when_not() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (
            dir.path().join(OLD_FILE_NAME),
            dir.path().join(NODE_RECORD_FILE),
        );
        std::fs::write(&old, OLD_RECORD).unwrap();
        drop(NodeRecord::open(dir.path(), "memory".into()).unwrap());
        std::fs::write(&old, OLD_RECORD).unwrap();
        let record = NodeRecord::open(dir.path(), "memory".into()).unwrap();
        assert!(!old.exists());
        assert_eq!(
            record.watermark(&NamespaceName::new("orders").unwrap()),
            Some(5001)
        );

        std::fs::write(&old, OLD_RECORD.replace("5001", "9001")).unwrap();
        let err = NodeRecord::open(dir.path(), "memory".into()).unwrap_err();
        assert!(
            matches!(&err, NodeRecordError::Corrupt { path, .. } if path == &old),
            "{err}"
        );
        assert!(old.exists() && new.exists());
    }

    /// An unreadable file under the old name is an error too, and is kept.
    #[test]
    fn an_unreadable_old_record_is_an_error_not_a_fresh_start() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join(OLD_FILE_NAME);
        std::fs::write(&old, "not = [toml").unwrap();
        let err = NodeRecord::open(dir.path(), "memory".into()).unwrap_err();
        assert!(matches!(err, NodeRecordError::Corrupt { .. }), "{err}");
        assert!(old.exists() && !dir.path().join(NODE_RECORD_FILE).exists());
    }

    /// Leases recorded at once (one node taking many shard ranges of one group): every write
    /// succeeds, and the file ends with what the last one recorded, readable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_writes_all_land_and_the_last_state_wins() {
        let dir = tempfile::tempdir().unwrap();
        let record = Arc::new(NodeRecord::open(dir.path(), "memory".into()).unwrap());
        for round in 0..20u64 {
            let writes: Vec<_> = (1..=16u64)
                .map(|worker| {
                    let record = record.clone();
                    let lease = WorkerLease {
                        group: NamespaceName::new("photos:shards").unwrap(),
                        worker,
                        token: round * 16 + worker,
                        floor_unix_ms: 1_700_000_000_000,
                        ttl: Duration::from_secs(10),
                        holder: "test".into(),
                    };
                    tokio::spawn(async move { record.record_lease(&lease).await })
                })
                .collect();
            for w in writes {
                w.await.unwrap().unwrap();
            }
            let reread = NodeRecord::open(dir.path(), "memory".into()).unwrap();
            let group = reread
                .group(&NamespaceName::new("photos:shards").unwrap())
                .unwrap();
            assert_eq!(group.last_token, round * 16 + 16, "round {round}");
        }
    }
}
