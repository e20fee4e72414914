//! One MySQL/MariaDB connection as the shared pool ([`crate::pool`]) manages it: opening it
//! from the URL (on TCP unless the URL asks for the socket), and, for ticket mode, the
//! session's auto-increment settings read once when it opens.
//!
//! Invariants: a URL must name a database; no message holds the password (the target is
//! `host:port/database`); a session's auto-increment settings are those of the connection they
//! were read on.
//!
//! What it does not do: pooling, timeouts or retries (the pool's), or any authority logic.

use super::{col, driver_error, invalid_setup, query, unavailable, KIND};
use crate::config::{redact_url, MysqlConfig};
use crate::pool::{Connector, Pool, PoolLimits};
use crate::StoreError;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder};

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
}

impl Connector for MyConnector {
    type Conn = Session;

    async fn connect(&self) -> Result<Session, StoreError> {
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
    if config.op_timeout.is_zero() || config.pool.max_connections == 0 {
        return Err(invalid_setup(
            "op_timeout and pool.max_connections must be above zero".into(),
        ));
    }
    let connector = MyConnector {
        opts: builder.into(),
        read_auto_increment,
    };
    let limits = PoolLimits {
        max_size: config.pool.max_connections,
        max_idle: config.pool.max_idle,
        op_timeout: config.op_timeout,
    };
    Pool::new(connector, KIND, target, limits)
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
