//! Block mode of the MySQL authority ([`MysqlAuthority`]): every namespace's watermark is one
//! row of one InnoDB table, and a reservation is one autocommitted `UPDATE` whose block start
//! comes back in the OK packet (see the parent module's docs for the statements and why a lost
//! reply never hands a block out twice).
//!
//! Invariants: a reservation is never retried after an error; a statement that changed
//! nothing is run again only when a read shows a concurrent give-back raced it
//! ([`GIVE_BACK_RACE_ATTEMPTS`]); every row read is validated (`ops::stored_state`) and every
//! block the server computed is checked against [`SequenceSpec::reserve`].
//!
//! What it does not do: ticket mode (`tickets`), connection handling (`conn` and the pool).

use super::conn::{self, Client};
use super::leases::{self, Tables};
use super::sql::{namespace_table_sql, quote_identifier, valid_identifier, LeaseTables};
use super::{col, execute, invalid_setup, literal, query, unavailable, SpecCache, KIND};
use crate::config::MysqlConfig;
use crate::lease::{GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases, WorkerSlot};
use crate::ops::{self, GIVE_BACK_RACE_ATTEMPTS};
use crate::{Authority, GiveBack, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use mysql_async::{Conn, Row};
use std::fmt;

/// The MySQL/MariaDB authority in block mode: see the [module docs](super).
pub struct MysqlAuthority {
    client: Client,
    table: String,
    specs: SpecCache<SequenceSpec>,
    /// The worker-lease tables, named after the table (see [`leases`]).
    leases: Tables,
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
        let lease_tables = LeaseTables::for_table(&config.table);
        client
            .on_conn("creating the schema", async |s| {
                // Create only when absent: a user without the CREATE privilege can still use
                // a table made for it.
                let rows = query(&mut s.conn, &exists).await?;
                match rows.first().map(|row| col::<u64>(row, 0, "COUNT(*)")) {
                    Some(Ok(n)) if n > 0 => {}
                    _ => drop(execute(&mut s.conn, &ddl).await?),
                }
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
        for _ in 0..GIVE_BACK_RACE_ATTEMPTS {
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
        for _ in 0..GIVE_BACK_RACE_ATTEMPTS {
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

    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        Some(self)
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
impl WorkerLeases for MysqlAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        leases::acquire(&self.client, &self.leases, request).await
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
