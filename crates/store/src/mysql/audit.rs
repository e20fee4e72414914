//! The audit ledger of both MySQL authorities ([`AuditLog`](crate::AuditLog) for
//! [`MysqlAuthority`](super::MysqlAuthority) and
//! [`MysqlTicketAuthority`](super::MysqlTicketAuthority)): the InnoDB table
//! `<table>_audit` (`sql::AuditTable`), created at connect when absent, and the one-round-trip
//! transactions that write an entry with the change it records.
//!
//! Invariants:
//! - **same transaction**: every entry is inserted by the transaction that makes the change it
//!   records (`START TRANSACTION; <change>; <entry>; COMMIT`, sent as one multi-statement
//!   request: one round trip, as the change alone took), and only if the change happened (the
//!   entry's `INSERT … SELECT` is conditioned on the change's `ROW_COUNT()`);
//! - **ordered per subject**: the entry is inserted after the change locked its row (the
//!   namespace's row, the ticket row, the lease group's row) and that lock is held to the
//!   commit, so the `AUTO_INCREMENT` `seq` of one subject follows the order of its writes;
//! - **no open transaction is handed back**: after a failed request the connection is rolled
//!   back before it returns to the pool (a failure that cut the connection leaves nothing
//!   open: the server rolls back a closed session);
//! - **reads change nothing and are validated**: a row this version did not write is
//!   [`StoreError::Corrupt`].

use super::conn::{Client, Session};
use super::sql::AuditTable;
use super::{col, driver_error, execute, query};
use crate::audit::{AuditEntry, AuditEvent};
use crate::StoreError;
use idmint_core::NamespaceName;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

/// Creates the ledger table if absent.
pub(super) async fn ensure_table(conn: &mut Conn, t: &AuditTable) -> Result<(), StoreError> {
    super::ensure_table(conn, &t.name, &t.ddl()).await
}

/// `INSERT INTO <ledger> (…) SELECT`: the head of every entry's statement, which then selects
/// `subject, at_unix_ms, event, a, b, holder`.
pub(super) fn insert_select(t: &AuditTable) -> String {
    format!(
        "INSERT INTO {} (subject, at_unix_ms, event, a, b, holder) SELECT",
        t.quoted
    )
}

/// Inside `tx`, after the change locked `name`'s row: the ledger entry `event`.
pub(super) async fn record(
    tx: &mut mysql_async::Transaction<'_>,
    t: &AuditTable,
    name: &NamespaceName,
    event: &AuditEvent,
) -> Result<(), StoreError> {
    let (a, b) = event.numbers();
    tx.query_drop(format!(
        "{} {}, {}, '{}', {a}, {b}, {}",
        insert_select(t),
        super::literal(name),
        super::sql::NOW_MS,
        event.name(),
        super::sql::text_literal(crate::audit::holder())
    ))
    .await
    .map_err(|e| driver_error("recording the change", e))
}

/// Inside `tx`: the ledger entry of a forward-only move of `name`'s watermark (`event`) to
/// the state `target`, then the outcome an `advance` answers.
pub(super) async fn record_advance(
    tx: &mut mysql_async::Transaction<'_>,
    t: &AuditTable,
    name: &NamespaceName,
    event: AuditEvent,
    target: crate::NamespaceState,
) -> Result<(bool, crate::Advanced), StoreError> {
    let (from, _) = event.numbers();
    record(tx, t, name, &event).await?;
    Ok((
        true,
        crate::Advanced {
            from,
            state: target,
        },
    ))
}

/// Ends an `advance` transaction: `COMMIT` when it moved the watermark, `ROLLBACK` on every
/// other outcome (nothing moved, or an error) before the connection is reused.
pub(super) async fn finish_advance(
    tx: mysql_async::Transaction<'_>,
    out: Result<(bool, crate::Advanced), StoreError>,
) -> Result<crate::Advanced, StoreError> {
    match out {
        Ok((true, advanced)) => {
            tx.commit().await.map_err(|e| driver_error("COMMIT", e))?;
            Ok(advanced)
        }
        other => {
            tx.rollback()
                .await
                .map_err(|e| driver_error("ROLLBACK", e))?;
            other.map(|(_, advanced)| advanced)
        }
    }
}

/// Runs a multi-statement request and returns the rows of every result set, in order. On an
/// error the session is rolled back (best effort) before the error is returned, so no
/// transaction the request opened stays open on a connection that goes back to the pool.
pub(super) async fn batch(conn: &mut Conn, sql: &str) -> Result<Vec<Row>, mysql_async::Error> {
    let out = async {
        let mut result = conn.query_iter(sql).await?;
        let mut rows = Vec::new();
        loop {
            rows.extend(result.collect::<Row>().await?);
            if result.is_empty() {
                break;
            }
        }
        // The driver keeps the error of a later statement as the pending result and reports
        // the request as finished: reading on is what returns it.
        result.drop_result().await?;
        Ok(rows)
    }
    .await;
    if out.is_err() {
        // A connection that failed fails this too; the pool then drops it, and the server
        // rolls the closed session back.
        let _ = conn.query_drop("ROLLBACK").await;
    }
    out
}

/// One ledger row (`seq, at_unix_ms, subject, event, a, b, holder`) of `subject`, validated.
fn decode_entry(row: &Row, subject: &NamespaceName) -> Result<AuditEntry, StoreError> {
    let seq: u64 = col(row, 0, "audit.seq")?;
    let bad = |what: String| StoreError::Corrupt {
        message: format!("ledger of {subject}, entry {seq}: {what}"),
    };
    let at_unix_ms: u64 = col(row, 1, "audit.at_unix_ms")?;
    let stored: String = col(row, 2, "audit.subject")?;
    if stored != subject.as_str() {
        return Err(bad(format!("the row is of subject {stored:?}")));
    }
    let name: String = col(row, 3, "audit.event")?;
    let a: u64 = col(row, 4, "audit.a")?;
    let b: u64 = col(row, 5, "audit.b")?;
    let event = AuditEvent::from_parts(&name, a, b)
        .ok_or_else(|| bad(format!("unknown event {name:?}")))?;
    Ok(AuditEntry {
        seq,
        at_unix_ms,
        subject: subject.clone(),
        event,
        holder: col(row, 6, "audit.holder")?,
    })
}

/// [`AuditLog::subjects`] of the ledger `t`.
pub(super) async fn subjects(
    client: &Client,
    t: &AuditTable,
) -> Result<Vec<NamespaceName>, StoreError> {
    let sql = format!("SELECT DISTINCT subject FROM {}", t.quoted);
    let sql = &sql;
    let mut subjects = client
        .read_on_conn("audit_subjects", async |s: &mut Session| {
            let mut out = Vec::new();
            for row in query(&mut s.conn, sql).await? {
                let raw: String = col(&row, 0, "audit.subject")?;
                out.push(NamespaceName::new(&raw).map_err(|e| StoreError::Corrupt {
                    message: format!("ledger subject {raw:?} is not a valid name: {e}"),
                })?);
            }
            Ok(out)
        })
        .await?;
    subjects.sort();
    subjects.dedup();
    Ok(subjects)
}

/// [`AuditLog::entries`] of the ledger `t`.
pub(super) async fn entries(
    client: &Client,
    t: &AuditTable,
    subject: &NamespaceName,
    after: Option<u64>,
    limit: usize,
) -> Result<Vec<AuditEntry>, StoreError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT seq, at_unix_ms, subject, event, a, b, holder FROM {} \
         WHERE subject = ? AND seq > ? ORDER BY seq LIMIT ?",
        t.quoted
    );
    let params = (
        subject.as_str().to_owned(),
        after.unwrap_or(0),
        u64::try_from(limit).unwrap_or(u64::MAX),
    );
    let (sql, params) = (&sql, &params);
    let rows: Vec<Row> = client
        .read_on_conn("audit_entries", async |s: &mut Session| {
            s.conn
                .exec(sql.as_str(), params.clone())
                .await
                .map_err(|e| driver_error("reading the audit ledger", e))
        })
        .await?;
    let mut entries: Vec<AuditEntry> = Vec::with_capacity(rows.len());
    for row in &rows {
        let entry = decode_entry(row, subject)?;
        if entries.last().is_some_and(|last| last.seq >= entry.seq) {
            return Err(StoreError::Corrupt {
                message: format!(
                    "the ledger of {subject} came back out of order at entry {}",
                    entry.seq
                ),
            });
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// [`AuditLog::now_unix_ms`]: the server's clock, as entries are stamped with it.
pub(super) async fn now_unix_ms(client: &Client) -> Result<u64, StoreError> {
    let sql = format!("SELECT {}", super::sql::NOW_MS);
    let sql = &sql;
    let rows = client
        .on_conn("audit_now", async |s: &mut Session| {
            super::query(&mut s.conn, sql).await
        })
        .await?;
    match rows.first() {
        Some(row) => col(row, 0, "the server's clock"),
        None => Err(StoreError::Corrupt {
            message: "the server's clock came back empty".into(),
        }),
    }
}

/// [`AuditLog::fold`] of the ledger `t`: the `UPDATE` that makes entry `through` the
/// checkpoint, then, if it is there, the `DELETE` of the older ones (by the primary key).
pub(super) async fn fold(
    client: &Client,
    t: &AuditTable,
    subject: &NamespaceName,
    through: u64,
    checkpoint: AuditEvent,
) -> Result<u64, StoreError> {
    let (a, b) = checkpoint.numbers();
    let subject = super::literal(subject);
    let update = format!(
        "UPDATE {} SET event = '{}', a = {a}, b = {b} WHERE subject = {subject} AND seq = {through}",
        t.quoted,
        checkpoint.name()
    );
    let present = format!(
        "SELECT COUNT(*) FROM {} WHERE subject = {subject} AND seq = {through}",
        t.quoted
    );
    let delete = format!(
        "DELETE FROM {} WHERE subject = {subject} AND seq < {through}",
        t.quoted
    );
    let (update, present, delete) = (&update, &present, &delete);
    client
        .on_conn("audit_fold", async |s: &mut Session| {
            execute(&mut s.conn, update).await?;
            let rows = super::query(&mut s.conn, present).await?;
            let there: u64 = match rows.first() {
                Some(row) => col(row, 0, "COUNT(*)")?,
                None => 0,
            };
            if there == 0 {
                return Ok(0);
            }
            execute(&mut s.conn, delete).await.map(|(n, _)| n)
        })
        .await
}
