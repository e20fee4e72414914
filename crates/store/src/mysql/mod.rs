//! The MySQL/MariaDB authority (cargo feature `mysql`), in two modes:
//!
//! - [`MysqlAuthority`] (**block mode**, the one to use with idmint nodes): every namespace's
//!   watermark is one row of one InnoDB table; a reservation is one `UPDATE` of that row and
//!   its audit-ledger entry in one transaction, one round trip.
//! - [`MysqlTicketAuthority`] (**Flickr ticket mode**): every namespace is its own `Tickets`
//!   table, and every id is one `REPLACE INTO … (stub) VALUES ('a')`; the server's
//!   `auto_increment_increment` / `auto_increment_offset` make two (or N) servers issue disjoint
//!   residue classes (odd/even). For namespaces served without a cache: one id per call.
//!
//! Both speak the text protocol through [`mysql_async`] (pure Rust), on the crate's one
//! connection pool and its policy (health checks, reconnection, retries, timeouts: see the
//! `pool` module's docs), sized by [`PoolConfig`]. The code is split along the seams:
//! `blocks` (block mode), `tickets` (ticket mode), `leases` (worker leases, both modes), `sql`
//! (the statements and the DDL that `idmint sql mysql` prints), `conn` (one connection and its
//! session settings).
//!
//! ## Block mode: schema and statements
//!
//! One table (default `idmint_namespaces`, see [`schema_sql`]), created by
//! [`MysqlAuthority::connect`] if `information_schema.TABLES` does not list it:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS `idmint_namespaces` (
//!   name     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
//!   width    TINYINT UNSIGNED NOT NULL,  -- 32 or 64
//!   first    BIGINT UNSIGNED NOT NULL,
//!   step     BIGINT UNSIGNED NOT NULL,
//!   `offset` BIGINT UNSIGNED NOT NULL,
//!   hi       BIGINT UNSIGNED NOT NULL,   -- the watermark
//!   retired  TINYINT UNSIGNED NOT NULL DEFAULT 0,
//!   parks    TEXT CHARACTER SET ascii NULL  -- parked blocks, NULL or '' for none
//! ) ENGINE=InnoDB
//! ```
//!
//! `retired` is `1` once the namespace is retired (`idmint admin retire`): the `UPDATE` that
//! moves `hi` past the largest id sets it, so both are one write; a reservation and a
//! give-back never change a retired row. `parks` holds the namespace's parked blocks
//! ([`crate::parks`]) as [`Parks::encode`](crate::Parks::encode)'s text, written only with the
//! row locked (see "The audit ledger" below). A table made without either column gains it at
//! connect (`ALTER TABLE … ADD COLUMN`, when `information_schema.COLUMNS` lacks it), every row
//! live and nothing parked.
//!
//! - `reserve`: one statement (sent with its ledger entry in one transaction, see "The audit
//!   ledger" below) that computes the block in SQL (DECIMAL arithmetic, so nothing overflows
//!   near 2^63 nor with steps near 2^64):
//!   `UPDATE t SET hi = LAST_INSERT_ID(<aligned start>) + LEAST(count - 1, (<max> - <start>)
//!   DIV step) * step + 1 WHERE name = '…' AND <start> <= <max>`. The block's **start** comes back
//!   as the session's `LAST_INSERT_ID()` (the `LAST_INSERT_ID(expr)` sequence idiom), its
//!   `ROW_COUNT()` says whether there was room (both read right after it, in the same request); the block is then [`SequenceSpec::reserve`](idmint_core::SequenceSpec::reserve)`(start,
//!   count)`, which is exactly what the statement computed (same alignment, same cut at the
//!   width's maximum), and its end is the new `hi`. (The start, not the new watermark, is what
//!   travels: from the end alone a block cut at the maximum cannot be told from a full one.)
//!   No row changed: one `SELECT` tells an unknown namespace from an exhausted one.
//! - `give_back`: the tail is validated against the namespace's spec (as every backend does),
//!   then one compare-and-swap `UPDATE t SET hi = <tail start> WHERE name = '…' AND hi = <tail
//!   end>`; no row changed: a `SELECT` for the current watermark (or unknown namespace).
//! - `ensure_namespace`: `INSERT … ON DUPLICATE KEY UPDATE name = name`, then `SELECT` the row.
//! - `state`, `list`: `SELECT`.
//!
//! A namespace's spec never changes once created, so each authority caches the specs it has
//! read: a reservation costs one `SELECT` the first time a process meets a namespace, then one
//! `UPDATE` each.
//!
//! ## Ticket mode: schema and statements
//!
//! Per namespace, the table [`ticket_table_name`] (`idmint_tickets_<name>`, with a hash suffix
//! when the name is not already a lower-case SQL identifier of at most 49 characters), with
//! Flickr's shape; its comment records the namespace and its spec, so the table describes itself:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS `idmint_tickets_photos` (
//!   id   BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
//!   stub CHAR(1) NOT NULL DEFAULT '' UNIQUE
//! ) ENGINE=InnoDB AUTO_INCREMENT=1
//!   COMMENT='idmint-ticket v1 name=photos width=64 first=1 step=2 offset=1'
//! ```
//!
//! - `reserve`: `REPLACE INTO t (stub) VALUES ('a')` and its ledger entry in one transaction,
//!   one request; the id is the session's `LAST_INSERT_ID()`.
//!   **Each call returns a block of exactly one id, whatever `count`** (ids of a ticket server
//!   are not contiguous when several clients or servers share it): this is the one place where
//!   an authority returns fewer ids than asked before the id space ends, so ticket mode is for
//!   namespaces served without a cache (callers ask for `count = 1`). An id above the width's
//!   maximum is never returned: [`StoreError::Exhausted`].
//! - A retirement's marker row has the stub `'x'` (id `max + 1 - 1`, in the transaction that
//!   raises the counter past the largest id): a namespace is retired while its table holds one,
//!   and a `REPLACE` past the maximum then answers [`StoreError::Retired`], not `Exhausted`.
//! - The server's `@@auto_increment_increment` and `@@auto_increment_offset` are read once per
//!   connection; a namespace is served only if they are its step and offset (idmint offset `0`
//!   of step `n` is MySQL's offset `n`). Otherwise `ensure_namespace` and `reserve` are
//!   [`StoreError::SpecConflict`] with the server's spec as `existing`, and no id is issued
//!   (an offset above the increment, which MySQL silently ignores, is
//!   [`StoreError::InvalidSetup`]).
//!   Every id returned is checked against the residue class as well.
//! - `state`/`list`: `information_schema.TABLES` (comment and `AUTO_INCREMENT`) and
//!   `MAX(id)`; the watermark is the largest of `first`, the table's `AUTO_INCREMENT` and
//!   `MAX(id) + 1`, at most `max + 1`. It may lie up to `step - 1` above the end of the last
//!   reservation (the server reports its next value of the class); no id of the class lies in
//!   between.
//! - `give_back` validates the tail and is always [`GiveBack::Refused`](crate::GiveBack::Refused): a ticket server cannot
//!   lower its counter atomically, so tails are simply not reissued.
//! - `ensure_namespace`: `CREATE TABLE IF NOT EXISTS` (with `AUTO_INCREMENT = first`), then the
//!   comment is read back and compared.
//! - [`ticket_sql`] prints the DDL and the `my.cnf` lines of an N-server setup.
//!
//! ## Durability and exclusivity
//!
//! Every write is one InnoDB transaction (the change and its ledger entry): when the server
//! acknowledges its `COMMIT`, it is committed, and durable across a server crash with `innodb_flush_log_at_trx_commit = 1` (the
//! default; with binary logging also `sync_binlog = 1`). Every new connection checks both
//! (`conn`): a server that may lose acknowledged commits is [`StoreError::InvalidSetup`], with the
//! variables, their values and the `my.cnf` lines to fix it, unless
//! [`MysqlConfig::accept_unsafe_durability`] is set (then a warning is logged once). InnoDB's row lock on the namespace's
//! row serialises concurrent reservations from any number of processes, so their blocks are
//! disjoint. In ticket mode the single `REPLACE` row keeps `MAX(id)` at the last id issued, so
//! even servers that rebuild the counter from `MAX(id) + 1` at restart (MySQL before 8.0,
//! MariaDB before 10.2.4) never reissue an id.
//!
//! **Lost replies never hand out a block twice.** A `reserve` is never retried: if its reply
//! is lost (connection dropped, timeout) the call is [`StoreError::Unavailable`] and its
//! connection is discarded. The statement may have committed: its block is then burned, never
//! returned to anyone. The caller's next `reserve` is a new statement that moves the watermark
//! from wherever it now is, so it gets a new block above the possibly granted one. The same
//! holds for a `REPLACE` in ticket mode (the next one gets a new, higher id) and for
//! `give_back`, which is not retried either (a lost `Returned` must not turn into a `Refused`).
//!
//! ## Failures
//!
//! Every operation (waiting for a connection, connecting, every statement) runs under
//! [`MysqlConfig::op_timeout`] (default 5 s): a stalled server is [`StoreError::Unavailable`],
//! never a hang. Connection and I/O errors, timeouts and unexpected server errors are
//! `Unavailable` (with the host, port and database, never the password); after one, every idle
//! connection is dropped and the next operation connects afresh, so the authority recovers by
//! itself when the server is back. Idle connections unused for 30 s are pinged before use.
//! Only reads (`state`, `list`) run a second time after a connection failure.
//! Rows this version did not write are [`StoreError::Corrupt`]; a URL without a database, an
//! invalid table name or timeout are [`StoreError::InvalidSetup`].
//!
//! ## What it does not do
//!
//! No retries of writes, no failover between servers (point the URL at the primary, or at a proxy that
//! follows it; an asynchronous replica promoted after a crash may lack the last reservations),
//! no TLS setup beyond what the URL can say, no schema migrations (new tables are created when
//! absent), no deletion of namespaces.
//!
//! ## The audit ledger
//!
//! Both modes keep the [`AuditLog`](crate::AuditLog) in `<table>_audit` (named after
//! [`MysqlConfig::table`], in ticket mode too; a hashed name when that is not a plain identifier
//! of at most 64 characters), created at connect when absent (existing deployments gain it in
//! place) and printed by [`schema_sql`]: `seq` (`AUTO_INCREMENT`), `subject`, `at_unix_ms`
//! (the server's `UTC_TIMESTAMP(6)`), `event`, `a`, `b`, `holder`, indexed by `(subject, seq)`
//! and by time. Every entry is written in the transaction of the change it
//! records (module `audit`):
//!
//! - block mode's `reserve` and `give_back`, and ticket mode's `REPLACE`, are each one
//!   multi-statement request, `START TRANSACTION; <the statement above>; SET @idmint_… =
//!   ROW_COUNT(), LAST_INSERT_ID(); INSERT INTO <audit> … SELECT … WHERE <it changed a row>;
//!   COMMIT; SELECT @idmint_…`: still one round trip, and an entry exactly when something was
//!   granted (a failed compare-and-swap, an id a ticket table issued outside the namespace's
//!   class or width, write none). A failure anywhere rolls the transaction back: nothing
//!   granted, nothing recorded;
//! - a worker-lease acquisition: one more `INSERT` in its transaction;
//! - [`Authority::advance`](crate::Authority::advance): a transaction with the namespace's row
//!   (block mode) or the ticket rows (ticket mode) locked `FOR UPDATE`; in ticket mode the move
//!   is a marker row `REPLACE INTO t (id, stub) VALUES (<to - 1>, 'r')`, whose explicit id
//!   moves the table's `AUTO_INCREMENT` counter up to `to` (InnoDB never moves a counter down
//!   for an explicit id below it) and keeps `MAX(id)` at `to - 1` for servers that rebuild the
//!   counter from it; the counter is not transactional, so a move rolled back after the marker
//!   was written may still have raised it: ids are skipped, never reissued, and none is recorded.
//!   In block mode the same `UPDATE` writes the parks the move leaves (a rebase trims them, a
//!   retirement drops them);
//! - [`Authority::park`](crate::Authority::park) and [`Authority::claim`](crate::Authority::claim)
//!   (block mode; ticket mode keeps no parks and answers
//!   [`StoreError::NotSupported`]): a transaction with the
//!   namespace's row and its `parks` locked `FOR UPDATE`, the change decided by
//!   [`Parks`](crate::Parks), the `UPDATE` of `parks` and an entry per block, `COMMIT`; a
//!   refused one rolls back.
//!
//! `seq` is drawn by the entry's `INSERT`, after the change locked its row, and that lock is
//! held to the commit, so within a subject it follows the order of the writes. Ticket mode's
//! concurrent `REPLACE`s may commit out of id order (see the deadlock note below): the ledger
//! then lists their ids in commit order, which the verifier accepts (they are disjoint).
//!
//! ## Worker leases
//!
//! Both modes store snowflake worker leases ([`crate::lease::WorkerLeases`], module `leases`)
//! in `<table>_lease_groups` and `<table>_leases`, named after [`MysqlConfig::table`] (in
//! ticket mode too) and created at connect when absent ([`schema_sql`] prints them). Expiry is
//! judged by the server's `UTC_TIMESTAMP(6)` only; an acquisition is one transaction around
//! [`crate::lease::plan_acquire`] (group row locked `FOR UPDATE`), retried when InnoDB rolls it
//! back as a deadlock; renew and release are one compare-and-swap `UPDATE` each. A table name
//! without room for the suffixes (more than 51 characters) serves ids, and its lease operations
//! are [`StoreError::InvalidSetup`].

mod audit;
mod blocks;
mod conn;
mod leases;
mod meta;
mod sql;
mod tickets;

pub use crate::config::{MysqlConfig, MysqlMode, PoolConfig, DEFAULT_TABLE};
pub use blocks::MysqlAuthority;
pub use sql::{schema_sql, ticket_sql, ticket_table_name, ticket_table_sql, TICKET_TABLE_PREFIX};
pub use tickets::MysqlTicketAuthority;

use crate::StoreError;
use idmint_core::NamespaceName;
use mysql_async::prelude::{FromValue, Queryable};
use mysql_async::{Conn, Row};
use std::collections::HashMap;
use std::sync::Mutex;

const KIND: &str = "mysql";

/// Runs a statement that returns no rows; (affected rows, last insert id).
pub(super) async fn execute(conn: &mut Conn, sql: &str) -> Result<(u64, Option<u64>), StoreError> {
    conn.query_drop(sql)
        .await
        .map_err(|e| driver_error("statement", e))?;
    Ok((conn.affected_rows(), conn.last_insert_id()))
}

/// Runs `ddl` unless `information_schema` lists the table `name` (unquoted) in the
/// connection's database: a user without the `CREATE` privilege can use a table made for it.
pub(super) async fn ensure_table(conn: &mut Conn, name: &str, ddl: &str) -> Result<(), StoreError> {
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
         AND TABLE_NAME = '{name}'"
    );
    let rows = query(conn, &sql).await?;
    match rows.first().map(|row| col::<u64>(row, 0, "COUNT(*)")) {
        Some(Ok(n)) if n > 0 => Ok(()),
        _ => execute(conn, ddl).await.map(drop),
    }
}

pub(super) async fn query(conn: &mut Conn, sql: &str) -> Result<Vec<Row>, StoreError> {
    conn.query::<Row, _>(sql)
        .await
        .map_err(|e| driver_error("query", e))
}

/// Column `i` of `row` as `T`; a missing or unconvertible value is `Corrupt`.
pub(super) fn col<T: FromValue>(row: &Row, i: usize, what: &str) -> Result<T, StoreError> {
    match row.get_opt::<T, usize>(i) {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(StoreError::Corrupt {
            message: format!("{what} holds an unexpected value: {e}"),
        }),
        None => Err(StoreError::Corrupt {
            message: format!("{what} is missing from the server's answer"),
        }),
    }
}

/// A configuration (ours or the server's) that cannot work, or could hand out an id twice.
pub(super) fn invalid_setup(message: String) -> StoreError {
    StoreError::InvalidSetup { message }
}

pub(super) fn unavailable(message: String) -> StoreError {
    StoreError::Unavailable {
        backend: KIND,
        message,
    }
}

/// Every driver error is `Unavailable`: I/O, protocol, and server errors alike (the callers
/// match the few server errors that mean something else before getting here).
pub(super) fn driver_error(what: &str, e: mysql_async::Error) -> StoreError {
    match e {
        mysql_async::Error::Server(e) => unavailable(format!(
            "{what}: server error {} ({}): {}",
            e.code, e.state, e.message
        )),
        other => unavailable(format!("{what}: {other}")),
    }
}

/// The server error code of `e`, if it is one.
pub(super) fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(e) => Some(e.code),
        _ => None,
    }
}

/// ER_NO_SUCH_TABLE.
pub(super) const ER_NO_SUCH_TABLE: u16 = 1146;

/// ER_LOCK_DEADLOCK: InnoDB rolled the transaction back.
pub(super) const ER_LOCK_DEADLOCK: u16 = 1213;

/// ER_DUP_FIELDNAME: the column exists.
pub(super) const ER_DUP_FIELDNAME: u16 = 1060;

/// A namespace name as an SQL string literal. Names are letters, digits, `_`, `-`, `.` and `:`
/// only ([`NamespaceName`]), so nothing needs escaping; quotes and backslashes are escaped
/// anyway should that rule ever widen.
pub(super) fn literal(name: &NamespaceName) -> String {
    format!(
        "'{}'",
        name.as_str().replace('\\', "\\\\").replace('\'', "''")
    )
}

/// Specs (immutable once created) by namespace, for one authority.
pub(super) struct SpecCache<T> {
    map: Mutex<HashMap<NamespaceName, T>>,
}

impl<T> Default for SpecCache<T> {
    fn default() -> Self {
        SpecCache {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> SpecCache<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NamespaceName, T>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub(super) fn get(&self, name: &NamespaceName) -> Option<T> {
        self.lock().get(name).cloned()
    }
    pub(super) fn put(&self, name: &NamespaceName, value: T) {
        self.lock().insert(name.clone(), value);
    }
    pub(super) fn forget(&self, name: &NamespaceName) {
        self.lock().remove(name);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::redact_url;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("mysql://root:s3cret@db:3306/idmint?x=1"),
            "mysql://root:***@db:3306/idmint?x=1"
        );
        assert_eq!(
            redact_url("mysql://root@db/idmint"),
            "mysql://root@db/idmint"
        );
        assert_eq!(redact_url("mysql://db/idmint"), "mysql://db/idmint");
        let config = MysqlConfig::new("mysql://u:pw@h/d");
        assert!(!format!("{config:?}").contains("pw"));
    }
}
