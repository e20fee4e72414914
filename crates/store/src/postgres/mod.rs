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
//! | `retired`     | `boolean`       | retired (`idmint admin retire`), set with the watermark's move past the largest id |
//! | `parks`       | `text`          | the namespace's parked blocks ([`crate::parks`]), [`Parks::encode`]'s text; `''` for none |
//!
//! `retired` and `parks` are added by `ALTER TABLE … ADD COLUMN IF NOT EXISTS … DEFAULT …`
//! after the `CREATE TABLE`, so a table made before them gains them at the next connect with
//! every row live and nothing parked; a reservation and a give-back never touch a retired row.
//!
//! `CHECK` constraints repeat the invariants of a valid spec and watermark, so a row the
//! arithmetic below would misread cannot be written. Every row read is validated again
//! ([`SequenceSpec::new`], `first <= watermark <= max + 1`, a valid [`NamespaceName`]); a row that
//! fails is [`StoreError::Corrupt`], never a panic.
//!
//! ## The audit ledger
//!
//! A third table, `<table>_audit` (or, when that passes 63 bytes, `<the table's first 40
//! bytes>_<16 hex digits of a hash of its name>_audit`, so every table has one), created with
//! the others and printed by [`schema_sql`], holds the [`AuditLog`]: one row per grant,
//! `(seq bigserial, subject, at_unix_ms, event, a, b, holder)`, keyed by `(subject, seq)`;
//! `a` and `b` are `numeric(20,0)` like the watermark (a retirement reaches 2^63). Every entry is
//! written by the statement or transaction of the change it records, never alone:
//!
//! - `reserve` and `give_back`: the `UPDATE` becomes a `WITH u AS (UPDATE … RETURNING …) , l AS
//!   (INSERT INTO <audit> … SELECT … FROM u) SELECT … FROM u`: one statement, one round trip as
//!   before, and an entry exactly when the row changed (a refused give-back writes none);
//! - a worker-lease acquisition: one more `INSERT` in its transaction, after the group's row
//!   is locked;
//! - [`Authority::advance`]: a transaction (row locked `FOR UPDATE`, the move checked by the
//!   shared arithmetic, then the `UPDATE` and its entry in one statement, `COMMIT`); a move to
//!   or below the watermark writes no entry. The same `UPDATE` writes the parks the move leaves
//!   ([`Parks::after_advance`]: a rebase trims them, a retirement drops them);
//! - [`Authority::park`] and [`Authority::claim`]: a transaction (row and parks locked `FOR
//!   UPDATE`, the change decided by [`Parks::park`] or [`Parks::claim`], then the `UPDATE` of
//!   `parks` and an entry per block in one statement, `COMMIT`); a refused one writes nothing.
//!
//! `seq` is drawn from the table's sequence by the `INSERT`, after the change locked its row, so
//! within a subject it follows the order of the writes; `at_unix_ms` is the server's
//! `clock_timestamp()`; the holder is [`crate::audit::holder`]. Reads (`subjects`, `entries`,
//! paged by `seq`) change nothing and validate every row (an unknown event, a bad number or
//! name is [`StoreError::Corrupt`]); `fold` (pruning) is one statement, the `UPDATE` of the entry that becomes the checkpoint
//! and the `DELETE` of the older ones; `now_unix_ms` reads `clock_timestamp()`.
//!
//! ## The store's incarnation
//!
//! `<table>_meta` (named like the ledger when too long), created with the others, holds the
//! store's incarnation ([`crate::incarnation`]) in the row `key = 'incarnation'`, written once
//! by `INSERT … ON CONFLICT DO NOTHING`.
//!
//! ## Worker leases
//!
//! The authority stores snowflake worker leases too ([`WorkerLeases`], see `leases`): two more
//! tables, `<table>_lease_groups` and `<table>_leases`, created with the namespace table and
//! printed by [`schema_sql`]. Their expiry is judged by the server's `clock_timestamp()` only;
//! an acquisition is one transaction around [`crate::lease::plan_acquire`] (group row locked
//! `FOR UPDATE`), renew and release one compare-and-swap `UPDATE` each. Both names must fit 63
//! bytes: with a longer table name the authority serves sequences, and its lease operations
//! are [`StoreError::InvalidSetup`].
//!
//! ## The statements, and what a compatible server must support
//!
//! - `reserve` is **one** autocommitted statement (with its ledger entry in a `WITH`, see below),
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
//! - Both carry their ledger entry in the same statement (see "The audit ledger" below).
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
//! statements. PostgreSQL 9.6 or later has all of it (`ADD COLUMN IF NOT EXISTS`). Behind
//! PgBouncer in transaction pooling mode, prepared statements need PgBouncer 1.21+ with
//! `max_prepared_statements` set.
//!
//! ## Durability
//!
//! Every write is its own transaction (autocommitted, or the explicit one of `advance`, `park`,
//! `claim` and a lease acquisition), and the call returns `Ok` only after the
//! server reported the commit. With `synchronous_commit` on (forced per session, see above) and
//! `fsync` and `full_page_writes` on (checked on every new connection: a server with either off is
//! refused unless `accept_unsafe_durability`), the commit is flushed to the WAL
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
//! for `give_back` and `ensure_namespace`. Only the read-only `state` and `list` run a second
//! time, on a new connection, after a connection failure.
//!
//! ## Connections
//!
//! At most [`PostgresConfig::pool_size`] connections (tokio-postgres; over rustls with `tls`), on the crate's one
//! connection pool and its policy, shared with the MySQL authority (see the `pool` module):
//! idle connections are reused after a health check (closed ones dropped, ones idle for 30 s
//! pinged), a connection whose operation failed or was cancelled is never reused, and a new one
//! is opened on demand, so the authority reconnects by itself after a restart or a network cut.
//! Every operation, including waiting for a pooled connection and connecting, is bounded by
//! [`PostgresConfig::op_timeout`]; a stalled server yields [`StoreError::Unavailable`], never a
//! hang. The code is split along the seams: `conn` (one connection: session setup, prepared
//! statements, error mapping), `sql` (the DDL, the statements and [`instagram_sql`]), `leases`
//! (worker leases), and this module (the authority).
//!
//! ## What it does not do
//!
//! TLS (use a local socket, a tunnel or a sidecar), migrations of the tables (the layout is
//! version 1; the audit table is created if absent at connect, so a database without it
//! gains it in place), retries of writes,
//! failover between servers (list several hosts in the URL and tokio-postgres tries them in
//! order at connect; consistency across a failover is the replication setup's business: use
//! synchronous replication). [`instagram_sql`] prints Instagram's PL/pgSQL id function for
//! `idmint sql postgres`; the authority itself does not use it.

mod conn;
mod leases;
mod sql;

pub use crate::config::PostgresConfig;
pub use sql::{instagram_sql, schema_sql, InstagramSqlError};

use crate::audit::{self, Advance, Advanced, AuditEntry, AuditEvent, AuditLog};
use crate::lease::WorkerLeases;
use crate::ops::{self, GIVE_BACK_RACE_ATTEMPTS};
use crate::parks::{self, ClaimKey, Parks};
use crate::pool::{Pool, PoolLimits};
use crate::{Authority, GiveBack, Incarnation, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use conn::{chain, describe_server, PgConnector, Statements};
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use sql::{
    audit_ddl, audit_table_name, incarnation_create, incarnation_get, meta_ddl, meta_table_name,
    quote_ident, schema_sql_quoted, validate_table, LeaseTables, StatementsSql,
};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

const KIND: &str = "postgres";

/// The PostgreSQL authority. Share it behind an `Arc`; its pool serves concurrent callers.
pub struct PostgresAuthority {
    pool: Pool<PgConnector>,
    table: String,
    /// `<table>_meta`, quoted.
    meta: String,
}

impl fmt::Debug for PostgresAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresAuthority")
            .field("server", &self.pool.target())
            .field("table", &self.table)
            .field("op_timeout", &self.pool.op_timeout())
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
        let tls = crate::tls::client_config(config.tls, config.ca_file.as_deref())
            .map_err(|e| invalid_setup(format!("PostgreSQL TLS: {e}")))?
            .map(MakeRustlsConnect::new);
        if tls.is_some() {
            pg.ssl_mode(tokio_postgres::config::SslMode::Require);
        }
        let server = describe_server(&pg);
        // Without room for the lease tables' names the authority still serves sequences; its
        // lease operations say why they cannot run.
        let lease_tables = LeaseTables::for_table(&config.table);
        let audit_table = quote_ident(&audit_table_name(&config.table));
        let meta = quote_ident(&meta_table_name(&config.table));
        let mut ddl = schema_sql_quoted(&table);
        ddl.push_str(&audit_ddl(&audit_table));
        ddl.push_str(&meta_ddl(&meta));
        if let Ok(tables) = &lease_tables {
            ddl.push_str(&tables.ddl());
        }
        let connector = PgConnector {
            pg,
            tls,
            accept_unsafe_durability: config.accept_unsafe_durability,
            warned: std::sync::atomic::AtomicBool::new(false),
            target: server.clone(),
            sql: Arc::new(StatementsSql::new(
                &table,
                &audit_table,
                lease_tables.as_ref().map_err(Clone::clone),
            )),
        };
        let limits = PoolLimits {
            max_size: config.pool_size,
            max_idle: config.pool_size,
            op_timeout: config.op_timeout,
        };
        let authority = PostgresAuthority {
            pool: Pool::new(connector, KIND, server, limits)?,
            table,
            meta,
        };
        authority
            .pool
            .on_conn("connect", async |conn| {
                conn.create_schema(&ddl).await?;
                conn.prepare().await.map(drop)
            })
            .await?;
        Ok(authority)
    }

    /// A statement that writes: run once, never retried (see the module docs).
    async fn write(
        &self,
        what: &str,
        pick: fn(&Statements) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.pool
            .on_conn(what, async |c| c.query(pick, params).await)
            .await
    }

    /// A read-only query (`state`, `list`): run again on a new connection after a connection
    /// failure (see [`crate::pool`]). Reads change nothing, so running one twice is harmless.
    async fn read(
        &self,
        what: &str,
        pick: fn(&Statements) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.pool
            .read_on_conn(what, async |c| c.query(pick, params).await)
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

    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        Some(self)
    }

    fn audit_log(&self) -> Option<&dyn AuditLog> {
        Some(self)
    }

    async fn incarnation(&self) -> Result<Option<Incarnation>, StoreError> {
        let sql = incarnation_get(&self.meta);
        let rows = self
            .pool
            .read_on_conn("incarnation", async |c| c.query_text(&sql, &[]).await)
            .await?;
        rows.first().map(decode_incarnation).transpose()
    }

    /// `INSERT … ON CONFLICT DO NOTHING`, then the row: whoever committed first wins.
    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        let sql = incarnation_create(&self.meta);
        self.pool
            .on_conn("create_incarnation", async |c| {
                c.query_text(&sql, &[&candidate.as_str()]).await
            })
            .await?;
        self.incarnation().await?.ok_or_else(|| {
            corrupt("the store's incarnation is missing right after it was written".into())
        })
    }

    /// One transaction: the row locked (`FOR UPDATE`), the move checked by `ops::advance`,
    /// then the `UPDATE` and its ledger entry in one statement, commit.
    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        self.pool
            .on_conn("advance", async |c| advance_on(c, name, to, why).await)
            .await
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let (width, first, step, offset) = spec_params(&spec);
        let inserted = self
            .write(
                "ensure_namespace",
                |s| &s.insert,
                &[&name.as_str(), &width, &first, &step, &offset],
            )
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
        for _ in 0..GIVE_BACK_RACE_ATTEMPTS {
            // The one statement that reserves. Not retried after an error: see the module docs.
            let rows = self
                .write(
                    "reserve",
                    |s| &s.reserve,
                    &[&name.as_str(), &count_param, &audit::holder()],
                )
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
            "reserve on {name}: the watermark kept changing under {GIVE_BACK_RACE_ATTEMPTS} attempts"
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
        for _ in 0..GIVE_BACK_RACE_ATTEMPTS {
            let Some(state) = self.select_one(name).await? else {
                return Err(StoreError::UnknownNamespace { name: name.clone() });
            };
            if let Err(refused) = ops::give_back(&state, tail)? {
                return Ok(refused);
            }
            // The compare-and-swap. Not retried after an error: see the module docs.
            let updated = self
                .write(
                    "give_back",
                    |s| &s.give_back,
                    &[&name.as_str(), &start, &end, &audit::holder()],
                )
                .await?
                .len();
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
            "give_back on {name}: the watermark kept changing under {GIVE_BACK_RACE_ATTEMPTS} attempts"
        )))
    }

    /// One transaction: the row locked, [`Parks::park`] decides, the parks and a `parked`
    /// entry per block written in one statement, commit.
    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        self.pool
            .on_conn("park", async |c| {
                parks_on(c, name, |state, parks| {
                    let next = parks.park(state, key, blocks)?;
                    Ok((next, parks::events(blocks, false), ()))
                })
                .await
            })
            .await
    }

    /// One transaction: the row locked, [`Parks::claim`] decides, the parks and a `claimed`
    /// entry per block written in one statement, commit.
    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        self.pool
            .on_conn("claim", async |c| {
                parks_on(c, name, |state, parks| {
                    let (next, blocks) = parks.claim(state, key)?;
                    Ok((next, parks::events(&blocks, true), blocks))
                })
                .await
            })
            .await
    }
}

/// The row of `name`, locked in `tx` (`FOR UPDATE`), and its parks.
async fn lock_on(
    tx: &tokio_postgres::Transaction<'_>,
    lock: &Statement,
    name: &NamespaceName,
) -> Result<(NamespaceState, Parks), StoreError> {
    let rows = tx
        .query(lock, &[&name.as_str()])
        .await
        .map_err(|e| conn::pg_error(&e))?;
    let Some(row) = rows.first() else {
        return Err(StoreError::UnknownNamespace { name: name.clone() });
    };
    let state = decode_state(row)?;
    let text: &str = row
        .try_get(7)
        .map_err(|e| corrupt(format!("namespace {name}: unreadable parks: {}", chain(&e))))?;
    let parks = Parks::decode(text, state.spec.step()).map_err(|e| parks::corrupt(name, e))?;
    Ok((state, parks))
}

/// Writes `parks` to the row of `name` locked in `tx`, with a ledger entry per event, in one
/// statement.
async fn set_parks_on(
    tx: &tokio_postgres::Transaction<'_>,
    write: &Statement,
    name: &NamespaceName,
    parks: &Parks,
    events: &[AuditEvent],
) -> Result<(), StoreError> {
    let kinds: Vec<&str> = events.iter().map(AuditEvent::name).collect();
    let (a, b): (Vec<String>, Vec<String>) = events
        .iter()
        .map(|e| {
            let (a, b) = e.numbers();
            (a.to_string(), b.to_string())
        })
        .unzip();
    let rows = tx
        .query(
            write,
            &[
                &name.as_str(),
                &parks.encode(),
                &kinds,
                &a,
                &b,
                &audit::holder(),
            ],
        )
        .await
        .map_err(|e| conn::pg_error(&e))?;
    match rows.len() {
        1 => Ok(()),
        n => Err(corrupt(format!(
            "writing the parks of {name} updated {n} rows, not the one locked"
        ))),
    }
}

/// [`Authority::advance`] on one connection (see there). Every early return drops the
/// transaction, which rolls it back before the connection runs anything else.
async fn advance_on(
    c: &mut conn::PgConn,
    name: &NamespaceName,
    to: u64,
    why: Advance,
) -> Result<Advanced, StoreError> {
    let st = c.prepare().await?;
    let (lock, write, set_parks) = (
        st.lock_one.clone(),
        st.advance.clone(),
        st.set_parks.clone(),
    );
    let pg = |e: tokio_postgres::Error| conn::pg_error(&e);
    let tx = c.transaction().await?;
    let (state, parks) = lock_on(&tx, &lock, name).await?;
    let from = state.watermark;
    let Some(target) = ops::advance(&state, to, why)? else {
        // Already there: nothing to record; only the parks may lose ids below the target.
        let trimmed = parks.after_advance(&state, to);
        if trimmed != parks {
            set_parks_on(&tx, &set_parks, name, &trimmed, &[]).await?;
        }
        tx.commit().await.map_err(pg)?;
        return Ok(Advanced { from, state });
    };
    let event = ops::advance_event(why, from, target.watermark);
    let trimmed = parks.after_advance(&target, to);
    let rows = tx
        .query(
            &write,
            &[
                &name.as_str(),
                &target.watermark.to_string(),
                &event.name(),
                &from.to_string(),
                &audit::holder(),
                &target.retired.to_string(),
                &trimmed.encode(),
            ],
        )
        .await
        .map_err(pg)?;
    let after = match rows.first() {
        Some(row) => decode_state(row)?,
        None => {
            return Err(corrupt(format!(
                "advance on {name}: the row locked a moment ago was not updated"
            )))
        }
    };
    if after != target {
        return Err(corrupt(format!(
            "advance on {name} to {target:?} wrote {after:?}"
        )));
    }
    tx.commit().await.map_err(pg)?;
    Ok(Advanced { from, state: after })
}

/// A change of `name`'s parks on one connection: one transaction that locks the row, lets
/// `op` decide from the state and the parks (the new parks, the ledger entries recording
/// them, the answer), writes both in one statement and commits. An `Err` of `op` rolls back.
async fn parks_on<T>(
    c: &mut conn::PgConn,
    name: &NamespaceName,
    op: impl FnOnce(&NamespaceState, &Parks) -> Result<(Parks, Vec<AuditEvent>, T), StoreError>,
) -> Result<T, StoreError> {
    let st = c.prepare().await?;
    let (lock, write) = (st.lock_one.clone(), st.set_parks.clone());
    let tx = c.transaction().await?;
    let (state, parks) = lock_on(&tx, &lock, name).await?;
    let (next, events, out) = op(&state, &parks)?;
    set_parks_on(&tx, &write, name, &next, &events).await?;
    tx.commit().await.map_err(|e| conn::pg_error(&e))?;
    Ok(out)
}

#[async_trait]
impl AuditLog for PostgresAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        let rows = self
            .read("audit_subjects", |s| &s.audit_subjects, &[])
            .await?;
        let mut subjects = Vec::with_capacity(rows.len());
        for row in &rows {
            let raw: &str = row
                .try_get(0)
                .map_err(|e| corrupt(format!("unreadable ledger subject: {}", chain(&e))))?;
            subjects.push(NamespaceName::new(raw).map_err(|e| {
                corrupt(format!("ledger subject {raw:?} is not a valid name: {e}"))
            })?);
        }
        // Byte order, whatever the server's collation.
        subjects.sort();
        subjects.dedup();
        Ok(subjects)
    }

    async fn entries(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        // `seq` is a positive bigint: nothing lies above 2^63 - 1.
        let after = match after.map(i64::try_from) {
            None => 0,
            Some(Ok(after)) => after,
            Some(Err(_)) => return Ok(Vec::new()),
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .read(
                "audit_entries",
                |s| &s.audit_entries,
                &[&subject.as_str(), &after, &limit],
            )
            .await?;
        let mut entries: Vec<AuditEntry> = Vec::with_capacity(rows.len());
        for row in &rows {
            let entry = decode_entry(row, subject)?;
            if entries.last().is_some_and(|last| last.seq >= entry.seq) {
                return Err(corrupt(format!(
                    "the ledger of {subject} came back out of order at entry {}",
                    entry.seq
                )));
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    async fn now_unix_ms(&self) -> Result<u64, StoreError> {
        let rows = self
            .pool
            .read_on_conn("audit_now", async |c| {
                c.query_text(sql::AUDIT_NOW, &[]).await
            })
            .await?;
        let now: i64 = rows
            .first()
            .ok_or_else(|| corrupt("the server's clock came back empty".into()))?
            .try_get(0)
            .map_err(|e| corrupt(format!("unreadable server clock: {}", chain(&e))))?;
        u64::try_from(now).map_err(|_| corrupt(format!("the server's clock reads {now}")))
    }

    async fn fold(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
    ) -> Result<u64, StoreError> {
        let Ok(seq) = i64::try_from(through) else {
            return Ok(0);
        };
        let (a, b) = checkpoint.numbers();
        let (a, b) = (a.to_string(), b.to_string());
        let rows = self
            .pool
            .on_conn("audit_fold", async |c| {
                c.query(
                    |s| &s.audit_fold,
                    &[&subject.as_str(), &seq, &checkpoint.name(), &a, &b],
                )
                .await
            })
            .await?;
        let removed: i64 = rows
            .first()
            .ok_or_else(|| corrupt("pruning answered no count".into()))?
            .try_get(0)
            .map_err(|e| corrupt(format!("unreadable count of pruned entries: {}", chain(&e))))?;
        Ok(u64::try_from(removed).unwrap_or(0))
    }
}

/// A ledger row (`seq, at_unix_ms, subject, event, a::text, b::text, holder`) of `subject`,
/// validated: a row this version did not write is `Corrupt`, never a panic.
fn decode_entry(row: &Row, subject: &NamespaceName) -> Result<AuditEntry, StoreError> {
    let bad = |what: String| corrupt(format!("ledger of {subject}: {what}"));
    let seq: i64 = row
        .try_get(0)
        .map_err(|e| bad(format!("unreadable seq: {}", chain(&e))))?;
    let seq = u64::try_from(seq).map_err(|_| bad(format!("seq {seq} is negative")))?;
    let bad = |what: String| corrupt(format!("ledger of {subject}, entry {seq}: {what}"));
    let at: i64 = row
        .try_get(1)
        .map_err(|e| bad(format!("unreadable time: {}", chain(&e))))?;
    let at_unix_ms = u64::try_from(at).map_err(|_| bad(format!("time {at} is negative")))?;
    let stored: &str = row
        .try_get(2)
        .map_err(|e| bad(format!("unreadable subject: {}", chain(&e))))?;
    if stored != subject.as_str() {
        return Err(bad(format!("the row is of subject {stored:?}")));
    }
    let text = |i: usize, what: &str| -> Result<&str, StoreError> {
        row.try_get(i)
            .map_err(|e| bad(format!("unreadable {what}: {}", chain(&e))))
    };
    let number = |i: usize, what: &str| -> Result<u64, StoreError> {
        let raw = text(i, what)?;
        raw.parse::<u64>().map_err(|_| {
            bad(format!(
                "{what} {raw:?} is not an integer from 0 to 2^64 - 1"
            ))
        })
    };
    let name = text(3, "event")?;
    let (a, b) = (number(4, "first number")?, number(5, "second number")?);
    let event =
        AuditEvent::from_parts(name, a, b).ok_or_else(|| bad(format!("unknown event {name:?}")))?;
    Ok(AuditEntry {
        seq,
        at_unix_ms,
        subject: subject.clone(),
        event,
        holder: text(6, "holder")?.to_string(),
    })
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
fn decode_incarnation(row: &Row) -> Result<Incarnation, StoreError> {
    let text: String = row
        .try_get(0)
        .map_err(|e| corrupt(format!("the store's incarnation: {}", chain(&e))))?;
    Incarnation::parse(&text).map_err(|e| corrupt(format!("the store's incarnation: {e}")))
}

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
    let retired: bool = row
        .try_get(6)
        .map_err(|e| bad(format!("unreadable retired mark: {}", chain(&e))))?;
    ops::stored_state(name, width, first, step, offset, watermark, retired).map_err(bad)
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
    let start_text: &str = row.try_get(7).map_err(|e| {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use std::str::FromStr;

    #[test]
    fn server_descriptions_hold_no_secrets() {
        let pg =
            tokio_postgres::Config::from_str("postgres://u:hunter2@db.example:6543/x").unwrap();
        assert_eq!(describe_server(&pg), "db.example:6543");
        let config = PostgresConfig::new("postgres://u:hunter2@db.example/x");
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
