//! Flickr's ticket mode of the MySQL authority ([`MysqlTicketAuthority`]): every namespace is
//! its own ticket table, and every id is one `REPLACE INTO … (stub) VALUES ('a')` whose id is
//! the session's `LAST_INSERT_ID()`, sent with its ledger entry in one transaction, one
//! request (see the parent module's docs).
//!
//! Invariants: a namespace is served only by a server whose `auto_increment_increment` and
//! `auto_increment_offset` are the namespace's step and offset (read once per connection); every
//! id returned is checked against the namespace's residue class and width; a `REPLACE` is
//! retried only when the server answered that it rolled it back (InnoDB deadlock, 1213: two
//! `REPLACE`s on one ticket row, common under concurrency), at most [`DEADLOCK_ATTEMPTS`] times
//! after a random pause that grows with each attempt (a rolled-back statement granted nothing; the retry gets a new id, and a rolled-back
//! auto-increment value is never issued again), never after a lost reply or any other error;
//! `give_back` always refuses (a ticket counter cannot be lowered atomically); every id returned
//! has its ledger entry, committed with its `REPLACE`; `advance` only ever raises the counter.
//!
//! What it does not do: block mode (`blocks`), connection handling (`conn` and the pool).

use super::audit::{self, batch, insert_select};
use super::blocks::changed_and_value;
use super::conn::{self, AutoIncrement, Client, Session};
use super::leases::{self, Tables};
use super::meta::{self, MetaTable};
use super::sql::{
    parse_ticket_comment, quote_identifier, text_literal, ticket_table_name, ticket_table_sql,
    AuditTable, LeaseTables, NOW_MS, TICKET_TABLE_PREFIX,
};
use super::{
    col, driver_error, execute, invalid_setup, literal, query, server_code, unavailable, SpecCache,
    ER_LOCK_DEADLOCK, ER_NO_SUCH_TABLE, KIND,
};
use crate::audit::{Advance, Advanced, AuditEntry, AuditEvent, AuditLog};
use crate::config::MysqlConfig;
use crate::lease::{GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases, WorkerSlot};
use crate::ops;
use crate::{
    Authority, AutoIncrementSettings, GiveBack, Incarnation, NamespaceState, Reservation,
    StoreError,
};
use async_trait::async_trait;
use idmint_core::{Backoff, Block, NamespaceName, SequenceSpec};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, TxOpts};
use std::fmt;
use std::time::Duration;

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
            server: Some(AutoIncrementSettings {
                increment: auto.increment,
                offset: auto.offset,
            }),
        })
    }
}

/// How many times one reservation tries a `REPLACE` the server rolled back as a deadlock.
pub const DEADLOCK_ATTEMPTS: u32 = 16;

/// The pauses between the tries of a transaction the server rolled back as a deadlock:
/// random and exponential from 400 µs to 20 ms, so that the transactions that collided do not
/// collide again; `None` once [`DEADLOCK_ATTEMPTS`] tries were made.
pub(super) fn deadlock_backoff() -> Backoff {
    Backoff::new(Duration::from_micros(400), Duration::from_millis(20)).limit(DEADLOCK_ATTEMPTS - 1)
}

/// Why one `REPLACE` failed: the server rolled it back (a deadlock: try again), or anything
/// else (never retried).
#[derive(Debug)]
enum Rollback {
    Deadlock(mysql_async::Error),
    Error(StoreError),
}

impl From<StoreError> for Rollback {
    fn from(e: StoreError) -> Self {
        Rollback::Error(e)
    }
}

/// What a ticket-mode namespace's cache holds: its spec and table.
#[derive(Debug, Clone)]
struct Ticket {
    spec: SequenceSpec,
    table: String,
}

/// The MySQL/MariaDB authority in Flickr ticket mode: one id per call, from the server's
/// auto-increment counter. See the [module docs](super).
pub struct MysqlTicketAuthority {
    client: Client,
    tickets: SpecCache<Ticket>,
    /// The worker-lease tables, named after `config.table` (see [`leases`]).
    leases: Tables,
    /// The audit ledger, named after `config.table` (see [`audit`]).
    audit: AuditTable,
    /// The store's facts (its incarnation), named after `config.table` (see [`meta`]).
    meta: MetaTable,
}

impl fmt::Debug for MysqlTicketAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlTicketAuthority")
            .field("target", &self.client.target())
            .field("op_timeout", &self.client.op_timeout())
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
        let client = conn::client(&config, true)?;
        let lease_tables = LeaseTables::for_table(&config.table);
        let audit_table = AuditTable::for_table(&config.table);
        let meta_table = MetaTable::for_table(&config.table);
        client
            .on_conn("connecting", async |s| {
                s.auto_increment
                    .map(drop)
                    .ok_or_else(|| unavailable("auto-increment settings not read".into()))?;
                audit::ensure_table(&mut s.conn, &audit_table).await?;
                meta::ensure_table(&mut s.conn, &meta_table).await?;
                match &lease_tables {
                    Ok(tables) => leases::ensure_tables(&mut s.conn, tables).await,
                    // Without room for the lease tables' names the authority still serves
                    // tickets; its lease operations say why they cannot run.
                    Err(_) => Ok(()),
                }
            })
            .await?;
        Ok(MysqlTicketAuthority {
            client,
            tickets: SpecCache::default(),
            leases: lease_tables,
            audit: audit_table,
            meta: meta_table,
        })
    }

    /// The server's auto-increment settings, as (increment, offset), read on a connection.
    pub async fn server_auto_increment(&self) -> Result<(u64, u64), StoreError> {
        self.client
            .on_conn("reading auto-increment settings", async |s| {
                s.auto_increment
                    .map(|auto| (auto.increment, auto.offset))
                    .ok_or_else(|| unavailable("auto-increment settings not read".into()))
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
        let sql = format!(
            "SELECT MAX(id), COUNT(stub = '{RETIRED_STUB}' OR NULL) FROM {}",
            quote_identifier(&table)
        );
        let rows = query(conn, &sql).await?;
        let (max_id, retired): (Option<u64>, u64) = match rows.first() {
            Some(row) => (col(row, 0, "MAX(id)")?, col(row, 1, "retired marks")?),
            None => (None, 0),
        };
        self.tickets.put(
            name,
            Ticket {
                spec,
                table: quote_identifier(&table),
            },
        );
        Ok(Some(ticket_state(
            name.clone(),
            spec,
            counter,
            max_id,
            retired > 0,
        )))
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
        let mut backoff = deadlock_backoff();
        loop {
            match self.reserve_once(session, name).await {
                Err(Rollback::Deadlock(e)) => match backoff.next() {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => {
                        return Err(driver_error(
                            &format!("REPLACE (deadlocked {DEADLOCK_ATTEMPTS} times)"),
                            e,
                        ))
                    }
                },
                Err(Rollback::Error(e)) => return Err(e),
                Ok(r) => return Ok(r),
            }
        }
    }

    /// One `REPLACE`; a deadlock (rolled back by the server) is told apart for a retry.
    async fn reserve_once(
        &self,
        session: &mut Session,
        name: &NamespaceName,
    ) -> Result<Reservation, Rollback> {
        let Some(ticket) = self.ticket_on(&mut session.conn, name).await? else {
            return Err(StoreError::UnknownNamespace { name: name.clone() }.into());
        };
        let spec = ticket.spec;
        check_server(session.auto_increment, name, &spec)?;
        let max = spec.width().max_id();
        // The REPLACE and its ledger entry in one transaction, one round trip. The entry is
        // written only for an id this call returns (of the class, within the width); the
        // checks below refuse any other, which is then burned, unrecorded.
        let sql = format!(
            "START TRANSACTION; REPLACE INTO {table} (stub) VALUES ('a'); \
             SET @idmint_id = LAST_INSERT_ID(); \
             {insert} {name}, {NOW_MS}, 'granted', @idmint_id, @idmint_id + 1, {holder} \
             FROM DUAL WHERE @idmint_id BETWEEN {first} AND {max} \
             AND MOD(@idmint_id, {step}) = {offset}; \
             COMMIT; SELECT (SELECT COUNT(*) FROM {table} WHERE stub = '{RETIRED_STUB}'), \
             @idmint_id",
            table = ticket.table,
            insert = insert_select(&self.audit),
            name = literal(name),
            holder = text_literal(crate::audit::holder()),
            first = spec.first(),
            step = spec.step(),
            offset = spec.offset(),
        );
        let rows = match batch(&mut session.conn, &sql).await {
            Ok(rows) => rows,
            Err(e) if server_code(&e) == Some(ER_NO_SUCH_TABLE) => {
                self.tickets.forget(name);
                return Err(StoreError::UnknownNamespace { name: name.clone() }.into());
            }
            Err(e) if server_code(&e) == Some(ER_LOCK_DEADLOCK) => {
                return Err(Rollback::Deadlock(e))
            }
            Err(e) => return Err(driver_error("REPLACE", e).into()),
        };
        let (retired, id) = changed_and_value(&rows, "REPLACE")?;
        if id > max && retired > 0 {
            return Err(StoreError::Retired { name: name.clone() }.into());
        }
        if id > max {
            // Burned, never returned: the id space of this width is over.
            return Err(StoreError::Exhausted {
                name: name.clone(),
                bits: spec.width().bits(),
                watermark: max + 1,
            }
            .into());
        }
        if id < spec.first() || id % spec.step() != spec.offset() {
            return Err(StoreError::Corrupt {
                message: format!(
                    "ticket table {} issued {id}, which is not an id of {spec:?}: refusing it",
                    ticket.table
                ),
            }
            .into());
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

    /// [`Authority::advance`] in one transaction: the ticket rows locked (`FOR UPDATE`, which
    /// also locks the gap above them: a concurrent `REPLACE` waits for the commit), the
    /// watermark read as `state` reads it, the move checked by [`ops::advance`], then a marker
    /// row `(to - 1, 'r')` (`REPLACE`: it replaces the previous marker, always lower) and the
    /// ledger entry, `COMMIT`. The marker's explicit id raises the table's counter to `to` or
    /// above (InnoDB moves the counter past an explicit id above it, never down), and keeps
    /// `MAX(id)` at `to - 1` for servers that rebuild the counter from it at restart.
    async fn advance_on(
        &self,
        conn: &mut Conn,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        let Some(ticket) = self.ticket_on(conn, name).await? else {
            return Err(StoreError::UnknownNamespace { name: name.clone() });
        };
        let table_name = ticket_table_name(name);
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(|e| driver_error("START TRANSACTION", e))?;
        let out = async {
            let rows: Vec<Row> = match tx
                .query(format!("SELECT id, stub FROM {} FOR UPDATE", ticket.table))
                .await
            {
                Ok(rows) => rows,
                Err(e) if server_code(&e) == Some(ER_NO_SUCH_TABLE) => {
                    self.tickets.forget(name);
                    return Err(StoreError::UnknownNamespace { name: name.clone() });
                }
                Err(e) => return Err(driver_error("locking the ticket table", e)),
            };
            let mut max_id: Option<u64> = None;
            for row in &rows {
                let id: u64 = col(row, 0, "ticket id")?;
                max_id = Some(max_id.map_or(id, |m| m.max(id)));
            }
            let retired = rows
                .iter()
                .any(|row| col::<String>(row, 1, "stub").ok().as_deref() == Some(RETIRED_STUB));
            let rows: Vec<Row> = tx
                .query(format!(
                    "SELECT AUTO_INCREMENT FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{table_name}'"
                ))
                .await
                .map_err(|e| driver_error("reading the ticket counter", e))?;
            let counter: Option<u64> = match rows.first() {
                Some(row) => col(row, 0, "AUTO_INCREMENT")?,
                None => None,
            };
            let state = ticket_state(name.clone(), ticket.spec, counter, max_id, retired);
            let from = state.watermark;
            let Some(target) = ops::advance(&state, to, why)? else {
                return Ok((false, Advanced { from, state }));
            };
            let event = ops::advance_event(why, from, target.watermark);
            // target >= from > MAX(id), or a retirement's id one below the ceiling: either
            // way at or above every ticket id of the class.
            let stub = if target.retired { RETIRED_STUB } else { "r" };
            tx.query_drop(format!(
                "REPLACE INTO {} (id, stub) VALUES ({}, '{stub}')",
                ticket.table,
                target.watermark - 1
            ))
            .await
            .map_err(|e| driver_error("raising the ticket counter", e))?;
            super::audit::record_advance(&mut tx, &self.audit, name, event, target).await
        }
        .await;
        super::audit::finish_advance(tx, out).await
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
            .map(|(i, (table, ..))| {
                format!(
                    "SELECT {i}, MAX(id), COUNT(stub = '{RETIRED_STUB}' OR NULL) FROM {}",
                    quote_identifier(table)
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let mut max_ids = vec![(None, false); found.len()];
        for row in query(conn, &union).await? {
            let i: usize = col(&row, 0, "table index")?;
            let max_id: Option<u64> = col(&row, 1, "MAX(id)")?;
            let retired: u64 = col(&row, 2, "retired marks")?;
            if let Some(slot) = max_ids.get_mut(i) {
                *slot = (max_id, retired > 0);
            }
        }
        Ok(found
            .into_iter()
            .zip(max_ids)
            .map(|((_, name, spec, counter), (max_id, retired))| {
                ticket_state(name, spec, counter, max_id, retired)
            })
            .collect())
    }
}

/// The stub of a retirement's marker row: the namespace is retired while its table holds one.
const RETIRED_STUB: &str = "x";

/// A ticket namespace's watermark: the largest of `first`, the table's counter and
/// `MAX(id) + 1`, at most the width's maximum + 1 (exactly that when retired).
fn ticket_state(
    name: NamespaceName,
    spec: SequenceSpec,
    counter: Option<u64>,
    max_id: Option<u64>,
    retired: bool,
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
        watermark: if retired { ceiling } else { watermark },
        retired,
    }
}

#[async_trait]
impl Authority for MysqlTicketAuthority {
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
                self.advance_on(&mut s.conn, name, to, why).await
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
                self.ensure_on(s, &name, spec).await
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
            .on_conn("reserve", async |s| self.reserve_on(s, &name).await)
            .await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.client
            .read_on_conn("state", async |s| self.read_state(&mut s.conn, name).await)
            .await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let mut all = self
            .client
            .read_on_conn("list", async |s| self.list_on(&mut s.conn).await)
            .await?;
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Validates the tail, then refuses it: a ticket server's counter cannot be lowered by
    /// compare-and-swap, so tails are not reissued.
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let name = name.clone();
        self.client
            .on_conn("give_back", async |s| {
                self.refuse_tail(&mut s.conn, &name, tail).await
            })
            .await
    }
}

#[async_trait]
impl AuditLog for MysqlTicketAuthority {
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
impl WorkerLeases for MysqlTicketAuthority {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_core::Width;

    fn name(s: &str) -> NamespaceName {
        NamespaceName::new(s).unwrap()
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
    fn ticket_watermark_is_the_highest_evidence() {
        let spec = SequenceSpec::new(Width::Bits32, 10, 2, 1).unwrap();
        let n = name("t");
        let live = |counter, max_id| ticket_state(n.clone(), spec, counter, max_id, false);
        assert_eq!(live(Some(1), None).watermark, 10);
        assert_eq!(live(Some(13), Some(11)).watermark, 13);
        assert_eq!(live(None, Some(11)).watermark, 12);
        assert_eq!(
            live(Some(u64::MAX), None).watermark,
            Width::Bits32.max_id() + 1
        );
        // A retirement's marker row puts the watermark past the largest id.
        let retired = ticket_state(n.clone(), spec, Some(13), Some(11), true);
        assert!(retired.retired);
        assert_eq!(retired.watermark, Width::Bits32.max_id() + 1);
    }
}
