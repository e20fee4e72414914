//! The audit ledger of the file authority ([`AuditLog`] for [`FileAuthority`]).
//!
//! [`AuditLog`] keeps `idmint.audit.v1`, keyed by `(subject, seq)`, whose values are
//! [`crate::audit::encode_record`]'s line, and `idmint.audit_seq.v1`, one key `""` holding the
//! last sequence number given (so numbers never repeat, even after every entry was pruned).
//! An entry is inserted in the write transaction of the watermark change or lease acquisition
//! it records, so redb's one-writer-at-a-time order is the entries' order.

use super::record::{AUDIT, AUDIT_SEQ};
use super::{begin_durable, redb_error, FileAuthority};
use crate::audit::{self, AuditEntry, AuditEvent, AuditLog};
use crate::StoreError;
use async_trait::async_trait;
use idmint_core::NamespaceName;
use redb::{ReadableDatabase, ReadableTable, WriteTransaction};

/// Appends an entry for `subject` inside `txn`, numbered from the one counter.
pub(super) fn append_entry(
    txn: &WriteTransaction,
    subject: &str,
    event: &AuditEvent,
) -> Result<(), StoreError> {
    append_entry_by(txn, subject, event, audit::holder())
}

/// [`append_entry`], granted to `holder`.
pub(super) fn append_entry_by(
    txn: &WriteTransaction,
    subject: &str,
    event: &AuditEvent,
    holder: &str,
) -> Result<(), StoreError> {
    let mut counter = txn.open_table(AUDIT_SEQ).map_err(redb_error)?;
    let last = counter
        .get("")
        .map_err(redb_error)?
        .map_or(0, |v| v.value());
    let seq = last + 1;
    counter.insert("", seq).map_err(redb_error)?;
    let mut table = txn.open_table(AUDIT).map_err(redb_error)?;
    let record = audit::encode_record(audit::now_unix_ms(), event, holder);
    table
        .insert((subject, seq), record.as_bytes())
        .map_err(redb_error)?;
    Ok(())
}

/// Whether the ledger, as `txn` sees it, holds a trace of lease group `group`
/// ([`crate::lease::is_group_trace`]).
pub(super) fn shows_group(txn: &WriteTransaction, group: &str) -> Result<bool, StoreError> {
    let table = txn.open_table(AUDIT).map_err(redb_error)?;
    for item in table
        .range((group, 0)..=(group, u64::MAX))
        .map_err(redb_error)?
    {
        let (key, value) = item.map_err(redb_error)?;
        let seq = key.value().1;
        let subject = NamespaceName::new(group).map_err(|e| StoreError::Corrupt {
            message: format!("audit ledger subject {group:?} is not a name: {e}"),
        })?;
        let entry = audit::decode_record(subject, seq, value.value()).map_err(|message| {
            StoreError::Corrupt {
                message: format!("audit ledger entry ({group}, {seq}): {message}"),
            }
        })?;
        if crate::lease::is_group_trace(&entry.event) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[async_trait]
#[async_trait]
impl AuditLog for FileAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(redb_error)?;
            let table = match txn.open_table(AUDIT) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(redb_error(e)),
            };
            let mut subjects: Vec<NamespaceName> = Vec::new();
            // Keys are sorted by subject: jump past each subject's entries.
            let mut from = String::new();
            loop {
                let next = table
                    .range((from.as_str(), 0)..)
                    .map_err(redb_error)?
                    .next()
                    .transpose()
                    .map_err(redb_error)?;
                let Some((key, _)) = next else { break };
                let subject = key.value().0.to_string();
                let name = NamespaceName::new(&subject).map_err(|e| StoreError::Corrupt {
                    message: format!("audit ledger subject {subject:?} is not a name: {e}"),
                })?;
                subjects.push(name);
                from = format!("{subject}\0");
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
        let subject = subject.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(redb_error)?;
            let table = match txn.open_table(AUDIT) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(redb_error(e)),
            };
            let start = after.map_or(0, |a| a.saturating_add(1));
            let mut out = Vec::new();
            for item in table
                .range((subject.as_str(), start)..=(subject.as_str(), u64::MAX))
                .map_err(redb_error)?
            {
                if out.len() >= limit {
                    break;
                }
                let (key, value) = item.map_err(redb_error)?;
                let seq = key.value().1;
                let entry = audit::decode_record(subject.clone(), seq, value.value()).map_err(
                    |message| StoreError::Corrupt {
                        message: format!("audit ledger entry ({subject}, {seq}): {message}"),
                    },
                )?;
                out.push(entry);
            }
            Ok(out)
        })
        .await
    }

    /// The process clock stamps the entries (one process holds the file): it is this
    /// store's clock.
    async fn now_unix_ms(&self) -> Result<u64, StoreError> {
        Ok(audit::now_unix_ms())
    }

    async fn fold(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
    ) -> Result<u64, StoreError> {
        let subject = subject.clone();
        self.blocking(move |db| {
            let txn = begin_durable(db)?;
            let removed = {
                let mut table = txn.open_table(AUDIT).map_err(redb_error)?;
                let key = (subject.as_str(), through);
                let kept = match table.get(key).map_err(redb_error)? {
                    Some(value) => audit::decode_record(subject.clone(), through, value.value())
                        .map_err(|message| StoreError::Corrupt {
                            message: format!(
                                "audit ledger entry ({subject}, {through}): {message}"
                            ),
                        })?,
                    None => return Ok(0),
                };
                let record = audit::encode_record(kept.at_unix_ms, &checkpoint, &kept.holder);
                table.insert(key, record.as_bytes()).map_err(redb_error)?;
                let old: Vec<u64> = table
                    .range((subject.as_str(), 0)..(subject.as_str(), through))
                    .map_err(redb_error)?
                    .map(|item| item.map(|(k, _)| k.value().1))
                    .collect::<Result<_, _>>()
                    .map_err(redb_error)?;
                for seq in &old {
                    table.remove((subject.as_str(), *seq)).map_err(redb_error)?;
                }
                old.len() as u64
            };
            txn.commit().map_err(redb_error)?;
            Ok(removed)
        })
        .await
    }
}
