//! Worker leases of the Redis authority ([`WorkerLeases`] for [`RedisAuthority`]): per lease
//! group one hash holding the group record and every worker id's durable record, and per held
//! worker id a live key written with `SET … NX PX`, so expiry is the server's clock.
//!
//! - `{p}:lease:<group>` (hash, no TTL): `layout`, `last_token` (the fencing counter: every
//!   acquisition sets it to its token), and per worker id `w:<n>:token`, `w:<n>:holder`,
//!   `w:<n>:floor` (the time floor, kept forever). Numbers are decimal text.
//! - `{p}:live:<group>:<n>` (string, `PX` = the TTL): `<token> <holder>`. The worker id is
//!   leased exactly while this key exists; Redis deletes it when the TTL runs out by its own
//!   clock, whatever the nodes' clocks say.
//!
//! - `acquire`: one read script (the hash, and each worker's live key with its `PTTL`),
//!   [`plan_acquire`] in Rust, then one write script that checks the group's `last_token` and the
//!   chosen worker's record are as read and its live key is absent, then writes the live key
//!   (`SET NX PX`), the record, the group and the `leased` audit entry. Any change in between
//!   (another acquisition, a release, a renewal that brought back a lapsed lease) makes the
//!   script write nothing, and the acquisition decides again (at most
//!   [`ops::MAX_CONFLICTS`] times). Within one authority, acquisitions in one group run one at
//!   a time.
//! - `renew` and `release`: the worker's record read (`HMGET`), [`check_current`] in Rust
//!   (token **and** holder), then one script that writes only if the record is still as read:
//!   the floor (raised by a renewal, set by a release) and the live key (`SET PX` again, which
//!   also brings back a lease that lapsed while nobody acquired the worker id; `DEL` on
//!   release).
//! - `group`: the read script alone; it writes nothing.
//!
//! Lost replies: nothing is resent. An acquisition whose reply was lost holds its worker id
//! until the TTL runs out (its token is burned; the next one is larger). A renewal or release
//! that ran unseen is found by the next one as a changed record and decided again.
//!
//! The code knows nothing specific to worker ids beyond the group hash's fields: a lease with
//! a single holder per group (a leader lease) would be the group's worker 0 with the same
//! fencing counter, floor and live key.

use super::record::{self, corrupt, unexpected};
use super::{unavailable, RedisAuthority};
use crate::lease::{
    check_current, plan_acquire, GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases,
    WorkerSlot,
};
use crate::{ops, StoreError};
use async_trait::async_trait;
use idmint_core::NamespaceName;
use redis::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// A lease group as read by the read script.
#[derive(Debug, Default)]
struct GroupRead {
    record: Option<GroupRecord>,
    slots: Vec<WorkerSlot>,
}

/// A worker's record fields as stored: token, holder, floor (empty: no record).
type Stored = (String, String, String);

impl RedisAuthority {
    fn ttl_ms(ttl: Duration) -> u64 {
        u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
    }

    /// The group's hash and live keys, validated.
    async fn read_group(&self, group: &NamespaceName) -> Result<GroupRead, StoreError> {
        let what = format!("reading lease group {group}");
        let mut call = self.scripts.group.prepare_invoke();
        call.key(self.keys.lease_group(group))
            .arg(self.keys.live_prefix(group));
        let reply: Value = self.conn.script(&what, &call).await?;
        let parts = record::items(&reply).ok_or_else(|| unexpected(&what, &reply))?;
        let (Some(fields), Some(live)) = (
            parts.first().and_then(record::pairs),
            parts.get(1).and_then(record::items),
        ) else {
            return Err(unexpected(&what, &reply));
        };
        decode_group(group, &fields, live)
    }

    /// The stored record fields of one worker id.
    async fn read_worker(
        &self,
        group: &NamespaceName,
        worker: u64,
    ) -> Result<Option<(WorkerSlot, Stored)>, StoreError> {
        let w = format!("w:{worker}:");
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.keys.lease_group(group))
            .arg(format!("{w}token"))
            .arg(format!("{w}holder"))
            .arg(format!("{w}floor"));
        let what = format!("reading worker {worker} of lease group {group}");
        let fields: Vec<Option<String>> = self.conn.query(&what, &cmd).await?;
        match fields.as_slice() {
            [None, None, None] => Ok(None),
            [Some(token), Some(holder), Some(floor)] => {
                let slot = worker_slot(group, worker, token, holder, floor, None)?;
                Ok(Some((slot, (token.clone(), holder.clone(), floor.clone()))))
            }
            _ => Err(corrupt(format!(
                "redis record of worker {worker} of lease group {group} is incomplete: {fields:?}"
            ))),
        }
    }

    async fn acquire_once(
        &self,
        request: &LeaseRequest,
    ) -> Result<Option<WorkerLease>, LeaseError> {
        let group = &request.group;
        let read = self.read_group(group).await?;
        // The write script requires the group still absent (no `last_token`), so a group
        // deleted after this read is read again (and refused) on the retry.
        // A trace with the group now present is a concurrent first acquisition (its entry and
        // the group are one script): a conflict, decided again on a fresh read.
        if read.record.is_none() && crate::lease::ledger_shows_group(self, group).await? {
            if self.read_group(group).await?.record.is_some() {
                return Ok(None);
            }
            return Err(crate::lease::lost_group(group, "redis"));
        }
        let grant = plan_acquire(request, read.record.as_ref(), &read.slots)?;
        let expected_last = read
            .record
            .as_ref()
            .map_or_else(String::new, |r| r.last_token.to_string());
        let (token, holder, floor) = read
            .slots
            .iter()
            .find(|s| s.worker == grant.worker)
            .map_or_else(Stored::default, |s| {
                (
                    s.token.to_string(),
                    s.holder.clone(),
                    s.floor_unix_ms.to_string(),
                )
            });
        let what = format!("acquiring worker {} of lease group {group}", grant.worker);
        let mut call = self.scripts.acquire.prepare_invoke();
        call.key(self.keys.lease_group(group))
            .key(self.keys.live(group, grant.worker))
            .key(self.keys.audit_seq())
            .key(self.keys.audit(group))
            .key(self.keys.audit_subjects())
            .arg(expected_last)
            .arg(&grant.group.layout)
            .arg(grant.worker.to_string())
            .arg(token)
            .arg(holder)
            .arg(floor)
            .arg(grant.token.to_string())
            .arg(&request.holder)
            .arg(grant.floor_unix_ms.to_string())
            .arg(Self::ttl_ms(request.ttl).to_string())
            .arg(group.as_str());
        let reply: Value = self.conn.script(&what, &call).await?;
        match record::int(&reply) {
            Some(1) => {
                self.replicated(&what).await?;
                Ok(Some(WorkerLease {
                    group: group.clone(),
                    worker: grant.worker,
                    token: grant.token,
                    floor_unix_ms: grant.floor_unix_ms,
                    ttl: request.ttl,
                    holder: request.holder.clone(),
                }))
            }
            Some(0) => Ok(None),
            _ => Err(unexpected(&what, &reply).into()),
        }
    }

    /// A renewal (`Some(ttl)`: the live key written again) or a release (`None`: deleted) of
    /// `lease`, setting the floor to what `floor` computes from the stored one.
    async fn update_worker(
        &self,
        lease: &WorkerLease,
        renew: Option<Duration>,
        floor: impl Fn(u64) -> u64,
    ) -> Result<u64, LeaseError> {
        let group = &lease.group;
        let mut backoff = ops::conflict_backoff();
        loop {
            let stored = self.read_worker(group, lease.worker).await?;
            check_current(lease, stored.as_ref().map(|(slot, _)| slot))?;
            let Some((slot, (token, holder, old_floor))) = stored else {
                return Err(crate::lease::superseded(lease, None));
            };
            let new_floor = floor(slot.floor_unix_ms);
            let what = format!(
                "{} worker {} of lease group {group}",
                if renew.is_some() {
                    "renewing"
                } else {
                    "releasing"
                },
                lease.worker
            );
            let mut call = self.scripts.worker.prepare_invoke();
            call.key(self.keys.lease_group(group))
                .key(self.keys.live(group, lease.worker))
                .arg(lease.worker.to_string())
                .arg(token)
                .arg(holder)
                .arg(old_floor)
                .arg(new_floor.to_string())
                .arg(if renew.is_some() { "renew" } else { "release" })
                .arg(Self::ttl_ms(renew.unwrap_or_default()).to_string());
            let reply: Value = self.conn.script(&what, &call).await?;
            match record::int(&reply) {
                Some(1) => {
                    self.replicated(&what).await?;
                    return Ok(new_floor);
                }
                Some(0) => {
                    self.conflict();
                    match backoff.next() {
                        Some(pause) => tokio::time::sleep(pause).await,
                        None => {
                            return Err(unavailable(format!(
                                "{what}: gave up after {} conflicting writes",
                                ops::MAX_CONFLICTS
                            ))
                            .into())
                        }
                    }
                }
                _ => return Err(unexpected(&what, &reply).into()),
            }
        }
    }
}

impl RedisAuthority {
    /// Deletes lease group `group`'s keys (its hash and every worker's live key) and nothing
    /// else, as a mistaken operator would: the conformance suite's
    /// `a_deleted_group_is_never_created_again`.
    #[cfg(feature = "conformance")]
    #[doc(hidden)]
    pub async fn delete_lease_group_records(
        &self,
        group: &NamespaceName,
    ) -> Result<(), StoreError> {
        let read = self.read_group(group).await?;
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.keys.lease_group(group));
        for slot in &read.slots {
            cmd.arg(self.keys.live(group, slot.worker));
        }
        let _: i64 = self.conn.query("deleting a lease group", &cmd).await?;
        Ok(())
    }
}

#[async_trait]
impl WorkerLeases for RedisAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        let lock = self.group_lock(&request.group);
        let _serialized = lock.lock().await;
        let mut backoff = ops::conflict_backoff();
        loop {
            if let Some(lease) = self.acquire_once(request).await? {
                return Ok(lease);
            }
            self.conflict();
            match backoff.next() {
                Some(pause) => tokio::time::sleep(pause).await,
                None => {
                    return Err(unavailable(format!(
                        "lease group {}: gave up after {} conflicting acquisitions",
                        request.group,
                        ops::MAX_CONFLICTS
                    ))
                    .into())
                }
            }
        }
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let floor = self
            .update_worker(lease, Some(lease.ttl), |stored| {
                crate::lease::kept_floor(stored, floor_unix_ms)
            })
            .await?;
        Ok(WorkerLease {
            floor_unix_ms: floor,
            ..lease.clone()
        })
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        self.update_worker(lease, None, |stored| {
            crate::lease::kept_floor(stored, floor_unix_ms)
        })
        .await
        .map(drop)
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        let read = self.read_group(group).await?;
        Ok(read.record.map(|record| (record, read.slots)))
    }
}

/// One worker's record, validated (`expires_in` as given).
fn worker_slot(
    group: &NamespaceName,
    worker: u64,
    token: &str,
    holder: &str,
    floor: &str,
    expires_in: Option<Duration>,
) -> Result<WorkerSlot, StoreError> {
    let bad = |what: String| {
        corrupt(format!(
            "redis record of worker {worker} of lease group {group}: {what}"
        ))
    };
    let token = record::number(token)
        .filter(|&t| t > 0)
        .ok_or_else(|| bad(format!("token {token:?} is not a token")))?;
    let floor_unix_ms =
        record::number(floor).ok_or_else(|| bad(format!("floor {floor:?} is not a number")))?;
    Ok(WorkerSlot {
        worker,
        token,
        holder: holder.to_owned(),
        floor_unix_ms,
        expires_in,
    })
}

/// The group record and sorted slots from the group hash's `fields` and the live keys' `live`
/// triples (worker, `PTTL`, value).
fn decode_group(
    group: &NamespaceName,
    fields: &[(String, String)],
    live: &[Value],
) -> Result<GroupRead, StoreError> {
    let bad = |what: String| corrupt(format!("redis record of lease group {group}: {what}"));
    if fields.is_empty() {
        return Ok(GroupRead::default());
    }
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let layout = get("layout").ok_or_else(|| bad("no layout".into()))?;
    let last = get("last_token").unwrap_or("");
    let last_token =
        record::number(last).ok_or_else(|| bad(format!("last_token {last:?} is not a number")))?;
    let mut remaining: BTreeMap<u64, Option<Duration>> = BTreeMap::new();
    if !live.len().is_multiple_of(3) {
        return Err(bad("the read script answered an odd live list".into()));
    }
    for triple in live.chunks(3) {
        let worker = record::text(&triple[0])
            .as_deref()
            .and_then(record::number)
            .ok_or_else(|| bad(format!("worker {:?} is not a number", triple[0])))?;
        let pttl = record::int(&triple[1]).ok_or_else(|| bad("no PTTL".into()))?;
        let value = record::text(&triple[2]).unwrap_or_default();
        let w = format!("w:{worker}:");
        let token = get(&format!("{w}token")).unwrap_or("");
        let holder = get(&format!("{w}holder")).unwrap_or("");
        let left = match pttl {
            -2 => None,
            ms if ms > 0 => {
                if value != format!("{token} {holder}") {
                    return Err(bad(format!(
                        "the live key of worker {worker} ({value:?}) does not match its record"
                    )));
                }
                Some(Duration::from_millis(ms.unsigned_abs()))
            }
            // 0: expiring this very millisecond; -1: a live key without a TTL, never written
            // by idmint.
            0 => None,
            other => {
                return Err(bad(format!(
                    "the live key of worker {worker} has TTL {other}"
                )))
            }
        };
        remaining.insert(worker, left);
    }
    let mut slots = Vec::with_capacity(remaining.len());
    for (worker, left) in remaining {
        let w = format!("w:{worker}:");
        let field = |name: &str| {
            get(&format!("{w}{name}")).ok_or_else(|| bad(format!("worker {worker} has no {name}")))
        };
        slots.push(worker_slot(
            group,
            worker,
            field("token")?,
            field("holder")?,
            field("floor")?,
            left,
        )?);
    }
    let expected_fields = 2 + 3 * slots.len();
    if fields.len() != expected_fields {
        return Err(bad(format!(
            "has {} fields, expected {expected_fields}",
            fields.len()
        )));
    }
    Ok(GroupRead {
        record: Some(GroupRecord {
            layout: layout.to_owned(),
            last_token,
        }),
        slots,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fields(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn live(worker: &str, pttl: i64, value: &str) -> Vec<Value> {
        vec![
            Value::BulkString(worker.into()),
            Value::Int(pttl),
            Value::BulkString(value.into()),
        ]
    }

    #[test]
    fn groups_decode_with_liveness_and_damage_is_corrupt() {
        let group = NamespaceName::new("events").unwrap();
        let hash = fields(&[
            ("layout", "L"),
            ("last_token", "7"),
            ("w:1:token", "7"),
            ("w:1:holder", "web-1 lease a"),
            ("w:1:floor", "1700000005000"),
            ("w:0:token", "3"),
            ("w:0:holder", "web-2 lease b"),
            ("w:0:floor", "0"),
        ]);
        let mut lives = live("1", 4_000, "7 web-1 lease a");
        lives.extend(live("0", -2, ""));
        let read = decode_group(&group, &hash, &lives).unwrap();
        let record = read.record.unwrap();
        assert_eq!((record.layout.as_str(), record.last_token), ("L", 7));
        assert_eq!(read.slots.len(), 2);
        assert_eq!((read.slots[0].worker, read.slots[0].is_live()), (0, false));
        assert_eq!(read.slots[1].expires_in, Some(Duration::from_millis(4_000)));
        assert_eq!(read.slots[1].floor_unix_ms, 1_700_000_005_000);

        assert!(decode_group(&group, &[], &[]).unwrap().record.is_none());
        // A live key naming another lease than the record.
        let mut wrong = live("1", 4_000, "6 web-9 lease z");
        wrong.extend(live("0", -2, ""));
        assert!(decode_group(&group, &hash, &wrong).is_err());
        // A live key without a TTL, which idmint never writes.
        let mut forever = live("1", -1, "7 web-1 lease a");
        forever.extend(live("0", -2, ""));
        assert!(decode_group(&group, &hash, &forever).is_err());
        // A token that is no number; a stray field.
        let mut bad = hash.clone();
        bad[2].1 = "07".into();
        assert!(decode_group(&group, &bad, &lives).is_err());
        let mut stray = hash.clone();
        stray.push(("w:1:extra".into(), "x".into()));
        assert!(decode_group(&group, &stray, &lives).is_err());
    }
}
