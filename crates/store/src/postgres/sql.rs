//! The SQL text of the PostgreSQL authority: the DDL of the namespace table and of its
//! worker-lease tables ([`schema_sql`], which `idmint sql postgres` prints and
//! `PostgresAuthority::connect` runs), the statements the authority prepares on every
//! connection (the lease statements on first use, `LeaseSql`), and Instagram's PL/pgSQL id function
//! ([`instagram_sql`]).
//!
//! Invariants: every identifier is double-quoted (inner quotes doubled), so a table name is
//! taken exactly as written and cannot inject SQL; the reservation arithmetic in the statements
//! is [`SequenceSpec::reserve`](idmint_core::SequenceSpec::reserve)'s, in `numeric`, so nothing
//! overflows near 2^63.
//!
//! What it does not do: run anything (see the parent module), or migrate tables.

use crate::StoreError;
use idmint_core::Width;
use thiserror::Error;

/// PostgreSQL truncates identifiers longer than this many bytes (NAMEDATALEN - 1).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// `"name"`: a double-quoted SQL identifier, inner quotes doubled.
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The table name, checked and quoted.
pub(super) fn validate_table(table: &str) -> Result<String, StoreError> {
    if table.is_empty() || table.len() > MAX_IDENTIFIER_BYTES || table.contains('\0') {
        return Err(StoreError::InvalidSetup {
            message: format!(
                "the table name must be 1 to {MAX_IDENTIFIER_BYTES} bytes without NUL, got \
                 {table:?}"
            ),
        });
    }
    Ok(quote_ident(table))
}

/// The DDL of the namespace table `table` (taken exactly as written: it is quoted) and of its
/// worker-lease tables `<table>_lease_groups` and `<table>_leases` (left out, with a comment
/// saying why, when those names would pass PostgreSQL's 63 bytes), as
/// [`PostgresAuthority::connect`](super::PostgresAuthority::connect) runs it. Idempotent
/// (`CREATE TABLE IF NOT EXISTS`).
pub fn schema_sql(table: &str) -> String {
    let mut ddl = schema_sql_quoted(&quote_ident(table));
    ddl.push_str(&audit_ddl(&quote_ident(&audit_table_name(table))));
    ddl.push_str(&meta_ddl(&quote_ident(&meta_table_name(table))));
    match LeaseTables::for_table(table) {
        Ok(tables) => ddl.push_str(&tables.ddl()),
        Err(e) => ddl.push_str(&format!("-- no worker-lease tables: {e}\n")),
    }
    ddl
}

/// The quoted names of the worker-lease tables of one namespace table.
#[derive(Debug, Clone)]
pub(super) struct LeaseTables {
    /// `<table>_lease_groups`: one row per group (its layout and last token).
    pub(super) groups: String,
    /// `<table>_leases`: one row per worker id ever leased.
    pub(super) leases: String,
}

impl LeaseTables {
    /// The lease tables of the namespace table `table` (as written, unquoted); an error when
    /// a name would pass PostgreSQL's identifier limit (it would silently truncate them, maybe
    /// to one name).
    pub(super) fn for_table(table: &str) -> Result<Self, String> {
        let groups = format!("{table}_lease_groups");
        if groups.len() > MAX_IDENTIFIER_BYTES {
            return Err(format!(
                "the table name {table:?} leaves no room for the suffix _lease_groups within \
                 {MAX_IDENTIFIER_BYTES} bytes: worker leases need a table name of at most {} bytes",
                MAX_IDENTIFIER_BYTES - "_lease_groups".len()
            ));
        }
        Ok(LeaseTables {
            groups: quote_ident(&groups),
            leases: quote_ident(&format!("{table}_leases")),
        })
    }

    /// Their DDL. `expires_at` is set by the server's clock only (`clock_timestamp()`); `NULL`
    /// once released. Tokens and floors are `bigint` (idmint refuses values past 2^63 - 1).
    pub(super) fn ddl(&self) -> String {
        let LeaseTables { groups, leases } = self;
        format!(
            "CREATE TABLE IF NOT EXISTS {groups} (
    grp        text PRIMARY KEY,
    layout     text NOT NULL,
    last_token bigint NOT NULL CHECK (last_token >= 0)
);
CREATE TABLE IF NOT EXISTS {leases} (
    grp           text NOT NULL REFERENCES {groups} (grp),
    worker        bigint NOT NULL CHECK (worker >= 0),
    token         bigint NOT NULL CHECK (token >= 1),
    holder        text NOT NULL,
    floor_unix_ms bigint NOT NULL CHECK (floor_unix_ms >= 0),
    expires_at    timestamptz NULL,
    PRIMARY KEY (grp, worker)
);
"
        )
    }
}

/// A slot's columns (`worker, token, holder, floor_unix_ms, expires_in_us`) of the lease table
/// aliased `l`, with `n.now` the server's clock: the time left in microseconds while live
/// (at least 1), `NULL` when released or expired.
const SLOT_COLUMNS: &str = "l.worker, l.token, l.holder, l.floor_unix_ms, \
     CASE WHEN l.expires_at > n.now THEN \
     GREATEST(1, floor(extract(epoch FROM (l.expires_at - n.now)) * 1000000))::bigint END";

/// The server's clock, read once per statement (`clock_timestamp()`: the time the statement
/// runs, not the transaction's start).
const NOW: &str = "(SELECT clock_timestamp() AS now) n";

/// The worker-lease statements for one pair of lease tables. Parameters: `$1` the group,
/// `$2` the worker id, `$3` the token; the rest as each says.
#[derive(Debug)]
pub(super) struct LeaseSql {
    /// Creates the group's row if absent (`$2` the layout, token 0), so it can be locked.
    pub(super) insert_group: String,
    /// Locks the group's row: `layout, last_token`.
    pub(super) lock_group: String,
    /// Every slot of the group, locked (a concurrent renew or release waits, then sees the new
    /// token).
    pub(super) lock_slots: String,
    /// Writes the granted slot: `$4` holder, `$5` floor, `$6` TTL in microseconds.
    pub(super) upsert_slot: String,
    /// Writes the group's record: `$2` layout, `$3` last token.
    pub(super) update_group: String,
    /// Extends the lease `$3` held by `$6` by `$4` microseconds and raises its floor to `$5`;
    /// returns the floor (no row: superseded).
    pub(super) renew: String,
    /// Ends the lease `$3` held by `$5`, setting its floor to `$4`; returns the floor.
    pub(super) release: String,
    /// One slot (`$2`), unlocked.
    pub(super) slot: String,
    /// The group's record and its slots: `layout, last_token` then [`SLOT_COLUMNS`] (`NULL`s
    /// for a group without slots), ordered by worker id.
    pub(super) group: String,
    /// The ledger entry of an acquisition, in its transaction: `$1` the group, `$2` the worker
    /// id, `$3` the token, `$4` the lease's holder.
    pub(super) audit: String,
    /// Whether the ledger holds a trace of group `$1` ([`crate::lease::is_group_trace`]: a
    /// `leased` entry, or a checkpoint whose token is above 0).
    pub(super) group_trace: String,
}

impl LeaseSql {
    pub(super) fn new(tables: &LeaseTables, audit: &str) -> Self {
        let LeaseTables { groups, leases } = tables;
        let expiry = "clock_timestamp() + $6::bigint * interval '1 microsecond'";
        LeaseSql {
            insert_group: format!(
                "INSERT INTO {groups} (grp, layout, last_token) VALUES ($1::text, $2::text, 0) \
                 ON CONFLICT (grp) DO NOTHING"
            ),
            lock_group: format!(
                "SELECT layout, last_token FROM {groups} WHERE grp = $1::text FOR UPDATE"
            ),
            lock_slots: format!(
                "SELECT {SLOT_COLUMNS} FROM {leases} l, {NOW} WHERE l.grp = $1::text \
                 FOR UPDATE OF l"
            ),
            upsert_slot: format!(
                "INSERT INTO {leases} (grp, worker, token, holder, floor_unix_ms, expires_at) \
                 VALUES ($1::text, $2::bigint, $3::bigint, $4::text, $5::bigint, {expiry}) \
                 ON CONFLICT (grp, worker) DO UPDATE SET token = EXCLUDED.token, \
                 holder = EXCLUDED.holder, floor_unix_ms = EXCLUDED.floor_unix_ms, \
                 expires_at = EXCLUDED.expires_at"
            ),
            update_group: format!(
                "UPDATE {groups} SET layout = $2::text, last_token = $3::bigint \
                 WHERE grp = $1::text"
            ),
            renew: format!(
                "UPDATE {leases} SET \
                 expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond', \
                 floor_unix_ms = GREATEST(floor_unix_ms, $5::bigint) \
                 WHERE grp = $1::text AND worker = $2::bigint AND token = $3::bigint \
                 AND holder = $6::text RETURNING floor_unix_ms"
            ),
            release: format!(
                "UPDATE {leases} SET expires_at = NULL, \
                 floor_unix_ms = GREATEST(floor_unix_ms, $4::bigint) \
                 WHERE grp = $1::text AND worker = $2::bigint AND token = $3::bigint \
                 AND holder = $5::text RETURNING floor_unix_ms"
            ),
            slot: format!(
                "SELECT {SLOT_COLUMNS} FROM {leases} l, {NOW} \
                 WHERE l.grp = $1::text AND l.worker = $2::bigint"
            ),
            group: format!(
                "SELECT g.layout, g.last_token, {SLOT_COLUMNS} FROM {groups} g \
                 CROSS JOIN {NOW} LEFT JOIN {leases} l ON l.grp = g.grp \
                 WHERE g.grp = $1::text ORDER BY l.worker"
            ),
            audit: format!(
                "INSERT INTO {audit} (subject, at_unix_ms, event, a, b, holder) \
                 VALUES ($1::text, {NOW_MS}, 'leased', $2::bigint, $3::bigint, $4::text)"
            ),
            group_trace: format!(
                "SELECT EXISTS (SELECT 1 FROM {audit} WHERE subject = $1::text \
                 AND (event = 'leased' OR (event = 'checkpoint' AND b > 0)))"
            ),
        }
    }
}

pub(super) fn schema_sql_quoted(table: &str) -> String {
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
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS retired boolean NOT NULL DEFAULT false;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS parks text NOT NULL DEFAULT '';
"
    )
}

/// The ledger table of the namespace table `table` (as written, unquoted): `<table>_audit`,
/// or, when that passes PostgreSQL's 63 bytes, `<the table's first 40 bytes at most>_<16 hex
/// digits of a stable hash of the whole name>_audit`, so every table name has a ledger of its
/// own (the ledger is written with every grant: an authority cannot run without one).
pub(super) fn audit_table_name(table: &str) -> String {
    side_table_name(table, "audit")
}

/// The meta table of the namespace table `table` (as written, unquoted): `<table>_meta`, named
/// like the ledger when that passes 63 bytes. It holds the store's incarnation.
pub(super) fn meta_table_name(table: &str) -> String {
    side_table_name(table, "meta")
}

/// `<table>_<suffix>`, or `<the table's first 40 bytes at most>_<16 hex digits of a stable
/// hash of the whole name>_<suffix>` when that passes 63 bytes.
fn side_table_name(table: &str, suffix: &str) -> String {
    let plain = format!("{table}_{suffix}");
    if plain.len() <= MAX_IDENTIFIER_BYTES {
        return plain;
    }
    let mut cut = 40;
    while !table.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}_{:016x}_{suffix}",
        &table[..cut],
        fnv1a64(table.as_bytes())
    )
}

/// The DDL of the meta table `meta` (quoted): facts about the store, one row per key
/// (`incarnation`, written once).
pub(super) fn meta_ddl(meta: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {meta} (
    key   text PRIMARY KEY,
    value text NOT NULL
);
"
    )
}

/// The store's incarnation: `SELECT` it.
pub(super) fn incarnation_get(meta: &str) -> String {
    format!("SELECT value FROM {meta} WHERE key = 'incarnation'")
}

/// Writes incarnation `$1` unless the store has one (it is then left as it is).
pub(super) fn incarnation_create(meta: &str) -> String {
    format!(
        "INSERT INTO {meta} (key, value) VALUES ('incarnation', $1::text) \
         ON CONFLICT (key) DO NOTHING"
    )
}

/// FNV-1a, 64 bits: stable across Rust versions and platforms (a table name must not change).
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The DDL of the audit ledger `audit` (quoted). `seq` comes from the table's sequence, drawn
/// when the entry is inserted, which every write does after it locked the row it changes, so
/// within one subject `seq` follows the order of the writes. Ranges and numbers are
/// `numeric(20,0)` like the watermark (2^63 does not fit a `bigint`). The event's name is not
/// constrained here: readers check it (an unknown one is `Corrupt`), and a later version may
/// add events without a migration.
pub(super) fn audit_ddl(audit: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {audit} (
    seq        bigserial NOT NULL,
    subject    text NOT NULL,
    at_unix_ms bigint NOT NULL CHECK (at_unix_ms >= 0),
    event      text NOT NULL,
    a          numeric(20,0) NOT NULL CHECK (a >= 0),
    b          numeric(20,0) NOT NULL CHECK (b >= 0),
    holder     text NOT NULL,
    PRIMARY KEY (subject, seq)
);
"
    )
}

/// The server's clock as ms since the Unix epoch (`clock_timestamp()`: when the statement
/// runs).
const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The server's clock as ledger entries are stamped with it ([`crate::AuditLog::now_unix_ms`]).
pub(super) const AUDIT_NOW: &str =
    "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

const MAX_32: u64 = Width::Bits32.max_id();
const MAX_64: u64 = Width::Bits64.max_id();
const CEILING_32: u64 = MAX_32 + 1;
const CEILING_64: u64 = MAX_64 + 1;

/// The columns every state-returning statement yields, in [`decode_state`]'s order.
pub(super) const STATE_COLUMNS: &str =
    "name, width, first_id::text, step::text, id_offset::text, watermark::text, retired";

/// The columns of a state as the table holds them, for a `RETURNING` whose rows a `WITH`
/// query reads ([`STATE_COLUMNS`] then formats them).
const RAW_COLUMNS: &str = "name, width, first_id, step, id_offset, watermark, retired";

/// The statements' text for one table.
#[derive(Debug)]
pub(super) struct StatementsSql {
    pub(super) insert: String,
    pub(super) select_one: String,
    pub(super) list: String,
    /// The reservation and its ledger entry, one statement: `$1` name, `$2` count, `$3` holder.
    pub(super) reserve: String,
    /// The compare-and-swap of a give-back and its ledger entry, one statement: `$1` name,
    /// `$2` the tail's start, `$3` its end, `$4` holder; a row if it matched.
    pub(super) give_back: String,
    /// The row and its parks, locked (the first statement of `advance`, `park` and `claim`).
    pub(super) lock_one: String,
    /// `advance`'s move and its ledger entry: `$1` name, `$2` the new watermark, `$3` the
    /// event, `$4` the old watermark, `$5` holder, `$6` the retired mark (`true`/`false`),
    /// `$7` the parks after the move.
    pub(super) advance: String,
    /// The parks of a locked row and their ledger entries, one statement: `$1` name, `$2` the
    /// parks' text, `$3`, `$4`, `$5` the entries' events and numbers (arrays, in order, maybe
    /// empty), `$6` holder; a row if it matched.
    pub(super) set_parks: String,
    /// Every subject of the ledger.
    pub(super) audit_subjects: String,
    /// A page of a subject's entries: `$1` subject, `$2` after (exclusive), `$3` limit.
    pub(super) audit_entries: String,
    /// [`crate::AuditLog::fold`]: turns entry `$2` of subject `$1` into a checkpoint (`$3`
    /// event, `$4`, `$5` its numbers) and removes the subject's entries below it, in one
    /// statement; answers how many were removed (none if entry `$2` is gone).
    pub(super) audit_fold: String,
    /// The worker-lease statements, or why there are none (the table name is too long).
    pub(super) leases: Result<LeaseSql, String>,
}

impl StatementsSql {
    /// The statements of the namespace table `table` (quoted) and of the lease tables
    /// `leases`.
    pub(super) fn new(table: &str, audit: &str, leases: Result<&LeaseTables, String>) -> Self {
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
        let insert_entry =
            format!("INSERT INTO {audit} (subject, at_unix_ms, event, a, b, holder)");
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
                "WITH u AS (UPDATE {table} SET block_start = {start}, \
                 watermark = {start} + ({n} - 1) * step + 1 \
                 WHERE name = $1::text AND NOT retired AND {start} <= {max} \
                 RETURNING {RAW_COLUMNS}, block_start), \
                 l AS ({insert_entry} SELECT name, {NOW_MS}, 'granted', block_start, watermark, \
                 $3::text FROM u) \
                 SELECT {STATE_COLUMNS}, block_start::text FROM u"
            ),
            give_back: format!(
                "WITH u AS (UPDATE {table} SET watermark = $2::text::numeric, block_start = NULL \
                 WHERE name = $1::text AND NOT retired AND watermark = $3::text::numeric \
                 RETURNING name), \
                 l AS ({insert_entry} SELECT name, {NOW_MS}, 'given_back', $2::text::numeric, \
                 $3::text::numeric, $4::text FROM u) \
                 SELECT name FROM u"
            ),
            lock_one: format!(
                "SELECT {STATE_COLUMNS}, parks FROM {table} WHERE name = $1::text FOR UPDATE"
            ),
            advance: format!(
                "WITH u AS (UPDATE {table} SET watermark = $2::text::numeric, block_start = NULL, \
                 retired = $6::text::boolean, parks = $7::text WHERE name = $1::text \
                 RETURNING {RAW_COLUMNS}), \
                 l AS ({insert_entry} SELECT name, {NOW_MS}, $3::text, $4::text::numeric, \
                 watermark, $5::text FROM u) \
                 SELECT {STATE_COLUMNS} FROM u"
            ),
            set_parks: format!(
                "WITH u AS (UPDATE {table} SET parks = $2::text WHERE name = $1::text \
                 RETURNING name), \
                 l AS ({insert_entry} SELECT u.name, {NOW_MS}, e.event, e.a::numeric, \
                 e.b::numeric, $6::text FROM u, \
                 unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS e(event, a, b, n) \
                 ORDER BY e.n) \
                 SELECT name FROM u"
            ),
            audit_subjects: format!("SELECT DISTINCT subject FROM {audit}"),
            audit_entries: format!(
                "SELECT seq, at_unix_ms, subject, event, a::text, b::text, holder FROM {audit} \
                 WHERE subject = $1::text AND seq > $2::bigint ORDER BY seq LIMIT $3::bigint"
            ),
            audit_fold: format!(
                "WITH c AS (UPDATE {audit} SET event = $3::text, a = $4::text::numeric, \
                 b = $5::text::numeric WHERE subject = $1::text AND seq = $2::bigint \
                 RETURNING seq), \
                 d AS (DELETE FROM {audit} WHERE subject = $1::text AND seq < $2::bigint \
                 AND EXISTS (SELECT 1 FROM c) RETURNING seq) \
                 SELECT count(*) FROM d"
            ),
            leases: leases.map(|tables| LeaseSql::new(tables, audit)),
        }
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
    fn the_reserve_statement_is_one_update() {
        let sql = StatementsSql::new(
            "\"t\"",
            "\"t_audit\"",
            LeaseTables::for_table("t").as_ref().map_err(Clone::clone),
        );
        assert!(sql.reserve.starts_with("WITH u AS (UPDATE \"t\" SET"));
        assert!(sql.reserve.contains("INSERT INTO \"t_audit\""));
        assert_eq!(sql.reserve.matches(';').count(), 0);
        assert!(sql.give_back.contains("AND watermark = $3::text::numeric"));
        assert!(sql.give_back.contains("'given_back'"));
    }

    #[test]
    fn every_table_has_a_ledger_name_that_fits() {
        assert_eq!(
            audit_table_name("idmint_namespaces"),
            "idmint_namespaces_audit"
        );
        let long = "t".repeat(60);
        let name = audit_table_name(&long);
        assert!(name.len() <= MAX_IDENTIFIER_BYTES, "{name}");
        assert!(name.ends_with("_audit"));
        assert_ne!(name, audit_table_name(&"t".repeat(61)));
        let wide = "é".repeat(31);
        assert!(audit_table_name(&wide).len() <= MAX_IDENTIFIER_BYTES);
        assert!(schema_sql("x").contains("CREATE TABLE IF NOT EXISTS \"x_audit\""));
    }
}
