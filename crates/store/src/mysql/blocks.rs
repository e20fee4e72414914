//! Block mode of the MySQL authority ([`MysqlAuthority`]): every namespace's watermark is one
//! row of one InnoDB table, and a reservation is one `UPDATE` (with its ledger entry, in one
//! transaction sent as one request, see `audit`) whose block start comes back as the
//! session's `LAST_INSERT_ID()` (see the parent module's docs for the statements and why a
//! lost reply never hands a block out twice).
//!
//! Invariants: a reservation is never retried after an error; a statement that changed
//! nothing is run again only when a read shows a concurrent give-back raced it
//! ([`GIVE_BACK_RACE_ATTEMPTS`]); every row read is validated (`ops::stored_state`) and every
//! block the server computed is checked against [`SequenceSpec::reserve`].
//!
//! What it does not do: ticket mode (`tickets`), connection handling (`conn` and the pool).

use super::audit::{self, batch, insert_select};
use super::conn::{self, Client};
use super::leases::{self, Tables};
use super::meta::{self, MetaTable};
use super::sql::{
    namespace_table_sql, quote_identifier, text_literal, valid_identifier, AuditTable, LeaseTables,
    NOW_MS, PARKS_COLUMN, RETIRED_COLUMN,
};
use super::{
    col, driver_error, execute, invalid_setup, literal, query, server_code, unavailable, SpecCache,
    ER_DUP_FIELDNAME, KIND,
};
use crate::audit::{Advance, Advanced, AuditEntry, AuditEvent, AuditLog};
use crate::config::MysqlConfig;
use crate::lease::{GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases, WorkerSlot};
use crate::ops::{self, GIVE_BACK_RACE_ATTEMPTS};
use crate::parks::{self, ClaimKey, Parks};
use crate::{Authority, GiveBack, Incarnation, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, TxOpts};
use std::fmt;

/// The MySQL/MariaDB authority in block mode: see the [module docs](super).
pub struct MysqlAuthority {
    client: Client,
    table: String,
    specs: SpecCache<SequenceSpec>,
    /// The worker-lease tables, named after the table (see [`leases`]).
    leases: Tables,
    /// The audit ledger, named after the table (see [`audit`]).
    audit: AuditTable,
    /// The store's facts (its incarnation), named after the table (see [`meta`]).
    meta: MetaTable,
}

impl fmt::Debug for MysqlAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlAuthority")
            .field("target", &self.client.target())
            .field("op_timeout", &self.client.op_timeout())
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
        let client = conn::client(&config, false)?;
        let exists = format!(
            "SELECT COUNT(*) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{}'",
            config.table
        );
        let ddl = namespace_table_sql(&config.table);
        // Columns a table made by an earlier version lacks, added in place.
        let added: Vec<(String, String)> = [("retired", RETIRED_COLUMN), ("parks", PARKS_COLUMN)]
            .into_iter()
            .map(|(column, definition)| {
                (
                    format!(
                        "SELECT COUNT(*) FROM information_schema.COLUMNS \
                         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{}' \
                         AND COLUMN_NAME = '{column}'",
                        config.table
                    ),
                    format!(
                        "ALTER TABLE {} ADD COLUMN {definition}",
                        quote_identifier(&config.table)
                    ),
                )
            })
            .collect();
        let lease_tables = LeaseTables::for_table(&config.table);
        let audit_table = AuditTable::for_table(&config.table);
        let meta_table = MetaTable::for_table(&config.table);
        client
            .on_conn("creating the schema", async |s| {
                // Create only when absent: a user without the CREATE privilege can still use
                // a table made for it.
                let rows = query(&mut s.conn, &exists).await?;
                match rows.first().map(|row| col::<u64>(row, 0, "COUNT(*)")) {
                    Some(Ok(n)) if n > 0 => {}
                    _ => drop(execute(&mut s.conn, &ddl).await?),
                }
                for (has, add) in &added {
                    let rows = query(&mut s.conn, has).await?;
                    if let Some(Ok(0)) = rows.first().map(|row| col::<u64>(row, 0, "COUNT(*)")) {
                        match s.conn.query_drop(add).await {
                            // Another process added it first.
                            Err(e) if server_code(&e) == Some(ER_DUP_FIELDNAME) => {}
                            other => other.map_err(|e| driver_error("adding a column", e))?,
                        }
                    }
                }
                audit::ensure_table(&mut s.conn, &audit_table).await?;
                meta::ensure_table(&mut s.conn, &meta_table).await?;
                match &lease_tables {
                    Ok(tables) => leases::ensure_tables(&mut s.conn, tables).await,
                    // A table name without room for the lease tables' suffixes still serves
                    // sequences; the lease operations say why they cannot run.
                    Err(_) => Ok(()),
                }
            })
            .await?;
        Ok(MysqlAuthority {
            table: quote_identifier(&config.table),
            client,
            specs: SpecCache::default(),
            leases: lease_tables,
            audit: audit_table,
            meta: meta_table,
        })
    }

    fn select_sql(&self, name: Option<&NamespaceName>) -> String {
        let filter = match name {
            Some(name) => format!(" WHERE name = {}", literal(name)),
            None => " ORDER BY name".into(),
        };
        format!(
            "SELECT name, width, first, step, `offset`, hi, retired FROM {}{filter}",
            self.table
        )
    }

    /// The one request of a reservation: its `UPDATE` and ledger entry in one transaction,
    /// then whether it changed the row and the block's start (see the module docs).
    fn reserve_request(&self, name: &NamespaceName, count: u64) -> String {
        format!(
            "START TRANSACTION; {update}; \
             SET @idmint_n = ROW_COUNT(), @idmint_start = LAST_INSERT_ID(); \
             {insert} name, {NOW_MS}, 'granted', @idmint_start, hi, {holder} FROM {table} \
             WHERE name = {name} AND @idmint_n = 1; \
             COMMIT; SELECT @idmint_n, @idmint_start",
            update = self.reserve_sql(name, count),
            insert = insert_select(&self.audit),
            holder = text_literal(crate::audit::holder()),
            table = self.table,
            name = literal(name),
        )
    }

    /// The `UPDATE` of a reservation; see the module docs.
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
             WHERE name = {name} AND retired = 0 AND {start} <= {max}",
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
        let sql = self.reserve_request(name, count);
        for _ in 0..GIVE_BACK_RACE_ATTEMPTS {
            let rows = batch(conn, &sql)
                .await
                .map_err(|e| driver_error("reserve", e))?;
            let (affected, start) = changed_and_value(&rows, "reserve")?;
            if affected == 1 {
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
            retired: false,
        };
        let lowered = match ops::give_back(&assumed, tail)? {
            Ok(lowered) => lowered,
            Err(refused) => return Ok(refused),
        };
        let sql = format!(
            "START TRANSACTION; \
             UPDATE {table} SET hi = {lowered} WHERE name = {name} AND hi = {end} \
             AND retired = 0; \
             SET @idmint_n = ROW_COUNT(); \
             {insert} {name}, {NOW_MS}, 'given_back', {lowered}, {end}, {holder} FROM DUAL \
             WHERE @idmint_n = 1; \
             COMMIT; SELECT @idmint_n, 0",
            table = self.table,
            name = literal(name),
            end = tail.end(),
            insert = insert_select(&self.audit),
            holder = text_literal(crate::audit::holder()),
        );
        for _ in 0..GIVE_BACK_RACE_ATTEMPTS {
            let rows = batch(conn, &sql)
                .await
                .map_err(|e| driver_error("give_back", e))?;
            let (affected, _) = changed_and_value(&rows, "give_back")?;
            if affected == 1 {
                return Ok(GiveBack::Returned);
            }
            match self.read_state(conn, name).await? {
                None => {
                    self.specs.forget(name);
                    return Err(StoreError::UnknownNamespace { name: name.clone() });
                }
                Some(state) => match ops::give_back(&state, tail)? {
                    // Back at the tail's end since the CAS (a give-back and a new reservation
                    // in between): try again.
                    Ok(_) => continue,
                    // Moved on, or retired.
                    Err(refused) => return Ok(refused),
                },
            }
        }
        Err(unavailable(format!(
            "giving back to {name} kept racing with concurrent reservations"
        )))
    }

    /// A change of `name`'s record and parks in one transaction: the row and its parks locked
    /// (`FOR UPDATE`), `decide` makes the change ([`parks`]'s `decide_*`), the `UPDATE` of
    /// `hi`, `retired` and `parks` and a ledger entry per event, `COMMIT`; a change that
    /// writes nothing and every error roll back before the connection is reused.
    async fn change_on<T>(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
        decide: impl FnOnce(&NamespaceState, &Parks) -> Result<parks::Change<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(|e| driver_error("START TRANSACTION", e))?;
        let out = async {
            let rows: Vec<Row> = tx
                .query(format!(
                    "SELECT name, width, first, step, `offset`, hi, retired, parks FROM {} \
                     WHERE name = {} FOR UPDATE",
                    self.table,
                    literal(name)
                ))
                .await
                .map_err(|e| driver_error("locking the namespace", e))?;
            let Some(row) = rows.first() else {
                return Err(StoreError::UnknownNamespace { name: name.clone() });
            };
            let state = decode_block_row(row)?;
            let text: Option<String> = col(row, 7, "namespaces.parks")?;
            let parks = Parks::decode(text.as_deref().unwrap_or(""), state.spec.step())
                .map_err(|e| parks::corrupt(name, e))?;
            let change = decide(&state, &parks)?;
            if change.writes_nothing(&state, &parks) {
                return Ok((false, change.answer));
            }
            tx.query_drop(format!(
                "UPDATE {} SET hi = {}, retired = {}, parks = {} WHERE name = {}",
                self.table,
                change.state.watermark,
                u8::from(change.state.retired),
                text_literal(&change.parks.encode()),
                literal(name)
            ))
            .await
            .map_err(|e| driver_error("writing the namespace", e))?;
            for event in &change.events {
                audit::record(&mut tx, &self.audit, name, event).await?;
            }
            Ok((true, change.answer))
        }
        .await;
        match out {
            Ok((true, answer)) => {
                tx.commit().await.map_err(|e| driver_error("COMMIT", e))?;
                Ok(answer)
            }
            other => {
                tx.rollback()
                    .await
                    .map_err(|e| driver_error("ROLLBACK", e))?;
                other.map(|(_, answer)| answer)
            }
        }
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

/// The last row of a request ending in `SELECT @idmint_n, <value>`: whether its change
/// happened (the rows it changed) and the value. An answer without it leaves the outcome
/// unknown: `Unavailable`, and the connection is dropped (the server rolls back whatever it
/// left open).
pub(super) fn changed_and_value(rows: &[Row], what: &str) -> Result<(u64, u64), StoreError> {
    let row = rows.last().ok_or_else(|| {
        unavailable(format!(
            "{what}: the server's answer ended before its outcome"
        ))
    })?;
    Ok((
        col::<u64>(row, 0, &format!("{what}'s row count"))?,
        col::<u64>(row, 1, &format!("{what}'s value"))?,
    ))
}

/// A block-mode row: `name, width, first, step, offset, hi, retired`.
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
    let retired = match col::<u8>(row, 6, "namespaces.retired")? {
        0 => false,
        1 => true,
        n => return Err(corrupt(format!("retired mark {n} is neither 0 nor 1"))),
    };
    ops::stored_state(name, width, first, step, offset, watermark, retired).map_err(corrupt)
}

#[async_trait]
impl Authority for MysqlAuthority {
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
        meta::incarnation(&self.client, &self.meta).await
    }

    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        meta::create_incarnation(&self.client, &self.meta, candidate).await
    }

    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        self.client
            .on_conn("advance", async |s| {
                self.change_on(&mut s.conn, name, |state, parks| {
                    parks::decide_advance(state, parks, to, why)
                })
                .await
            })
            .await
    }

    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        self.client
            .on_conn("park", async |s| {
                self.change_on(&mut s.conn, name, |state, parks| {
                    parks::decide_park(state, parks, key, blocks)
                })
                .await
            })
            .await
    }

    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        self.client
            .on_conn("claim", async |s| {
                self.change_on(&mut s.conn, name, |state, parks| {
                    parks::decide_claim(state, parks, key)
                })
                .await
            })
            .await
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let name = name.clone();
        self.client
            .on_conn("ensure_namespace", async |s| {
                self.ensure_on(&mut s.conn, &name, spec).await
            })
            .await
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        if count == 0 {
            return Err(StoreError::InvalidCount);
        }
        let name = name.clone();
        self.client
            .on_conn("reserve", async |s| {
                self.reserve_on(&mut s.conn, &name, count).await
            })
            .await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.client
            .read_on_conn("state", async |s| self.read_state(&mut s.conn, name).await)
            .await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let sql = self.select_sql(None);
        let sql = &sql;
        let mut all: Vec<NamespaceState> = self
            .client
            .read_on_conn("list", async |s| {
                query(&mut s.conn, sql)
                    .await?
                    .iter()
                    .map(decode_block_row)
                    .collect()
            })
            .await?;
        // ascii_bin orders like Rust's strings already; sorting again does not depend on it.
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let name = name.clone();
        self.client
            .on_conn("give_back", async |s| {
                self.give_back_on(&mut s.conn, &name, tail).await
            })
            .await
    }
}

#[async_trait]
impl AuditLog for MysqlAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        audit::subjects(&self.client, &self.audit).await
    }

    async fn entries(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        audit::entries(&self.client, &self.audit, subject, after, limit).await
    }

    async fn now_unix_ms(&self) -> Result<u64, StoreError> {
        audit::now_unix_ms(&self.client).await
    }

    async fn fold(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
    ) -> Result<u64, StoreError> {
        audit::fold(&self.client, &self.audit, subject, through, checkpoint).await
    }
}

#[async_trait]
impl WorkerLeases for MysqlAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        leases::acquire(&self.client, &self.leases, &self.audit, request).await
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        leases::renew(&self.client, &self.leases, lease, floor_unix_ms).await
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        leases::release(&self.client, &self.leases, lease, floor_unix_ms).await
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        leases::group(&self.client, &self.leases, group).await
    }
}
