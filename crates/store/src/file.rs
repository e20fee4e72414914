//! The file authority: an embedded [redb](https://www.redb.org) database, `idmint.redb` in the
//! data directory. The default backend.
//!
//! Invariants:
//! - every `ensure_namespace`, `reserve` and `give_back` is one redb write transaction (redb
//!   runs one at a time, so the read-modify-write of a watermark is atomic) committed with
//!   [`redb::Durability::Immediate`] (fsync) before the call returns;
//! - the database file's directory entry is durable before the first operation: after
//!   creating (or opening) the file, [`FileAuthority::open`] fsyncs the data directory, and its
//!   parent when it created the directory (on Unix; a file fsynced into a directory whose entry
//!   was not would vanish in a power loss, taking its watermarks with it: invariant 1);
//! - one process per data directory: redb locks the whole file at open, and a second open, from
//!   another process or from this one, is [`StoreError::Locked`] without touching the file;
//! - every record read is validated; a record this version did not write is
//!   [`StoreError::Corrupt`], never a panic.
//!
//! redb is blocking: each operation runs on tokio's blocking pool (`spawn_blocking`), so callers
//! see plain async methods. [`FileAuthority::open`] itself blocks (it opens, checks and may
//! repair the file): call it at startup, or inside `spawn_blocking`.
//!
//! ## On-disk format (version 1)
//!
//! One redb table, `idmint.namespaces.v1`, keyed by the namespace name (`&str`, so redb keeps
//! it sorted by name), whose values are 34 bytes:
//!
//! | bytes  | field                                        |
//! |--------|----------------------------------------------|
//! | 0      | record format version, `1`                   |
//! | 1      | width in bits, `32` or `64`                  |
//! | 2..10  | `first`, u64 big-endian                      |
//! | 10..18 | `step`, u64 big-endian                       |
//! | 18..26 | `offset`, u64 big-endian                     |
//! | 26..34 | watermark, u64 big-endian                    |
//!
//! A record is valid when its length and version match, the name is a valid
//! [`NamespaceName`], `SequenceSpec::new(width, first, step, offset)` accepts the spec, and
//! `first <= watermark <= max_id + 1`.

use crate::{ops, Authority, GiveBack, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use redb::{Database, DatabaseError, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The database file's name inside the data directory.
pub const FILE_NAME: &str = "idmint.redb";

const KIND: &str = "file";
const NAMESPACES: TableDefinition<&str, &[u8]> = TableDefinition::new("idmint.namespaces.v1");
const RECORD_VERSION: u8 = 1;
const RECORD_LEN: usize = 34;
/// The whole store is a few kilobytes per thousand namespaces; redb's default cache is 1 GiB.
const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// The file authority. Cheap to share behind an `Arc`; every operation is its own transaction.
pub struct FileAuthority {
    db: Arc<Database>,
    path: PathBuf,
}

impl fmt::Debug for FileAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileAuthority")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FileAuthority {
    /// Opens (creating if needed) the directory `dir` and the database `dir/idmint.redb`.
    ///
    /// Blocks. [`StoreError::Locked`] if another process, or another `FileAuthority` of this
    /// process, has it open; [`StoreError::Corrupt`] if the file is not a valid idmint store;
    /// [`StoreError::Unavailable`] on I/O errors.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let created_dir = !dir.exists();
        std::fs::create_dir_all(dir).map_err(|e| {
            unavailable(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
        })?;
        let path = dir.join(FILE_NAME);
        // redb may panic (rather than return an error) on some malformed files in debug builds;
        // a damaged file must never take the process down, so contain it here.
        let opened = catch_unwind(AssertUnwindSafe(|| {
            redb::Builder::new()
                .set_cache_size(CACHE_BYTES)
                // Verify every page's checksum at open: a damaged file fails here, clearly,
                // instead of being trusted. The store is small, so this is cheap.
                .set_check_integrity_on_open(true)
                .create(&path)
        }));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch)) => {
                return Err(StoreError::Locked { path });
            }
            Ok(Err(e)) => return Err(with_path(redb_error(e), &path)),
            Err(_) => {
                return Err(StoreError::Corrupt {
                    message: format!("{}: the database file cannot be read", path.display()),
                })
            }
        };
        // Create the table up front so that readers never meet a missing table.
        let txn = db.begin_write().map_err(redb_error)?;
        txn.open_table(NAMESPACES).map_err(redb_error)?;
        txn.commit().map_err(redb_error)?;
        // The file's own fsyncs do not make its name durable: the directory's entry is.
        sync_dir(dir)?;
        if created_dir {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        Ok(FileAuthority {
            db: Arc::new(db),
            path,
        })
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `op` on the blocking pool. A panic inside it (redb on a damaged file) becomes an
    /// error, not a crash.
    async fn blocking<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    {
        let db = self.db.clone();
        match tokio::task::spawn_blocking(move || op(&db)).await {
            Ok(result) => result,
            Err(e) => Err(unavailable(format!("file store operation failed: {e}"))),
        }
    }

    /// One write transaction on `name`'s record: `op` gets the current state and returns the
    /// state to write (if any) and the result. Commits with fsync before returning.
    async fn update<T, F>(&self, name: &NamespaceName, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Option<NamespaceState>) -> Result<(Option<NamespaceState>, T), StoreError>
            + Send
            + 'static,
    {
        let name = name.clone();
        self.blocking(move |db| {
            let mut txn = db.begin_write().map_err(redb_error)?;
            txn.set_durability(Durability::Immediate)
                .map_err(redb_error)?;
            let out = {
                let mut table = txn.open_table(NAMESPACES).map_err(redb_error)?;
                let current = match table.get(name.as_str()).map_err(redb_error)? {
                    Some(value) => Some(decode(name.as_str(), value.value())?),
                    None => None,
                };
                let (write, out) = op(current)?;
                if let Some(state) = write {
                    table
                        .insert(name.as_str(), encode(&state).as_slice())
                        .map_err(redb_error)?;
                }
                out
            };
            // Dropping an uncommitted transaction (the `?`s above) aborts it: nothing changes.
            txn.commit().map_err(redb_error)?;
            Ok(out)
        })
        .await
    }
}

#[async_trait]
impl Authority for FileAuthority {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let key = name.clone();
        self.update(name, move |current| {
            match ops::ensure(&key, current.as_ref(), spec)? {
                Some(created) => Ok((Some(created.clone()), created)),
                None => match current {
                    Some(state) => Ok((None, state)),
                    None => Err(StoreError::UnknownNamespace { name: key }),
                },
            }
        })
        .await
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        let key = name.clone();
        self.update(name, move |current| {
            let mut state = current.ok_or(StoreError::UnknownNamespace { name: key })?;
            let block = ops::reserve(&state, count)?;
            state.watermark = block.end();
            Ok((
                Some(state),
                Reservation {
                    block,
                    watermark: block.end(),
                },
            ))
        })
        .await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        let name = name.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(redb_error)?;
            let table = txn.open_table(NAMESPACES).map_err(redb_error)?;
            match table.get(name.as_str()).map_err(redb_error)? {
                Some(value) => decode(name.as_str(), value.value()).map(Some),
                None => Ok(None),
            }
        })
        .await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(redb_error)?;
            let table = txn.open_table(NAMESPACES).map_err(redb_error)?;
            let mut all = Vec::new();
            for entry in table.iter().map_err(redb_error)? {
                let (key, value) = entry.map_err(redb_error)?;
                all.push(decode(key.value(), value.value())?);
            }
            // redb iterates in key order already; sorting again costs nothing and does not
            // depend on how redb orders strings.
            all.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(all)
        })
        .await
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let key = name.clone();
        self.update(name, move |current| {
            let mut state = current.ok_or(StoreError::UnknownNamespace { name: key })?;
            match ops::give_back(&state, tail)? {
                Ok(watermark) => {
                    state.watermark = watermark;
                    Ok((Some(state), GiveBack::Returned))
                }
                Err(refused) => Ok((None, refused)),
            }
        })
        .await
    }
}

/// Makes the entries of directory `dir` durable (fsync of the directory). Unix only: elsewhere
/// a directory cannot be opened for it, and the file system journals its entries itself.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| unavailable(format!("cannot fsync directory {}: {e}", dir.display())))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn unavailable(message: String) -> StoreError {
    StoreError::Unavailable {
        backend: KIND,
        message,
    }
}

/// Maps redb's errors: damaged or foreign data is `Corrupt`, everything else (I/O, a poisoned database
/// after an earlier failure) is `Unavailable`.
fn redb_error(e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Corrupted(message) => StoreError::Corrupt { message },
        // redb reports a file that is not a redb database (wrong magic number) this way.
        redb::Error::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => StoreError::Corrupt {
            message: e.to_string(),
        },
        redb::Error::TableTypeMismatch { table, .. } => StoreError::Corrupt {
            message: format!("table {table} does not hold idmint namespace records"),
        },
        other => unavailable(other.to_string()),
    }
}

fn with_path(e: StoreError, path: &Path) -> StoreError {
    match e {
        StoreError::Corrupt { message } => StoreError::Corrupt {
            message: format!("{}: {message}", path.display()),
        },
        StoreError::Unavailable { backend, message } => StoreError::Unavailable {
            backend,
            message: format!("{}: {message}", path.display()),
        },
        other => other,
    }
}

fn encode(state: &NamespaceState) -> [u8; RECORD_LEN] {
    let spec = &state.spec;
    let mut out = [0u8; RECORD_LEN];
    out[0] = RECORD_VERSION;
    // Width::bits() is 32 or 64: it fits a byte.
    out[1] = if spec.width() == Width::Bits32 {
        32
    } else {
        64
    };
    out[2..10].copy_from_slice(&spec.first().to_be_bytes());
    out[10..18].copy_from_slice(&spec.step().to_be_bytes());
    out[18..26].copy_from_slice(&spec.offset().to_be_bytes());
    out[26..34].copy_from_slice(&state.watermark.to_be_bytes());
    out
}

fn decode(key: &str, bytes: &[u8]) -> Result<NamespaceState, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("namespace {key:?}: {what}"),
    };
    let name = NamespaceName::new(key).map_err(|e| corrupt(format!("invalid name: {e}")))?;
    let bytes: &[u8; RECORD_LEN] = bytes.try_into().map_err(|_| {
        corrupt(format!(
            "record is {} bytes long, expected {RECORD_LEN}",
            bytes.len()
        ))
    })?;
    if bytes[0] != RECORD_VERSION {
        return Err(corrupt(format!(
            "record format version {} is not {RECORD_VERSION} (written by another idmint version?)",
            bytes[0]
        )));
    }
    let width = Width::from_bits(u32::from(bytes[1]))
        .ok_or_else(|| corrupt(format!("width {} is neither 32 nor 64", bytes[1])))?;
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[i..i + 8]);
        u64::from_be_bytes(b)
    };
    let (first, step, offset, watermark) = (u64_at(2), u64_at(10), u64_at(18), u64_at(26));
    ops::stored_state(name, width, first, step, offset, watermark).map_err(corrupt)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn state(name: &str, spec: SequenceSpec, watermark: u64) -> NamespaceState {
        NamespaceState {
            name: NamespaceName::new(name).unwrap(),
            spec,
            watermark,
        }
    }

    #[test]
    fn records_round_trip() {
        let specs = [
            SequenceSpec::default_64(),
            SequenceSpec::new(Width::Bits32, 5, 2, 1).unwrap(),
            SequenceSpec::new(Width::Bits64, u64::MAX >> 2, 1000, 999).unwrap(),
        ];
        for spec in specs {
            for watermark in [spec.first(), spec.first() + 17, spec.width().max_id() + 1] {
                let s = state("photos", spec, watermark);
                assert_eq!(decode("photos", &encode(&s)).unwrap(), s);
            }
        }
    }

    #[test]
    fn damaged_records_are_corrupt_not_panics() {
        let good = encode(&state(
            "n",
            SequenceSpec::new(Width::Bits32, 10, 4, 2).unwrap(),
            10,
        ));
        let mut cases: Vec<Vec<u8>> =
            vec![Vec::new(), good[..33].to_vec(), [&good[..], &[0]].concat()];
        let mut bad = |i: usize, v: u8| {
            let mut b = good.to_vec();
            b[i] = v;
            cases.push(b);
        };
        bad(0, 2); // version
        bad(1, 16); // width
        bad(17, 0); // step 0
        bad(25, 9); // offset >= step
        bad(33, 9); // watermark below first
        bad(26, 0xff); // watermark far above the 32-bit ceiling
        for case in &cases {
            assert!(
                matches!(decode("n", case), Err(StoreError::Corrupt { .. })),
                "{case:?}"
            );
        }
        assert!(matches!(
            decode("-bad", &good),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), vec![0x5a; 8192]).unwrap();
        let err = FileAuthority::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains(FILE_NAME), "{err}");
    }

    /// Issue 8, finding 7: the data directory (and its parent, when open creates it) is
    /// fsync'd after the database file is created. A power loss cannot be simulated here; this
    /// runs that path on a directory open has to create, and on one that cannot be synced.
    #[test]
    fn open_syncs_the_directories_it_creates() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a").join("b");
        let store = FileAuthority::open(&nested).unwrap();
        assert!(nested.join(FILE_NAME).exists());
        drop(store);
        FileAuthority::open(&nested).unwrap();
        #[cfg(unix)]
        {
            let missing = dir.path().join("gone");
            let err = sync_dir(&missing).unwrap_err();
            assert!(err.to_string().contains("cannot fsync directory"), "{err}");
        }
    }

    #[test]
    fn second_open_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let first = FileAuthority::open(dir.path()).unwrap();
        let err = FileAuthority::open(dir.path()).unwrap_err();
        assert_eq!(
            err,
            StoreError::Locked {
                path: dir.path().join(FILE_NAME)
            }
        );
        drop(first);
        FileAuthority::open(dir.path()).unwrap();
    }
}
