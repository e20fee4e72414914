//! Worker leases of the PostgreSQL authority ([`WorkerLeases`] for [`PostgresAuthority`]), in
//! the tables `<table>_lease_groups` and `<table>_leases` next to the namespace table (see
//! `sql::LeaseTables` for their DDL).
//!
//! Invariants (the module docs of [`crate::lease`] list what every backend keeps):
//! - **the server's clock decides expiry**: `expires_at` is only ever written as
//!   `clock_timestamp() + TTL` and compared with `clock_timestamp()`, both inside the statement;
//!   the time left comes back in microseconds. The node's clock is never sent.
//! - **one transaction per acquisition**: insert the group's row if absent, lock it (`FOR
//!   UPDATE`), lock and read the group's slots, [`plan_acquire`], write the slot, the
//!   group's `last_token` and the audit ledger's `leased` entry, commit. Acquisitions of one group therefore queue on the group row,
//!   and a concurrent renewal or release of a slot waits for the slot's row lock and then finds
//!   the new token (0 rows: [`LeaseError::Superseded`]).
//! - **renew and release are one compare-and-swap `UPDATE`** on `(group, worker, token,
//!   holder)`: the lease's identity, never the token alone (a store that lost its rows grants
//!   token 1 again); a renewal raises the floor with `GREATEST`, a release sets it and clears
//!   `expires_at`.
//! - **durable on `Ok`**: the commit is acknowledged after its WAL flush (`synchronous_commit`
//!   forced on per session, see the parent module). Like every write here, none is retried
//!   after a lost reply: an acquisition whose reply was lost may have committed, and its lease
//!   then simply expires.
//!
//! What it does not do: renew by itself (the holder does), or judge expiry by this process's
//! clock.

use super::conn::{chain, pg_error, PgConn};
use super::PostgresAuthority;
use crate::lease::{
    plan_acquire, superseded, GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases,
    WorkerSlot,
};
use crate::StoreError;
use async_trait::async_trait;
use idmint_core::NamespaceName;
use std::time::Duration;
use tokio_postgres::Row;

/// The longest TTL granted: a lease is renewed every few seconds; a year is a mistake.
const MAX_TTL: Duration = Duration::from_secs(366 * 24 * 3600);

/// `ttl` in whole microseconds, rounded up (the server's resolution), and the TTL that grants.
fn ttl_micros(group: &NamespaceName, ttl: Duration) -> Result<(i64, Duration), LeaseError> {
    if ttl > MAX_TTL {
        return Err(LeaseError::Invalid {
            group: group.clone(),
            message: format!("the TTL {ttl:?} is longer than {MAX_TTL:?}"),
        });
    }
    let micros = ttl.as_nanos().div_ceil(1000);
    let micros = i64::try_from(micros).map_err(|_| LeaseError::Invalid {
        group: group.clone(),
        message: format!("the TTL {ttl:?} does not fit"),
    })?;
    Ok((micros, Duration::from_micros(micros.unsigned_abs())))
}

/// A floor as the `bigint` column stores it.
fn floor_param(group: &NamespaceName, floor_unix_ms: u64) -> Result<i64, LeaseError> {
    i64::try_from(floor_unix_ms).map_err(|_| LeaseError::Invalid {
        group: group.clone(),
        message: format!("the floor {floor_unix_ms} ms is past 2^63 - 1"),
    })
}

fn corrupt(message: String) -> StoreError {
    StoreError::Corrupt { message }
}

/// Column `i` of `row`, a non-negative `bigint`.
fn unsigned(row: &Row, i: usize, what: &str, group: &str) -> Result<u64, StoreError> {
    let value: i64 = row
        .try_get(i)
        .map_err(|e| corrupt(format!("group {group}: unreadable {what}: {}", chain(&e))))?;
    u64::try_from(value).map_err(|_| corrupt(format!("group {group}: {what} {value} is negative")))
}

/// The slot in columns `base..base + 5` of `row` (`sql::SLOT_COLUMNS`); `None` where the worker
/// id is `NULL` (a group without slots, from the `LEFT JOIN`).
fn decode_slot(row: &Row, base: usize, group: &str) -> Result<Option<WorkerSlot>, StoreError> {
    let bad = |what: &str, e: tokio_postgres::Error| {
        corrupt(format!("group {group}: unreadable {what}: {}", chain(&e)))
    };
    let worker: Option<i64> = row.try_get(base).map_err(|e| bad("worker id", e))?;
    if worker.is_none() {
        return Ok(None);
    }
    let expires_in: Option<i64> = row.try_get(base + 4).map_err(|e| bad("expiry", e))?;
    Ok(Some(WorkerSlot {
        worker: unsigned(row, base, "worker id", group)?,
        token: unsigned(row, base + 1, "token", group)?,
        holder: row.try_get(base + 2).map_err(|e| bad("holder", e))?,
        floor_unix_ms: unsigned(row, base + 3, "floor", group)?,
        expires_in: expires_in.map(|us| Duration::from_micros(us.unsigned_abs())),
    }))
}

/// `layout, last_token` in columns 0 and 1 of `row`.
fn decode_group(row: &Row, group: &str) -> Result<GroupRecord, StoreError> {
    Ok(GroupRecord {
        layout: row
            .try_get(0)
            .map_err(|e| corrupt(format!("group {group}: unreadable layout: {}", chain(&e))))?,
        last_token: unsigned(row, 1, "last token", group)?,
    })
}

/// The acquisition's transaction (see the module docs). `Ok(Err(_))`: refused by
/// [`plan_acquire`], rolled back (the dropped transaction), the connection still good.
async fn acquire_on(
    conn: &mut PgConn,
    request: &LeaseRequest,
    ttl_us: i64,
    ttl: Duration,
) -> Result<Result<WorkerLease, LeaseError>, StoreError> {
    let st = conn.lease_statements().await?;
    let group = request.group.as_str();
    let pg = |e: tokio_postgres::Error| pg_error(&e);
    let tx = conn.transaction().await?;
    let created = tx
        .execute(&st.insert_group, &[&group, &request.layout])
        .await
        .map_err(pg)?;
    if created == 1 {
        // A group made now: refused (rolled back with the transaction) if it existed before.
        let row = tx.query_one(&st.group_trace, &[&group]).await.map_err(pg)?;
        if row.try_get::<_, bool>(0).map_err(pg)? {
            return Ok(Err(crate::lease::lost_group(&request.group, "postgres")));
        }
    }
    let rows = tx.query(&st.lock_group, &[&group]).await.map_err(pg)?;
    let record = match rows.first() {
        Some(row) => decode_group(row, group)?,
        None => {
            return Err(corrupt(format!(
                "group {group}: its row is missing right after its insert"
            )))
        }
    };
    let rows = tx.query(&st.lock_slots, &[&group]).await.map_err(pg)?;
    let mut slots = Vec::with_capacity(rows.len());
    for row in &rows {
        slots.extend(decode_slot(row, 0, group)?);
    }
    let grant = match plan_acquire(request, Some(&record), &slots) {
        Ok(grant) => grant,
        Err(refused) => return Ok(Err(refused)),
    };
    let Ok(worker) = i64::try_from(grant.worker) else {
        return Ok(Err(LeaseError::Invalid {
            group: request.group.clone(),
            message: format!("worker id {} is past 2^63 - 1", grant.worker),
        }));
    };
    let token = i64::try_from(grant.token)
        .map_err(|_| corrupt(format!("group {group}: fencing token past 2^63 - 1")))?;
    let floor = i64::try_from(grant.floor_unix_ms)
        .map_err(|_| corrupt(format!("group {group}: floor past 2^63 - 1")))?;
    tx.execute(
        &st.upsert_slot,
        &[&group, &worker, &token, &request.holder, &floor, &ttl_us],
    )
    .await
    .map_err(pg)?;
    tx.execute(&st.update_group, &[&group, &grant.group.layout, &token])
        .await
        .map_err(pg)?;
    // The ledger entry, under the group's row lock: entries of a group follow its grants.
    tx.execute(&st.audit, &[&group, &worker, &token, &request.holder])
        .await
        .map_err(pg)?;
    tx.commit().await.map_err(pg)?;
    Ok(Ok(WorkerLease {
        group: request.group.clone(),
        worker: grant.worker,
        token: grant.token,
        floor_unix_ms: grant.floor_unix_ms,
        ttl,
        holder: request.holder.clone(),
    }))
}

/// The slot `(group, worker)` as it is now, for [`superseded`].
async fn slot_on(
    conn: &mut PgConn,
    group: &str,
    worker: i64,
) -> Result<Option<WorkerSlot>, StoreError> {
    let st = conn.lease_statements().await?;
    let rows = conn.query_statement(&st.slot, &[&group, &worker]).await?;
    match rows.first() {
        Some(row) => decode_slot(row, 0, group),
        None => Ok(None),
    }
}

/// `renew` or `release`: the compare-and-swap `UPDATE` (`release` when `ttl_us` is `None`),
/// then, if it matched nothing, the slot's current record for the refusal. `Ok(Ok(floor))`:
/// the floor recorded.
async fn swap_on(
    conn: &mut PgConn,
    lease: &WorkerLease,
    ttl_us: Option<i64>,
    floor: i64,
) -> Result<Result<u64, LeaseError>, StoreError> {
    let group = lease.group.as_str();
    // A lease whose worker id or token does not fit was never granted here.
    let (Ok(worker), Ok(token)) = (i64::try_from(lease.worker), i64::try_from(lease.token)) else {
        return Ok(Err(superseded(lease, None)));
    };
    let st = conn.lease_statements().await?;
    let rows = match ttl_us {
        Some(ttl_us) => {
            conn.query_statement(
                &st.renew,
                &[&group, &worker, &token, &ttl_us, &floor, &lease.holder],
            )
            .await?
        }
        None => {
            conn.query_statement(
                &st.release,
                &[&group, &worker, &token, &floor, &lease.holder],
            )
            .await?
        }
    };
    match rows.first() {
        Some(row) => Ok(Ok(unsigned(row, 0, "floor", group)?)),
        None => {
            let current = slot_on(conn, group, worker).await?;
            Ok(Err(superseded(lease, current.as_ref())))
        }
    }
}

/// The group's record and slots in one statement (one snapshot).
async fn group_on(
    conn: &mut PgConn,
    group: &str,
) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, StoreError> {
    let st = conn.lease_statements().await?;
    let rows = conn.query_statement(&st.group, &[&group]).await?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let record = decode_group(first, group)?;
    let mut slots = Vec::with_capacity(rows.len());
    for row in &rows {
        slots.extend(decode_slot(row, 2, group)?);
    }
    slots.sort_by_key(|s| s.worker);
    Ok(Some((record, slots)))
}

#[async_trait]
impl WorkerLeases for PostgresAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        let (ttl_us, ttl) = ttl_micros(&request.group, request.ttl)?;
        self.pool
            .on_conn("acquire_lease", async |c| {
                acquire_on(c, request, ttl_us, ttl).await
            })
            .await?
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let (ttl_us, _) = ttl_micros(&lease.group, lease.ttl)?;
        let floor = floor_param(&lease.group, floor_unix_ms)?;
        let recorded = self
            .pool
            .on_conn("renew_lease", async |c| {
                swap_on(c, lease, Some(ttl_us), floor).await
            })
            .await??;
        Ok(WorkerLease {
            floor_unix_ms: recorded,
            ..lease.clone()
        })
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        let floor = floor_param(&lease.group, floor_unix_ms)?;
        self.pool
            .on_conn("release_lease", async |c| {
                swap_on(c, lease, None, floor).await
            })
            .await??;
        Ok(())
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        let name = group.as_str();
        Ok(self
            .pool
            .read_on_conn("lease_group", async |c| group_on(c, name).await)
            .await?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ttls_round_up_to_microseconds_and_are_bounded() {
        let g = NamespaceName::new("g").unwrap();
        assert_eq!(
            ttl_micros(&g, Duration::from_nanos(1_500)).unwrap(),
            (2, Duration::from_micros(2))
        );
        assert_eq!(
            ttl_micros(&g, Duration::from_secs(10)).unwrap().0,
            10_000_000
        );
        assert!(matches!(
            ttl_micros(&g, Duration::MAX),
            Err(LeaseError::Invalid { .. })
        ));
        assert!(matches!(
            floor_param(&g, u64::MAX),
            Err(LeaseError::Invalid { .. })
        ));
    }
}
