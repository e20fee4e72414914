//! The audit ledger of the ZooKeeper authority ([`AuditLog`] for [`ZookeeperAuthority`]).
//!
//! One persistent-sequential znode per entry under `<root>/audit/<subject>/` (subject: the
//! namespace, or the lease group of a worker-lease acquisition), named by ZooKeeper with the
//! parent's 10-digit sequence number, holding [`audit::encode_record`]'s line.
//!
//! - **Same write.** The entry is created by the very `multi` that writes the watermark
//!   (`setData` at the version read, then the create: `reserve`, a `give_back` that returns,
//!   an `advance` that moves it; a `park` or `claim`, with one entry per block, in the `multi`
//!   that writes the parks) or acquires a worker lease (the create, then the group,
//!   worker and live znodes), or re-establishes a lapsed lease in a renewal (the same token and
//!   holder, under a new session): no grant without its entry, no entry without its grant, also
//!   when a reply is lost. A refused give-back, an `advance` that changes nothing, a plain
//!   renewal and a release write none.
//! - **seq** is the sequence suffix: ZooKeeper numbers a parent's sequential children from its
//!   `cversion` when the transaction is applied, so seq increases in commit order within a
//!   subject. Pruning deletes entries but never the subject's directory, so the numbering
//!   continues after it. The counter is a 32-bit signed int: a subject takes at most
//!   2^31 - 1 child changes (an entry counts once when created and once when pruned), then
//!   ZooKeeper's names go negative and readers answer [`StoreError::Corrupt`].
//! - **Time** ([`AuditEntry::at_unix_ms`]) is the entry znode's `ctime`, stamped by the
//!   ZooKeeper leader's clock when the `multi` is applied; it is read back from the znode's
//!   `Stat` (the time field of the stored line is the writing process's clock, for people
//!   reading it with `zkCli.sh`, and is not what readers report). Pruning compares `ctime`
//!   with the server's clock: the `mtime` a `setData` of `<root>/audit` answers.
//! - **Directories on first use.** `<root>/audit` is created on connect; a subject's directory
//!   on its first write: a `multi` that fails on the entry's create with `NoNode` (nothing
//!   written) makes the directory and is sent again. A store without them (one that holds
//!   namespaces but no audit znodes) starts its ledger with its next write.
//! - **Reads.** `subjects`: `getChildren(<root>/audit)` and an `exists` per subject (pipelined),
//!   keeping those with a child. `entries`: `getChildren` of the subject, sorted and cut to the
//!   page in Rust, then a `getData` per entry of the page (pipelined). `fold` (pruning): a
//!   `getData` and a versioned `setData` of the entry that becomes the checkpoint, then
//!   `getChildren` and a `delete` per older entry (pipelined). Names that
//!   are not 10 digits, lines [`audit::decode_record`] refuses and subjects that are no
//!   namespace name are [`StoreError::Corrupt`].
//! - **Limit: `jute.maxbuffer`.** `getChildren` answers a subject's whole list of names in one
//!   reply, and every page of `entries` (and pruning) reads it again. Each name costs 14 bytes
//!   of the reply (10 digits and a 4-byte length), so a subject of more than about 74,000
//!   entries makes a reply above ZooKeeper's default `jute.maxbuffer` of 1 MiB (0xfffff
//!   bytes). ZooKeeper 3.8.0 sends it anyway and this module's client reads it (measured: a
//!   listing of 400,000 entries, 5.6 MB, answered in one reply), but Java clients (`zkCli.sh`,
//!   Curator, ZooInspector) refuse a reply above their own `jute.maxbuffer`, and each page
//!   then costs a listing of the whole subject. Keep subjects below that with retention
//!   ([`audit::prune`]), or raise `jute.maxbuffer` for the Java tools.
//! - Cost: none in round trips: a `multi` replaces the `setData` that was sent anyway (one
//!   more failed `multi` and two creates the first time a subject is written).

use super::session::{fail, failed, retry_backoff, retry_pause, timed, Deadline, Fail};
use super::{ZookeeperAuthority, PERSISTENT, SEQUENTIAL};
use crate::audit::{self, AuditEntry, AuditEvent, AuditLog};
use crate::StoreError;
use async_trait::async_trait;
use idmint_core::NamespaceName;
use std::future::Future;
use zookeeper_client::{Client, Error as ZkError};

impl ZookeeperAuthority {
    /// `<root>/audit/<subject>`: the parent of the subject's entries.
    fn audit_subject_dir(&self, subject: &NamespaceName) -> String {
        format!("{}/{}", self.audit_dir, subject.as_str())
    }

    /// Creates `<root>/audit` and `<root>/audit/<subject>` if absent (an entry's first write,
    /// or a store that holds namespaces but no audit znodes).
    pub(super) async fn ensure_audit_dir(
        &self,
        subject: &NamespaceName,
        deadline: Deadline,
    ) -> Result<(), StoreError> {
        let client = self.client(deadline).await?;
        for path in [self.audit_dir.clone(), self.audit_subject_dir(subject)] {
            let what = format!("creating {path}");
            match timed(deadline, &what, client.create(&path, b"", &PERSISTENT)).await? {
                Ok(_) | Err(ZkError::NodeExists) => {}
                // The root itself vanished (the ensemble was wiped): make the directories
                // again, so the next attempt reaches the checks that refuse an emptied store
                // instead of failing here forever.
                Err(ZkError::NoNode) => return self.ensure_dirs(deadline).await,
                Err(e) => return Err(failed(&what, &e)),
            }
        }
        Ok(())
    }

    /// Adds the creation of `subject`'s next audit entry (persistent sequential) to `multi`.
    pub(super) fn add_audit_entry(
        &self,
        multi: &mut zookeeper_client::MultiWriter<'_>,
        subject: &NamespaceName,
        event: &AuditEvent,
    ) -> Result<(), ZkError> {
        self.add_audit_entry_by(multi, subject, event, audit::holder())
    }

    /// [`Self::add_audit_entry`], granted to `holder` (a worker lease's).
    pub(super) fn add_audit_entry_by(
        &self,
        multi: &mut zookeeper_client::MultiWriter<'_>,
        subject: &NamespaceName,
        event: &AuditEvent,
        holder: &str,
    ) -> Result<(), ZkError> {
        let prefix = format!("{}/", self.audit_subject_dir(subject));
        let record = audit::encode_record(audit::now_unix_ms(), event, holder);
        multi.add_create(&prefix, record.as_bytes(), &SEQUENTIAL)
    }
}

impl ZookeeperAuthority {
    /// Runs a read of the ledger until it does not fail with a lost connection.
    async fn audit_read<T, F, Fut>(&self, attempt: F) -> Result<T, StoreError>
    where
        F: Fn(Deadline) -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        let deadline = self.deadline();
        let mut retries = retry_backoff();
        loop {
            match attempt(deadline).await {
                Err(Fail::Transient) => retry_pause(deadline, &mut retries).await,
                Err(Fail::Store(e)) => return Err(e),
                Ok(done) => return Ok(done),
            }
        }
    }

    /// Every directory under `<root>/audit` (subjects, also those with no entry left).
    async fn audit_dirs(&self, deadline: Deadline) -> Result<Vec<NamespaceName>, Fail> {
        let client = self.client(deadline).await?;
        let what = "listing audit subjects";
        let children = match timed(deadline, what, client.list_children(&self.audit_dir)).await? {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(fail(what, e)),
        };
        let mut subjects = Vec::with_capacity(children.len());
        for child in children {
            subjects.push(NamespaceName::new(&child).map_err(|e| StoreError::Corrupt {
                message: format!(
                    "znode {}/{child} is not an audit subject: {e}",
                    self.audit_dir
                ),
            })?);
        }
        subjects.sort();
        Ok(subjects)
    }

    /// The sequence numbers of `subject`'s entries, sorted (one `getChildren`).
    async fn audit_seqs(
        &self,
        client: &Client,
        subject: &NamespaceName,
        deadline: Deadline,
    ) -> Result<Vec<u64>, Fail> {
        let dir = self.audit_subject_dir(subject);
        let what = format!("listing the audit ledger of {subject}");
        let children = match timed(deadline, &what, client.list_children(&dir)).await? {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(fail(&what, e)),
        };
        let mut seqs = Vec::with_capacity(children.len());
        for child in children {
            seqs.push(entry_seq(&child).ok_or_else(|| StoreError::Corrupt {
                message: format!("znode {dir}/{child} is not an audit entry"),
            })?);
        }
        seqs.sort_unstable();
        Ok(seqs)
    }

    async fn entries_once(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
        deadline: Deadline,
    ) -> Result<Vec<AuditEntry>, Fail> {
        let client = self.client(deadline).await?;
        let seqs = self.audit_seqs(&client, subject, deadline).await?;
        let dir = self.audit_subject_dir(subject);
        let what = format!("reading the audit ledger of {subject}");
        // Sent at once, answered in order.
        let reads: Vec<_> = seqs
            .into_iter()
            .filter(|&seq| after.is_none_or(|a| seq > a))
            .take(limit)
            .map(|seq| {
                let path = format!("{dir}/{}", entry_name(seq));
                let read = client.get_data(&path);
                (seq, path, read)
            })
            .collect();
        let mut entries = Vec::with_capacity(reads.len());
        for (seq, path, read) in reads {
            let (data, stat) = match timed(deadline, &what, read).await? {
                Ok(found) => found,
                // Pruned since the listing.
                Err(ZkError::NoNode) => continue,
                Err(e) => return Err(fail(&what, e)),
            };
            let corrupt = |what: String| StoreError::Corrupt {
                message: format!("ZooKeeper audit entry {path}: {what}"),
            };
            let mut entry = audit::decode_record(subject.clone(), seq, &data).map_err(corrupt)?;
            // The time is the server's: when the znode was created.
            entry.at_unix_ms = created_ms(stat.ctime).map_err(corrupt)?;
            entries.push(entry);
        }
        Ok(entries)
    }

    /// The server's clock: a `setData` of `<root>/audit` (which holds nothing) answers its
    /// `mtime`, stamped by the leader as `ctime`s are.
    async fn now_once(&self, deadline: Deadline) -> Result<u64, Fail> {
        let client = self.client(deadline).await?;
        let what = "reading the server's clock";
        match timed(deadline, what, client.set_data(&self.audit_dir, b"", None)).await? {
            Ok(stat) => created_ms(stat.mtime).map_err(|e| {
                Fail::Store(StoreError::Corrupt {
                    message: format!("ZooKeeper {}: {e}", self.audit_dir),
                })
            }),
            Err(e) => Err(fail(what, e)),
        }
    }

    /// [`AuditLog::fold`] once: `setData` of entry `through` (at the version read), then a
    /// `delete` per older entry (pipelined).
    async fn fold_once(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
        deadline: Deadline,
    ) -> Result<u64, Fail> {
        let client = self.client(deadline).await?;
        let dir = self.audit_subject_dir(subject);
        let what = format!("pruning the audit ledger of {subject}");
        let path = format!("{dir}/{}", entry_name(through));
        let (data, stat) = match timed(deadline, &what, client.get_data(&path)).await? {
            Ok(found) => found,
            Err(ZkError::NoNode) => return Ok(0),
            Err(e) => return Err(fail(&what, e)),
        };
        let kept = audit::decode_record(subject.clone(), through, &data).map_err(|e| {
            Fail::Store(StoreError::Corrupt {
                message: format!("ZooKeeper audit entry {path}: {e}"),
            })
        })?;
        let record = audit::encode_record(kept.at_unix_ms, &checkpoint, &kept.holder);
        let set = client.set_data(&path, record.as_bytes(), Some(stat.version));
        match timed(deadline, &what, set).await? {
            Ok(_) => {}
            // Pruned or folded by another pruner meanwhile.
            Err(ZkError::NoNode | ZkError::BadVersion) => return Ok(0),
            Err(e) => return Err(fail(&what, e)),
        }
        let seqs = self.audit_seqs(&client, subject, deadline).await?;
        let deletes: Vec<_> = seqs
            .into_iter()
            .filter(|&seq| seq < through)
            .map(|seq| client.delete(&format!("{dir}/{}", entry_name(seq)), None))
            .collect();
        let mut removed = 0;
        for delete in deletes {
            match timed(deadline, &what, delete).await? {
                Ok(()) => removed += 1,
                // Removed by another pruner meanwhile.
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(fail(&what, e)),
            }
        }
        Ok(removed)
    }
}

#[async_trait]
#[async_trait]
impl AuditLog for ZookeeperAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        self.audit_read(|deadline| async move {
            let dirs = self.audit_dirs(deadline).await?;
            let client = self.client(deadline).await?;
            let what = "listing audit subjects";
            // Only those with an entry left; sent at once, answered in order.
            let stats: Vec<_> = dirs
                .into_iter()
                .map(|subject| {
                    let stat = client.check_stat(&self.audit_subject_dir(&subject));
                    (subject, stat)
                })
                .collect();
            let mut subjects = Vec::new();
            for (subject, stat) in stats {
                match timed(deadline, what, stat).await? {
                    Ok(Some(stat)) if stat.num_children > 0 => subjects.push(subject),
                    Ok(_) => {}
                    Err(e) => return Err(fail(what, e)),
                }
            }
            Ok(subjects)
        })
        .await
    }

    async fn entries(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.audit_read(|deadline| self.entries_once(subject, after, limit, deadline))
            .await
    }

    async fn now_unix_ms(&self) -> Result<u64, StoreError> {
        self.audit_read(|deadline| self.now_once(deadline)).await
    }

    /// The subject's directory stays: its child counter is the next entry's sequence number,
    /// which must keep growing.
    async fn fold(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
    ) -> Result<u64, StoreError> {
        self.audit_read(|deadline| self.fold_once(subject, through, checkpoint, deadline))
            .await
    }
}

/// The name ZooKeeper gives the sequential znode numbered `seq` (10 digits, zero-padded).
fn entry_name(seq: u64) -> String {
    format!("{seq:010}")
}

/// The sequence number of an entry's znode name (exactly 10 digits), `None` if it is none.
fn entry_seq(name: &str) -> Option<u64> {
    (name.len() == 10 && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

/// A znode's creation time (`Stat.ctime`, the server's clock) as unix ms.
fn created_ms(ctime: i64) -> Result<u64, String> {
    u64::try_from(ctime).map_err(|_| format!("creation time {ctime} is negative"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn audit_entry_names_are_ten_digits() {
        assert_eq!(entry_name(7), "0000000007");
        assert_eq!(entry_seq(&entry_name(7)), Some(7));
        assert_eq!(entry_seq("2147483647"), Some(2_147_483_647));
        for bad in [
            "",
            "7",
            "-000000001",
            "000000000x",
            "00000000007",
            "e000000007",
        ] {
            assert_eq!(entry_seq(bad), None, "{bad:?}");
        }
        assert_eq!(created_ms(1_700_000_000_000), Ok(1_700_000_000_000));
        assert!(created_ms(-1).is_err());
    }
}
