//! The PostgreSQL authority: namespaces and their watermarks in one table of a PostgreSQL
//! database (or of a database that speaks its protocol and the statements listed below).
//!
//! ## What it stores
//!
//! One table, `idmint_namespaces` by default ([`PostgresConfig::table`]), created by
//! [`PostgresAuthority::connect`] if absent; [`schema_sql`] prints the same DDL:
//!
//! | column        | type            | meaning                                                   |
//! |---------------|-----------------|-----------------------------------------------------------|
//! | `name`        | `text`, key     | the namespace                                             |
//! | `width`       | `smallint`      | 32 or 64                                                  |
//! | `first_id`    | `numeric(20,0)` | [`SequenceSpec::first`]                                   |
//! | `step`        | `numeric(20,0)` | [`SequenceSpec::step`] (a `u64`: may exceed `bigint`)     |
//! | `id_offset`   | `numeric(20,0)` | [`SequenceSpec::offset`]                                  |
//! | `watermark`   | `numeric(20,0)` | every id below it is reserved; up to 2^63, past `bigint`  |
//! | `block_start` | `numeric(20,0)` | start of the newest block; `NULL` before the first and after a give-back |
//!
//! `CHECK` constraints repeat the invariants of a valid spec and watermark, so a row the
//! arithmetic below would misread cannot be written. Every row read is validated again
//! ([`SequenceSpec::new`], `first <= watermark <= max + 1`, a valid [`NamespaceName`]); a row that
//! fails is [`StoreError::Corrupt`], never a panic.
//!
//! ## The statements, and what a compatible server must support
//!
//! - `reserve` is **one** autocommitted statement,
//!   `UPDATE … SET block_start = <start>, watermark = <end> WHERE name = $1 AND <start> <= <max>
//!   RETURNING …`, where `<start>` (the watermark aligned up to the residue class), the cut at the
//!   width's maximum and `<end>` are computed from the row's current values inside the statement,
//!   in `numeric` (so nothing overflows near 2^63). The row lock the `UPDATE` takes makes
//!   concurrent reservations, from any number of connections and processes, queue and each see
//!   the watermark the previous one wrote: blocks never overlap. What comes back is checked
//!   against idmint's own arithmetic ([`SequenceSpec::reserve`] from the returned start must give
//!   exactly the returned block) before it is returned. No row updated means unknown or
//!   exhausted; a plain `SELECT` tells which.
//! - `give_back` reads the row (`SELECT`), validates the tail as every backend does, then makes
//!   one compare-and-swap `UPDATE … SET watermark = <tail start> WHERE name = $1 AND watermark =
//!   <tail end>`.
//! - `ensure_namespace` is `INSERT … ON CONFLICT (name) DO NOTHING RETURNING …`, then a `SELECT`
//!   when the row was already there (creation happens once even under concurrent callers).
//! - `state` and `list` are plain `SELECT`s (`list` orders by `name COLLATE "C"`, byte order).
//! - At connect: `CREATE TABLE IF NOT EXISTS`, and on every new connection
//!   `SELECT set_config('synchronous_commit', 'on', false) WHERE
//!   current_setting('synchronous_commit') = 'off'` (a server or role configured with
//!   `synchronous_commit = off` would acknowledge commits before they are durable). A server that
//!   rejects this query is used as it is.
//! - Statements are prepared once per connection (extended query protocol) with `text`
//!   parameters cast to `numeric`/`smallint` in SQL, and results read as `text`.
//!
//! So a compatible server needs: `UPDATE … RETURNING`, `INSERT … ON CONFLICT DO NOTHING`,
//! `CREATE TABLE IF NOT EXISTS`, `CHECK` constraints, the `numeric` type with `mod`, `div`,
//! `GREATEST`, `LEAST`, `COLLATE "C"`, row locking by `UPDATE` in autocommit mode, and prepared
//! statements. PostgreSQL 9.5 or later has all of it. Behind PgBouncer in transaction pooling
//! mode, prepared statements need PgBouncer 1.21+ with `max_prepared_statements` set.
//!
//! ## Durability
//!
//! Every write is its own autocommitted transaction, and the call returns `Ok` only after the
//! server reported the commit. With `synchronous_commit` on (forced per session, see above) and
//! `fsync` on (the server's default; idmint cannot check it), the commit is flushed to the WAL
//! before the server answers; with synchronous replication it also reached the standbys the
//! server is configured to wait for.
//!
//! ## A lost reply never hands a block out twice
//!
//! A reservation is never retried inside the authority: if its connection fails or the operation
//! times out, the call returns [`StoreError::Unavailable`] and the connection is thrown away
//! (its task aborted, so a late reply cannot be read by anyone). The server may or may not have
//! committed the `UPDATE`. The next `reserve` is a new `UPDATE` that starts from whatever
//! watermark is committed at that point, so if the lost one committed, its block lies below the
//! new block and is simply never used (burned); it is not recomputed or reissued. The same holds
//! for `give_back` and `ensure_namespace`. Only the read-only `state` and `list` are retried,
//! once, on a fresh connection, when a pooled connection turns out to be dead.
//!
//! ## Connections
//!
//! A small pool of at most [`PostgresConfig::pool_size`] connections (tokio-postgres, no TLS),
//! managed here: idle connections are reused, dead ones dropped, and a new one is opened on
//! demand, so the authority reconnects by itself after a restart or a network cut. Every
//! operation, including waiting for a pooled connection and connecting, is bounded by
//! [`PostgresConfig::op_timeout`]; a stalled server yields [`StoreError::Unavailable`], never a
//! hang.
//!
//! ## What it does not do
//!
//! TLS (use a local socket, a tunnel or a sidecar), migrations of the table (the layout is
//! version 1; a change will come with its own), snowflake worker leases, retries of writes,
//! failover between servers (list several hosts in the URL and tokio-postgres tries them in
//! order at connect; consistency across a failover is the replication setup's business: use
//! synchronous replication). [`instagram_sql`] prints Instagram's PL/pgSQL id function for
//! `idmint sql postgres`; the authority itself does not use it.

pub use crate::config::PostgresConfig;
use crate::{ops, Authority, GiveBack, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Row, Statement};

const KIND: &str = "postgres";
/// How often `reserve` and `give_back` re-run their statement when a concurrent writer changed
/// the row between their `UPDATE` and the `SELECT` that explains an unchanged row. Each re-run
/// is safe (the previous statement definitely changed nothing); the bound only stops a livelock.
const MAX_ATTEMPTS: usize = 8;
/// PostgreSQL truncates identifiers longer than this many bytes (NAMEDATALEN - 1).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// The PostgreSQL authority. Share it behind an `Arc`; its pool serves concurrent callers.
pub struct PostgresAuthority {
    pool: Pool,
    table: String,
    op_timeout: Duration,
}

impl fmt::Debug for PostgresAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresAuthority")
            .field("server", &self.pool.server)
            .field("table", &self.table)
            .field("op_timeout", &self.op_timeout)
            .finish_non_exhaustive()
    }
}

impl PostgresAuthority {
    /// Connects (one connection, kept in the pool), creates the table if absent, and returns the
    /// authority.
    ///
    /// [`StoreError::Unavailable`] if the server cannot be reached within
    /// [`PostgresConfig::op_timeout`] or refuses the login or the DDL; the message names the host
    /// and port, never the password. [`StoreError::InvalidSetup`] if the configuration is invalid
    /// (an unparsable URL, an empty or over-long table name, a zero pool size or timeout).
    pub async fn connect(config: PostgresConfig) -> Result<Self, StoreError> {
        let table = validate_table(&config.table)?;
        if config.pool_size == 0 {
            return Err(invalid_setup("pool_size must be at least 1"));
        }
        if config.op_timeout.is_zero() {
            return Err(invalid_setup("op_timeout must be above zero"));
        }
        let mut pg = tokio_postgres::Config::from_str(&config.url).map_err(|e| {
            invalid_setup(format!("invalid PostgreSQL connection URL: {}", chain(&e)))
        })?;
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(config.op_timeout);
        }
        if pg.get_application_name().is_none() {
            pg.application_name("idmint");
        }
        let server = describe_server(&pg);
        let authority = PostgresAuthority {
            pool: Pool {
                pg,
                server,
                statements_for: StatementsSql::new(&table),
                permits: Semaphore::new(config.pool_size),
                idle: Mutex::new(Vec::new()),
            },
            table,
            op_timeout: config.op_timeout,
        };
        let ddl = schema_sql_quoted(&authority.table);
        authority
            .timed("connect", async {
                let mut conn = authority.pool.get_new_without_statements().await?;
                create_schema(&mut conn, &ddl).await?;
                conn.prepare(&authority.pool.statements_for).await?;
                conn.release();
                Ok(())
            })
            .await?;
        Ok(authority)
    }

    /// Runs `op` bounded by the operation timeout.
    async fn timed<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.op_timeout, op).await {
            Ok(result) => result,
            // The lease held by `op` was dropped mid-flight: its connection is discarded.
            Err(_) => Err(unavailable(format!(
                "{what} timed out after {:?} ({})",
                self.op_timeout, self.pool.server
            ))),
        }
    }

    /// A read-only query (`state`, `list`): retried once on a fresh connection when a pooled
    /// connection turns out to be dead. Reads change nothing, so running one twice is harmless.
    async fn read(
        &self,
        what: &str,
        pick: fn(&Statements) -> &Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.timed(what, async {
            let mut conn = self.pool.get().await?;
            let rows = match conn.query(pick, params).await {
                Err(_) if conn.reused && conn.broken => {
                    drop(conn);
                    let mut fresh = self.pool.get_new().await?;
                    let rows = fresh.query(pick, params).await?;
                    fresh.release();
                    return Ok(rows);
                }
                other => other?,
            };
            conn.release();
            Ok(rows)
        })
        .await
    }

    async fn select_one(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        let rows = self
            .read("state", |s| &s.select_one, &[&name.as_str()])
            .await?;
        rows.first().map(decode_state).transpose()
    }
}

#[async_trait]
impl Authority for PostgresAuthority {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let (width, first, step, offset) = spec_params(&spec);
        let inserted = self
            .timed("ensure_namespace", async {
                let mut conn = self.pool.get().await?;
                let rows = conn
                    .query(
                        |s| &s.insert,
                        &[&name.as_str(), &width, &first, &step, &offset],
                    )
                    .await?;
                conn.release();
                Ok(rows)
            })
            .await?;
        if let Some(row) = inserted.first() {
            let created = decode_state(row)?;
            if created != NamespaceState::new(name.clone(), spec) {
                return Err(corrupt(format!(
                    "namespace {name}: the row just inserted reads back as {created:?}"
                )));
            }
            return Ok(created);
        }
        // Already there (INSERT … ON CONFLICT waited for a concurrent creator to commit, so this
        // read, a new statement, sees the row).
        let existing = self.select_one(name).await?;
        match ops::ensure(name, existing.as_ref(), spec)? {
            None => existing.ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() }),
            // Deleted between the INSERT and the SELECT: only by hand, outside idmint.
            Some(_) => Err(StoreError::UnknownNamespace { name: name.clone() }),
        }
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        if count == 0 {
            return Err(StoreError::InvalidCount);
        }
        let count_param = count.to_string();
        for _ in 0..MAX_ATTEMPTS {
            // The one statement that reserves. Not retried after an error: see the module docs.
            let rows = self
                .timed("reserve", async {
                    let mut conn = self.pool.get().await?;
                    let rows = conn
                        .query(|s| &s.reserve, &[&name.as_str(), &count_param])
                        .await?;
                    conn.release();
                    Ok(rows)
                })
                .await?;
            if let Some(row) = rows.first() {
                return decode_reservation(row, name, count);
            }
            // Nothing updated: unknown, or no id left when the UPDATE ran.
            let Some(state) = self.select_one(name).await? else {
                return Err(StoreError::UnknownNamespace { name: name.clone() });
            };
            match ops::reserve(&state, count) {
                Err(e) => return Err(e),
                // A give_back lowered the watermark in between: the UPDATE changed nothing, so
                // running it again is safe.
                Ok(_) => continue,
            }
        }
        Err(unavailable(format!(
            "reserve on {name}: the watermark kept changing under {MAX_ATTEMPTS} attempts"
        )))
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.select_one(name).await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let rows = self.read("list", |s| &s.list, &[]).await?;
        let mut all = rows
            .iter()
            .map(decode_state)
            .collect::<Result<Vec<_>, _>>()?;
        // The server sorted by byte order already; this does not depend on its collation support.
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let (start, end) = (tail.start().to_string(), tail.end().to_string());
        for _ in 0..MAX_ATTEMPTS {
            let Some(state) = self.select_one(name).await? else {
                return Err(StoreError::UnknownNamespace { name: name.clone() });
            };
            if let Err(refused) = ops::give_back(&state, tail)? {
                return Ok(refused);
            }
            // The compare-and-swap. Not retried after an error: see the module docs.
            let updated = self
                .timed("give_back", async {
                    let mut conn = self.pool.get().await?;
                    let n = conn
                        .execute(|s| &s.give_back, &[&name.as_str(), &start, &end])
                        .await?;
                    conn.release();
                    Ok(n)
                })
                .await?;
            match updated {
                1 => return Ok(GiveBack::Returned),
                // A reservation won the race: the next read reports its watermark.
                0 => continue,
                n => {
                    return Err(corrupt(format!(
                        "give_back on {name} updated {n} rows of a keyed table"
                    )))
                }
            }
        }
        Err(unavailable(format!(
            "give_back on {name}: the watermark kept changing under {MAX_ATTEMPTS} attempts"
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// SQL

/// `"name"`: a double-quoted SQL identifier, inner quotes doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The table name, checked and quoted.
fn validate_table(table: &str) -> Result<String, StoreError> {
    if table.is_empty() || table.len() > MAX_IDENTIFIER_BYTES || table.contains('\0') {
        return Err(invalid_setup(format!(
            "the table name must be 1 to {MAX_IDENTIFIER_BYTES} bytes without NUL, got {table:?}"
        )));
    }
    Ok(quote_ident(table))
}

/// The DDL of the namespace table `table` (taken exactly as written: it is quoted), as
/// [`PostgresAuthority::connect`] runs it. Idempotent (`CREATE TABLE IF NOT EXISTS`).
pub fn schema_sql(table: &str) -> String {
    schema_sql_quoted(&quote_ident(table))
}

fn schema_sql_quoted(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (
    name        text PRIMARY KEY,
    width       smallint NOT NULL CHECK (width IN (32, 64)),
    first_id    numeric(20,0) NOT NULL CHECK (first_id >= 0),
    step        numeric(20,0) NOT NULL CHECK (step >= 1),
    id_offset   numeric(20,0) NOT NULL CHECK (id_offset >= 0 AND id_offset < step),
    watermark   numeric(20,0) NOT NULL CHECK (watermark >= first_id),
    block_start numeric(20,0) NULL CHECK (block_start IS NULL OR block_start < watermark),
    CHECK (first_id <= {MAX_32} OR width = 64),
    CHECK (first_id <= {MAX_64}),
    CHECK (watermark <= CASE width WHEN 32 THEN {CEILING_32} ELSE {CEILING_64} END)
);
"
    )
}

const MAX_32: u64 = Width::Bits32.max_id();
const MAX_64: u64 = Width::Bits64.max_id();
const CEILING_32: u64 = MAX_32 + 1;
const CEILING_64: u64 = MAX_64 + 1;

/// The columns every state-returning statement yields, in [`decode_state`]'s order.
const STATE_COLUMNS: &str =
    "name, width, first_id::text, step::text, id_offset::text, watermark::text";

/// The statements' text for one table.
#[derive(Debug)]
struct StatementsSql {
    insert: String,
    select_one: String,
    list: String,
    reserve: String,
    give_back: String,
}

impl StatementsSql {
    fn new(table: &str) -> Self {
        // The reservation arithmetic of `SequenceSpec::reserve`, in numeric, on the row's
        // current values (an UPDATE's SET sees the row version it locked):
        //   x     = max(watermark, first)
        //   start = x + (offset + step - x mod step) mod step        (align_up)
        //   max   = the width's largest id
        //   n     = min(count, (max - start) div step + 1)          (cut at the maximum)
        //   end   = start + (n - 1) * step + 1
        let x = "GREATEST(watermark, first_id)";
        let start = format!("({x} + mod(id_offset + step - mod({x}, step), step))");
        let max = format!("(CASE width WHEN 32 THEN {MAX_32}::numeric ELSE {MAX_64}::numeric END)");
        let n = format!("LEAST($2::text::numeric, div({max} - {start}, step) + 1)");
        StatementsSql {
            insert: format!(
                "INSERT INTO {table} (name, width, first_id, step, id_offset, watermark) \
                 VALUES ($1::text, $2::smallint, $3::text::numeric, $4::text::numeric, \
                 $5::text::numeric, $3::text::numeric) \
                 ON CONFLICT (name) DO NOTHING RETURNING {STATE_COLUMNS}"
            ),
            select_one: format!("SELECT {STATE_COLUMNS} FROM {table} WHERE name = $1::text"),
            list: format!("SELECT {STATE_COLUMNS} FROM {table} ORDER BY name COLLATE \"C\""),
            reserve: format!(
                "UPDATE {table} SET block_start = {start}, \
                 watermark = {start} + ({n} - 1) * step + 1 \
                 WHERE name = $1::text AND {start} <= {max} \
                 RETURNING {STATE_COLUMNS}, block_start::text"
            ),
            give_back: format!(
                "UPDATE {table} SET watermark = $2::text::numeric, block_start = NULL \
                 WHERE name = $1::text AND watermark = $3::text::numeric"
            ),
        }
    }
}

/// The statements, prepared on one connection.
struct Statements {
    insert: Statement,
    select_one: Statement,
    list: Statement,
    reserve: Statement,
    give_back: Statement,
}

async fn create_schema(conn: &mut Lease<'_>, ddl: &str) -> Result<(), StoreError> {
    // Two processes running CREATE TABLE IF NOT EXISTS at once can both miss the table and one
    // then fails on the catalog's unique index; the table exists by then, so run it again.
    match conn.batch_execute(ddl).await {
        Err(_) if conn.last_code_is_duplicate() => conn.batch_execute(ddl).await,
        other => other,
    }
}

// ---------------------------------------------------------------------------------------------
// Instagram's id function

/// Why [`instagram_sql`] cannot print the function.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InstagramSqlError {
    /// The shard does not fit the 13-bit shard field.
    #[error("shard {shard} does not fit in 13 bits (0 to {max})")]
    ShardOutOfRange {
        /// The shard asked for.
        shard: u64,
        /// The largest shard.
        max: u64,
    },
    /// The schema name is not a plain lower-case SQL identifier.
    #[error("schema name {name:?} is not a plain identifier: {reason}")]
    InvalidSchema {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The epoch does not fit a PostgreSQL `bigint`.
    #[error("epoch {epoch_ms} ms does not fit a bigint")]
    EpochOutOfRange {
        /// The epoch given.
        epoch_ms: u64,
    },
}

/// Bits of the Instagram layout, as `idmint_core::Layout::instagram()` defines it.
const INSTAGRAM_TIMESTAMP_BITS: u32 = 40;
const INSTAGRAM_SHARD_BITS: u32 = 13;
const INSTAGRAM_SEQUENCE_BITS: u32 = 10;

/// Instagram's PL/pgSQL id generator for logical shard `shard`, in schema `schema`:
/// `CREATE SCHEMA`, the sequence `schema.table_id_seq` and the function
/// `schema.next_id(OUT result bigint)`, computing
/// `(floor(extract(epoch from clock_timestamp()) * 1000) - epoch_ms) << 23 | shard << 10 |
/// nextval('schema.table_id_seq') % 1024`.
///
/// With `epoch_ms` = 1314220021721 the ids are exactly those of
/// `idmint_core::Layout::instagram()` (40 timestamp bits at shift 23, 13 shard bits at 10,
/// 10 sequence bits). Like that layout, and unlike Instagram's original, the function raises an
/// error instead of returning a negative or wrapped id when the time is before the epoch or past
/// the 40 bits (2046 with Instagram's epoch). Like the original, it repeats ids if one shard
/// hands out more than 1024 ids in one millisecond; a primary key on the column turns that into
/// an error.
///
/// The statements are idempotent (`IF NOT EXISTS`, `CREATE OR REPLACE`). `schema` must be a plain
/// lower-case identifier (`[a-z_][a-z0-9_]*`, at most 63 bytes); it is quoted in the output, so
/// reserved words are fine.
pub fn instagram_sql(schema: &str, shard: u64, epoch_ms: u64) -> Result<String, InstagramSqlError> {
    let max_shard = (1u64 << INSTAGRAM_SHARD_BITS) - 1;
    if shard > max_shard {
        return Err(InstagramSqlError::ShardOutOfRange {
            shard,
            max: max_shard,
        });
    }
    validate_schema(schema)?;
    if i64::try_from(epoch_ms).is_err() {
        return Err(InstagramSqlError::EpochOutOfRange { epoch_ms });
    }
    let s = quote_ident(schema);
    // Inside a string literal ('…'), the quoted identifier needs no further escaping: it holds
    // no single quote.
    let max_ts = (1u64 << INSTAGRAM_TIMESTAMP_BITS) - 1;
    let ts_shift = INSTAGRAM_SHARD_BITS + INSTAGRAM_SEQUENCE_BITS;
    let seq_mod = 1u64 << INSTAGRAM_SEQUENCE_BITS;
    Ok(format!(
        "CREATE SCHEMA IF NOT EXISTS {s};
CREATE SEQUENCE IF NOT EXISTS {s}.table_id_seq;
CREATE OR REPLACE FUNCTION {s}.next_id(OUT result bigint) AS $$
DECLARE
    our_epoch bigint := {epoch_ms};
    seq_id bigint;
    now_millis bigint;
    shard_id bigint := {shard};
BEGIN
    SELECT nextval('{s}.table_id_seq') % {seq_mod} INTO seq_id;
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000) INTO now_millis;
    IF now_millis < our_epoch OR now_millis - our_epoch > {max_ts} THEN
        RAISE EXCEPTION 'next_id: % ms since the epoch % do not fit the {INSTAGRAM_TIMESTAMP_BITS}-bit timestamp',
            now_millis - our_epoch, our_epoch;
    END IF;
    result := (now_millis - our_epoch) << {ts_shift};
    result := result | (shard_id << {INSTAGRAM_SEQUENCE_BITS});
    result := result | (seq_id);
END;
$$ LANGUAGE plpgsql;
"
    ))
}

fn validate_schema(schema: &str) -> Result<(), InstagramSqlError> {
    let invalid = |reason| InstagramSqlError::InvalidSchema {
        name: schema.to_owned(),
        reason,
    };
    let mut chars = schema.chars();
    match chars.next() {
        None => return Err(invalid("it is empty")),
        Some(c) if c.is_ascii_lowercase() || c == '_' => {}
        Some(_) => return Err(invalid("it must start with a-z or _")),
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err(invalid("only a-z, 0-9 and _ are allowed"));
    }
    if schema.len() > MAX_IDENTIFIER_BYTES {
        return Err(invalid("it is longer than 63 bytes"));
    }
    if schema.starts_with("pg_") {
        return Err(invalid(
            "names starting with pg_ are reserved by PostgreSQL",
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Rows

fn spec_params(spec: &SequenceSpec) -> (i16, String, String, String) {
    let width: i16 = match spec.width() {
        Width::Bits32 => 32,
        Width::Bits64 => 64,
    };
    (
        width,
        spec.first().to_string(),
        spec.step().to_string(),
        spec.offset().to_string(),
    )
}

/// A row of [`STATE_COLUMNS`], validated as the module docs say.
fn decode_state(row: &Row) -> Result<NamespaceState, StoreError> {
    let raw_name: &str = row
        .try_get(0)
        .map_err(|e| corrupt(format!("unreadable namespace name: {}", chain(&e))))?;
    let bad = |what: String| corrupt(format!("namespace {raw_name:?}: {what}"));
    let name = NamespaceName::new(raw_name).map_err(|e| bad(format!("invalid name: {e}")))?;
    let width_raw: i16 = row
        .try_get(1)
        .map_err(|e| bad(format!("unreadable width: {}", chain(&e))))?;
    let width = u32::try_from(width_raw)
        .ok()
        .and_then(Width::from_bits)
        .ok_or_else(|| bad(format!("width {width_raw} is neither 32 nor 64")))?;
    let number = |i: usize, what: &str| -> Result<u64, StoreError> {
        let text: &str = row
            .try_get(i)
            .map_err(|e| bad(format!("unreadable {what}: {}", chain(&e))))?;
        text.parse::<u64>().map_err(|_| {
            bad(format!(
                "{what} {text:?} is not an integer from 0 to 2^64 - 1"
            ))
        })
    };
    let first = number(2, "first_id")?;
    let step = number(3, "step")?;
    let offset = number(4, "id_offset")?;
    let watermark = number(5, "watermark")?;
    ops::stored_state(name, width, first, step, offset, watermark).map_err(bad)
}

/// The row `reserve` returned: the state after it, and the block's start. The block must be
/// exactly what [`SequenceSpec::reserve`] computes from that start.
fn decode_reservation(
    row: &Row,
    name: &NamespaceName,
    count: u64,
) -> Result<Reservation, StoreError> {
    let state = decode_state(row)?;
    if &state.name != name {
        return Err(corrupt(format!(
            "reserve on {name} returned the row of {}",
            state.name
        )));
    }
    let start_text: &str = row.try_get(6).map_err(|e| {
        corrupt(format!(
            "reserve on {name}: unreadable block start: {}",
            chain(&e)
        ))
    })?;
    let start: u64 = start_text.parse().map_err(|_| {
        corrupt(format!(
            "reserve on {name}: block start {start_text:?} is not an integer"
        ))
    })?;
    let block = Block::new(start, state.watermark, state.spec.step());
    let expected = state.spec.reserve(start, count).ok();
    match block {
        Some(block) if expected == Some(block) && state.spec.align_up(start) == Some(start) => {
            Ok(Reservation {
                block,
                watermark: block.end(),
            })
        }
        _ => Err(corrupt(format!(
            "reserve({name}, {count}) returned start {start} and watermark {}, which is not a \
             block of {:?}",
            state.watermark, state.spec
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

fn unavailable(message: impl Into<String>) -> StoreError {
    StoreError::Unavailable {
        backend: KIND,
        message: message.into(),
    }
}

fn invalid_setup(message: impl Into<String>) -> StoreError {
    StoreError::InvalidSetup {
        message: message.into(),
    }
}

fn corrupt(message: String) -> StoreError {
    StoreError::Corrupt { message }
}

/// An error and its causes, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

/// Maps a driver error. Integrity and data errors (classes 23 and 22: a row that breaks the
/// table's constraints, a number that does not fit) mean the stored data or the arithmetic is
/// not what this version expects: `Corrupt`. Everything else (I/O, closed connections, the
/// server shutting down, a missing table, permissions) is `Unavailable`.
fn pg_error(e: &tokio_postgres::Error, server: &str) -> StoreError {
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            let message = format!("{server}: {} {code}: {}", db.severity(), db.message());
            if code.starts_with("23") || code.starts_with("22") {
                corrupt(message)
            } else {
                unavailable(message)
            }
        }
        None => unavailable(format!("{server}: {}", chain(e))),
    }
}

/// `host:port[,host:port…]`, for messages. Never the user or password.
fn describe_server(pg: &tokio_postgres::Config) -> String {
    let ports = pg.get_ports();
    let hosts: Vec<String> = pg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports
                .get(i)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(h) => format!("{h}:{port}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(path) => {
                    format!("{}/.s.PGSQL.{port}", path.display())
                }
            }
        })
        .collect();
    if hosts.is_empty() {
        "postgres server".to_owned()
    } else {
        hosts.join(",")
    }
}

// ---------------------------------------------------------------------------------------------
// The pool

/// One open connection: the client, its statements, and the task driving the socket.
struct Conn {
    client: Client,
    statements: Option<Statements>,
    task: JoinHandle<()>,
}

/// At most `permits` connections in use at once; idle ones wait in `idle`. The mutex is taken
/// and released without an `.await` in between.
struct Pool {
    pg: tokio_postgres::Config,
    server: String,
    statements_for: StatementsSql,
    permits: Semaphore,
    idle: Mutex<Vec<Conn>>,
}

impl Pool {
    /// An idle connection if a live one is there, else a new one.
    async fn get(&self) -> Result<Lease<'_>, StoreError> {
        let permit = self.acquire().await?;
        loop {
            let conn = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match conn {
                Some(conn) if !conn.client.is_closed() => {
                    return Ok(Lease::new(self, conn, permit, true));
                }
                // Closed by the server or the network: its task has ended or is ending.
                Some(conn) => conn.task.abort(),
                None => break,
            }
        }
        let mut lease = self.open(permit).await?;
        lease.prepare(&self.statements_for).await?;
        Ok(lease)
    }

    /// A new connection with its statements prepared.
    async fn get_new(&self) -> Result<Lease<'_>, StoreError> {
        let mut lease = self.get_new_without_statements().await?;
        lease.prepare(&self.statements_for).await?;
        Ok(lease)
    }

    async fn get_new_without_statements(&self) -> Result<Lease<'_>, StoreError> {
        let permit = self.acquire().await?;
        self.open(permit).await
    }

    async fn acquire(&self) -> Result<SemaphorePermit<'_>, StoreError> {
        self.permits
            .acquire()
            .await
            .map_err(|_| unavailable("the connection pool is closed"))
    }

    async fn open<'a>(&'a self, permit: SemaphorePermit<'a>) -> Result<Lease<'a>, StoreError> {
        let (client, connection) = self
            .pg
            .connect(NoTls)
            .await
            .map_err(|e| pg_error(&e, &self.server))?;
        let task = tokio::spawn(async move {
            // The connection's end (closed, reset) shows on the client as `is_closed` and as
            // errors of the queries in flight; nothing to do with it here.
            let _ = connection.await;
        });
        let mut lease = Lease::new(
            self,
            Conn {
                client,
                statements: None,
                task,
            },
            permit,
            false,
        );
        // Commits must be durable before the server acknowledges them (see the module docs).
        if let Err(e) = lease
            .batch_execute(
                "SELECT set_config('synchronous_commit', 'on', false) \
                 WHERE current_setting('synchronous_commit') = 'off'",
            )
            .await
        {
            if lease.broken {
                return Err(e);
            }
            // A protocol-compatible server without these functions: use it as it is.
        }
        Ok(lease)
    }
}

/// A connection taken from the pool for one operation. Dropped without [`Lease::release`] (an
/// error, a timeout that cancelled the operation mid-statement), the connection is discarded and
/// its task aborted, so no late reply is ever read.
struct Lease<'a> {
    pool: &'a Pool,
    conn: Option<Conn>,
    _permit: SemaphorePermit<'a>,
    /// Taken from the idle list (it may have died while idle).
    reused: bool,
    /// A statement failed for another reason than a server-reported error.
    broken: bool,
    last_code: Option<SqlState>,
}

impl<'a> Lease<'a> {
    fn new(pool: &'a Pool, conn: Conn, permit: SemaphorePermit<'a>, reused: bool) -> Self {
        Lease {
            pool,
            conn: Some(conn),
            _permit: permit,
            reused,
            broken: false,
            last_code: None,
        }
    }

    fn conn(&self) -> Result<&Conn, StoreError> {
        self.conn
            .as_ref()
            .ok_or_else(|| unavailable("connection already returned"))
    }

    fn statements(&self) -> Result<(&Client, &Statements), StoreError> {
        let conn = self.conn()?;
        match &conn.statements {
            Some(s) => Ok((&conn.client, s)),
            None => Err(unavailable("connection has no prepared statements")),
        }
    }

    /// Notes what a failure says about the connection, and maps it.
    fn fail(&mut self, e: &tokio_postgres::Error) -> StoreError {
        match e.code() {
            Some(code) => self.last_code = Some(code.clone()),
            None => self.broken = true,
        }
        pg_error(e, &self.pool.server)
    }

    fn last_code_is_duplicate(&self) -> bool {
        matches!(
            &self.last_code,
            Some(c) if *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_TABLE
                || *c == SqlState::DUPLICATE_OBJECT
        )
    }

    async fn prepare(&mut self, sql: &StatementsSql) -> Result<(), StoreError> {
        let conn = self.conn()?;
        if conn.statements.is_some() {
            return Ok(());
        }
        let c = &conn.client;
        // Sent together (tokio-postgres pipelines concurrent requests on one connection).
        let prepared = tokio::try_join!(
            c.prepare(&sql.insert),
            c.prepare(&sql.select_one),
            c.prepare(&sql.list),
            c.prepare(&sql.reserve),
            c.prepare(&sql.give_back),
        );
        match prepared {
            Ok((insert, select_one, list, reserve, give_back)) => {
                if let Some(conn) = self.conn.as_mut() {
                    conn.statements = Some(Statements {
                        insert,
                        select_one,
                        list,
                        reserve,
                        give_back,
                    });
                }
                Ok(())
            }
            Err(e) => Err(self.fail(&e)),
        }
    }

    async fn query(
        &mut self,
        pick: fn(&Statements) -> &Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let (client, statements) = self.statements()?;
        let result = client.query(pick(statements), params).await;
        result.map_err(|e| self.fail(&e))
    }

    async fn execute(
        &mut self,
        pick: fn(&Statements) -> &Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let (client, statements) = self.statements()?;
        let result = client.execute(pick(statements), params).await;
        result.map_err(|e| self.fail(&e))
    }

    async fn batch_execute(&mut self, sql: &str) -> Result<(), StoreError> {
        let result = self.conn()?.client.batch_execute(sql).await;
        result.map_err(|e| self.fail(&e))
    }

    /// Back to the idle list, if it is still good.
    fn release(mut self) {
        if let Some(conn) = self.conn.take() {
            if self.broken || conn.client.is_closed() {
                conn.task.abort();
            } else {
                self.pool
                    .idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(conn);
            }
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        // Not released: an error or a cancelled operation. A statement may still be in flight.
        if let Some(conn) = self.conn.take() {
            conn.task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("idmint_namespaces"), "\"idmint_namespaces\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        let ddl = schema_sql("Ids \"x\"");
        assert!(
            ddl.starts_with("CREATE TABLE IF NOT EXISTS \"Ids \"\"x\"\"\" ("),
            "{ddl}"
        );
        assert!(ddl.contains("watermark   numeric(20,0)"));
        assert!(ddl.contains("9223372036854775808"));
        assert!(validate_table("").is_err());
        assert!(validate_table(&"t".repeat(64)).is_err());
        assert!(validate_table(&"t".repeat(63)).is_ok());
    }

    #[test]
    fn instagram_sql_validates_its_inputs() {
        let sql = instagram_sql("shard_5", 5, 1_314_220_021_721).unwrap();
        assert!(sql.contains("CREATE SCHEMA IF NOT EXISTS \"shard_5\";"));
        assert!(sql.contains("CREATE SEQUENCE IF NOT EXISTS \"shard_5\".table_id_seq;"));
        assert!(sql.contains("FUNCTION \"shard_5\".next_id(OUT result bigint)"));
        assert!(sql.contains("our_epoch bigint := 1314220021721;"));
        assert!(sql.contains("shard_id bigint := 5;"));
        assert!(sql.contains("<< 23"));
        assert!(sql.contains("% 1024"));
        assert!(sql.contains("> 1099511627775"));
        assert!(instagram_sql("s", 8191, 0).is_ok());
        assert_eq!(
            instagram_sql("s", 8192, 0),
            Err(InstagramSqlError::ShardOutOfRange {
                shard: 8192,
                max: 8191
            })
        );
        for bad in ["", "1abc", "Shard", "a-b", "a b", "a;drop", "x\"", "pg_x"] {
            assert!(
                matches!(
                    instagram_sql(bad, 1, 0),
                    Err(InstagramSqlError::InvalidSchema { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(instagram_sql(&"a".repeat(64), 1, 0).is_err());
        assert!(
            instagram_sql("order", 1, 0).is_ok(),
            "reserved words are quoted"
        );
        assert!(matches!(
            instagram_sql("s", 1, u64::MAX),
            Err(InstagramSqlError::EpochOutOfRange { .. })
        ));
    }

    #[test]
    fn the_layout_constants_are_instagrams() {
        let l = idmint_core::Layout::instagram();
        assert_eq!(u32::from(l.timestamp_bits()), INSTAGRAM_TIMESTAMP_BITS);
        assert_eq!(u32::from(l.node_bits()), INSTAGRAM_SHARD_BITS);
        assert_eq!(u32::from(l.sequence_bits()), INSTAGRAM_SEQUENCE_BITS);
        assert_eq!(l.spec().epoch_unix_ms, 1_314_220_021_721);
    }

    #[test]
    fn server_descriptions_hold_no_secrets() {
        let pg =
            tokio_postgres::Config::from_str("postgres://u:hunter2@db.example:6543/x").unwrap();
        assert_eq!(describe_server(&pg), "db.example:6543");
        let config = PostgresConfig::new("postgres://u:hunter2@db.example/x");
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn the_reserve_statement_is_one_update() {
        let sql = StatementsSql::new("\"t\"");
        assert!(sql.reserve.starts_with("UPDATE \"t\" SET"));
        assert_eq!(sql.reserve.matches(';').count(), 0);
        assert!(sql.give_back.contains("AND watermark = $3::text::numeric"));
    }
}
