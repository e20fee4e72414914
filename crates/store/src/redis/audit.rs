//! The audit ledger of the Redis authority ([`AuditLog`] for [`RedisAuthority`]): one stream per
//! subject, appended by the very script that makes the grant.
//!
//! - `{p}:audit:<subject>` (stream): entry id `<seq>-0`, fields `at event a b holder`
//!   (`XRANGE {idmint}:audit:photos - +` is readable as it is). `seq` is an `INCR` of the
//!   store's counter `{p}:audit-seq`, so it increases in the order the scripts ran, within a
//!   subject and across subjects; `at` is the server's `TIME` in ms, so retention is measured
//!   by the store's clock.
//! - **Same write.** The entry is added by the script that writes the watermark (reserve, a
//!   returned give-back, an advance that moves it) or the acquisition, and Redis logs a script
//!   as one block: no grant without its entry, no entry without its grant. A refused give-back,
//!   an advance that changes nothing, a renewal and a release write none.
//! - `{p}:audit-checkpoint:<subject>` (hash, `seq at event a b holder`): a stream cannot take an
//!   entry back below its newest one, so pruning keeps the subject's checkpoint beside it:
//!   [`AuditLog::fold`] is one script that writes the checkpoint (the folded entry's seq, time
//!   and holder) and trims the stream up to that entry (`XTRIM MINID`). Every stream entry then
//!   has a larger seq than the checkpoint, which [`AuditLog::entries`] returns first.
//! - `{p}:audit-subjects` (set): every subject the scripts appended to.
//! - Readers validate what they read: an id that is not `<seq>-0`, a field missing or not a
//!   number, an unknown event, a subject that is no namespace name are
//!   [`StoreError::Corrupt`].
//! - Cost: one `INCR`, one `XADD` and one `SADD` inside the script a grant runs anyway, so no
//!   round trip; memory grows with the entries kept, so prune.

use super::record::{self, corrupt, unexpected};
use super::RedisAuthority;
use crate::audit::{AuditEntry, AuditEvent, AuditLog};
use crate::StoreError;
use async_trait::async_trait;
use idmint_core::NamespaceName;
use redis::Value;

/// An entry from its sequence number and its fields (`at event a b holder`, any order; a
/// checkpoint's hash also has `seq`, ignored here).
fn entry(
    subject: &NamespaceName,
    seq: u64,
    fields: &[(String, String)],
) -> Result<AuditEntry, StoreError> {
    let bad = |what: String| corrupt(format!("redis audit entry {seq} of {subject}: {what}"));
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| bad(format!("no field {name}")))
    };
    let num = |name: &str| {
        let raw = get(name)?;
        record::number(raw).ok_or_else(|| bad(format!("{name} {raw:?} is not a number")))
    };
    let name = get("event")?;
    let event = AuditEvent::from_parts(name, num("a")?, num("b")?)
        .ok_or_else(|| bad(format!("unknown event {name:?}")))?;
    Ok(AuditEntry {
        seq,
        at_unix_ms: num("at")?,
        subject: subject.clone(),
        event,
        holder: get("holder")?.to_owned(),
    })
}

/// The sequence number of stream entry id `<seq>-0`.
fn stream_seq(id: &str) -> Option<u64> {
    id.strip_suffix("-0").and_then(record::number)
}

#[async_trait]
impl AuditLog for RedisAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(self.keys.audit_subjects());
        let names: Vec<String> = self.conn.query("listing audit subjects", &cmd).await?;
        let mut subjects = names
            .iter()
            .map(|n| {
                NamespaceName::new(n)
                    .map_err(|e| corrupt(format!("the audit subjects set names {n:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        subjects.sort();
        Ok(subjects)
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
        let what = format!("reading the audit ledger of {subject}");
        let mut call = self.scripts.entries.prepare_invoke();
        call.key(self.keys.checkpoint(subject))
            .key(self.keys.audit(subject))
            .arg(after.map_or_else(String::new, |a| a.to_string()))
            .arg(limit.to_string());
        let reply: Value = self.conn.script(&what, &call).await?;
        let parts = record::items(&reply).ok_or_else(|| unexpected(&what, &reply))?;
        let (Some(checkpoint), Some(stream)) = (
            parts.first().and_then(record::pairs),
            parts.get(1).and_then(record::items),
        ) else {
            return Err(unexpected(&what, &reply));
        };
        let mut out = Vec::with_capacity(limit);
        if !checkpoint.is_empty() {
            let raw = checkpoint
                .iter()
                .find(|(k, _)| k == "seq")
                .map(|(_, v)| v.as_str())
                .unwrap_or("");
            let seq = record::number(raw).ok_or_else(|| {
                corrupt(format!(
                    "redis audit checkpoint of {subject}: seq {raw:?} is not a number"
                ))
            })?;
            if after.is_none_or(|a| seq > a) {
                out.push(entry(subject, seq, &checkpoint)?);
            }
        }
        for item in stream {
            let bad = || corrupt(format!("redis audit stream of {subject}: entry {item:?}"));
            let [id, fields] = record::items(item).ok_or_else(bad)? else {
                return Err(bad());
            };
            let seq = record::text(id)
                .as_deref()
                .and_then(stream_seq)
                .ok_or_else(bad)?;
            let fields = record::pairs(fields).ok_or_else(bad)?;
            out.push(entry(subject, seq, &fields)?);
        }
        out.truncate(limit);
        Ok(out)
    }

    async fn now_unix_ms(&self) -> Result<u64, StoreError> {
        let (secs, micros): (u64, u64) = self
            .conn
            .query("reading the server's clock", &redis::cmd("TIME"))
            .await?;
        Ok(secs.saturating_mul(1000).saturating_add(micros / 1000))
    }

    async fn fold(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
    ) -> Result<u64, StoreError> {
        let what = format!("pruning the audit ledger of {subject}");
        let (a, b) = checkpoint.numbers();
        let mut call = self.scripts.fold.prepare_invoke();
        call.key(self.keys.checkpoint(subject))
            .key(self.keys.audit(subject))
            .arg(through.to_string())
            .arg(checkpoint.name())
            .arg(a.to_string())
            .arg(b.to_string());
        let reply: Value = self.conn.script(&what, &call).await?;
        let removed = record::int(&reply).ok_or_else(|| unexpected(&what, &reply))?;
        self.replicated(&what).await?;
        u64::try_from(removed).map_err(|_| unexpected(&what, &reply))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn entries_decode_and_damage_is_corrupt() {
        let subject = NamespaceName::new("photos").unwrap();
        let fields = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let good = fields(&[
            ("at", "1700000005000"),
            ("event", "granted"),
            ("a", "1"),
            ("b", "11"),
            ("holder", "web-1 pid 7"),
        ]);
        let e = entry(&subject, 4, &good).unwrap();
        assert_eq!(e.event, AuditEvent::Granted { start: 1, end: 11 });
        assert_eq!(
            (e.seq, e.at_unix_ms, e.holder.as_str()),
            (4, 1_700_000_005_000, "web-1 pid 7")
        );
        let bad = fields(&[
            ("at", "x"),
            ("event", "granted"),
            ("a", "1"),
            ("b", "2"),
            ("holder", "h"),
        ]);
        assert!(entry(&subject, 4, &bad).is_err());
        let bad = fields(&[
            ("at", "1"),
            ("event", "stolen"),
            ("a", "1"),
            ("b", "2"),
            ("holder", "h"),
        ]);
        assert!(entry(&subject, 4, &bad).is_err());
        assert_eq!(stream_seq("12-0"), Some(12));
        for id in ["12-1", "012-0", "12", "x-0"] {
            assert_eq!(stream_seq(id), None, "{id}");
        }
    }
}
