//! One MySQL/MariaDB connection as the shared pool ([`crate::pool`]) manages it: opening it
//! from the URL (on TCP unless the URL asks for the socket), checking that the server makes
//! every commit durable, and, for ticket mode, the session's auto-increment settings read once
//! when it opens.
//!
//! Invariants: a URL must name a database; no message holds the password (the target is
//! `host:port/database`); a session's auto-increment settings are those of the connection they
//! were read on; no connection is used unless the server it reaches flushes every commit
//! (`innodb_flush_log_at_trx_commit = 1`, and `sync_binlog = 1` when binary logging is on), or
//! the config says `accept_unsafe_durability = true` (then a warning is logged, once per
//! authority). Invariant 1 of docs/design.md rests on it: an acknowledged reservation a server
//! crash forgets would be granted again. Every new connection is checked, so a failover to a
//! server configured differently is caught too.
//!
//! What it does not do: pooling, timeouts or retries (the pool's), or any authority logic.

use super::{col, driver_error, invalid_setup, query, unavailable, KIND};
use crate::config::{redact_url, MysqlConfig};
use crate::pool::{Connector, Pool, PoolLimits};
use crate::StoreError;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, SslOpts};
use std::sync::atomic::{AtomicBool, Ordering};

/// The server's auto-increment settings of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AutoIncrement {
    pub(super) increment: u64,
    pub(super) offset: u64,
}

/// A connection lent to one operation, with its session's settings.
pub(super) struct Session {
    pub(super) conn: Conn,
    /// Read when the connection opened, in ticket mode only.
    pub(super) auto_increment: Option<AutoIncrement>,
}

/// Opens connections to one server and database.
pub(super) struct MyConnector {
    opts: Opts,
    /// Ticket mode reads the session's auto-increment settings on every new connection.
    read_auto_increment: bool,
    /// `host:port/database`, for messages.
    target: String,
    /// `accept_unsafe_durability`: serve from a server that may lose acknowledged commits.
    accept_unsafe_durability: bool,
    /// Whether that was already logged (once per authority, not once per connection).
    warned: AtomicBool,
}

impl Connector for MyConnector {
    type Conn = Session;

    async fn connect(&self) -> Result<Session, StoreError> {
        let mut conn = Conn::new(self.opts.clone())
            .await
            .map_err(|e| driver_error("connecting", e))?;
        self.check_durability(&mut conn).await?;
        let auto_increment = if self.read_auto_increment {
            Some(read_auto_increment(&mut conn).await?)
        } else {
            None
        };
        Ok(Session {
            conn,
            auto_increment,
        })
    }

    /// mysql_async cannot tell without a round trip; the ping after idling covers it.
    fn is_closed(_: &Session) -> bool {
        false
    }

    async fn ping(session: &mut Session) -> Result<(), StoreError> {
        session
            .conn
            .ping()
            .await
            .map_err(|e| driver_error("ping", e))
    }
}

/// The pool both modes use.
pub(super) type Client = Pool<MyConnector>;

/// The pool for `config`: validates the URL (it must name a database) and the limits; opens no
/// connection yet.
pub(super) fn client(
    config: &MysqlConfig,
    read_auto_increment: bool,
) -> Result<Client, StoreError> {
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
    // TLS (rustls; see crate::tls): checked and the CA file read now, not on first connect.
    let ca = crate::tls::ca_pem(config.tls, config.ca_file.as_deref())
        .map_err(|e| invalid_setup(format!("MySQL TLS: {e}")))?;
    builder = match (config.tls, ca) {
        (crate::tls::TlsMode::Off, _) => builder,
        (crate::tls::TlsMode::Require, _) => builder.ssl_opts(Some(
            SslOpts::default()
                .with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true),
        )),
        (crate::tls::TlsMode::VerifyFull, ca) => builder.ssl_opts(Some(
            SslOpts::default()
                .with_root_certs(ca.map(Into::into).into_iter().collect())
                .with_disable_built_in_roots(true),
        )),
    };
    if config.op_timeout.is_zero() || config.pool.max_connections == 0 {
        return Err(invalid_setup(
            "op_timeout and pool.max_connections must be above zero".into(),
        ));
    }
    let connector = MyConnector {
        opts: builder.into(),
        read_auto_increment,
        target: target.clone(),
        accept_unsafe_durability: config.accept_unsafe_durability,
        warned: AtomicBool::new(false),
    };
    let limits = PoolLimits {
        max_size: config.pool.max_connections,
        max_idle: config.pool.max_idle,
        op_timeout: config.op_timeout,
    };
    Pool::new(connector, KIND, target, limits)
}

/// What the server makes durable at commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Durability {
    /// `@@innodb_flush_log_at_trx_commit`: 1 writes and flushes the redo log at every commit.
    pub(super) flush_log_at_trx_commit: u64,
    /// `@@sync_binlog`: 1 flushes the binary log at every commit.
    pub(super) sync_binlog: u64,
    /// `@@log_bin`: whether binary logging is on (only then does `sync_binlog` matter).
    pub(super) log_bin: bool,
}

impl Durability {
    /// The settings that let an acknowledged commit be lost in a crash, as `name = value`
    /// with what it needs; empty when every commit is durable.
    pub(super) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.flush_log_at_trx_commit != 1 {
            problems.push(format!(
                "innodb_flush_log_at_trx_commit = {} (needs 1: with 0 or 2 the redo log is flushed about once a second, so a crash loses the last second of commits)",
                self.flush_log_at_trx_commit
            ));
        }
        if self.log_bin && self.sync_binlog != 1 {
            problems.push(format!(
                "sync_binlog = {} with log_bin = ON (needs 1: otherwise a crash can lose commits from the binary log, which recovery and replicas follow)",
                self.sync_binlog
            ));
        }
        problems
    }
}

/// The refusal (or, with `accept_unsafe_durability`, the warning) for `problems` of `target`.
fn durability_message(target: &str, problems: &[String]) -> String {
    format!(
        "the MySQL server at {target} does not make every commit durable: {}. A server crash \
         could then forget reservations already handed out, and ids would repeat. Fix it in \
         my.cnf under [mysqld]: `innodb_flush_log_at_trx_commit = 1` and `sync_binlog = 1` \
         (or now: SET GLOBAL innodb_flush_log_at_trx_commit = 1; SET GLOBAL sync_binlog = 1), \
         or accept the risk with accept_unsafe_durability = true in this authority's table",
        problems.join("; ")
    )
}

impl MyConnector {
    /// Refuses a server that may lose acknowledged commits, unless accepted (then warns once).
    async fn check_durability(&self, conn: &mut Conn) -> Result<(), StoreError> {
        let read = read_durability(conn).await;
        let problems = match &read {
            Ok(d) => d.problems(),
            Err(e) => vec![format!("its settings could not be read ({e})")],
        };
        if problems.is_empty() {
            return Ok(());
        }
        if !self.accept_unsafe_durability {
            return match read {
                Ok(_) => Err(invalid_setup(durability_message(&self.target, &problems))),
                // A connection that failed mid-query is an outage, not a setup error.
                Err(e) => Err(e),
            };
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "accept_unsafe_durability = true: {}",
                durability_message(&self.target, &problems)
            );
        }
        Ok(())
    }
}

async fn read_durability(conn: &mut Conn) -> Result<Durability, StoreError> {
    let rows = query(
        conn,
        "SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin",
    )
    .await?;
    let row = rows
        .first()
        .ok_or_else(|| unavailable("the server returned no durability settings".into()))?;
    Ok(Durability {
        flush_log_at_trx_commit: col(row, 0, "@@innodb_flush_log_at_trx_commit")?,
        sync_binlog: col(row, 1, "@@sync_binlog")?,
        log_bin: col::<u64>(row, 2, "@@log_bin")? != 0,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Which settings lose acknowledged commits, each named in the refusal.
    #[test]
    fn durability_problems_name_the_variables() {
        let safe = Durability {
            flush_log_at_trx_commit: 1,
            sync_binlog: 0,
            log_bin: false,
        };
        assert!(safe.problems().is_empty());
        let lazy_redo = Durability {
            flush_log_at_trx_commit: 2,
            ..safe
        };
        assert!(lazy_redo.problems()[0].starts_with("innodb_flush_log_at_trx_commit = 2"));
        let lazy_binlog = Durability {
            log_bin: true,
            ..safe
        };
        assert!(lazy_binlog.problems()[0].starts_with("sync_binlog = 0 with log_bin = ON"));
        let both = Durability {
            flush_log_at_trx_commit: 0,
            sync_binlog: 100,
            log_bin: true,
        };
        assert_eq!(both.problems().len(), 2);
        let message = durability_message("h:1/db", &both.problems());
        assert!(message.contains("my.cnf") && message.contains("accept_unsafe_durability = true"));
        assert!(Durability {
            sync_binlog: 1,
            log_bin: true,
            ..safe
        }
        .problems()
        .is_empty());
    }
}
