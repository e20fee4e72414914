//! One PostgreSQL connection as the shared pool ([`crate::pool`]) manages it: opening it
//! (tokio-postgres, over rustls when `tls` asks for it: [`crate::tls`]) with
//! `synchronous_commit` forced on and the server's durability checked, its prepared statements,
//! and the mapping of driver errors.
//!
//! No connection is used unless the server it reaches has `fsync` and `full_page_writes` on
//! (with either off a crash can lose or tear acknowledged commits, and a reservation it forgets
//! would be granted again: invariant 1), or the config says `accept_unsafe_durability = true`
//! (then a warning is logged, once per authority). Every new connection is checked, so a
//! failover to a server configured differently is caught too.
//!
//! Invariants: a connection's statements are prepared once, on first use (the table may not
//! exist yet when the connection opens); dropping a connection aborts the task driving its
//! socket, so a reply still in flight is never read by anyone; no message holds the user or
//! password of the URL.
//!
//! What it does not do: pooling, timeouts or retries (the pool's), or any authority logic.

use super::sql::StatementsSql;
use super::KIND;
use crate::pool::Connector;
use crate::StoreError;
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Statement, Transaction};
use tokio_postgres_rustls::MakeRustlsConnect;

/// Opens connections to one server (or list of hosts) for one table.
pub(super) struct PgConnector {
    pub(super) pg: tokio_postgres::Config,
    pub(super) sql: Arc<StatementsSql>,
    /// TLS (`tls` other than `off`): the URL's `sslmode` is then forced to `require`.
    pub(super) tls: Option<MakeRustlsConnect>,
    /// `accept_unsafe_durability`: use a server whose `fsync` or `full_page_writes` is off.
    pub(super) accept_unsafe_durability: bool,
    /// Whether that was said once already.
    pub(super) warned: std::sync::atomic::AtomicBool,
    /// `host:port` of the server, for messages.
    pub(super) target: String,
}

/// The settings of `fsync` and `full_page_writes` that let an acknowledged commit be lost or
/// torn in a crash, with what each needs; empty when both are on.
pub(super) fn durability_problems(fsync: &str, full_page_writes: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if fsync != "on" {
        problems.push(format!(
            "fsync = {fsync} (needs on: without it a crash can lose commits the server acknowledged)"
        ));
    }
    if full_page_writes != "on" {
        problems.push(format!(
            "full_page_writes = {full_page_writes} (needs on: without it a crash can leave torn pages that recovery cannot repair)"
        ));
    }
    problems
}

/// The refusal (or, with `accept_unsafe_durability`, the warning) for `problems` of `target`.
fn durability_message(target: &str, problems: &[String]) -> String {
    format!(
        "the PostgreSQL server at {target} does not make every commit durable: {}. A server \
         crash could then forget reservations already handed out, and ids would repeat. Fix it \
         in postgresql.conf: `fsync = on` and `full_page_writes = on`, then reload (SELECT \
         pg_reload_conf()), or accept the risk with accept_unsafe_durability = true in this \
         authority's table",
        problems.join("; ")
    )
}

impl PgConnector {
    /// Refuses a server that may lose acknowledged commits, unless accepted (then warns once).
    async fn check_durability(&self, conn: &mut PgConn) -> Result<(), StoreError> {
        let rows = match conn
            .query_text(
                "SELECT current_setting('fsync'), current_setting('full_page_writes')",
                &[],
            )
            .await
        {
            Ok(rows) => rows,
            // A protocol-compatible server without these settings: nothing to check.
            Err(_) if conn.last_code.is_some() => return Ok(()),
            Err(e) => return Err(e),
        };
        let setting = |i: usize| -> String {
            rows.first()
                .and_then(|r| r.try_get::<_, String>(i).ok())
                .unwrap_or_default()
        };
        let problems = durability_problems(&setting(0), &setting(1));
        if problems.is_empty() {
            return Ok(());
        }
        if !self.accept_unsafe_durability {
            return Err(StoreError::InvalidSetup {
                message: durability_message(&self.target, &problems),
            });
        }
        if !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                "accept_unsafe_durability = true: {}",
                durability_message(&self.target, &problems)
            );
        }
        Ok(())
    }
}

impl Connector for PgConnector {
    type Conn = PgConn;

    async fn connect(&self) -> Result<PgConn, StoreError> {
        let (client, task) = match &self.tls {
            None => {
                let (client, connection) =
                    self.pg.connect(NoTls).await.map_err(|e| pg_error(&e))?;
                (client, tokio::spawn(drive(connection)))
            }
            Some(tls) => {
                let (client, connection) = self
                    .pg
                    .connect(tls.clone())
                    .await
                    .map_err(|e| pg_error(&e))?;
                (client, tokio::spawn(drive(connection)))
            }
        };
        let mut conn = PgConn {
            client,
            statements: None,
            lease_statements: None,
            sql: self.sql.clone(),
            task,
            last_code: None,
        };
        // Commits must be durable before the server acknowledges them (see the module docs).
        if let Err(e) = conn
            .batch_execute(
                "SELECT set_config('synchronous_commit', 'on', false) \
                 WHERE current_setting('synchronous_commit') = 'off'",
            )
            .await
        {
            if conn.last_code.is_none() {
                return Err(e);
            }
            // A protocol-compatible server without these functions: use it as it is.
        }
        self.check_durability(&mut conn).await?;
        Ok(conn)
    }

    fn is_closed(conn: &PgConn) -> bool {
        conn.client.is_closed()
    }

    async fn ping(conn: &mut PgConn) -> Result<(), StoreError> {
        conn.batch_execute("SELECT 1").await
    }
}

/// The statements, prepared on one connection.
pub(super) struct Statements {
    pub(super) insert: Statement,
    pub(super) select_one: Statement,
    pub(super) list: Statement,
    pub(super) reserve: Statement,
    pub(super) give_back: Statement,
    pub(super) lock_one: Statement,
    pub(super) advance: Statement,
    pub(super) set_parks: Statement,
    pub(super) audit_subjects: Statement,
    pub(super) audit_entries: Statement,
    pub(super) audit_fold: Statement,
}

/// The worker-lease statements, prepared on one connection (on first use).
#[derive(Clone)]
pub(super) struct LeaseStatements {
    pub(super) insert_group: Statement,
    pub(super) lock_group: Statement,
    pub(super) lock_slots: Statement,
    pub(super) upsert_slot: Statement,
    pub(super) update_group: Statement,
    pub(super) renew: Statement,
    pub(super) release: Statement,
    pub(super) slot: Statement,
    pub(super) group: Statement,
    pub(super) audit: Statement,
    pub(super) group_trace: Statement,
}

/// One open connection: the client, its statements once prepared, and the task driving the
/// socket.
pub(super) struct PgConn {
    client: Client,
    statements: Option<Statements>,
    lease_statements: Option<LeaseStatements>,
    sql: Arc<StatementsSql>,
    task: JoinHandle<()>,
    /// The SQLSTATE of the last server-reported error, if the last failure was one.
    last_code: Option<SqlState>,
}

impl Drop for PgConn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PgConn {
    /// Notes what a failure says about the connection, and maps it.
    fn fail(&mut self, e: &tokio_postgres::Error) -> StoreError {
        self.last_code = e.code().cloned();
        pg_error(e)
    }

    /// Whether the last failure was a duplicate table, type or key (a concurrent `CREATE`).
    pub(super) fn last_code_is_duplicate(&self) -> bool {
        matches!(
            &self.last_code,
            Some(c) if *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_TABLE
                || *c == SqlState::DUPLICATE_OBJECT
        )
    }

    /// Prepares the statements, if not done yet on this connection.
    pub(super) async fn prepare(&mut self) -> Result<&Statements, StoreError> {
        if self.statements.is_none() {
            let c = &self.client;
            let sql = &self.sql;
            // Sent together (tokio-postgres pipelines concurrent requests on one connection).
            let prepared = tokio::try_join!(
                c.prepare(&sql.insert),
                c.prepare(&sql.select_one),
                c.prepare(&sql.list),
                c.prepare(&sql.reserve),
                c.prepare(&sql.give_back),
                c.prepare(&sql.lock_one),
                c.prepare(&sql.advance),
                c.prepare(&sql.set_parks),
                c.prepare(&sql.audit_subjects),
                c.prepare(&sql.audit_entries),
                c.prepare(&sql.audit_fold),
            );
            match prepared {
                Ok((
                    insert,
                    select_one,
                    list,
                    reserve,
                    give_back,
                    lock_one,
                    advance,
                    set_parks,
                    audit_subjects,
                    audit_entries,
                    audit_fold,
                )) => {
                    self.statements = Some(Statements {
                        insert,
                        select_one,
                        list,
                        reserve,
                        give_back,
                        lock_one,
                        advance,
                        set_parks,
                        audit_subjects,
                        audit_entries,
                        audit_fold,
                    });
                }
                Err(e) => return Err(self.fail(&e)),
            }
        }
        self.statements
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable {
                backend: KIND,
                message: "connection has no prepared statements".into(),
            })
    }

    /// Prepares the worker-lease statements, if not done yet on this connection (on first
    /// use: a node without snowflake namespaces never pays for them).
    pub(super) async fn lease_statements(&mut self) -> Result<LeaseStatements, StoreError> {
        if self.lease_statements.is_none() {
            let sql = match &self.sql.leases {
                Ok(sql) => sql,
                Err(e) => {
                    return Err(StoreError::InvalidSetup { message: e.clone() });
                }
            };
            let c = &self.client;
            let prepared = tokio::try_join!(
                c.prepare(&sql.insert_group),
                c.prepare(&sql.lock_group),
                c.prepare(&sql.lock_slots),
                c.prepare(&sql.upsert_slot),
                c.prepare(&sql.update_group),
                c.prepare(&sql.renew),
                c.prepare(&sql.release),
                c.prepare(&sql.slot),
                c.prepare(&sql.group),
                c.prepare(&sql.audit),
                c.prepare(&sql.group_trace),
            );
            match prepared {
                Ok((
                    insert_group,
                    lock_group,
                    lock_slots,
                    upsert_slot,
                    update_group,
                    renew,
                    release,
                    slot,
                    group,
                    audit,
                    group_trace,
                )) => {
                    self.lease_statements = Some(LeaseStatements {
                        insert_group,
                        lock_group,
                        lock_slots,
                        upsert_slot,
                        update_group,
                        renew,
                        release,
                        slot,
                        group,
                        audit,
                        group_trace,
                    });
                }
                Err(e) => return Err(self.fail(&e)),
            }
        }
        self.lease_statements
            .clone()
            .ok_or_else(|| StoreError::Unavailable {
                backend: KIND,
                message: "connection has no prepared lease statements".into(),
            })
    }

    /// Starts a transaction (`BEGIN`, read committed). Dropped without
    /// [`Transaction::commit`], it is rolled back before anything else runs on the connection.
    pub(super) async fn transaction(&mut self) -> Result<Transaction<'_>, StoreError> {
        self.client.transaction().await.map_err(|e| pg_error(&e))
    }

    /// Runs a prepared statement outside a transaction (autocommit).
    pub(super) async fn query_statement(
        &mut self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let result = self.client.query(statement, params).await;
        result.map_err(|e| self.fail(&e))
    }

    /// Runs `sql` (prepared for this call only) outside a transaction: for the rare
    /// statements not worth preparing on every connection.
    pub(super) async fn query_text(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let result = self.client.query(sql, params).await;
        result.map_err(|e| self.fail(&e))
    }

    pub(super) async fn query(
        &mut self,
        pick: fn(&Statements) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let statement = pick(self.prepare().await?).clone();
        let result = self.client.query(&statement, params).await;
        result.map_err(|e| self.fail(&e))
    }

    pub(super) async fn batch_execute(&mut self, sql: &str) -> Result<(), StoreError> {
        let result = self.client.batch_execute(sql).await;
        result.map_err(|e| self.fail(&e))
    }

    /// Runs the DDL. Two processes running `CREATE TABLE IF NOT EXISTS` at once can both miss
    /// the table and one then fails on the catalog's unique index; the table exists by then, so
    /// it is run again.
    pub(super) async fn create_schema(&mut self, ddl: &str) -> Result<(), StoreError> {
        match self.batch_execute(ddl).await {
            Err(_) if self.last_code_is_duplicate() => self.batch_execute(ddl).await,
            other => other,
        }
    }
}

/// Drives a connection to its end, dropping the server's asynchronous messages. Awaiting the
/// connection itself would log each notice at INFO through the `log` crate, among them
/// `relation "…" already exists, skipping` from the idempotent DDL on every start: nothing an
/// operator acts on (errors come back on the statements). The connection's end (closed, reset)
/// shows on the client as `is_closed` and as errors of the statements in flight.
async fn drive<S, T>(mut connection: tokio_postgres::Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(Ok(_message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {}
}

/// An error and its causes, `a: b: c`.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
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
/// server shutting down, a missing table, permissions) is `Unavailable`, which the pool also
/// takes as "do not reuse this connection". The pool prefixes the server's address.
pub(super) fn pg_error(e: &tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            let message = format!("{} {code}: {}", db.severity(), db.message());
            if code.starts_with("23") || code.starts_with("22") {
                StoreError::Corrupt { message }
            } else {
                StoreError::Unavailable {
                    backend: KIND,
                    message,
                }
            }
        }
        None => StoreError::Unavailable {
            backend: KIND,
            message: chain(e),
        },
    }
}

/// `host:port[,host:port…]`, for messages. Never the user or password.
pub(super) fn describe_server(pg: &tokio_postgres::Config) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_servers_with_fsync_and_full_page_writes_are_durable() {
        assert!(durability_problems("on", "on").is_empty());
        let problems = durability_problems("off", "off");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("fsync = off"), "{problems:?}");
        assert!(
            problems[1].starts_with("full_page_writes = off"),
            "{problems:?}"
        );
        let message = durability_message("db:5432", &problems);
        assert!(message.contains("fsync = on"), "{message}");
        assert!(message.contains("accept_unsafe_durability"), "{message}");
    }
}
