//! Worker leases of both MySQL authorities ([`WorkerLeases`](crate::lease::WorkerLeases) for
//! [`MysqlAuthority`](super::MysqlAuthority) and
//! [`MysqlTicketAuthority`](super::MysqlTicketAuthority)), in the InnoDB tables
//! `<table>_lease_groups` and `<table>_leases` (`sql::LeaseTables`), created at connect when
//! absent.
//!
//! Invariants (the module docs of [`crate::lease`] list what every backend keeps):
//! - **the server's clock decides expiry**: `expires_at` is only ever written as
//!   `UTC_TIMESTAMP(6) + INTERVAL ttl MICROSECOND` and compared with `UTC_TIMESTAMP(6)` in the
//!   same statement (UTC: the session's time zone plays no part); the time left comes back in
//!   microseconds. The node's clock is never sent.
//! - **one transaction per acquisition**: insert the group's row if absent (`ON DUPLICATE KEY
//!   UPDATE`, which locks it), lock it (`SELECT … FOR UPDATE`), lock and read the group's slots
//!   (`FOR UPDATE`: locking reads see the latest commit), [`plan_acquire`], write the slot,
//!   the group's `last_token` and the audit ledger's `leased` entry, `COMMIT`. Every other ending rolls back explicitly before the
//!   connection goes back to the pool, so no idle connection holds a group's lock.
//! - **renew and release are one compare-and-swap `UPDATE`** on `(grp, worker, token,
//!   holder)`, the lease's identity (never the token alone: a store that lost its rows grants
//!   token 1 again); a renewal raises the floor with `GREATEST`, a release sets it and clears
//!   `expires_at`. The slot is read afterwards (MySQL counts changed rows, not matched ones),
//!   and a record that does not name the lease is [`LeaseError::Superseded`].
//! - **deadlocks are retried**: concurrent first acquisitions of a group (or of neighbouring
//!   groups, through InnoDB's gap locks) can deadlock (1213); the server then rolled the whole
//!   transaction back, so it is run again after a random pause, at most `DEADLOCK_ATTEMPTS`
//!   times, as ticket mode does. Nothing else is retried: a lost `COMMIT` reply is
//!   [`StoreError::Unavailable`] and the lease, if it committed, expires.
//! - **durable on `Ok`**: commits are flushed (the server's durability is checked on every
//!   connection, see `conn`).

use super::conn::{Client, Session};
use super::sql::{text_literal, AuditTable, LeaseTables, NOW_MS};
use super::tickets::{deadlock_backoff, DEADLOCK_ATTEMPTS};
use super::{col, driver_error, execute, query, server_code, ER_LOCK_DEADLOCK};
use crate::lease::{
    is_current, plan_acquire, superseded, GroupRecord, LeaseError, LeaseRequest, WorkerLease,
    WorkerSlot,
};
use crate::StoreError;
use idmint_core::{Backoff, NamespaceName};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, Transaction, TxOpts};
use std::time::Duration;

/// The longest TTL granted: a lease is renewed every few seconds; a year is a mistake.
const MAX_TTL: Duration = Duration::from_secs(366 * 24 * 3600);

/// A slot's columns of the lease table aliased `l`: `worker, token, holder, floor_unix_ms`,
/// and the time left in microseconds by the server's clock while live (at least 1), `NULL`
/// when released or expired. `UTC_TIMESTAMP(6)` is the statement's start time: one reading.
const SLOT_COLUMNS: &str = "l.worker, l.token, l.holder, l.floor_unix_ms, \
     CASE WHEN l.expires_at > UTC_TIMESTAMP(6) THEN \
     GREATEST(1, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at)) END";

/// The lease tables of an authority, or why it has none (an unusable table name).
pub(super) type Tables = Result<LeaseTables, String>;

fn tables_of(tables: &Tables) -> Result<&LeaseTables, LeaseError> {
    tables
        .as_ref()
        .map_err(|e| LeaseError::Store(StoreError::InvalidSetup { message: e.clone() }))
}

/// Creates the lease tables that `information_schema` does not list (a user without the
/// `CREATE` privilege can use tables made for it).
pub(super) async fn ensure_tables(conn: &mut Conn, tables: &LeaseTables) -> Result<(), StoreError> {
    let sql = format!(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
         AND TABLE_NAME IN ('{}', '{}')",
        tables.groups_name, tables.leases_name
    );
    let mut present = Vec::new();
    for row in query(conn, &sql).await? {
        present.push(col::<String>(&row, 0, "TABLE_NAME")?.to_ascii_lowercase());
    }
    let [groups_ddl, leases_ddl] = tables.ddl();
    for (name, ddl) in [
        (&tables.groups_name, groups_ddl),
        (&tables.leases_name, leases_ddl),
    ] {
        if !present.contains(&name.to_ascii_lowercase()) {
            execute(conn, &ddl).await?;
        }
    }
    Ok(())
}

/// `ttl` in whole microseconds, rounded up (the server's resolution), and the TTL that grants.
fn ttl_micros(group: &NamespaceName, ttl: Duration) -> Result<(u64, Duration), LeaseError> {
    if ttl > MAX_TTL {
        return Err(LeaseError::Invalid {
            group: group.clone(),
            message: format!("the TTL {ttl:?} is longer than {MAX_TTL:?}"),
        });
    }
    let micros = u64::try_from(ttl.as_nanos().div_ceil(1000)).map_err(|_| LeaseError::Invalid {
        group: group.clone(),
        message: format!("the TTL {ttl:?} does not fit"),
    })?;
    Ok((micros, Duration::from_micros(micros)))
}

/// Why one try failed: the server rolled the transaction back as a deadlock (try again), or
/// anything else (never retried).
#[derive(Debug)]
enum Failure {
    Deadlock(mysql_async::Error),
    Error(StoreError),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Error(e)
    }
}

/// Classifies a driver error of the statement `what`.
fn failure(what: &'static str) -> impl Fn(mysql_async::Error) -> Failure {
    move |e| {
        if server_code(&e) == Some(ER_LOCK_DEADLOCK) {
            Failure::Deadlock(e)
        } else {
            Failure::Error(driver_error(what, e))
        }
    }
}

/// After a failed try: the pause before the next one if the server rolled the try back as a
/// deadlock and fewer than `DEADLOCK_ATTEMPTS` were made; the error otherwise.
fn retry_after(
    what: &str,
    backoff: &mut Backoff,
    failure: Failure,
) -> Result<Duration, StoreError> {
    match failure {
        Failure::Deadlock(e) => backoff.next().ok_or_else(|| {
            driver_error(&format!("{what} (deadlocked {DEADLOCK_ATTEMPTS} times)"), e)
        }),
        Failure::Error(e) => Err(e),
    }
}

/// The slot in columns `base..base + 5` of `row` ([`SLOT_COLUMNS`]); `None` where the worker
/// id is `NULL` (a group without slots, from the `LEFT JOIN`).
fn decode_slot(row: &Row, base: usize) -> Result<Option<WorkerSlot>, StoreError> {
    let Some(worker) = col::<Option<u64>>(row, base, "leases.worker")? else {
        return Ok(None);
    };
    let expires_in: Option<i64> = col(row, base + 4, "the lease's time left")?;
    Ok(Some(WorkerSlot {
        worker,
        token: col(row, base + 1, "leases.token")?,
        holder: col(row, base + 2, "leases.holder")?,
        floor_unix_ms: col(row, base + 3, "leases.floor_unix_ms")?,
        expires_in: expires_in.map(|us| Duration::from_micros(us.unsigned_abs())),
    }))
}

fn decode_group(row: &Row) -> Result<GroupRecord, StoreError> {
    Ok(GroupRecord {
        layout: col(row, 0, "lease_groups.layout")?,
        last_token: col(row, 1, "lease_groups.last_token")?,
    })
}

/// The statements of an acquisition inside its transaction; the caller commits on
/// `Ok(Ok(_))` and rolls back otherwise.
async fn acquire_in(
    tx: &mut Transaction<'_>,
    t: &LeaseTables,
    audit: &AuditTable,
    request: &LeaseRequest,
    ttl_us: u64,
    ttl: Duration,
) -> Result<Result<WorkerLease, LeaseError>, Failure> {
    let group = request.group.as_str();
    tx.exec_drop(
        format!(
            "INSERT INTO {} (grp, layout, last_token) VALUES (?, ?, 0) \
             ON DUPLICATE KEY UPDATE grp = grp",
            t.groups
        ),
        (group, request.layout.as_str()),
    )
    .await
    .map_err(failure("inserting the lease group"))?;
    let rows: Vec<Row> = tx
        .exec(
            format!(
                "SELECT layout, last_token FROM {} WHERE grp = ? FOR UPDATE",
                t.groups
            ),
            (group,),
        )
        .await
        .map_err(failure("locking the lease group"))?;
    let record = match rows.first() {
        Some(row) => decode_group(row)?,
        None => {
            return Err(StoreError::Corrupt {
                message: format!("lease group {group} is missing right after its insert"),
            }
            .into())
        }
    };
    if record.last_token == 0 {
        // Inserted now (every grant sets a token of at least 1): refused, and rolled back with
        // the transaction, if the group existed before.
        let trace: Option<u8> = tx
            .exec_first(
                format!(
                    "SELECT 1 FROM {} WHERE subject = ? AND (event = 'leased' \
                     OR (event = 'checkpoint' AND b > 0)) LIMIT 1",
                    audit.quoted
                ),
                (group,),
            )
            .await
            .map_err(failure("reading the lease group's ledger"))?;
        if trace.is_some() {
            return Ok(Err(crate::lease::lost_group(&request.group, "mysql")));
        }
    }
    let rows: Vec<Row> = tx
        .exec(
            format!(
                "SELECT {SLOT_COLUMNS} FROM {} l WHERE l.grp = ? FOR UPDATE",
                t.leases
            ),
            (group,),
        )
        .await
        .map_err(failure("locking the group's leases"))?;
    let mut slots = Vec::with_capacity(rows.len());
    for row in &rows {
        slots.extend(decode_slot(row, 0)?);
    }
    let grant = match plan_acquire(request, Some(&record), &slots) {
        Ok(grant) => grant,
        Err(refused) => return Ok(Err(refused)),
    };
    let holder = request.holder.as_str();
    if slots.iter().any(|s| s.worker == grant.worker) {
        tx.exec_drop(
            format!(
                "UPDATE {} SET token = ?, holder = ?, floor_unix_ms = ?, \
                 expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
                 WHERE grp = ? AND worker = ?",
                t.leases
            ),
            (
                grant.token,
                holder,
                grant.floor_unix_ms,
                ttl_us,
                group,
                grant.worker,
            ),
        )
        .await
    } else {
        tx.exec_drop(
            format!(
                "INSERT INTO {} (grp, worker, token, holder, floor_unix_ms, expires_at) \
                 VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)",
                t.leases
            ),
            (
                group,
                grant.worker,
                grant.token,
                holder,
                grant.floor_unix_ms,
                ttl_us,
            ),
        )
        .await
    }
    .map_err(failure("writing the lease"))?;
    tx.exec_drop(
        format!(
            "UPDATE {} SET layout = ?, last_token = ? WHERE grp = ?",
            t.groups
        ),
        (grant.group.layout.as_str(), grant.token, group),
    )
    .await
    .map_err(failure("writing the lease group"))?;
    // The ledger entry, under the group's row lock: entries of a group follow its grants.
    tx.query_drop(format!(
        "INSERT INTO {} (subject, at_unix_ms, event, a, b, holder) \
         VALUES ({}, {NOW_MS}, 'leased', {}, {}, {})",
        audit.quoted,
        super::literal(&request.group),
        grant.worker,
        grant.token,
        text_literal(&request.holder)
    ))
    .await
    .map_err(failure("recording the lease"))?;
    Ok(Ok(WorkerLease {
        group: request.group.clone(),
        worker: grant.worker,
        token: grant.token,
        floor_unix_ms: grant.floor_unix_ms,
        ttl,
        holder: request.holder.clone(),
    }))
}

/// One try of an acquisition: its transaction, committed or rolled back.
async fn acquire_once(
    conn: &mut Conn,
    t: &LeaseTables,
    audit: &AuditTable,
    request: &LeaseRequest,
    ttl_us: u64,
    ttl: Duration,
) -> Result<Result<WorkerLease, LeaseError>, Failure> {
    let mut tx = conn
        .start_transaction(TxOpts::default())
        .await
        .map_err(failure("START TRANSACTION"))?;
    match acquire_in(&mut tx, t, audit, request, ttl_us, ttl).await {
        Ok(Ok(lease)) => {
            tx.commit().await.map_err(failure("COMMIT"))?;
            Ok(Ok(lease))
        }
        other => {
            // Release the group's lock before the connection is reused; a failed rollback
            // makes the connection unusable (Unavailable: the pool drops it).
            tx.rollback()
                .await
                .map_err(|e| Failure::Error(driver_error("ROLLBACK", e)))?;
            other
        }
    }
}

/// Acquires a lease (see the module docs).
pub(super) async fn acquire(
    client: &Client,
    tables: &Tables,
    audit: &AuditTable,
    request: &LeaseRequest,
) -> Result<WorkerLease, LeaseError> {
    let t = tables_of(tables)?;
    let (ttl_us, ttl) = ttl_micros(&request.group, request.ttl)?;
    client
        .on_conn("acquire_lease", async |s: &mut Session| {
            let mut backoff = deadlock_backoff();
            loop {
                match acquire_once(&mut s.conn, t, audit, request, ttl_us, ttl).await {
                    Ok(out) => return Ok(out),
                    Err(f) => {
                        let pause = retry_after("acquiring a lease", &mut backoff, f)?;
                        tokio::time::sleep(pause).await;
                    }
                }
            }
        })
        .await?
}

/// The slot `(group, worker)` as it is now.
async fn read_slot(
    conn: &mut Conn,
    t: &LeaseTables,
    group: &str,
    worker: u64,
) -> Result<Option<WorkerSlot>, StoreError> {
    let rows: Vec<Row> = conn
        .exec(
            format!(
                "SELECT {SLOT_COLUMNS} FROM {} l WHERE l.grp = ? AND l.worker = ?",
                t.leases
            ),
            (group, worker),
        )
        .await
        .map_err(|e| driver_error("reading a lease", e))?;
    match rows.first() {
        Some(row) => decode_slot(row, 0),
        None => Ok(None),
    }
}

/// `renew` (with `Some(ttl)`) or `release`: the compare-and-swap `UPDATE`, then the slot as
/// it now is. `Ok(Ok(floor))`: the lease's token is current and its floor is `floor`.
async fn swap(
    client: &Client,
    t: &LeaseTables,
    lease: &WorkerLease,
    ttl_us: Option<u64>,
    floor_unix_ms: u64,
) -> Result<Result<u64, LeaseError>, StoreError> {
    let group = lease.group.as_str();
    // The lease's identity, in every statement: token and holder, never the token alone.
    let matching = "WHERE grp = ? AND worker = ? AND token = ? AND holder = ?";
    let (set, mut values): (String, Vec<mysql_async::Value>) = match ttl_us {
        Some(ttl_us) => (
            "expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
             floor_unix_ms = GREATEST(floor_unix_ms, ?)"
                .into(),
            vec![ttl_us.into(), floor_unix_ms.into()],
        ),
        None => (
            "expires_at = NULL, floor_unix_ms = GREATEST(floor_unix_ms, ?)".into(),
            vec![floor_unix_ms.into()],
        ),
    };
    values.extend([
        group.into(),
        lease.worker.into(),
        lease.token.into(),
        lease.holder.as_str().into(),
    ]);
    let sql = format!("UPDATE {} SET {set} {matching}", t.leases);
    let params = mysql_async::Params::Positional(values);
    let what = if ttl_us.is_some() {
        "renewing a lease"
    } else {
        "releasing a lease"
    };
    client
        .on_conn(what, async |s: &mut Session| {
            let mut backoff = deadlock_backoff();
            while let Err(e) = s.conn.exec_drop(sql.as_str(), params.clone()).await {
                let pause = retry_after(what, &mut backoff, failure("UPDATE of a lease")(e))?;
                tokio::time::sleep(pause).await;
            }
            // Changed or not (MySQL counts changed rows: a release repeated with the same
            // floor changes nothing), the record decides: token and holder.
            let slot = read_slot(&mut s.conn, t, group, lease.worker).await?;
            Ok(match slot {
                Some(slot) if is_current(lease, &slot) => Ok(slot.floor_unix_ms),
                other => Err(superseded(lease, other.as_ref())),
            })
        })
        .await
}

/// Extends `lease` and raises its floor.
pub(super) async fn renew(
    client: &Client,
    tables: &Tables,
    lease: &WorkerLease,
    floor_unix_ms: u64,
) -> Result<WorkerLease, LeaseError> {
    let t = tables_of(tables)?;
    let (ttl_us, _) = ttl_micros(&lease.group, lease.ttl)?;
    let floor = swap(client, t, lease, Some(ttl_us), floor_unix_ms).await??;
    Ok(WorkerLease {
        floor_unix_ms: floor,
        ..lease.clone()
    })
}

/// Ends `lease`, setting its floor.
pub(super) async fn release(
    client: &Client,
    tables: &Tables,
    lease: &WorkerLease,
    floor_unix_ms: u64,
) -> Result<(), LeaseError> {
    let t = tables_of(tables)?;
    swap(client, t, lease, None, floor_unix_ms).await??;
    Ok(())
}

/// The group's record and slots, in one statement (one snapshot).
pub(super) async fn group(
    client: &Client,
    tables: &Tables,
    group: &NamespaceName,
) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
    let t = tables_of(tables)?;
    let sql = format!(
        "SELECT g.layout, g.last_token, {SLOT_COLUMNS} FROM {} g LEFT JOIN {} l \
         ON l.grp = g.grp WHERE g.grp = ? ORDER BY l.worker",
        t.groups, t.leases
    );
    let (sql, name) = (&sql, group.as_str());
    Ok(client
        .read_on_conn("lease_group", async |s: &mut Session| {
            let rows: Vec<Row> = s
                .conn
                .exec(sql.as_str(), (name,))
                .await
                .map_err(|e| driver_error("reading a lease group", e))?;
            let Some(first) = rows.first() else {
                return Ok(None);
            };
            let record = decode_group(first)?;
            let mut slots = Vec::with_capacity(rows.len());
            for row in &rows {
                slots.extend(decode_slot(row, 2)?);
            }
            slots.sort_by_key(|s| s.worker);
            Ok(Some((record, slots)))
        })
        .await?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ttls_round_up_to_microseconds_and_are_bounded() {
        let g = NamespaceName::new("g").unwrap();
        assert_eq!(
            ttl_micros(&g, Duration::from_nanos(1_001)).unwrap(),
            (2, Duration::from_micros(2))
        );
        assert!(matches!(
            ttl_micros(&g, Duration::MAX),
            Err(LeaseError::Invalid { .. })
        ));
    }
}
