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
//! Files, one job each: `record` (the tables and the byte layout of every record, version 1),
//! `blocks` (the namespaces: one write transaction per change, and
//! [`Authority`](crate::Authority)), `leases` ([`WorkerLeases`](crate::lease::WorkerLeases):
//! records on disk, liveness in memory), `audit` ([`AuditLog`](crate::AuditLog): entries
//! written in the transaction they record).

mod audit;
mod blocks;
mod leases;
mod record;

use self::leases::Liveness;
use self::record::{LEASE_GROUPS, META, NAMESPACES, WORKER_LEASES};
use crate::StoreError;
use idmint_core::{Clock, SystemClock};
use redb::{Database, DatabaseError, Durability, WriteTransaction};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The database file's name inside the data directory.
pub const FILE_NAME: &str = "idmint.redb";

const KIND: &str = "file";

/// The whole store is a few kilobytes per thousand namespaces; redb's default cache is 1 GiB.
const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// The file authority. Cheap to share behind an `Arc`; every operation is its own transaction.
pub struct FileAuthority {
    db: Arc<Database>,
    path: PathBuf,
    leases: Arc<Liveness>,
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
    /// [`StoreError::Unavailable`] on I/O errors. Worker leases expire by the operating
    /// system's monotonic clock.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with_clock(dir, Arc::new(SystemClock::new()))
    }

    /// Like [`Self::open`], with worker leases expiring by `clock`'s monotonic time (tests step
    /// it with a `ManualClock` instead of sleeping).
    pub fn open_with_clock(dir: &Path, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
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
        // Create the tables up front so that readers never meet a missing table.
        let txn = db.begin_write().map_err(redb_error)?;
        txn.open_table(NAMESPACES).map_err(redb_error)?;
        txn.open_table(LEASE_GROUPS).map_err(redb_error)?;
        txn.open_table(WORKER_LEASES).map_err(redb_error)?;
        txn.open_table(META).map_err(redb_error)?;
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
            leases: Arc::new(Liveness::new(clock)),
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
}

/// A write transaction committed with fsync.
fn begin_durable(db: &Database) -> Result<WriteTransaction, StoreError> {
    let mut txn = db.begin_write().map_err(redb_error)?;
    txn.set_durability(Durability::Immediate)
        .map_err(redb_error)?;
    Ok(txn)
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

/// Maps redb's errors: damaged or foreign data is `Corrupt`, everything else (I/O, a poisoned
/// database after an earlier failure) is `Unavailable`.
fn redb_error(e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Corrupted(message) => StoreError::Corrupt { message },
        // redb reports a file that is not a redb database (wrong magic number) this way.
        redb::Error::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => StoreError::Corrupt {
            message: e.to_string(),
        },
        redb::Error::TableTypeMismatch { table, .. } => StoreError::Corrupt {
            message: format!("table {table} does not hold the records idmint writes there"),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_file_that_is_not_a_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), vec![0x5a; 8192]).unwrap();
        let err = FileAuthority::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains(FILE_NAME), "{err}");
    }

    /// The data directory (and its parent, when open creates it) is fsync'd after the
    /// database file is created, so the file's name survives a power loss. A power loss cannot be simulated here; this
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
