//! The audit ledger of the etcd authority ([`AuditLog`] for [`EtcdAuthority`]).
//!
//! One key per entry, `<prefix>audit/<subject>/<20 digits>` (subject: the namespace, or the
//! lease group of a worker-lease acquisition), whose value is [`audit::encode_record`]'s line
//! `v1 <at_unix_ms> <event> <a> <b> <holder>`:
//!
//! ```text
//! /idmint/audit/photos/00000000000000000412   v1 1700000005000 granted 1001 2001 web-1 pid 7
//! ```
//!
//! - **Same write.** The entry is put by the very `Txn` that writes the watermark (`reserve`,
//!   a `give_back` that returns, an `advance` that moves it) or the lease group
//!   (`WorkerLeases::acquire`), in its `Then` branch: no grant without its entry, no entry
//!   without its grant, also when a reply is lost. A refused give-back, an `advance` that
//!   changes nothing, a renewal and a release write none.
//! - **seq** is the entry key's `create_revision`: the revision of that `Txn`, global to the
//!   cluster, so it increases in commit order within a subject (and across subjects, where it
//!   means nothing).
//! - **The name** is the revision the write is conditioned on, zero-padded to 20 digits: the
//!   namespace key's `mod_revision` compared by the CAS (the lease group key's, or for a new
//!   group the revision of the read the decision rests on). It is unique (each write of the
//!   key compares a newer revision), below the entry's own seq and at or above the seq of the
//!   subject's previous entry, so key order is seq order: [`AuditLog::entries`] is one range
//!   read from the key named `after` (plus, when that page cannot show there is none, a
//!   filtered read of the older keys for the one entry named below `after` with a seq above
//!   it).
//! - **Time** is the writing process's clock ([`audit::now_unix_ms`]): etcd offers none.
//!   Compacting etcd's history changes neither: a live key keeps its create revision.
//!   Pruning's "now" is the pruning process's clock, capped at 1 ms past the newest stamp in
//!   the ledger.
//! - `subjects`: range reads of the keys only, 500 at a time, skipping to the next subject
//!   after each page; `fold` (pruning): a `Txn` that turns the newest pruned entry into the
//!   checkpoint if its key still has its create revision, then `Txn`s of 64 deletes of the
//!   keys below it (etcd's `--max-txn-ops` is 128 by default).
//! - No schema: keys appear with the first write, so a store that holds namespaces but no
//!   audit keys starts its ledger with its next write.
//! - Readers validate what they read: a name that is not 20 digits or not below the key's
//!   create revision, a value [`audit::decode_record`] refuses, a subject that is no
//!   namespace name are [`StoreError::Corrupt`].
//! - Cost: none in round trips (one more `Put` in a `Txn` that was sent anyway); every entry
//!   is a key of etcd's keyspace for as long as it is kept, so size etcd's
//!   `--quota-backend-bytes` for the retention, and prune.

use super::request::{self, deleted_by};
use super::EtcdAuthority;
use crate::audit::{self, AuditEntry, AuditEvent, AuditLog};
use crate::StoreError;
use async_trait::async_trait;
use idmint_core::NamespaceName;
use idmint_proto::etcd::etcdserverpb::range_request::{SortOrder, SortTarget};
use idmint_proto::etcd::etcdserverpb::RangeRequest;
use idmint_proto::etcd::mvccpb::KeyValue;

/// How many audit keys one read of [`AuditLog::subjects`] or [`AuditLog::fold`] returns.
const AUDIT_PAGE: i64 = 500;
/// How many deletes one pruning `Txn` carries (etcd's `--max-txn-ops` is 128 by default).
const PRUNE_BATCH: usize = 64;

impl EtcdAuthority {
    /// `<prefix>audit/<subject>/`.
    fn audit_dir(&self, subject: &NamespaceName) -> String {
        format!("{}{}/", self.audit_prefix, subject.as_str())
    }

    /// The key of the entry whose write is conditioned on revision `after_revision`.
    pub(super) fn audit_key(&self, subject: &NamespaceName, after_revision: i64) -> String {
        format!("{}{:020}", self.audit_dir(subject), after_revision.max(0))
    }

    /// The keys `read` selects (a linearizable range read), sorted by key unless it asks
    /// otherwise.
    async fn range(&self, what: &str, read: RangeRequest) -> Result<Vec<KeyValue>, StoreError> {
        let response = self
            .call_idempotent(what, |client| client.range(read.clone()))
            .await?;
        Ok(response.kvs)
    }

    /// The subject and the name (after its directory) of an audit key.
    fn audit_parts<'k>(&self, key: &'k str) -> Result<(NamespaceName, &'k str), StoreError> {
        let corrupt = || StoreError::Corrupt {
            message: format!("etcd key {key:?} is not an audit entry"),
        };
        let (subject, entry) = key
            .strip_prefix(&self.audit_prefix)
            .and_then(|rest| rest.split_once('/'))
            .ok_or_else(corrupt)?;
        let subject = NamespaceName::new(subject).map_err(|_| corrupt())?;
        Ok((subject, entry))
    }

    /// An audit key and value read back, validated: the name is 20 digits, a revision below
    /// the key's create revision (its `seq`), and the value an [`audit::encode_record`] line.
    fn audit_entry(&self, kv: &KeyValue) -> Result<AuditEntry, StoreError> {
        let key = String::from_utf8_lossy(&kv.key);
        let (subject, name) = self.audit_parts(&key)?;
        let corrupt = |what: String| StoreError::Corrupt {
            message: format!("etcd audit entry {key:?}: {what}"),
        };
        let after = (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
            .then(|| name.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| corrupt("its name is not a 20-digit revision".to_owned()))?;
        let seq = u64::try_from(kv.create_revision)
            .ok()
            .filter(|&seq| seq > after)
            .ok_or_else(|| {
                corrupt(format!(
                    "created at revision {}, not after the one it is named after",
                    kv.create_revision
                ))
            })?;
        audit::decode_record(subject, seq, &kv.value).map_err(corrupt)
    }
}

/// What an audit key holds: the entry in [`audit::encode_record`]'s form, stamped with this
/// process's clock (etcd has none to offer).
pub(super) fn audit_value(event: &AuditEvent) -> String {
    audit_value_by(event, audit::holder())
}

/// [`audit_value`], granted to `holder` (a worker lease's).
pub(super) fn audit_value_by(event: &AuditEvent, holder: &str) -> String {
    audit::encode_record(audit::now_unix_ms(), event, holder)
}

/// The key just above every key that starts with `dir` (which ends in `/`): `dir` with the
/// `/` turned into `0`.
fn dir_end(dir: &str) -> String {
    let mut end = dir.strip_suffix('/').unwrap_or(dir).to_owned();
    end.push('0');
    end
}

#[async_trait]
impl AuditLog for EtcdAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        let end = dir_end(&self.audit_prefix);
        let mut start = self.audit_prefix.clone();
        let mut subjects = std::collections::BTreeSet::new();
        loop {
            let read = RangeRequest {
                limit: AUDIT_PAGE,
                keys_only: true,
                ..request::range(start, end.clone())
            };
            let page = self.range("listing audit subjects", read).await?;
            let mut last = None;
            for kv in &page {
                let key = String::from_utf8_lossy(&kv.key);
                let (subject, _) = self.audit_parts(&key)?;
                last = Some(subject.clone());
                subjects.insert(subject);
            }
            match last {
                // Skip the rest of the last subject's entries.
                Some(subject) if page.len() as i64 >= AUDIT_PAGE => {
                    start = dir_end(&self.audit_dir(&subject));
                }
                _ => return Ok(subjects.into_iter().collect()),
            }
        }
    }

    async fn entries(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // An entry is named after its predecessor's seq (the revision its write was
        // conditioned on) and its seq is above its name: so the entries after `after` are
        // those named `after` or above, plus at most one named below `after` if `after` is not
        // the seq of an entry (the one following the last entry at or below `after`).
        let what = format!("reading the audit ledger of {subject}");
        let dir = self.audit_dir(subject);
        let from = format!("{dir}{:020}", after.unwrap_or(0));
        let read = RangeRequest {
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
            ..request::range(from.clone(), dir_end(&dir))
        };
        let mut page = self.range(&what, read).await?;
        let named_after = |kv: &KeyValue| kv.key.ends_with(&from.as_bytes()[dir.len()..]);
        if let Some(after) = after.filter(|_| !page.first().is_some_and(named_after)) {
            // `after` is no entry's seq, or the last one's: look for the one entry named below
            // it with a seq above it. etcd filters by create revision after reading the
            // whole range, so this costs a read of the subject's older keys; it happens only
            // after a full page that ended the ledger, or with an `after` no entry has.
            let min = i64::try_from(after.saturating_add(1)).unwrap_or(i64::MAX);
            let read = RangeRequest {
                min_create_revision: min,
                ..request::range(dir.clone(), from.clone())
            };
            let mut before = self.range(&what, read).await?;
            before.append(&mut page);
            page = before;
        }
        let mut entries = Vec::with_capacity(page.len());
        for kv in &page {
            let entry = self.audit_entry(kv)?;
            if &entry.subject != subject {
                return Err(StoreError::Corrupt {
                    message: format!(
                        "etcd audit entry {:?} is not of {subject}",
                        String::from_utf8_lossy(&kv.key)
                    ),
                });
            }
            if after.is_none_or(|a| entry.seq > a) {
                entries.push(entry);
            }
        }
        // Key order is seq order by construction; sort anyway rather than depend on it.
        entries.sort_by_key(|e| e.seq);
        entries.truncate(limit);
        Ok(entries)
    }

    /// etcd has no clock to offer, and entries carry their writers' clocks: "now" is this
    /// process's clock, but at most 1 ms past the newest stamp the ledger holds (its latest
    /// write), so a pruner whose clock runs ahead of the writers prunes no earlier than they
    /// would.
    /// One read per subject (its last key).
    async fn now_unix_ms(&self) -> Result<u64, StoreError> {
        let mut newest: Option<u64> = None;
        for subject in self.subjects().await? {
            let dir = self.audit_dir(&subject);
            let read = RangeRequest {
                sort_target: SortTarget::Key.into(),
                sort_order: SortOrder::Descend.into(),
                limit: 1,
                ..request::range(dir.clone(), dir_end(&dir))
            };
            let last = self.range("reading the audit ledger", read).await?;
            for kv in &last {
                let at = self.audit_entry(kv)?.at_unix_ms;
                newest = Some(newest.map_or(at, |n| n.max(at)));
            }
        }
        let own = audit::now_unix_ms();
        Ok(newest.map_or(own, |n| n.saturating_add(1).min(own)))
    }

    /// A `Txn` that puts the checkpoint on entry `through`'s key if that key still holds it
    /// (its create revision, which a put keeps), then `Txn`s of deletes of the keys below it
    /// (key order is seq order).
    async fn fold(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
    ) -> Result<u64, StoreError> {
        let dir = self.audit_dir(subject);
        let Ok(revision) = i64::try_from(through) else {
            return Ok(0);
        };
        let read = RangeRequest {
            min_create_revision: revision,
            max_create_revision: revision,
            ..request::range(dir.clone(), dir_end(&dir))
        };
        let found = self.range("reading the audit ledger", read).await?;
        let Some(kv) = found.first() else {
            return Ok(0);
        };
        let kept = self.audit_entry(kv)?;
        let key = kv.key.clone();
        let value = audit::encode_record(kept.at_unix_ms, &checkpoint, &kept.holder);
        let txn = request::txn(
            [request::create_revision_is(key.clone(), revision)],
            [request::put(key.clone(), value, 0)],
            [],
        );
        if !self
            .call("pruning the audit ledger", self.client.txn(txn))
            .await?
            .succeeded
        {
            return Ok(0);
        }
        let end = String::from_utf8(key).map_err(|_| StoreError::Corrupt {
            message: "an etcd audit key is not UTF-8".to_owned(),
        })?;
        let mut removed = 0u64;
        loop {
            let read = RangeRequest {
                limit: AUDIT_PAGE,
                keys_only: true,
                ..request::range(dir.clone(), end.clone())
            };
            let page = self.range("reading the audit ledger", read).await?;
            for batch in page.chunks(PRUNE_BATCH) {
                let deletes: Vec<_> = batch
                    .iter()
                    .map(|kv| request::delete_op(kv.key.clone()))
                    .collect();
                let txn = request::txn([], deletes, []);
                let response = self
                    .call("pruning the audit ledger", self.client.txn(txn))
                    .await?;
                for op in &response.responses {
                    removed += u64::try_from(deleted_by(op)).unwrap_or(0);
                }
            }
            if (page.len() as i64) < AUDIT_PAGE {
                return Ok(removed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn audit_keys_sort_in_seq_order_and_dirs_end_below_their_neighbours() {
        assert_eq!(dir_end("/idmint/audit/"), "/idmint/audit0");
        assert_eq!(dir_end("/idmint/audit/a/"), "/idmint/audit/a0");
        // Every key of subject `a` sorts below the end of its directory, every key of a
        // subject whose name continues `a` (`a0`, `a:b`; `a.b` and `a-b` sort before) above.
        let end = dir_end("/idmint/audit/a/");
        assert!(format!("/idmint/audit/a/{:020}", i64::MAX).as_str() < end.as_str());
        assert!("/idmint/audit/a/zzz" < end.as_str());
        assert!("/idmint/audit/a0/00000000000000000001" >= end.as_str());
        assert!("/idmint/audit/a:b/00000000000000000001" > end.as_str());
        let (k1, k2) = (format!("{:020}", 99), format!("{:020}", 100));
        assert!(k1 < k2, "zero-padded names sort numerically");
    }
}
