//! The MySQL/MariaDB authority (cargo feature `mysql`), in two modes:
//!
//! - [`MysqlAuthority`] (**block mode**, the one to use with idmint nodes): every namespace's
//!   watermark is one row of one InnoDB table; a reservation is one autocommit `UPDATE` of that
//!   row, one round trip.
//! - [`MysqlTicketAuthority`] (**Flickr ticket mode**): every namespace is its own `Tickets`
//!   table, and every id is one `REPLACE INTO … (stub) VALUES ('a')`; the server's
//!   `auto_increment_increment` / `auto_increment_offset` make two (or N) servers issue disjoint
//!   residue classes (odd/even). For namespaces served without a cache: one id per call.
//!
//! Both speak the text protocol through [`mysql_async`] (pure Rust), with their own small pool
//! of connections (see [`PoolConfig`]).
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
//!   hi       BIGINT UNSIGNED NOT NULL    -- the watermark
//! ) ENGINE=InnoDB
//! ```
//!
//! - `reserve`: one statement, in autocommit, that computes the block in SQL (DECIMAL
//!   arithmetic, so nothing overflows near 2^63 nor with steps near 2^64):
//!   `UPDATE t SET hi = LAST_INSERT_ID(<aligned start>) + LEAST(count - 1, (<max> - <start>)
//!   DIV step) * step + 1 WHERE name = '…' AND <start> <= <max>`. The block's **start** comes back
//!   in the OK packet's last-insert-id (the `LAST_INSERT_ID(expr)` sequence idiom), the affected
//!   row count says whether there was room; the block is then [`SequenceSpec::reserve`]`(start,
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
//! - `reserve`: `REPLACE INTO t (stub) VALUES ('a')`; the id is the OK packet's last-insert-id.
//!   **Each call returns a block of exactly one id, whatever `count`** (ids of a ticket server
//!   are not contiguous when several clients or servers share it): this is the one place where
//!   an authority returns fewer ids than asked before the id space ends, so ticket mode is for
//!   namespaces served without a cache (callers ask for `count = 1`). An id above the width's
//!   maximum is never returned: [`StoreError::Exhausted`].
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
//! - `give_back` validates the tail and is always [`GiveBack::Refused`]: a ticket server cannot
//!   lower its counter atomically, so tails are simply not reissued.
//! - `ensure_namespace`: `CREATE TABLE IF NOT EXISTS` (with `AUTO_INCREMENT = first`), then the
//!   comment is read back and compared.
//! - [`ticket_sql`] prints the DDL and the `my.cnf` lines of an N-server setup.
//!
//! ## Durability and exclusivity
//!
//! Every write is one autocommit InnoDB statement: when the server acknowledges it, it is
//! committed, and durable across a server crash with `innodb_flush_log_at_trx_commit = 1` (the
//! default; with binary logging also `sync_binlog = 1`). InnoDB's row lock on the namespace's
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
//! Rows this version did not write are [`StoreError::Corrupt`]; a URL without a database, an
//! invalid table name or timeout are [`StoreError::InvalidSetup`].
//!
//! ## What it does not do
//!
//! No retries, no failover between servers (point the URL at the primary, or at a proxy that
//! follows it; an asynchronous replica promoted after a crash may lack the last reservations),
//! no TLS setup beyond what the URL can say, no schema migrations, no deletion of namespaces.
//! Snowflake worker leases are not stored here.

use crate::config::redact_url;
pub use crate::config::{MysqlConfig, MysqlMode, PoolConfig, DEFAULT_TABLE};
use crate::{ops, Authority, GiveBack, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use mysql_async::prelude::{FromValue, Queryable};
use mysql_async::{Conn, Opts, OptsBuilder, Row};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

const KIND: &str = "mysql";
/// The prefix of ticket-mode tables.
pub const TICKET_TABLE_PREFIX: &str = "idmint_tickets_";
/// MySQL identifiers are at most 64 characters.
const MAX_IDENTIFIER: usize = 64;
/// The first words of a ticket table's comment.
const TICKET_COMMENT_TAG: &str = "idmint-ticket v1";
/// Idle connections unused for longer are pinged before use (the server may have closed them).
const PING_IDLE_AFTER: Duration = Duration::from_secs(30);
/// Attempts of an operation that raced with a concurrent `give_back` (no ambiguity involved:
/// the previous attempt changed nothing).
const RACE_ATTEMPTS: usize = 3;

// ---------------------------------------------------------------------------------------------
// Connections

/// The server's auto-increment settings of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AutoIncrement {
    increment: u64,
    offset: u64,
}

/// A connection kept between operations.
struct Idle {
    conn: Conn,
    auto_increment: Option<AutoIncrement>,
    since: Instant,
}

/// A connection lent to one operation, with its slot of the pool.
struct Session {
    conn: Conn,
    auto_increment: Option<AutoIncrement>,
    _permit: OwnedSemaphorePermit,
}

/// The connection pool both modes share: at most `max_connections` sessions, each operation
/// under one timeout, and a connection that failed or was abandoned is never reused.
struct Client {
    opts: Opts,
    /// `host:port/database`, for messages.
    target: String,
    op_timeout: Duration,
    max_idle: usize,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Idle>>,
    /// Ticket mode reads the session's auto-increment settings on every new connection.
    read_auto_increment: bool,
}

impl Client {
    fn new(config: &MysqlConfig, read_auto_increment: bool) -> Result<Client, StoreError> {
        let opts = Opts::from_url(&config.url).map_err(|e| {
            invalid_setup(format!(
                "invalid MySQL URL {}: {e}",
                redact_url(&config.url)
            ))
        })?;
        let Some(db) = opts.db_name().map(str::to_owned) else {
            return Err(invalid_setup(format!(
                "the MySQL URL {} names no database (mysql://user@host:port/DATABASE)",
                redact_url(&config.url)
            )));
        };
        let target = format!("{}:{}/{db}", opts.ip_or_hostname(), opts.tcp_port());
        let mut builder = OptsBuilder::from_opts(opts);
        if !config.url.contains("prefer_socket=") {
            // Keep the connection where the URL points (a proxy, a container's published port).
            builder = builder.prefer_socket(false);
        }
        if config.op_timeout.is_zero() || config.pool.max_connections == 0 {
            return Err(invalid_setup(
                "op_timeout and pool.max_connections must be above zero".into(),
            ));
        }
        Ok(Client {
            opts: builder.into(),
            target,
            op_timeout: config.op_timeout,
            max_idle: config.pool.max_idle,
            permits: Arc::new(Semaphore::new(config.pool.max_connections)),
            idle: Mutex::new(Vec::new()),
            read_auto_increment,
        })
    }

    /// Runs `op` on a session, all of it (waiting for a slot and connecting included) within the
    /// timeout. A session whose operation failed with `Unavailable` or timed out is discarded,
    /// and so is every idle connection (the server is probably gone or restarted): the next
    /// operation connects afresh.
    ///
    /// `op` gets the session and hands it back with its result.
    async fn run<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(Session) -> Fut,
        Fut: Future<Output = (Session, Result<T, StoreError>)>,
    {
        let work = async {
            let session = self.checkout().await?;
            let (session, out) = op(session).await;
            match &out {
                Err(StoreError::Unavailable { .. }) => {
                    drop(session);
                    self.discard_idle();
                }
                _ => self.checkin(session),
            }
            out
        };
        match tokio::time::timeout(self.op_timeout, work).await {
            Ok(out) => out.map_err(|e| match e {
                StoreError::Unavailable { backend, message } => StoreError::Unavailable {
                    backend,
                    message: format!("{what} on {}: {message}", self.target),
                },
                other => other,
            }),
            Err(_) => {
                // The abandoned connection was dropped with the future: never reused.
                self.discard_idle();
                Err(unavailable(format!(
                    "{what} on {}: no answer within {:?}",
                    self.target, self.op_timeout
                )))
            }
        }
    }

    async fn checkout(&self) -> Result<Session, StoreError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| unavailable("the connection pool is closed".into()))?;
        loop {
            let idle = self.lock_idle().pop();
            let Some(mut idle) = idle else { break };
            if idle.since.elapsed() >= PING_IDLE_AFTER && idle.conn.ping().await.is_err() {
                continue; // closed by the server meanwhile: drop it, try the next
            }
            return Ok(Session {
                conn: idle.conn,
                auto_increment: idle.auto_increment,
                _permit: permit,
            });
        }
        let mut conn = Conn::new(self.opts.clone())
            .await
            .map_err(|e| driver_error("connecting", e))?;
        let auto_increment = if self.read_auto_increment {
            Some(read_auto_increment(&mut conn).await?)
        } else {
            None
        };
        Ok(Session {
            conn,
            auto_increment,
            _permit: permit,
        })
    }

    fn checkin(&self, session: Session) {
        let mut idle = self.lock_idle();
        if idle.len() < self.max_idle {
            idle.push(Idle {
                conn: session.conn,
                auto_increment: session.auto_increment,
                since: Instant::now(),
            });
        }
    }

    fn discard_idle(&self) {
        let dropped: Vec<Idle> = std::mem::take(&mut *self.lock_idle());
        drop(dropped); // outside the lock: dropping a Conn spawns its disconnection
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        // The list stays consistent even if a holder panicked: it is only pushed and popped.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn read_auto_increment(conn: &mut Conn) -> Result<AutoIncrement, StoreError> {
    let rows = query(
        conn,
        "SELECT @@auto_increment_increment, @@auto_increment_offset",
    )
    .await?;
    let row = rows
        .first()
        .ok_or_else(|| unavailable("the server returned no auto-increment settings".into()))?;
    Ok(AutoIncrement {
        increment: col(row, 0, "@@auto_increment_increment")?,
        offset: col(row, 1, "@@auto_increment_offset")?,
    })
}

/// Runs a statement that returns no rows; (affected rows, last insert id).
async fn execute(conn: &mut Conn, sql: &str) -> Result<(u64, Option<u64>), StoreError> {
    conn.query_drop(sql)
        .await
        .map_err(|e| driver_error("statement", e))?;
    Ok((conn.affected_rows(), conn.last_insert_id()))
}

async fn query(conn: &mut Conn, sql: &str) -> Result<Vec<Row>, StoreError> {
    conn.query::<Row, _>(sql)
        .await
        .map_err(|e| driver_error("query", e))
}

/// Column `i` of `row` as `T`; a missing or unconvertible value is `Corrupt`.
fn col<T: FromValue>(row: &Row, i: usize, what: &str) -> Result<T, StoreError> {
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
fn invalid_setup(message: String) -> StoreError {
    StoreError::InvalidSetup { message }
}

fn unavailable(message: String) -> StoreError {
    StoreError::Unavailable {
        backend: KIND,
        message,
    }
}

/// Every driver error is `Unavailable`: I/O, protocol, and server errors alike (the callers
/// match the few server errors that mean something else before getting here).
fn driver_error(what: &str, e: mysql_async::Error) -> StoreError {
    match e {
        mysql_async::Error::Server(e) => unavailable(format!(
            "{what}: server error {} ({}): {}",
            e.code, e.state, e.message
        )),
        other => unavailable(format!("{what}: {other}")),
    }
}

/// The server error code of `e`, if it is one.
fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(e) => Some(e.code),
        _ => None,
    }
}

/// ER_NO_SUCH_TABLE.
const ER_NO_SUCH_TABLE: u16 = 1146;

/// Whether `s` is a plain identifier we may put between backticks without escaping.
fn valid_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_IDENTIFIER
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
}

/// `` `name` ``, with backticks doubled.
fn quote_identifier(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// A namespace name as an SQL string literal. Names are letters, digits, `_`, `-` and `.`
/// only ([`NamespaceName`]), so nothing needs escaping; quotes and backslashes are escaped
/// anyway should that rule ever widen.
fn literal(name: &NamespaceName) -> String {
    format!(
        "'{}'",
        name.as_str().replace('\\', "\\\\").replace('\'', "''")
    )
}

// ---------------------------------------------------------------------------------------------
// Block mode

/// `CREATE TABLE IF NOT EXISTS` of block mode's table `table` (for `idmint sql mysql`).
pub fn schema_sql(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n  \
         name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,\n  \
         width TINYINT UNSIGNED NOT NULL,\n  \
         first BIGINT UNSIGNED NOT NULL,\n  \
         step BIGINT UNSIGNED NOT NULL,\n  \
         `offset` BIGINT UNSIGNED NOT NULL,\n  \
         hi BIGINT UNSIGNED NOT NULL\n\
         ) ENGINE=InnoDB COMMENT='idmint namespaces v1: hi is the watermark'",
        quote_identifier(table)
    )
}

/// The MySQL/MariaDB authority in block mode: see the [module docs](self).
pub struct MysqlAuthority {
    client: Client,
    table: String,
    specs: SpecCache<SequenceSpec>,
}

impl fmt::Debug for MysqlAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlAuthority")
            .field("target", &self.client.target)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl MysqlAuthority {
    /// Connects (within `config.op_timeout`) and creates the table if absent.
    ///
    /// [`StoreError::InvalidSetup`] if the URL is invalid or names no database, or the table
    /// name is not a plain identifier; [`StoreError::Unavailable`] if the server cannot be
    /// reached or refuses.
    pub async fn connect(config: MysqlConfig) -> Result<Self, StoreError> {
        if !valid_identifier(&config.table) {
            return Err(invalid_setup(format!(
                "table name {:?} is not a plain identifier (letters, digits, _ and $, at most 64)",
                config.table
            )));
        }
        let client = Client::new(&config, false)?;
        let exists = format!(
            "SELECT COUNT(*) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{}'",
            config.table
        );
        let ddl = schema_sql(&config.table);
        client
            .run("creating the schema", |mut s| async move {
                // Create only when absent: a user without the CREATE privilege can still use
                // a table made for it.
                let out = match query(&mut s.conn, &exists).await {
                    Ok(rows) => match rows.first().map(|row| col::<u64>(row, 0, "COUNT(*)")) {
                        Some(Ok(n)) if n > 0 => Ok(()),
                        _ => execute(&mut s.conn, &ddl).await.map(drop),
                    },
                    Err(e) => Err(e),
                };
                (s, out)
            })
            .await?;
        Ok(MysqlAuthority {
            table: quote_identifier(&config.table),
            client,
            specs: SpecCache::default(),
        })
    }

    fn select_sql(&self, name: Option<&NamespaceName>) -> String {
        let filter = match name {
            Some(name) => format!(" WHERE name = {}", literal(name)),
            None => " ORDER BY name".into(),
        };
        format!(
            "SELECT name, width, first, step, `offset`, hi FROM {}{filter}",
            self.table
        )
    }

    /// The one statement of a reservation; see the module docs.
    fn reserve_sql(&self, name: &NamespaceName, count: u64) -> String {
        // count - 1, capped where no namespace has that many ids left (keeps it a BIGINT).
        let more = (count - 1).min(i64::MAX as u64);
        let x = "GREATEST(CAST(hi AS DECIMAL(21,0)), CAST(first AS DECIMAL(21,0)))";
        let start = format!(
            "({x} + MOD(CAST(`offset` AS DECIMAL(21,0)) + CAST(step AS DECIMAL(21,0)) \
             - MOD({x}, step), step))"
        );
        let max = "(CASE width WHEN 32 THEN 2147483647 ELSE 9223372036854775807 END)";
        format!(
            "UPDATE {table} SET hi = LAST_INSERT_ID(CAST({start} AS UNSIGNED)) \
             + LEAST({more}, ({max} - {start}) DIV step) * step + 1 \
             WHERE name = {name} AND {start} <= {max}",
            table = self.table,
            name = literal(name),
        )
    }

    /// The namespace's spec: cached, or read (and cached). `None` if it does not exist.
    async fn spec_on(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
    ) -> Result<Option<SequenceSpec>, StoreError> {
        if let Some(spec) = self.specs.get(name) {
            return Ok(Some(spec));
        }
        Ok(self.read_state(conn, name).await?.map(|state| {
            self.specs.put(name, state.spec);
            state.spec
        }))
    }

    async fn read_state(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
    ) -> Result<Option<NamespaceState>, StoreError> {
        let rows = query(conn, &self.select_sql(Some(name))).await?;
        match rows.first() {
            Some(row) => decode_block_row(row).map(Some),
            None => Ok(None),
        }
    }

    async fn reserve_on(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
        count: u64,
    ) -> Result<Reservation, StoreError> {
        let Some(spec) = self.spec_on(conn, name).await? else {
            return Err(StoreError::UnknownNamespace { name: name.clone() });
        };
        let sql = self.reserve_sql(name, count);
        for _ in 0..RACE_ATTEMPTS {
            let (affected, start) = execute(conn, &sql).await?;
            if affected == 1 {
                // LAST_INSERT_ID(0) leaves no id in the OK packet: a start of 0 reads as None.
                let start = start.unwrap_or(0);
                let block = spec
                    .reserve(start, count)
                    .ok()
                    .filter(|b| b.start() == start)
                    .ok_or_else(|| StoreError::Corrupt {
                        message: format!(
                            "namespace {name}: the server reserved from {start}, which is not \
                             an id of {spec:?}"
                        ),
                    })?;
                return Ok(Reservation {
                    block,
                    watermark: block.end(),
                });
            }
            // Nothing changed: unknown, exhausted, or a give_back made room meanwhile.
            match self.read_state(conn, name).await? {
                None => {
                    self.specs.forget(name);
                    return Err(StoreError::UnknownNamespace { name: name.clone() });
                }
                Some(state) => {
                    ops::reserve(&state, count)?;
                }
            }
        }
        Err(unavailable(format!(
            "reserving from {name} kept racing with concurrent give-backs"
        )))
    }

    async fn give_back_on(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
        tail: Block,
    ) -> Result<GiveBack, StoreError> {
        let Some(spec) = self.spec_on(conn, name).await? else {
            return Err(StoreError::UnknownNamespace { name: name.clone() });
        };
        // Validate the tail against the spec only: with the watermark set to the tail's end
        // the shared check either rejects the tail or accepts it; the CAS below decides.
        let assumed = NamespaceState {
            name: name.clone(),
            spec,
            watermark: tail.end(),
        };
        let lowered = match ops::give_back(&assumed, tail)? {
            Ok(lowered) => lowered,
            Err(refused) => return Ok(refused),
        };
        let sql = format!(
            "UPDATE {} SET hi = {lowered} WHERE name = {} AND hi = {}",
            self.table,
            literal(name),
            tail.end()
        );
        for _ in 0..RACE_ATTEMPTS {
            let (affected, _) = execute(conn, &sql).await?;
            if affected == 1 {
                return Ok(GiveBack::Returned);
            }
            match self.read_state(conn, name).await? {
                None => {
                    self.specs.forget(name);
                    return Err(StoreError::UnknownNamespace { name: name.clone() });
                }
                // Back at the tail's end since the CAS (a give-back and a new reservation in
                // between): try again.
                Some(state) if state.watermark == tail.end() => continue,
                Some(state) => {
                    return Ok(GiveBack::Refused {
                        watermark: state.watermark,
                    })
                }
            }
        }
        Err(unavailable(format!(
            "giving back to {name} kept racing with concurrent reservations"
        )))
    }

    async fn ensure_on(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let sql = format!(
            "INSERT INTO {} (name, width, first, step, `offset`, hi) \
             VALUES ({}, {}, {}, {}, {}, {}) ON DUPLICATE KEY UPDATE name = name",
            self.table,
            literal(name),
            spec.width().bits(),
            spec.first(),
            spec.step(),
            spec.offset(),
            spec.initial_watermark()
        );
        execute(conn, &sql).await?;
        let state = self.read_state(conn, name).await?.ok_or_else(|| {
            unavailable(format!(
                "namespace {name} is missing right after its insert"
            ))
        })?;
        self.specs.put(name, state.spec);
        match ops::ensure(name, Some(&state), spec)? {
            None => Ok(state),
            Some(_) => Err(StoreError::Corrupt {
                message: format!("namespace {name}: the stored row was not recognised"),
            }),
        }
    }
}

/// A block-mode row: `name, width, first, step, offset, hi`.
fn decode_block_row(row: &Row) -> Result<NamespaceState, StoreError> {
    let key: String = col(row, 0, "namespaces.name")?;
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("namespace row {key:?}: {what}"),
    };
    let name = NamespaceName::new(&key).map_err(|e| corrupt(format!("invalid name: {e}")))?;
    let bits: u32 = col(row, 1, "namespaces.width")?;
    let width = Width::from_bits(bits)
        .ok_or_else(|| corrupt(format!("width {bits} is neither 32 nor 64")))?;
    let first: u64 = col(row, 2, "namespaces.first")?;
    let step: u64 = col(row, 3, "namespaces.step")?;
    let offset: u64 = col(row, 4, "namespaces.offset")?;
    let watermark: u64 = col(row, 5, "namespaces.hi")?;
    ops::stored_state(name, width, first, step, offset, watermark).map_err(corrupt)
}

#[async_trait]
impl Authority for MysqlAuthority {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let name = name.clone();
        self.client
            .run("ensure_namespace", |mut s| async move {
                let out = self.ensure_on(&mut s.conn, &name, spec).await;
                (s, out)
            })
            .await
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        if count == 0 {
            return Err(StoreError::InvalidCount);
        }
        let name = name.clone();
        self.client
            .run("reserve", |mut s| async move {
                let out = self.reserve_on(&mut s.conn, &name, count).await;
                (s, out)
            })
            .await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        let name = name.clone();
        self.client
            .run("state", |mut s| async move {
                let out = self.read_state(&mut s.conn, &name).await;
                (s, out)
            })
            .await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let sql = self.select_sql(None);
        let mut all: Vec<NamespaceState> = self
            .client
            .run("list", |mut s| async move {
                let out = match query(&mut s.conn, &sql).await {
                    Ok(rows) => rows.iter().map(decode_block_row).collect(),
                    Err(e) => Err(e),
                };
                (s, out)
            })
            .await?;
        // ascii_bin orders like Rust's strings already; sorting again does not depend on it.
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let name = name.clone();
        self.client
            .run("give_back", |mut s| async move {
                let out = self.give_back_on(&mut s.conn, &name, tail).await;
                (s, out)
            })
            .await
    }
}

/// Specs (immutable once created) by namespace, for one authority.
struct SpecCache<T> {
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
    fn get(&self, name: &NamespaceName) -> Option<T> {
        self.lock().get(name).cloned()
    }
    fn put(&self, name: &NamespaceName, value: T) {
        self.lock().insert(name.clone(), value);
    }
    fn forget(&self, name: &NamespaceName) {
        self.lock().remove(name);
    }
}

// ---------------------------------------------------------------------------------------------
// Ticket mode

/// The ticket table of `namespace`: `idmint_tickets_<name>` when the name is a lower-case
/// identifier (`[a-z0-9_]`) of at most 49 characters, otherwise
/// `idmint_tickets_<sanitised, at most 32>_<16 hex digits of a stable hash of the name>`
/// (so `Photos`, `photos.x` and `photos_x` get different tables). At most 64 characters.
pub fn ticket_table_name(namespace: &NamespaceName) -> String {
    let name = namespace.as_str();
    let room = MAX_IDENTIFIER - TICKET_TABLE_PREFIX.len();
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if plain && name.len() <= room {
        return format!("{TICKET_TABLE_PREFIX}{name}");
    }
    let sanitised: String = name
        .chars()
        .take(32)
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{TICKET_TABLE_PREFIX}{sanitised}_{:016x}",
        fnv1a64(name.as_bytes())
    )
}

/// FNV-1a, 64 bits: stable across Rust versions and platforms, unlike `DefaultHasher`.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The comment of a ticket table: what namespace and spec it holds.
fn ticket_comment(namespace: &NamespaceName, spec: &SequenceSpec) -> String {
    format!(
        "{TICKET_COMMENT_TAG} name={namespace} width={} first={} step={} offset={}",
        spec.width().bits(),
        spec.first(),
        spec.step(),
        spec.offset()
    )
}

/// Parses [`ticket_comment`]'s output.
fn parse_ticket_comment(comment: &str) -> Option<(NamespaceName, SequenceSpec)> {
    let rest = comment.strip_prefix(TICKET_COMMENT_TAG)?;
    let mut fields = HashMap::new();
    for part in rest.split_whitespace() {
        let (k, v) = part.split_once('=')?;
        fields.insert(k, v);
    }
    let name = NamespaceName::new(fields.get("name")?).ok()?;
    let num = |k: &str| fields.get(k)?.parse::<u64>().ok();
    let width = Width::from_bits(u32::try_from(num("width")?).ok()?)?;
    let spec = SequenceSpec::new(width, num("first")?, num("step")?, num("offset")?).ok()?;
    Some((name, spec))
}

/// `CREATE TABLE IF NOT EXISTS` of `namespace`'s ticket table with `spec` (the spec of the
/// server the statement is run on: its step is the server's `auto-increment-increment`).
pub fn ticket_table_sql(namespace: &NamespaceName, spec: &SequenceSpec) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n  \
         id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,\n  \
         stub CHAR(1) NOT NULL DEFAULT '' UNIQUE\n\
         ) ENGINE=InnoDB AUTO_INCREMENT={} COMMENT='{}'",
        quote_identifier(&ticket_table_name(namespace)),
        spec.first().max(1),
        ticket_comment(namespace, spec)
    )
}

/// The SQL and server configuration of Flickr's ticket servers for `namespace`, with `servers`
/// servers (at least 1): for each server its `my.cnf` lines (`auto-increment-increment = N`,
/// `auto-increment-offset = i`) and its table (64-bit ids from 1), and how to take an id.
/// For `idmint sql mysql`.
pub fn ticket_sql(namespace: &NamespaceName, servers: u32) -> String {
    let n = servers.max(1);
    let table = quote_identifier(&ticket_table_name(namespace));
    let mut out = format!(
        "-- idmint: Flickr ticket servers for namespace {namespace}, {n} server(s).\n\
         -- Server i issues the ids congruent to i mod {n}, so the servers never collide;\n\
         -- clients take ids from them round-robin and skip one that is down.\n\
         -- Take one id (one round trip):\n\
         --   REPLACE INTO {table} (stub) VALUES ('a');  -- then LAST_INSERT_ID()\n"
    );
    for i in 1..=n {
        let offset = u64::from(i % n);
        let spec = SequenceSpec::new(Width::Bits64, 1, u64::from(n), offset);
        out.push_str(&format!(
            "\n-- Server {i} of {n}. In its my.cnf:\n\
             --   [mysqld]\n\
             --   auto-increment-increment = {n}\n\
             --   auto-increment-offset = {i}\n\
             -- and on it:\n"
        ));
        match spec {
            Ok(spec) => {
                out.push_str(&ticket_table_sql(namespace, &spec));
                out.push_str(";\n");
            }
            // Every offset below n has ids between 1 and 2^63 - 1: not reached.
            Err(e) => out.push_str(&format!("-- (no table: {e})\n")),
        }
    }
    out
}

/// The spec a server's auto-increment settings give `requested`'s width and first id.
fn server_spec(auto: AutoIncrement, requested: &SequenceSpec) -> Result<SequenceSpec, StoreError> {
    if auto.increment == 0 || auto.offset == 0 || auto.offset > auto.increment {
        return Err(invalid_setup(format!(
            "the server's auto_increment_offset {} is not within 1..=auto_increment_increment \
             {} (MySQL then ignores it): fix the server's configuration",
            auto.offset, auto.increment
        )));
    }
    SequenceSpec::new(
        requested.width(),
        requested.first(),
        auto.increment,
        auto.offset % auto.increment,
    )
    .map_err(|e| {
        invalid_setup(format!(
            "the server's auto-increment settings (increment {}, offset {}) issue no id of a \
             {}-bit namespace from {}: {e}",
            auto.increment,
            auto.offset,
            requested.width().bits(),
            requested.first()
        ))
    })
}

/// Whether the session issues exactly `spec`'s residue class; the conflict otherwise.
fn check_server(
    auto: Option<AutoIncrement>,
    name: &NamespaceName,
    spec: &SequenceSpec,
) -> Result<(), StoreError> {
    let auto = auto.ok_or_else(|| unavailable("auto-increment settings not read".into()))?;
    let server = server_spec(auto, spec)?;
    if server.step() == spec.step() && server.offset() == spec.offset() {
        Ok(())
    } else {
        Err(StoreError::SpecConflict {
            name: name.clone(),
            existing: server,
            requested: *spec,
        })
    }
}

/// What a ticket-mode namespace's cache holds: its spec and table.
#[derive(Debug, Clone)]
struct Ticket {
    spec: SequenceSpec,
    table: String,
}

/// The MySQL/MariaDB authority in Flickr ticket mode: one id per call, from the server's
/// auto-increment counter. See the [module docs](self).
pub struct MysqlTicketAuthority {
    client: Client,
    tickets: SpecCache<Ticket>,
}

impl fmt::Debug for MysqlTicketAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlTicketAuthority")
            .field("target", &self.client.target)
            .finish_non_exhaustive()
    }
}

impl MysqlTicketAuthority {
    /// Connects (within `config.op_timeout`) and reads the server's auto-increment settings.
    /// Tables are created per namespace by `ensure_namespace`; `config.table` is not used.
    ///
    /// [`StoreError::InvalidSetup`] if the URL is invalid or names no database;
    /// [`StoreError::Unavailable`] if the server cannot be reached or refuses.
    pub async fn connect(config: MysqlConfig) -> Result<Self, StoreError> {
        let client = Client::new(&config, true)?;
        client
            .run("connecting", |s| async move {
                let out = s
                    .auto_increment
                    .map(drop)
                    .ok_or_else(|| unavailable("auto-increment settings not read".into()));
                (s, out)
            })
            .await?;
        Ok(MysqlTicketAuthority {
            client,
            tickets: SpecCache::default(),
        })
    }

    /// The server's auto-increment settings, as (increment, offset), read on a connection.
    pub async fn server_auto_increment(&self) -> Result<(u64, u64), StoreError> {
        self.client
            .run("reading auto-increment settings", |s| async move {
                let out = s
                    .auto_increment
                    .map(|auto| (auto.increment, auto.offset))
                    .ok_or_else(|| unavailable("auto-increment settings not read".into()));
                (s, out)
            })
            .await
    }

    /// Takes one id: `reserve(name, 1)`'s only id.
    pub async fn next_id(&self, name: &NamespaceName) -> Result<u64, StoreError> {
        Ok(self.reserve(name, 1).await?.block.start())
    }

    /// State of `namespace`'s table, `None` if there is none.
    async fn read_state(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
    ) -> Result<Option<NamespaceState>, StoreError> {
        let table = ticket_table_name(name);
        let sql = format!(
            "SELECT TABLE_COMMENT, AUTO_INCREMENT FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{table}'"
        );
        let rows = query(conn, &sql).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let comment: String = col(row, 0, "TABLE_COMMENT")?;
        let counter: Option<u64> = col(row, 1, "AUTO_INCREMENT")?;
        let (stored, spec) = parse_ticket_comment(&comment).ok_or_else(|| StoreError::Corrupt {
            message: format!("table {table} is not an idmint ticket table (comment {comment:?})"),
        })?;
        if &stored != name {
            return Err(StoreError::Corrupt {
                message: format!("table {table} holds namespace {stored}, not {name}"),
            });
        }
        let sql = format!("SELECT MAX(id) FROM {}", quote_identifier(&table));
        let rows = query(conn, &sql).await?;
        let max_id: Option<u64> = match rows.first() {
            Some(row) => col(row, 0, "MAX(id)")?,
            None => None,
        };
        self.tickets.put(
            name,
            Ticket {
                spec,
                table: quote_identifier(&table),
            },
        );
        Ok(Some(ticket_state(name.clone(), spec, counter, max_id)))
    }

    async fn ticket_on(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
    ) -> Result<Option<Ticket>, StoreError> {
        if let Some(ticket) = self.tickets.get(name) {
            return Ok(Some(ticket));
        }
        self.read_state(conn, name).await?;
        Ok(self.tickets.get(name))
    }

    async fn reserve_on(
        &self,
        session: &mut Session,
        name: &NamespaceName,
    ) -> Result<Reservation, StoreError> {
        let Some(ticket) = self.ticket_on(&mut session.conn, name).await? else {
            return Err(StoreError::UnknownNamespace { name: name.clone() });
        };
        let spec = ticket.spec;
        check_server(session.auto_increment, name, &spec)?;
        let sql = format!("REPLACE INTO {} (stub) VALUES ('a')", ticket.table);
        let id = match session.conn.query_drop(sql.as_str()).await {
            Ok(()) => session.conn.last_insert_id(),
            Err(e) if server_code(&e) == Some(ER_NO_SUCH_TABLE) => {
                self.tickets.forget(name);
                return Err(StoreError::UnknownNamespace { name: name.clone() });
            }
            Err(e) => return Err(driver_error("REPLACE", e)),
        };
        let id =
            id.ok_or_else(|| unavailable(format!("REPLACE into {} returned no id", ticket.table)))?;
        let max = spec.width().max_id();
        if id > max {
            // Burned, never returned: the id space of this width is over.
            return Err(StoreError::Exhausted {
                name: name.clone(),
                bits: spec.width().bits(),
                watermark: max + 1,
            });
        }
        if id < spec.first() || id % spec.step() != spec.offset() {
            return Err(StoreError::Corrupt {
                message: format!(
                    "ticket table {} issued {id}, which is not an id of {spec:?}: refusing it",
                    ticket.table
                ),
            });
        }
        let block = Block::new(id, id + 1, spec.step())
            .ok_or_else(|| unavailable(format!("id {id} makes no block")))?;
        Ok(Reservation {
            block,
            watermark: block.end(),
        })
    }

    async fn ensure_on(
        &self,
        session: &mut Session,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        check_server(session.auto_increment, name, &spec)?;
        execute(&mut session.conn, &ticket_table_sql(name, &spec)).await?;
        let state = self
            .read_state(&mut session.conn, name)
            .await?
            .ok_or_else(|| {
                unavailable(format!("ticket table of {name} is missing after CREATE"))
            })?;
        match ops::ensure(name, Some(&state), spec)? {
            None => Ok(state),
            Some(_) => Err(StoreError::Corrupt {
                message: format!("namespace {name}: the ticket table was not recognised"),
            }),
        }
    }

    /// Validates `tail` and refuses it (see [`Authority::give_back`] below).
    async fn refuse_tail(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
        tail: Block,
    ) -> Result<GiveBack, StoreError> {
        let Some(state) = self.read_state(conn, name).await? else {
            return Err(StoreError::UnknownNamespace { name: name.clone() });
        };
        // Validate against the spec only (see MysqlAuthority::give_back_on).
        let assumed = NamespaceState {
            watermark: tail.end(),
            ..state.clone()
        };
        let _valid = ops::give_back(&assumed, tail)?;
        Ok(GiveBack::Refused {
            watermark: state.watermark,
        })
    }

    async fn list_on(&self, conn: &mut Conn) -> Result<Vec<NamespaceState>, StoreError> {
        let sql = format!(
            "SELECT TABLE_NAME, TABLE_COMMENT, AUTO_INCREMENT FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE '{}%' ORDER BY TABLE_NAME",
            TICKET_TABLE_PREFIX.replace('_', "\\_")
        );
        let rows = query(conn, &sql).await?;
        let mut found = Vec::new();
        for row in &rows {
            let table: String = col(row, 0, "TABLE_NAME")?;
            let comment: String = col(row, 1, "TABLE_COMMENT")?;
            let counter: Option<u64> = col(row, 2, "AUTO_INCREMENT")?;
            // Tables with the prefix but without idmint's comment are someone else's.
            if let Some((name, spec)) = parse_ticket_comment(&comment) {
                if ticket_table_name(&name) == table {
                    found.push((table, name, spec, counter));
                }
            }
        }
        if found.is_empty() {
            return Ok(Vec::new());
        }
        // MAX(id) of every table in one round trip (AUTO_INCREMENT in information_schema may
        // be a cached statistic on some servers; MAX(id) + 1 never is).
        let union = found
            .iter()
            .enumerate()
            .map(|(i, (table, ..))| format!("SELECT {i}, MAX(id) FROM {}", quote_identifier(table)))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let mut max_ids = vec![None; found.len()];
        for row in query(conn, &union).await? {
            let i: usize = col(&row, 0, "table index")?;
            let max_id: Option<u64> = col(&row, 1, "MAX(id)")?;
            if let Some(slot) = max_ids.get_mut(i) {
                *slot = max_id;
            }
        }
        Ok(found
            .into_iter()
            .zip(max_ids)
            .map(|((_, name, spec, counter), max_id)| ticket_state(name, spec, counter, max_id))
            .collect())
    }
}

/// A ticket namespace's watermark: the largest of `first`, the table's counter and
/// `MAX(id) + 1`, at most the width's maximum + 1.
fn ticket_state(
    name: NamespaceName,
    spec: SequenceSpec,
    counter: Option<u64>,
    max_id: Option<u64>,
) -> NamespaceState {
    let ceiling = spec.width().max_id() + 1;
    let watermark = spec
        .initial_watermark()
        .max(counter.unwrap_or(0))
        .max(max_id.map_or(0, |id| id.saturating_add(1)))
        .min(ceiling);
    NamespaceState {
        name,
        spec,
        watermark,
    }
}

#[async_trait]
impl Authority for MysqlTicketAuthority {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let name = name.clone();
        self.client
            .run("ensure_namespace", |mut s| async move {
                let out = self.ensure_on(&mut s, &name, spec).await;
                (s, out)
            })
            .await
    }

    /// One id per call, whatever `count` (at least 1): see the module docs.
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        if count == 0 {
            return Err(StoreError::InvalidCount);
        }
        let name = name.clone();
        self.client
            .run("reserve", |mut s| async move {
                let out = self.reserve_on(&mut s, &name).await;
                (s, out)
            })
            .await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        let name = name.clone();
        self.client
            .run("state", |mut s| async move {
                let out = self.read_state(&mut s.conn, &name).await;
                (s, out)
            })
            .await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let mut all = self
            .client
            .run("list", |mut s| async move {
                let out = self.list_on(&mut s.conn).await;
                (s, out)
            })
            .await?;
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Validates the tail, then refuses it: a ticket server's counter cannot be lowered by
    /// compare-and-swap, so tails are not reissued.
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let name = name.clone();
        self.client
            .run("give_back", |mut s| async move {
                let out = self.refuse_tail(&mut s.conn, &name, tail).await;
                (s, out)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn name(s: &str) -> NamespaceName {
        NamespaceName::new(s).unwrap()
    }

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

    #[test]
    fn ticket_tables_are_distinct_and_short() {
        assert_eq!(ticket_table_name(&name("photos")), "idmint_tickets_photos");
        let names = [
            "Photos",
            "photos.x",
            "photos_x",
            "photos-x",
            "a".repeat(128).as_str(),
        ]
        .map(|s| ticket_table_name(&name(s)));
        for (i, a) in names.iter().enumerate() {
            assert!(a.len() <= 64 && valid_identifier(a), "{a}");
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn ticket_comments_round_trip() {
        let spec = SequenceSpec::new(Width::Bits32, 7, 2, 1).unwrap();
        let n = name("users.names");
        assert_eq!(
            parse_ticket_comment(&ticket_comment(&n, &spec)),
            Some((n, spec))
        );
        assert_eq!(parse_ticket_comment("something else"), None);
        assert_eq!(
            parse_ticket_comment("idmint-ticket v1 name=x width=64 first=1 step=2 offset=2"),
            None
        );
    }

    #[test]
    fn server_settings_map_to_specs() {
        let want = SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap();
        // MySQL offset 2 of increment 2 is idmint offset 0.
        let auto = AutoIncrement {
            increment: 2,
            offset: 2,
        };
        assert_eq!(server_spec(auto, &want).unwrap(), want);
        assert!(check_server(Some(auto), &name("a"), &want).is_ok());
        let odd = AutoIncrement {
            increment: 2,
            offset: 1,
        };
        assert!(matches!(
            check_server(Some(odd), &name("a"), &want),
            Err(StoreError::SpecConflict { .. })
        ));
        let bad = AutoIncrement {
            increment: 2,
            offset: 3,
        };
        assert!(matches!(
            server_spec(bad, &want),
            Err(StoreError::InvalidSetup { .. })
        ));
    }

    #[test]
    fn ticket_sql_configures_every_server() {
        let sql = ticket_sql(&name("photos"), 2);
        for line in [
            "auto-increment-increment = 2",
            "auto-increment-offset = 1",
            "auto-increment-offset = 2",
            "step=2 offset=1",
            "step=2 offset=0",
            "REPLACE INTO `idmint_tickets_photos` (stub) VALUES ('a')",
        ] {
            assert!(sql.contains(line), "{line} missing from\n{sql}");
        }
    }

    #[test]
    fn ticket_watermark_is_the_highest_evidence() {
        let spec = SequenceSpec::new(Width::Bits32, 10, 2, 1).unwrap();
        let n = name("t");
        assert_eq!(ticket_state(n.clone(), spec, Some(1), None).watermark, 10);
        assert_eq!(
            ticket_state(n.clone(), spec, Some(13), Some(11)).watermark,
            13
        );
        assert_eq!(ticket_state(n.clone(), spec, None, Some(11)).watermark, 12);
        assert_eq!(
            ticket_state(n, spec, Some(u64::MAX), None).watermark,
            Width::Bits32.max_id() + 1
        );
    }
}
